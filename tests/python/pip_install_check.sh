#!/usr/bin/env bash
# pip_install_check.sh PYTHON PACKAGE_DIR TARGET: installs the tejit package
# offline into TARGET and checks, from another folder and without
# TEJIT_LIBRARY, that it imports and loads its libtejit.so.
set -euo pipefail
python="$1" package="$2" target="$3"
rm -rf "$target"
if ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "pip is not available for $python: nothing to check"
  exit 0
fi
"$python" -m pip install --quiet --no-build-isolation --no-index \
  --disable-pip-version-check --target "$target" "$package"
unset TEJIT_LIBRARY
cd "$(mktemp -d)"
PYTHONPATH="$target" "$python" - "$target" <<'PY'
import sys
import tejit
loaded = str(tejit._capi.lib()._name)
# The wheel carries the library: the installed copy is the one loaded.
assert loaded.startswith(sys.argv[1]), f"loaded {loaded}, not the installed copy"
assert tejit.version(), "no version"
print("installed tejit", tejit.version(), "loads", loaded)
PY
