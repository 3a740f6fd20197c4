#!/usr/bin/env bash
# Runs the block benchmark on the GPU machine, over what
# tools/scripts/pack-gpu.sh packed into .gpu/ (libtejit.so and the libraries
# it needs):
#   benchmarks/gpu/run.sh                        # quickstart sizes
#   benchmarks/gpu/run.sh --small --json out.json
# Arguments go to bench_layers.py (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/scripts/gpu-env.sh
# Compiled kernels are cached across configs and runs on this machine.
export TEJIT_CACHE_DIR="${TEJIT_CACHE_DIR:-/tmp/tejit-cache}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem \
  --format=csv,noheader || echo "note: nvidia-smi failed"
exec python3 benchmarks/gpu/bench_layers.py "$@"
