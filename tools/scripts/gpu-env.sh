# Sourced on the GPU machine (by gpu-tests.sh and tests/gpu/run_all.sh):
# unpacks the Debian libraries pack-gpu.sh brought (libLLVM 19, libz3) and
# puts them, libtejit.so's folder and PyTorch's cuDNN/NCCL on the library
# path.
TEJIT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TEJIT_SYS=/tmp/tejit-sys
if [ -d "$TEJIT_ROOT/.gpu/debs" ] && [ ! -d "$TEJIT_SYS/usr" ]; then
  for deb in "$TEJIT_ROOT"/.gpu/debs/*.deb; do dpkg -x "$deb" "$TEJIT_SYS"; done
fi
nvidia_libs="$(python3 -c 'import os, nvidia.cudnn, nvidia.nccl
print(":".join(os.path.join(p, "lib") for m in (nvidia.cudnn, nvidia.nccl) for p in m.__path__))' 2>/dev/null || true)"
export LD_LIBRARY_PATH="$TEJIT_SYS/usr/lib/x86_64-linux-gnu:$TEJIT_SYS/usr/lib/llvm-19/lib:$TEJIT_ROOT/.gpu/lib:/usr/local/cuda/lib64${nvidia_libs:+:$nvidia_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TEJIT_LIBRARY="$TEJIT_ROOT/.gpu/lib/libtejit.so"
export PATH="$TEJIT_ROOT/.gpu/bin:/usr/local/cuda/bin:$PATH"
