#!/usr/bin/env bash
# Sets up, builds, and compiles the bundled quickstart layer, printing its IR.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/scripts/install-deps.sh
tools/scripts/build.sh
build/bin/te-compile examples/quickstart.yaml
