#!/usr/bin/env bash
# Runs the sustained (power-capped, interleaved) comparison on the GPU
# machine, over what tools/scripts/pack-gpu.sh packed into .gpu/:
#   benchmarks/gpu/run_sustained.sh --block transformer --json out.json
#   benchmarks/gpu/run_sustained.sh --block mlp
# Arguments go to bench_sustained.py (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/scripts/gpu-env.sh
export TEJIT_CACHE_DIR="${TEJIT_CACHE_DIR:-/tmp/tejit-cache}"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm \
  --format=csv,noheader || echo "note: nvidia-smi failed"
exec python3 benchmarks/gpu/bench_sustained.py "$@"
