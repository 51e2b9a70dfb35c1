"""The job side as one file: :mod:`easylaunch_job` packed into a zipapp (``job.pyz``).

Every mode stores it once per content where its runs live (a run folder's ``.blobs``, the
remote content store, the bucket) and starts it the same way: ``python job.pyz run BUNDLE``.
The archive is built here rather than with ``zipapp.create_archive``, which stamps each entry
with its file's modification time: these bytes depend on the package's source alone, so the
same code is the same blob on every machine and every launch.
"""

from __future__ import annotations

import functools
import io
import zipfile
from pathlib import Path

import easylaunch_job
from easylaunch_job.records import JOB_PYZ  # noqa: F401 - the file's name, for the modes

# ``python job.pyz ...`` runs this; the package's own __main__ checks the Python first.
_ZIP_MAIN = b"import sys\nfrom easylaunch_job.__main__ import main\nsys.exit(main())\n"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


@functools.cache
def job_archive() -> bytes:
    """The zipapp's bytes: ``__main__.py`` and every module of easylaunch_job, in name order."""
    package = Path(easylaunch_job.__file__).parent
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(_entry("__main__.py"), _ZIP_MAIN)
        for path in sorted(package.rglob("*.py")):
            name = f"{package.name}/{path.relative_to(package).as_posix()}"
            archive.writestr(_entry(name), path.read_bytes())
    return buffer.getvalue()
