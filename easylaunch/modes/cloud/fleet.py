"""What a cloud launch starts: its target (where, on what), its fleets of instances and their
names, and an instance's state as its cloud describes it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from easylaunch.modes.cloud import transfer as cloud


def name_part(text: str, limit: int) -> str:
    """Lowercase letters, digits and dashes, as GCE and Azure names, GCE label values
    allow."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")


def instance_name(exp_name: str, run_id: str, relaunch: int = 0) -> str:
    """A valid, unique instance name: ``el-<experiment>-<run id>``, with ``-r<n>`` for the
    n-th relaunch (at most 63 characters)."""
    ident = f"{run_id}-r{relaunch}" if relaunch else run_id
    exp = name_part(exp_name, 63 - len("el--") - len(ident))
    return f"el-{exp}-{ident}" if exp else f"el-{ident}"


class InstanceState(NamedTuple):
    """An instance as its cloud describes it."""

    name: str  # the cloud's own word: "running", "TERMINATED"
    ended: bool  # the machine runs no more
    reason: str  # why, when the cloud says
    interrupted: bool  # the cloud took it back (spot, preemption)


@dataclass(frozen=True)
class Target:
    """Where and on what a request runs, from the settings."""

    location: str  # region (EC2) or zone (GCE)
    bucket: str
    prefix: str
    image: str
    machine_type: str
    market: str  # "on-demand", "spot (max $0.5/hour each)", "preemptible"


@dataclass(frozen=True)
class Fleet:
    """Instances started together: the ids of each one's runs (by index in the manifest)."""

    instances: list[list[str]]
    manifest: cloud.Archive
    launch_id: str  # the first run's id: names the fleet's cancel markers and instance labels
    control_prefix: str
    boot_script: str
    relaunch: int = 0  # 1, 2...: the instances start runs again after earlier ones ended


# A cloud's own Target (its settings beyond the shared ones), as its mode's methods take it.
TargetT = TypeVar("TargetT", bound="Target")


@dataclass(frozen=True)
class CloudPlan(Generic[TargetT]):
    """Everything a launch uploads and starts."""

    target: TargetT
    shared: list[cloud.Archive]  # the agent and code snapshots: uploaded when not stored yet
    bundles: list[cloud.Archive]
    fleets: list[Fleet]
