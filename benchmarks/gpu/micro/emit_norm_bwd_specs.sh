#!/bin/sh
# Writes OUT_DIR/norm_bwd_emitted.inc and OUT_DIR/cubins (see
# emit_norm_bwd.py): the norm backward kernels of the examples and of single
# norm layers of other shapes, then (OUT_DIR defaults to build/normbwd):
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
#     -Icodegen/runtime_headers -Ibuild/normbwd \
#     -DNORM_BWD_EMITTED='"norm_bwd_emitted.inc"' \
#     benchmarks/gpu/micro/norm_bwd_fused.cu -o /tmp/n
#   /tmp/n emitted build/normbwd/cubins
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
te_compile=${TE_COMPILE:-$root/build/bin/te-compile}
out_dir=${1:-$root/build/normbwd}
specs=$(mktemp -d)
trap 'rm -rf "$specs"' EXIT
spec() { # name dtype seq batch layer hidden [zero_centered_gamma]
  printf 'name: %s\nparams_dtype: %s\nseq_length: %s\nbatch_size: %s\nlayers:\n  - type: %s\n    hidden_size: %s\n    zero_centered_gamma: %s\n' \
    "$1" "$2" "$3" "$4" "$5" "$6" "${7:-false}" > "$specs/$1.yaml"
}
spec ln_odd bf16 777 1 LayerNorm 1000        # rows of no round size
spec rms_vec1 bf16 333 3 RMSNorm 1001        # columns odd: 2-byte vectors
spec ln_f16_zc fp16 50 1 LayerNorm 36 true   # fp16, 4-element vectors, 1 + gamma
spec rms_zc bf16 1000 1 RMSNorm 4096 true    # zero-centered RMSNorm
spec ln_f32 fp32 8192 1 LayerNorm 4096       # fp32
spec ln_768 bf16 4096 8 LayerNorm 768        # 3 rows a block
spec rms_tall bf16 100003 1 RMSNorm 64       # 8 rows a block, many of them
spec ln_8k bf16 8192 1 LayerNorm 8192        # two passes of the stage
spec ln_f16_8k fp16 999 1 LayerNorm 8192      # fp16, two passes, rows of no round size
spec rms_16k bf16 4096 4 RMSNorm 8192        # 512 threads a row
spec ln_huge bf16 524288 1 LayerNorm 4096    # 2^31 elements: 64-bit offsets
python3 "$here/emit_norm_bwd.py" "$te_compile" "$out_dir/norm_bwd_emitted.inc" \
  "$out_dir/cubins" \
  "$root/examples/quickstart.yaml" "$root/examples/llama.yaml" \
  "$root/examples/quickstart_small.yaml" "$root/examples/llama_small.json" \
  "$root/examples/all_layers_small.yaml" \
  "$root/examples/layernorm_mlp_small.yaml" "$specs"/*.yaml
