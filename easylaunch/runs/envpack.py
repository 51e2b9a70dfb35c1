"""Pack a Python environment once per content, to broadcast to the nodes of a job.

A virtualenv is packed with venv-pack, a conda environment with conda-pack (each imported only
here). The archive is named by a hash of the interpreter and the installed distributions, so a
later launch with the same environment reuses it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import uuid
from pathlib import Path

from easylaunch.errors import LaunchError, needed


def _site_packages(prefix: Path) -> list[Path]:
    return sorted(prefix.glob("lib/python*/site-packages")) + sorted(
        prefix.glob("Lib/site-packages"))


def env_key(prefix: Path) -> str:
    """A hash of the environment's Python and the names of its installed distributions."""
    h = hashlib.sha256(f"{prefix.resolve()}\0{sys.version}\0".encode())
    for site in _site_packages(prefix):
        for entry in sorted(site.glob("*.dist-info")) + sorted(site.glob("*.egg-info")):
            h.update(entry.name.encode() + b"\0")
    return h.hexdigest()[:16]


def is_conda(prefix: Path) -> bool:
    """True for a conda environment (it has conda-meta/)."""
    return (prefix / "conda-meta").is_dir()


def archive_path(prefix: Path, store: Path) -> Path:
    """Where the packed archive of the environment at ``prefix`` goes (named by content)."""
    if not (prefix / "bin" / "python").exists():
        raise LaunchError(f"env_pack={str(prefix)!r} is not a Python environment (no "
                          "bin/python); give the path of a virtualenv or conda environment")
    return store / f"env-{env_key(prefix)}.tar.gz"


def pack_env(prefix: Path, archive: Path) -> None:
    """Pack the environment at ``prefix`` into ``archive`` (its archive_path), unless done."""
    if archive.exists():
        return
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.parent / f".partial-{uuid.uuid4().hex[:8]}.tar.gz"
    tool = "conda-pack" if is_conda(prefix) else "venv-pack"
    packer = needed(tool.replace("-", "_"), f"env_pack={str(prefix)!r}", "envpack", tool)
    try:
        packer.pack(prefix=str(prefix), output=str(tmp), force=True)
        os.replace(tmp, archive)
    except Exception as exc:  # noqa: BLE001 - the packers raise their own error types
        raise LaunchError(f"cannot pack the environment {prefix}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
