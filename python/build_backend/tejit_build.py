"""PEP 517/660 build backend of the tejit Python package, standard library
only (see ../pyproject.toml for why).

A wheel holds tejit/**/*.py, tejit/libtejit.so when a built library is
found ($TEJIT_LIBRARY, else <repo>/build/lib/libtejit.so; the wheel is then
tagged for this platform), and a generated tejit/_build_info.py naming the
repository it was built from. An editable wheel holds a .pth file that puts
python/ on sys.path, so the package runs from the checkout and finds the
library in build/lib (tejit/_capi.py).
"""
import base64
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import zipfile
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parent.parent
REPO = PYTHON_DIR.parent
PACKAGE = "tejit"
LIBRARY_NAME = "libtejit.so"


def _project_field(name):
    """A string field of pyproject.toml's [project] table (tomllib is only
    in Python >= 3.11, and these are plain `key = "value"` lines)."""
    text = (PYTHON_DIR / "pyproject.toml").read_text(encoding="utf-8")
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]
    match = re.search(rf'^{name}\s*=\s*"([^"]*)"', project, re.MULTILINE)
    if not match:
        raise RuntimeError(f"pyproject.toml: [project] has no {name}")
    return match.group(1)


NAME = _project_field("name")
VERSION = _project_field("version")
DIST_INFO = f"{NAME}-{VERSION}.dist-info"


def _library():
    """The built libtejit.so to bundle, or None."""
    for candidate in (os.environ.get("TEJIT_LIBRARY"),
                      REPO / "build" / "lib" / LIBRARY_NAME):
        if candidate and Path(candidate).is_file():
            return Path(candidate).resolve()
    return None


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
            f"Summary: {_project_field('description')}\n"
            f"Requires-Python: {_project_field('requires-python')}\n"
            f"Provides-Extra: pytorch\n"
            f"Requires-Dist: torch; extra == \"pytorch\"\n").encode()


def _wheel_file(tag, purelib):
    return (f"Wheel-Version: 1.0\nGenerator: tejit_build\n"
            f"Root-Is-Purelib: {'true' if purelib else 'false'}\n"
            f"Tag: {tag}\n").encode()


def _build_info(library):
    return (f'"""Written by python/build_backend/tejit_build.py when this '
            f'package was built."""\n'
            f"REPO = {str(REPO)!r}\n"
            f"LIBRARY_SOURCE = {str(library) if library else None!r}\n"
            f"BUNDLED_LIBRARY = {library is not None}\n").encode()


def _package_sources():
    """(archive name, path) of every module of the package."""
    root = PYTHON_DIR / PACKAGE
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield path.relative_to(PYTHON_DIR).as_posix(), path


def _write_wheel(directory, tag, purelib, members):
    """Writes a wheel of `members` ((archive name, bytes, mode)) plus the
    dist-info; returns its file name."""
    filename = f"{NAME}-{VERSION}-{tag}.whl"
    members = list(members) + [
        (f"{DIST_INFO}/METADATA", _metadata(), 0o644),
        (f"{DIST_INFO}/WHEEL", _wheel_file(tag, purelib), 0o644),
        (f"{DIST_INFO}/top_level.txt", f"{PACKAGE}\n".encode(), 0o644)]
    record = []
    with zipfile.ZipFile(Path(directory) / filename, "w",
                         zipfile.ZIP_DEFLATED) as wheel:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16  # regular file
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
            digest = base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append(f"{DIST_INFO}/RECORD,,")
        wheel.writestr(f"{DIST_INFO}/RECORD", "\n".join(record) + "\n")
    return filename


# --- PEP 517 hooks -----------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    target = Path(metadata_directory) / DIST_INFO
    target.mkdir(parents=True, exist_ok=True)
    (target / "METADATA").write_bytes(_metadata())
    return DIST_INFO


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    library = _library()
    members = [(name, path.read_bytes(), 0o644)
               for name, path in _package_sources()]
    members.append((f"{PACKAGE}/_build_info.py", _build_info(library),
                    0o644))
    if library is None:
        tag = "py3-none-any"
    else:
        # A native library inside: tag the wheel for this platform.
        platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
        tag = f"py3-none-{platform}"
        members.append((f"{PACKAGE}/{LIBRARY_NAME}", library.read_bytes(),
                        0o755))
    return _write_wheel(wheel_directory, tag, library is None, members)


def build_editable(wheel_directory, config_settings=None,
                   metadata_directory=None):
    pth = f"{PYTHON_DIR}\n".encode()
    return _write_wheel(wheel_directory, "py3-none-any", True,
                        [(f"__editable__.{NAME}.pth", pth, 0o644)])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    filename = f"{base}.tar.gz"
    files = [("pyproject.toml", PYTHON_DIR / "pyproject.toml"),
             ("build_backend/tejit_build.py", Path(__file__).resolve())]
    files += list(_package_sources())
    pkg_info = _metadata()
    with tarfile.open(Path(sdist_directory) / filename, "w:gz") as sdist:
        for name, path in files:
            sdist.add(path, arcname=f"{base}/{name}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        sdist.addfile(info, io.BytesIO(pkg_info))
    return filename
