#!/usr/bin/env bash
# Runs the GPU layer test suite on the GPU machine, over what
# tools/scripts/pack-gpu.sh packed into .gpu/ (libtejit.so in .gpu/lib, the
# libLLVM/libz3 Debian packages in .gpu/debs):
#   tests/gpu/run_all.sh                     # every case
#   SIZES=small tests/gpu/run_all.sh         # small | real | all (default)
#   tests/gpu/run_all.sh --filter LayerNormMLP --seed 7
# Extra arguments go to run_layer_tests.py. Exits non-zero if any case fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

prepend_library_path() {
  export LD_LIBRARY_PATH="$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# libtejit.so links Debian's shared libLLVM 19 (which needs libz3), and the
# GPU machine has neither: unpack the packages pack-gpu.sh sent, without
# installing them (no root, nothing kept between runs anyway).
SYSROOT=/tmp/sys
shopt -s nullglob
debs=(.gpu/debs/*.deb)
shopt -u nullglob
if ((${#debs[@]})); then
  mkdir -p "$SYSROOT"
  for deb in "${debs[@]}"; do
    dpkg -x "$deb" "$SYSROOT"
  done
  prepend_library_path "$SYSROOT/usr/lib/x86_64-linux-gnu:$SYSROOT/usr/lib/llvm-19/lib"
else
  echo "note: no .gpu/debs/*.deb; libLLVM and libz3 must come from the system"
fi

# cuDNN and NCCL exist there only as PyTorch's pip packages: add their lib/
# folders (a missing package is not an error: only attention needs cuDNN).
nvidia_libs=$(python3 - <<'EOF' || true
import importlib
import os

folders = []
for name in ("nvidia.cudnn", "nvidia.nccl"):
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue
    for path in getattr(module, "__path__", []):
        lib = os.path.join(path, "lib")
        if os.path.isdir(lib) and lib not in folders:
            folders.append(lib)
print(":".join(folders))
EOF
)
if [[ -n "$nvidia_libs" ]]; then
  prepend_library_path "$nvidia_libs"
else
  echo "note: no cuDNN/NCCL found in PyTorch's nvidia packages"
fi

if [[ -f .gpu/lib/libtejit.so ]]; then
  export TEJIT_LIBRARY="$PWD/.gpu/lib/libtejit.so"
fi
echo "tejit library: ${TEJIT_LIBRARY:-(default search: python/tejit, build/lib, loader path)}"

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader ||
  echo "note: nvidia-smi failed"

status=0
python3 tests/gpu/run_layer_tests.py --sizes "${SIZES:-all}" "$@" || status=$?
exit "$status"
