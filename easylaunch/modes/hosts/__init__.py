"""The machines that hold runs, under the modes: this one, or a cluster reached over SSH.

``CLUSTERS`` names remote machines; a mode's ``cluster=`` option (or DEFAULT_CLUSTER for the
Slurm modes, SSH_DEFAULT_HOST for ``ssh``) picks one, or gives an ssh destination directly.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from easylaunch.errors import LaunchError
from easylaunch.modes.hosts.transport import LocalTransport, Transport
from easylaunch.settings import Settings

FIELDS = ("host", "log_dir", "python", "ssh_config", "identity_file",
          "username", "hostname")  # (the last two: doodad's SSH_HOSTS entries)
_DESTINATION = re.compile(r"(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+(?::\d{1,5})?")


@dataclass(frozen=True)
class Cluster:
    """A remote machine: how to reach it, where runs go there, its Python."""

    name: str
    destination: str  # an ~/.ssh/config alias, or user@host
    port: int | None
    log_dir: str
    python: str
    ssh_config: str | None
    identity_file: str | None


def _destination(text: str, where: str) -> tuple[str, int | None]:
    if not isinstance(text, str) or not _DESTINATION.fullmatch(text):
        raise LaunchError(f"{where}: {text!r} is not an ssh destination; give an ~/.ssh/config "
                          "Host name or user@host[:port]")
    host, _, port = text.partition(":")
    return host, int(port) if port else None


def find_cluster(settings: Settings, name: str) -> Cluster:
    """The cluster ``name`` of CLUSTERS, or one given as an ssh destination directly."""
    clusters = settings.CLUSTERS or {}
    if name not in clusters:
        host, port = _destination(name, "cluster")
        return Cluster(name, host, port, settings.SSH_LOG_DIR, "python3", None,
                       settings.SSH_PRIVATE_KEY)
    entry, where = clusters[name], f"CLUSTERS[{name!r}]"
    if not isinstance(entry, dict):
        raise LaunchError(f"{where} must be a dict with 'host' (and 'log_dir', 'python')")
    unknown = sorted(set(entry) - set(FIELDS))
    if unknown:
        raise LaunchError(f"{where} has unknown field(s) {', '.join(unknown)}; known fields: "
                          f"{', '.join(FIELDS[:5])}")
    text = entry.get("host") or (
        f"{entry['username']}@{entry['hostname']}" if entry.get("username") and
        entry.get("hostname") else entry.get("hostname"))
    if not text:
        raise LaunchError(f"{where} names no host; set 'host' to an ~/.ssh/config Host name or "
                          "user@host[:port]")
    host, port = _destination(text, where)
    for key in ("log_dir", "python", "ssh_config", "identity_file"):
        if entry.get(key) is not None and not isinstance(entry[key], str):
            raise LaunchError(f"{where}: {key} must be a string, got {entry[key]!r}")
    return Cluster(name, host, port, entry.get("log_dir") or settings.SSH_LOG_DIR,
                   entry.get("python") or "python3", entry.get("ssh_config"),
                   entry.get("identity_file") or settings.SSH_PRIVATE_KEY)


def transport_to(settings: Settings, name: str | None, local_python: str = sys.executable
                 ) -> Transport:
    """The transport to cluster ``name``, or to this machine when ``name`` is None."""
    if name is None:
        return LocalTransport(local_python)
    from easylaunch.modes.hosts.ssh import SshTransport  # (late: only a cluster over SSH needs it)

    cluster = find_cluster(settings, name)
    return SshTransport(cluster.name, cluster.destination, cluster.port, cluster.python,
                        cluster.log_dir, cluster.ssh_config, cluster.identity_file)
