#!/usr/bin/env bash
# The GPU suite, run on the GPU machine over what pack-gpu.sh packed: every
# bundle's kernels load, and its FP8 cast kernels match PyTorch bit for bit.
set -euo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0
for bundle in .gpu/*/; do
  echo "== $bundle"
  python3 tools/scripts/gpu_smoke.py "$bundle" || status=1
done
exit $status
