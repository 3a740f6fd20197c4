#!/usr/bin/env bash
# Runs the TransformerLayer benchmark (tejit against PyTorch) on the GPU
# machine, over what tools/scripts/pack-gpu.sh packed into .gpu/
# (libtejit.so and the libraries it needs):
#   benchmarks/gpu/run_transformer.sh --json out.json     # batch 4 and 8
#   benchmarks/gpu/run_transformer.sh --small             # a quick check
#   benchmarks/gpu/run_transformer.sh --only tejit-fp8 compile-fp8-sdpa
# Arguments go to bench_transformer.py (--help lists them and the rows).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/scripts/gpu-env.sh
# Compiled kernels are cached across rows and runs on this machine.
export TEJIT_CACHE_DIR="${TEJIT_CACHE_DIR:-/tmp/tejit-cache}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem \
  --format=csv,noheader || echo "note: nvidia-smi failed"
exec python3 benchmarks/gpu/bench_transformer.py "$@"
