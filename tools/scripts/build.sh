#!/usr/bin/env bash
# Configures and builds tejit into build/ (Release, Ninja, ccache when present).
set -euo pipefail
cd "$(dirname "$0")/../.."
# Relative paths in ccache's keys let clones in other folders share hits.
export CCACHE_BASEDIR="$PWD"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
