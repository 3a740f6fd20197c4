#!/usr/bin/env bash
# Runs the GPU layer test suite on the GPU machine, over what
# tools/scripts/pack-gpu.sh packed into .gpu/:
#   tests/gpu/run_all.sh                     # every case
#   SIZES=small tests/gpu/run_all.sh         # small | real | all (default)
#   tests/gpu/run_all.sh --filter LayerNormMLP --seed 7
# Extra arguments go to run_layer_tests.py. Exits non-zero if any case fails.
# tools/scripts/gpu-tests.sh runs this suite and the other GPU checks.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/scripts/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader ||
  echo "note: nvidia-smi failed"
exec python3 tests/gpu/run_layer_tests.py --sizes "${SIZES:-all}" "$@"
