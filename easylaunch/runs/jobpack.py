"""The job side as one file: :mod:`easylaunch_job` packed into a zipapp (``job.pyz``).

Every mode stores it once per content where its runs live (a run folder's ``.blobs``, the
remote content store, the bucket) and starts it the same way: ``python job.pyz run BUNDLE``.
The archive is built here rather than with ``zipapp.create_archive``, which stamps each entry
with its file's modification time: these bytes depend on the package's source (and this
Python's bytecode) alone, so the same code is the same blob on every launch. Beside each module a
run imports lies its bytecode for this Python, as an unchecked hash-based ``.pyc``: a run (which
needs this Python's minor version anyway) starts without compiling them, while another Python
finds a foreign magic number and compiles the source. The bytecode's string constants are
interned before it is written: marshal marks a string by whether it is interned, which otherwise
depends on what the process interned before (a process that had used Ray wrote other bytes, so
its launches named another job side than a later process's resubmit did). The packer, the far
side and the agent (long-lived, and mostly on a cluster's or instance's own python3) travel as
source alone, which keeps the file small.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import marshal
import sys
import types
import zipfile
from pathlib import Path

import easylaunch_job

# ``python job.pyz ...`` runs this; the package's own __main__ checks the Python first.
_ZIP_MAIN = b"import sys\nfrom easylaunch_job.__main__ import main\nsys.exit(main())\n"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_SOURCE_ONLY = ("easylaunch_job/packer.py", "easylaunch_job/host_ops.py", "easylaunch_job/cloud/")


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def _bytecode(name: str, source: bytes) -> bytes:
    """``source`` compiled, as an unchecked hash-based .pyc (no time stamp in it)."""
    code = _settled(compile(source, name, "exec", dont_inherit=True))
    flags = (0b01).to_bytes(4, "little")  # hash-based, source not checked
    return (importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source)
            + marshal.dumps(code))


def _settled(code: types.CodeType) -> types.CodeType:
    """``code`` with its string constants (and those of the code inside it) interned, so
    marshal writes it the same in every process."""
    return code.replace(co_consts=tuple(map(_settled_constant, code.co_consts)))


def _settled_constant(value: object) -> object:
    if type(value) is str:
        return sys.intern(value)
    if isinstance(value, types.CodeType):
        return _settled(value)
    if type(value) is tuple:
        return tuple(map(_settled_constant, value))
    return value


@functools.cache
def job_archive() -> bytes:
    """The zipapp's bytes: ``__main__.py`` and every module of easylaunch_job (those a run
    imports with their bytecode), in name order."""
    package = Path(easylaunch_job.__file__).parent
    sources = {"__main__.py": _ZIP_MAIN}
    for path in sorted(package.rglob("*.py")):
        sources[f"{package.name}/{path.relative_to(package).as_posix()}"] = path.read_bytes()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, source in sources.items():
            archive.writestr(_entry(name), source)
            if not name.startswith(_SOURCE_ONLY):
                archive.writestr(_entry(name + "c"), _bytecode(name, source))
    return buffer.getvalue()
