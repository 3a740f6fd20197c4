#!/usr/bin/env bash
# The runtime's tuned GEMM path (TEJIT_GEMM_TUNING, runtime/GemmTuning.h) on
# the GPU. tejit-gemm-algos --pick 1 writes a tuning file naming, for each of
# the real-size layers' FP8 GEMMs, cuBLASLt's second candidate: an algorithm
# the heuristic does not pick, so the file changes what runs. The real-size
# layer suite's DelayedScaling cases then run with it against their float32
# references, and the runtime's log must show tuned algorithms in use.
# Run from the repository root on the GPU machine, after gpu-env.sh.
set -euo pipefail
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tejit-gemm-algos --algos 2 --fprop-bias --pick 1 \
  --write-tuning "$work/tuning.json" >"$work/algos.txt"
grep "^wrote" "$work/algos.txt"
TEJIT_GEMM_TUNING="$work/tuning.json" TEJIT_LOG_GEMMS=1 \
  python3 tests/gpu/run_layer_tests.py --sizes real --filter delayed \
  2>&1 | tee "$work/suite.txt"
tuned=$(grep -c "the tuning file's" "$work/suite.txt" || true)
echo "GEMM problems created with the tuning file's algorithm: $tuned"
if (( tuned == 0 )); then
  echo "FAIL: no GEMM ran the tuning file's algorithm" >&2
  exit 1
fi
