#!/usr/bin/env bash
# Sets up, builds, and runs every test: lit (IR, diagnostics, te-compile) and
# the GoogleTest unit tests, through ctest.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/scripts/install-deps.sh
tools/scripts/build.sh
ctest --test-dir build --output-on-failure
