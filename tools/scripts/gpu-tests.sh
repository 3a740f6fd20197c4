#!/usr/bin/env bash
# The GPU suite, run on the GPU machine over what pack-gpu.sh packed (carry
# .gpu): every full-size bundle's kernels load and its FP8 casts match
# PyTorch bit for bit; the C API example trains and replays a CUDA graph;
# compute-sanitizer memcheck and racecheck over it; the layer suite (every
# layer x recipe, small and real sizes, against the PyTorch reference); and
# tejit.pytorch (its PyTorch-side unit tests, modules, the TE quickstart, a
# training curve, the amax
# reduction, tensor and sequence parallelism across two GPUs where there
# are two, pip install).
# SIZES=small|real|all (default all) picks the layer suite's
# sizes. SKIP=REGEX leaves out the steps whose command line matches it, and
# ONLY=REGEX runs only those (grep -E), e.g. to split the suite over two
# device calls of 10 minutes each. Exits non-zero if anything fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/scripts/gpu-env.sh
export TEJIT_CACHE_DIR="${TEJIT_CACHE_DIR:-/tmp/tejit-cache}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0
step() {
  if { [[ -n "${SKIP:-}" ]] && grep -qE -- "$SKIP" <<<"$*"; } ||
    { [[ -n "${ONLY:-}" ]] && ! grep -qE -- "$ONLY" <<<"$*"; }; then
    echo "== skipped: $*"
    return
  fi
  echo "== $*"
  "$@" || { echo "FAILED: $*"; status=1; }
}
for bundle in .gpu/quickstart .gpu/llama; do
  step python3 tools/scripts/gpu_smoke.py "$bundle/"
done
step tejit-train-step examples/layernorm_mlp_small.yaml
step tejit-train-step examples/layernorm_mlp.yaml
# cuDNN flash attention against a float64 reference (every mask, GQA/MQA,
# both layouts, dropout), then a TransformerLayer through the C API.
step tejit-attention-check
# FP8 attention (fp8_dpa, docs/fp8-attention.md) against float64.
step tejit-fp8-attention-check
# Context parallelism's attention steps (docs/context-parallel.md), every
# rank's on this GPU, against float64 on the whole sequence.
step tejit-cp-attention-check
step tejit-train-step examples/fp8_attention_small.yaml
step tejit-train-step examples/quickstart_small.yaml
# GPT-OSS's clamped SwiGLU with rotary tables (float32 inputs).
step tejit-train-step examples/gpt_oss_small.yaml
# delay_wgrad_compute through the C API: dgrad then wgrad against the whole
# backward.
step tejit-train-step tests/lit/te-compile/Inputs/delay-wgrad-mlp.yaml
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    step compute-sanitizer --tool "$tool" --error-exitcode 1 \
      tejit-train-step examples/layernorm_mlp_small.yaml
  done
  # FP8 attention's casts and cuDNN steps (memcheck: cuDNN's kernels are
  # not ours to racecheck).
  step compute-sanitizer --tool memcheck --error-exitcode 1 \
    tejit-train-step examples/fp8_attention_small.yaml
else
  echo "compute-sanitizer not found: sanitizer runs skipped"; status=1
fi
# GroupedLinear's pieces: the grouped GEMM (per-group cuBLASLt calls, host
# m_splits) and the grouped cast/amax/bias-gradient kernels, both against
# float64 references, and the kernels under the sanitizers.
step tejit-grouped-gemm-check
step tejit-grouped-kernels-check
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    step compute-sanitizer --tool "$tool" --error-exitcode 1 \
      tejit-grouped-kernels-check --filter G=3
  done
fi
step python3 tests/gpu/run_layer_tests.py --sizes "${SIZES:-all}"
# Algorithms from a GEMM tuning file (not the heuristic's) at real sizes.
step tests/gpu/check_gemm_tuning.sh
# tejit.pytorch: modules against PyTorch, the TE quickstart with only its
# imports changed, and an FP8 training curve against bf16.
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
# The CPU-side Python tests that need PyTorch (CI has none): the modules'
# specs, program keys and argument checks.
step python3 -m pytest -q -p no:cacheprovider tests/python/
step python3 tests/gpu/test_pytorch_modules.py
step python3 tests/gpu/test_tensor_interop.py
step python3 tests/gpu/quickstart_te.py
step python3 tests/gpu/quickstart_te.py --full
step python3 tests/gpu/train_curve.py
# The attention modules, and TE's quickstart with te.TransformerLayer.
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention_layers.py
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention_bias.py
# FP8 attention (DelayedScaling(fp8_dpa=True)): the three attention modules
# against float32 math (FP8.md's RMSE bounds), their FP8 state, the seed size.
step python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_fp8_attention.py
step python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_cross_attention_layers.py
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_thd_attention.py
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_thd_blocks.py
# KV cache (inference_params): decode loops against the whole sequences.
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kv_cache.py
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_rope.py
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_weight_cast_cache.py
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_microbatch_weight_cache.py
# fuse_wgrad_accumulation: weight gradients added to float32 main_grads.
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_main_grad.py
# fp8_model_init: FP8 primary weights against twins, optimizers, memory.
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fp8_model_init.py
# TE's FusedAdam / FusedSGD over FP8 parameters (master weights).
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_optimizers.py
# TE's parallel_cross_entropy and MoE token permutation, against float64
# and PyTorch references.
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cross_entropy.py tests/python/test_pytorch_cross_entropy.py
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_moe_permutation.py tests/python/test_pytorch_permutation.py
# TE's router fusions against a float64 model of Megatron-LM's unfused
# router; TE 2.x's quantizers (per-tensor and block) against float64 casts.
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_router.py tests/python/test_pytorch_router.py
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_quantizers.py tests/gpu/test_block_quantizer.py tests/python/test_pytorch_quantizers.py
# TE's operation fuser (tejit.pytorch.ops): chains against float64 models
# and bit-equal to te.LayerNormMLP.
step python3 -m pytest -q -p no:cacheprovider -p no:logging tests/gpu/test_fusible_ops.py
# tejit modules inside torch.compile'd models, against eager twins.
step python3 -m pytest -q -p no:cacheprovider -p no:logging tests/gpu/test_torch_compile.py
# parameters_split (Linear, LayerNormLinear) against unsplit twins.
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_parameters_split.py
# TE's CUDA RNG tracker and FP8 state queries (FP8GlobalStateManager).
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_rng_tracker.py tests/python/test_pytorch_fp8_state.py
# delay_wgrad_compute: backward_dw's gradients against undelayed twins.
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_delay_wgrad.py
# Activation offloading (get_cpu_offload_context, torch's save_on_cpu).
step python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_cpu_offload.py
# LayerNormMLP(checkpoint=True): recomputed forward, bit-equal results.
step python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_layernorm_mlp_checkpoint.py
# CUDA graphs through make_graphed_callables: replays equal eager steps.
step python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_graphed_callables.py
# Float8BlockScaling, and GroupedLinear (TE's MoE experts) with
# Fp8Padding/Fp8Unpadding against float64 references at G=8, 4096 -> 2048.
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_block_scaling.py
step python3 -m pytest -q -p no:cacheprovider tests/gpu/test_grouped_linear.py
# GroupedLinear's graphs again without side streams for small groups
# (runtime/GemmLanes.h; captures use four by default).
step env TEJIT_GROUPED_GEMM_STREAMS=1 python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_graphed_callables.py -k grouped
# The mixture-of-experts example (router, Fp8Padding, two GroupedLinears)
# against its PyTorch bf16 twin, with and without main_grads.
step python3 examples/pytorch/moe_experts.py --steps 3
step python3 examples/pytorch/moe_experts.py --steps 3 --recipe current --main-grads
step python3 examples/pytorch/moe_experts.py --steps 3 --recipe block --main-grads
step python3 tests/gpu/quickstart_te_layer.py --full
# DelayedScaling's amax reduction across ranks (torch.distributed, DDP and
# tejit's own NCCL communicator): needs two GPUs.
if (( $(nvidia-smi -L | wc -l) >= 2 )); then
  step python3 -m torch.distributed.run --nproc_per_node=2 \
    tests/gpu/amax_reduction_check.py --full
  # The runtime's tensor-parallel groups (NCCL, borrowed, function), their
  # sums and their capture in a CUDA graph.
  step python3 -m torch.distributed.run --nproc_per_node=2 \
    tests/gpu/tp_group_check.py
  # FP8 weights under a distributed optimizer (cast_master_weights_to_fp8
  # on master shards, the FP8 bytes all-gathered), against whole casts.
  step python3 -m torch.distributed.run --nproc_per_node=2 \
    tests/gpu/fp8_master_weights_check.py
  # parallel_cross_entropy with the vocab split over the ranks.
  step python3 -m torch.distributed.run --nproc_per_node=2 \
    tests/gpu/cross_entropy_parallel_check.py
  # tejit.pytorch's modules with tp_group, each against its tp=1 twin.
  step python3 -m torch.distributed.run --nproc_per_node=2 \
    tests/gpu/tensor_parallel_check.py --full
  # The same with sequence_parallel=True: each rank its slice of dim 0.
  step python3 -m torch.distributed.run --nproc_per_node=2 \
    tests/gpu/sequence_parallel_check.py --full
  # tejit.pytorch.ops chains with tensor (and sequence) parallelism.
  step python3 -m torch.distributed.run --nproc_per_node=2 \
    tests/gpu/fusible_ops_parallel_check.py
  # Context parallelism (cp_group; all_gather and a2a): each rank its
  # load-balanced chunks of the sequence, against the cp=1 twin on the
  # whole sequence.
  step python3 -m torch.distributed.run --nproc_per_node=2 \
    tests/gpu/context_parallel_check.py --full
  # The README's context-parallel example, against its twin.
  step python3 -m torch.distributed.run --nproc_per_node=2 \
    examples/pytorch/context_parallel.py --comm a2a
else
  echo "== amax reduction across ranks: skipped (one GPU; it runs on a" \
    "machine with two)"
fi
# pip install from the repository, offline, into a throwaway target.
step python3 -m pip install --quiet --no-index --no-build-isolation \
  --target /tmp/tejit-pip ./python
step env PYTHONPATH=/tmp/tejit-pip python3 -c \
  "import tejit, tejit.pytorch; print('pip-installed tejit', tejit.version(), tejit.device_info())"
exit $status
