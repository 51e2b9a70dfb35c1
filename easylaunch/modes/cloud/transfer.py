"""What every cloud mode shares: packing runs for object storage, uploads once per content, and
the boot script that starts the instance agent.

A run travels as three kinds of objects: one archive per code snapshot
(``snapshots/<digest>.tar.gz``), each blob its bundle links to (``blobs/<sha>.function.pkl``,
``blobs/<sha>.job.pyz``) and its bundle folder without those, in one archive with the bundles of
the runs started with it (``bundles/<sha>.tar.gz``, a folder a run). Keys are
named by content, so an archive whose key already exists is never uploaded again. On the
instance, snapshots unpack to ``<workdir>/.snapshots/<digest>``, blobs go to
``<workdir>/.blobs/`` and a bundle to ``<workdir>/<exp>/<run folder>/bundle``, where its
relative links resolve.

Nothing here imports a cloud SDK: buckets are reached through the instance agent's
:class:`~easylaunch.modes.cloud.Store` classes, given the mode's own client.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shlex
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from easylaunch.errors import LaunchError
from easylaunch.runs.bundle import Run
from easylaunch.runs.jobpack import job_archive
from easylaunch_job.cloud.agent import AGENT_PID, DEFAULT_WORKDIR, ENV_WORKDIR
from easylaunch_job.cloud.platforms import DEFAULT_SHUTDOWN_CMD, ENV_SHUTDOWN_CMD
from easylaunch_job.cloud.stores import ENV_AML_IDENTITY, ENV_AZURE_CONNECTION, Store
from easylaunch_job.records import BLOB_STORE, SNAPSHOT_STORE, write_bytes_atomic

MANIFEST_FORMAT = 1
# The largest object a single upload may hold (S3's single PUT limit, 5 GiB; GCS allows more).
MAX_OBJECT_BYTES = 5 * 2**30
# The boot script must stay well below the user-data / metadata value limits (16 KB on EC2).
MAX_BOOT_SCRIPT_BYTES = 8 * 2**10
# How long the shutdown script waits for the agent's last sync (GCE allows about 30 s when it
# preempts an instance).
SHUTDOWN_GRACE_SECONDS = 25


def download_prefix(store: Store, prefix: str, dest: str | os.PathLike,
                    skip: Iterable[str] = (), suffix: str = "") -> list[str]:
    """Copy every object under ``prefix/`` (whose name ends with ``suffix``) into ``dest``
    (keeping relative paths).

    Relative paths in ``skip`` are left out; returns the relative paths written.
    """
    dest = Path(dest).resolve()
    prefix = prefix.rstrip("/") + "/"
    written = []
    for key in store.list(prefix):
        rel = key[len(prefix):]
        target = (dest / rel).resolve()
        if not rel or rel in skip or not rel.endswith(suffix) or not target.is_relative_to(dest):
            continue
        data = store.get(key)
        if data is None:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(str(target), data)
        written.append(rel)
    return written


@dataclass
class Archive:
    """One object to upload: its key and bytes."""

    key: str
    data: bytes


def split_url(url: str, scheme: str, setting: str) -> tuple[str, str]:
    """``scheme://bucket/prefix`` as (bucket, prefix without slashes at either end)."""
    head = f"{scheme}://"
    if not isinstance(url, str) or not url.startswith(head) or not url[len(head):].strip("/"):
        raise LaunchError(f"{setting} must look like {head}bucket/prefix, got {url!r}; set it in "
                          "your settings to a bucket this machine and the instances can write")
    bucket, _, prefix = url[len(head):].partition("/")
    return bucket, prefix.strip("/")


def join_key(*parts: str) -> str:
    """Parts joined by ``/``, empty parts left out."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def tar_gz(folder: Path) -> bytes:
    """A reproducible gzipped tarball of ``folder``'s content (see :func:`tar_gz_folders`)."""
    return tar_gz_folders({"": folder})


def tar_gz_folders(folders: dict[str, Path]) -> bytes:
    """A reproducible gzipped tarball of each folder's content under its name (""): links to
    folders (a bundle's code snapshots) and to the blob store (its pickled function and job
    side) kept as links, other links to files stored as those files."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for root, folder in folders.items():
            for dirpath, dirnames, filenames in os.walk(folder):
                dirnames.sort()
                for name in sorted(dirnames + filenames):
                    path = Path(dirpath) / name
                    source = path.resolve() if path.is_symlink() and path.is_file() and \
                        path.resolve().parent.name != BLOB_STORE else path
                    arcname = os.path.join(root, str(path.relative_to(folder)))
                    info = tar.gettarinfo(str(source), arcname=arcname)
                    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                    if info.isreg():
                        with open(source, "rb") as f:
                            tar.addfile(info, f)
                    else:
                        tar.addfile(info)
    return buf.getvalue()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def snapshot_key(prefix: str, digest: str) -> str:
    """Where the archive of code snapshot ``digest`` is stored."""
    return join_key(prefix, "snapshots", f"{digest}.tar.gz")


def run_log_prefix(prefix: str, run: Run) -> str:
    """Where a run's log folder is mirrored: ``<prefix>/logs/<exp>/<run folder>``."""
    return join_key(prefix, "logs", run.exp_name, run.log_dir.name)


def _check_size(archive: Archive, what: str) -> Archive:
    if len(archive.data) > MAX_OBJECT_BYTES:
        raise LaunchError(
            f"{what}: {len(archive.data) / 2**20:.1f} MB packed, more than the "
            f"{MAX_OBJECT_BYTES / 2**20:.0f} MB one upload may hold; move data out of the code "
            "folders and the variant (NON_CODE_DIRS_TO_MOUNT, or read it from the bucket)")
    return archive


def pack_snapshots(runs: list[Run], log_root: Path, prefix: str) -> list[Archive]:
    """One archive per code snapshot the runs use (each digest once)."""
    digests = dict.fromkeys(s["digest"] for r in runs for s in r.launch["code_snapshots"])
    return [_check_size(Archive(snapshot_key(prefix, d), tar_gz(log_root / SNAPSHOT_STORE / d)),
                        f"code snapshot {d}") for d in digests]


def blob_key(prefix: str, name: str) -> str:
    """Where blob ``name`` (content-named: ``<sha>.function.pkl``) is stored."""
    return join_key(prefix, "blobs", name)


def pack_blobs(runs: list[Run], log_root: Path, prefix: str) -> list[Archive]:
    """One object per blob the runs' bundles link to (each pickled function and job side
    once)."""
    names = dict.fromkeys(link.resolve().name for run in runs for link in run.bundle_dir.iterdir()
                          if link.is_symlink() and link.resolve().parent.name == BLOB_STORE)
    return [_check_size(Archive(blob_key(prefix, name),
                                (log_root / BLOB_STORE / name).read_bytes()), f"blob {name}")
            for name in names]


def pack_bundles(runs: list[Run], prefix: str) -> Archive:
    """The runs' bundle folders (links to snapshots and blobs kept as links), each under its
    run folder's name, as one content-named archive (one upload a fleet; alike bundles
    compress together)."""
    data = tar_gz_folders({run.log_dir.name: run.bundle_dir for run in runs})
    ids = runs[0].run_id + (f"..{runs[-1].run_id}, {len(runs)} runs" if len(runs) > 1 else "")
    return _check_size(Archive(join_key(prefix, "bundles", f"{_sha(data)}.tar.gz"), data),
                       f"the bundles of run {ids}")


def agent_archive(prefix: str) -> Archive:
    """The job side's zipapp (whose ``agent`` command is the instance agent), named by its
    content."""
    data = job_archive()
    return Archive(join_key(prefix, "agent", f"{_sha(data)}.pyz"), data)


def manifest_archive(prefix: str, manifest: dict) -> Archive:
    """A launch manifest as gzipped JSON, named by its content."""
    data = gzip.compress(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode(),
                         mtime=0)
    return Archive(join_key(prefix, "manifests", f"{_sha(data)}.json.gz"), data)


def upload(storage: Store, shared: Iterable[Archive], fresh: Iterable[Archive]) -> None:
    """Upload each shared archive (code snapshots, the agent) whose key is not stored yet, and
    every fresh one (bundles and manifests: their content names run ids, so never stored yet)."""
    for archive in shared:
        if not storage.exists(archive.key):
            storage.put_bytes(archive.key, archive.data)
    for archive in fresh:
        storage.put_bytes(archive.key, archive.data)


def manifest_run(run: Run, prefix: str, bundles_key: str) -> dict:
    """What the agent needs to know about one run (its bundle: the folder named as its run
    folder in the archive ``bundles_key``)."""
    return {"run_id": run.run_id, "exp_name": run.exp_name, "folder": run.log_dir.name,
            "bundles_key": bundles_key, "log_prefix": run_log_prefix(prefix, run),
            "queued_at": run.launch.get("launched_at")}


# How the boot script fetches the job side with the bucket's storage library, by the bucket's
# kind, and runs its agent in the same Python (argv: region, bucket, key, the agent's arguments),
# before the agent and its Store classes are there.
_RUN_AGENT = ('; sys.path.insert(0, "job.pyz"); from easylaunch_job.__main__ import main; '
              "sys.exit(main(sys.argv[4:]))")
FETCH_AND_RUN_AGENT = {
    "s3": ('import sys, boto3; boto3.client("s3", region_name=sys.argv[1] or None)'
           '.download_file(sys.argv[2], sys.argv[3], "job.pyz")' + _RUN_AGENT),
    "gs": ("import sys; from google.cloud import storage; storage.Client().bucket(sys.argv[2])"
           '.blob(sys.argv[3]).download_to_filename("job.pyz")' + _RUN_AGENT),
    # (the account's endpoint in the region's place; a connection string where the machine
    # has one, else its managed identity)
    "az": ('import os, sys; from azure.storage.blob import BlobServiceClient as S; '
           f'c = os.environ.get("{ENV_AZURE_CONNECTION}"); '
           's = S.from_connection_string(c) if c else S(sys.argv[1], credential=__import__('
           '"azure.identity", fromlist=["_"]).DefaultAzureCredential('
           f'managed_identity_client_id=os.environ.get("{ENV_AML_IDENTITY}"))); '
           'open("job.pyz", "wb").write(s.get_blob_client(sys.argv[2], sys.argv[3])'
           '.download_blob().readall())' + _RUN_AGENT),
}


@dataclass(frozen=True)
class BootSpec:
    """What the boot script needs: the platform, the bucket's kind, the Python, packages, the
    agent and manifest; whether a failed boot ends the machine (not a machine of its own: no)."""

    cloud: str
    store: str  # "s3", "gs", "az"
    python: str
    pip_requirements: tuple[str, ...]
    bucket: str
    region: str
    agent_key: str
    manifest_key: str
    shutdown_on_failure: bool = True
    per_rank: bool = False  # each process of a multi-process job (Azure ML) works apart


# The instance's work folder: EASYLAUNCH_WORKDIR when set (tests point it at a sandbox).
_WORKDIR_LINE = (f'WORKDIR="${{{ENV_WORKDIR}:-}}"; '
                 f'[ -n "$WORKDIR" ] || WORKDIR={shlex.quote(DEFAULT_WORKDIR)}')

# The work folder of a process other than rank 0 (RANK, or Open MPI's rank): its own, beside
# rank 0's (which goes when rank 0's agent ends).
_RANK_LINE = ('RANK_HERE="${RANK:-${OMPI_COMM_WORLD_RANK:-0}}"; '
              '[ "$RANK_HERE" = 0 ] || WORKDIR="$WORKDIR-rank-$RANK_HERE"')


def boot_script(spec: BootSpec) -> str:
    """The short bash boot script: install packages, fetch the agent, run it on the manifest.

    ``EASYLAUNCH_WORKDIR`` and ``EASYLAUNCH_SHUTDOWN_CMD`` override the work folder and the
    shutdown command (tests point them at a sandbox). With ``shutdown_on_failure``, a failure
    before the agent starts shuts the machine down, so a broken boot never leaves an instance
    running.
    """
    q = shlex.quote
    python = q(spec.python)
    shutdown = f"${{{ENV_SHUTDOWN_CMD}:-{DEFAULT_SHUTDOWN_CMD}}}"
    lines = [
        "#!/bin/bash",
        "# easylaunch boot script: fetch the instance agent, which runs the launch manifest.",
        "set -eu",
        _WORKDIR_LINE,
        *([_RANK_LINE] if spec.per_rank else []),
        f'export {ENV_WORKDIR}="$WORKDIR"',
        'mkdir -p "$WORKDIR" && cd "$WORKDIR"',
        'exec >>"$WORKDIR"/boot.log 2>&1',
    ]
    if spec.shutdown_on_failure:
        lines.append(f"trap '{shutdown}' EXIT")
    if spec.pip_requirements:
        lines.append(f"PIP_BREAK_SYSTEM_PACKAGES=1 {python} -m pip install --quiet "
                     + " ".join(q(r) for r in spec.pip_requirements))
    agent = (f"{python} -c {q(FETCH_AND_RUN_AGENT[spec.store])} {q(spec.region)} "
             f"{q(spec.bucket)} {q(spec.agent_key)} agent {q(spec.bucket)} "
             f"{q(spec.manifest_key)} --cloud {q(spec.cloud)} --region {q(spec.region)} "
             f"--store {q(spec.store)}")
    if spec.shutdown_on_failure:  # the agent ends the machine; a failed fetch does here
        lines += ["trap - EXIT", f"{agent} || {{ {shutdown}; exit 1; }}"]
    else:
        lines.append(f"exec {agent}")
    text = "\n".join(lines) + "\n"
    if len(text.encode()) > MAX_BOOT_SCRIPT_BYTES:
        raise LaunchError(f"the boot script is {len(text.encode())} bytes, more than "
                          f"{MAX_BOOT_SCRIPT_BYTES}; shorten the pip requirements list")
    return text


def shutdown_script() -> str:
    """A bash script that lets the agent sync a last time when the machine goes down
    (a GCE shutdown-script: preemption, stop, delete): SIGTERM, then wait for it to exit."""
    return "\n".join([
        "#!/bin/bash",
        "# easylaunch shutdown script: the instance agent syncs the run logs a last time.",
        _WORKDIR_LINE,
        f'PID="$(cat "$WORKDIR"/{AGENT_PID} 2>/dev/null)" || exit 0',
        'kill -TERM "$PID" 2>/dev/null || exit 0',
        f"for _ in $(seq {SHUTDOWN_GRACE_SECONDS * 4}); do",
        '  kill -0 "$PID" 2>/dev/null || exit 0',
        "  sleep 0.25",
        "done",
    ]) + "\n"
