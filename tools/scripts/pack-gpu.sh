#!/usr/bin/env bash
# Packs what the GPU machine needs into .gpu/ (git-ignored; carry it with the
# run): libtejit.so, the C API example, the attention check, the GEMM
# algorithm benchmark (tejit-gemm-algos), the attention engine benchmark
# (tejit-attention-engines), the two Debian packages our
# LLVM-linked code needs there (libLLVM 19, libz3), and the compiled bundles
# of the full-size examples. Run after tools/scripts/build.sh; then, on the
# GPU machine, tools/scripts/gpu-tests.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .gpu
mkdir -p .gpu/lib .gpu/bin .gpu/debs
cp build/lib/libtejit.so .gpu/lib/
cp build/bin/tejit-train-step build/bin/tejit-attention-check build/bin/te-compile \
  build/bin/tejit-fp8-attention-check \
  build/bin/tejit-gemm-algos build/bin/tejit-attention-engines \
  build/bin/tejit-grouped-gemm-check build/bin/tejit-grouped-kernels-check \
  build/bin/tejit-cp-attention-check \
  .gpu/bin/ 2>/dev/null || true
# cuBLASLt's block-scale layout check (tests/gpu/block_gemm_layout_check.cpp).
g++ -O2 -std=c++17 -I. -I/usr/local/cuda/include \
  tests/gpu/block_gemm_layout_check.cpp -o .gpu/bin/tejit-block-gemm-check \
  -L/usr/local/cuda/lib64 -lcublasLt -lcudart_static -ldl -lpthread -lrt
strip --strip-unneeded .gpu/lib/libtejit.so .gpu/bin/* 2>/dev/null || true
# The GPU machine has no network and no LLVM: bring Debian's packages.
debs="${TEJIT_DEB_CACHE:-$HOME/.cache/tejit-debs}"
mkdir -p "$debs"
if ! ls "$debs"/libllvm19_*.deb "$debs"/libz3-4_*.deb >/dev/null 2>&1; then
  (cd "$debs" && apt-get download libllvm19 libz3-4)
fi
cp "$debs"/libllvm19_*.deb "$debs"/libz3-4_*.deb .gpu/debs/
for spec in quickstart.yaml llama.yaml; do
  build/bin/te-compile "examples/$spec" -o ".gpu/${spec%.*}"
done
du -sh .gpu
