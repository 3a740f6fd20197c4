#!/usr/bin/env bash
# Installs the Debian 12 packages tejit builds and tests with: the LLVM/MLIR 19
# series (pinned by package name, checked by version), fmt, GoogleTest, Google
# Benchmark, CMake, Ninja, ccache and pytest. Installs only what is missing, so it is
# cheap to run again. The CUDA toolkit is not a Debian package: later stages
# expect it in /usr/local/cuda.
set -euo pipefail

packages=(
  cmake ninja-build g++ ccache python3 python3-pytest
  llvm-19-dev libmlir-19-dev mlir-19-tools llvm-19-tools
  libfmt-dev libgtest-dev libbenchmark-dev
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null |
      grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi

version=$(/usr/lib/llvm-19/bin/llvm-config --version)
if [[ $version != 19.* ]]; then
  echo "install-deps: expected LLVM 19.x, found $version" >&2
  exit 1
fi
echo "install-deps: ok (LLVM/MLIR $version)"
