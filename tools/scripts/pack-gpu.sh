#!/usr/bin/env bash
# Packs what the GPU machine needs into .gpu/ (git-ignored, ~3 MB): the
# compiled bundles (plan.json + cubins) of the full-size examples. Run after
# tools/scripts/build.sh; then, on the GPU machine, tools/scripts/gpu-tests.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .gpu
mkdir -p .gpu
for spec in quickstart.yaml llama.yaml; do
  build/bin/te-compile "examples/$spec" --emit=cuda -o ".gpu/${spec%.*}"
done
