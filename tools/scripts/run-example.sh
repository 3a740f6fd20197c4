#!/usr/bin/env bash
# Sets up, builds, and compiles the bundled quickstart layer: prints its te
# IR and what each function launches, and writes its runnable bundle (planned
# IR, kernels and cubins, plan.json) to build/quickstart.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/scripts/install-deps.sh
tools/scripts/build.sh
build/bin/te-compile examples/quickstart.yaml
build/bin/te-compile examples/quickstart.yaml --stats
build/bin/te-compile examples/quickstart.yaml -o build/quickstart
