#!/bin/sh
# Writes dgamma_emitted.inc (see emit_dgamma.py): the dgamma/dbeta kernels of
# the examples and of single norm layers of other shapes, then:
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
#     -DDGAMMA_EMITTED='"dgamma_emitted.inc"' dgamma_variants.cu -o /tmp/d
#   /tmp/d emitted
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
te_compile=${TE_COMPILE:-$root/build/bin/te-compile}
specs=$(mktemp -d)
trap 'rm -rf "$specs"' EXIT
spec() { # name dtype seq batch layer hidden
  printf 'name: %s\nparams_dtype: %s\nseq_length: %s\nbatch_size: %s\nlayers:\n  - type: %s\n    hidden_size: %s\n' \
    "$1" "$2" "$3" "$4" "$5" "$6" > "$specs/$1.yaml"
}
spec ln_odd bf16 777 1 LayerNorm 1000       # rows of no round size
spec rms_vec1 bf16 333 3 RMSNorm 1001       # columns odd: 2-byte vectors
spec ln_f16 fp16 50 1 LayerNorm 36          # fp16, 4-element vectors
spec ln_f32 fp32 8192 1 LayerNorm 4096      # fp32
spec ln_768 bf16 4096 8 LayerNorm 768       # 12 strips
spec ln_1024 bf16 8192 1 LayerNorm 1024     # rows cap the splits
spec rms_tall bf16 100003 1 RMSNorm 64      # one strip, many splits
spec rms_16k bf16 4096 4 RMSNorm 8192       # 1 GiB read
spec ln_huge bf16 524288 1 LayerNorm 4096   # 2^31 elements: 64-bit indices
python3 "$here/emit_dgamma.py" "$te_compile" "$here/dgamma_emitted.inc" \
  "$root/examples/quickstart.yaml" "$root/examples/llama.yaml" \
  "$root/examples/quickstart_small.yaml" "$root/examples/llama_small.json" \
  "$root/examples/all_layers_small.yaml" "$specs"/*.yaml
