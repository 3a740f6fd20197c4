#!/usr/bin/env bash
# Runs the GPU layer test suite on the GPU machine, over what
# tools/scripts/pack-gpu.sh packed into .gpu/:
#   tests/gpu/run_all.sh                     # every case
#   SIZES=small tests/gpu/run_all.sh         # small | real | all (default)
#   tests/gpu/run_all.sh --filter LayerNormMLP --seed 7
# Extra arguments go to run_layer_tests.py. Then the attention modules of
# tejit.pytorch (tests/gpu/test_attention_layers.py,
# test_cross_attention_layers.py, test_thd_attention.py and
# test_thd_blocks.py, test_kv_cache.py, test_block_scaling.py,
# test_grouped_linear.py, test_moe_permutation.py, pytest;
# SIZES=small leaves out the full-size steps)
# and TE's quickstart with te.TransformerLayer
# (tests/gpu/quickstart_te_layer.py; --full unless SIZES=small) run, where
# PyTorch is installed. Exits non-zero if any case fails.
# tools/scripts/gpu-tests.sh runs this suite and the other GPU checks.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/scripts/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader ||
  echo "note: nvidia-smi failed"
status=0
python3 tests/gpu/run_layer_tests.py --sizes "${SIZES:-all}" "$@" || status=1
if python3 -c "import torch, pytest" 2>/dev/null; then
  pytest_filter=()
  [[ "${SIZES:-all}" == small ]] && pytest_filter=(-k "not full_size")
  PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} python3 -m pytest -q \
    -p no:cacheprovider "${pytest_filter[@]}" \
    tests/gpu/test_attention_layers.py \
    tests/gpu/test_cross_attention_layers.py \
    tests/gpu/test_thd_attention.py \
    tests/gpu/test_thd_blocks.py \
    tests/gpu/test_kv_cache.py \
    tests/gpu/test_block_scaling.py \
    tests/gpu/test_grouped_linear.py \
    tests/gpu/test_moe_permutation.py || status=1
  quickstart_size=(--full)
  [[ "${SIZES:-all}" == small ]] && quickstart_size=()
  PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} python3 \
    tests/gpu/quickstart_te_layer.py "${quickstart_size[@]}" || status=1
else
  echo "note: PyTorch or pytest missing: the tejit.pytorch attention tests" \
    "did not run"
fi
exit "$status"
