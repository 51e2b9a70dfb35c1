"""A search's space, sampler and pruner as Optuna takes them (``pip install
'easylaunch[search]'``; optuna is imported only by searches).

The space is a dict: Optuna distributions are drawn from, plain lists are categorical choices,
nested dicts group names (``{"model": {"lr": ...}}`` is Optuna's ``model.lr``), and any other
value is a constant every trial's variant holds. Choices that are not plain values (tuples,
lists, dicts) are drawn by their index, since Optuna stores only plain ones.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from easylaunch.errors import LaunchError, needed

PLAIN = (str, int, float, bool, type(None))
SAMPLERS = ("tpe", "random", "grid", "cmaes")


_quieted = False


def import_optuna() -> Any:
    """optuna, or the missing-extra error that says how to install it. The first time, its
    INFO lines ("A new study created", "Trial 3 finished") are turned off: easylaunch's own
    lines say what a search does. tqdm's warning on import in a kernel without ipywidgets is
    not shown. ``optuna.logging.set_verbosity(optuna.logging.INFO)``
    after that brings them back."""
    global _quieted
    with warnings.catch_warnings():  # (tqdm's, in a kernel without ipywidgets: not ours)
        warnings.filterwarnings("ignore", message="IProgress not found")
        optuna = needed("optuna", "run_search", "search")
    if not _quieted:
        _quieted = True
        if optuna.logging.get_verbosity() == optuna.logging.INFO:  # (Optuna's default)
            optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@dataclass(frozen=True)
class Space:
    """The space's Optuna distributions by dotted name, its constants, and the choices drawn
    by their index."""

    distributions: dict[str, Any]
    constants: dict[str, Any]
    indexed: dict[str, list]

    @classmethod
    def of(cls, space: Mapping[str, Any]) -> Space:
        optuna = import_optuna()
        if not isinstance(space, Mapping) or not space:
            raise LaunchError("space must be a non-empty dict of names to Optuna distributions "
                              "or lists of choices")
        distributions, constants, indexed = {}, {}, {}
        for name, value in _flattened(space):
            if isinstance(value, optuna.distributions.BaseDistribution):
                distributions[name] = value
            elif isinstance(value, (list, tuple)):
                if not value:
                    raise LaunchError(f"space[{name!r}] is an empty list: give its choices")
                if all(isinstance(choice, PLAIN) for choice in value):
                    distributions[name] = optuna.distributions.CategoricalDistribution(value)
                else:
                    indexed[name] = list(value)
                    distributions[name] = optuna.distributions.CategoricalDistribution(
                        list(range(len(value))))
            else:
                constants[name] = value
        if not distributions:
            raise LaunchError("space has nothing to search: give at least one distribution "
                              "or list of choices")
        return cls(distributions, constants, indexed)

    def variant(self, params: Mapping[str, Any]) -> dict:
        """A trial's variant: its drawn values (choices by index put back) and the constants,
        dotted names nested again."""
        flat = {**self.constants, **{name: self.indexed[name][value] if name in self.indexed
                                     else value for name, value in params.items()}}
        nested: dict[str, Any] = {}
        for name, value in flat.items():
            *parents, leaf = name.split(".")
            place = nested
            for parent in parents:
                place = place.setdefault(parent, {})
            place[leaf] = value
        return nested

    def key(self) -> str:
        """The space's content, as text that is the same in every process."""
        optuna = import_optuna()
        return json.dumps({
            "distributions": {n: optuna.distributions.distribution_to_json(d)
                              for n, d in sorted(self.distributions.items())},
            "constants": {n: repr(v) for n, v in sorted(self.constants.items())},
            "indexed": {n: repr(v) for n, v in sorted(self.indexed.items())}}, sort_keys=True)

    def grid(self) -> dict[str, list]:
        """The choices of every name, for a grid search; a continuous range is refused."""
        optuna = import_optuna()
        dists = optuna.distributions
        grid = {}
        for name, dist in self.distributions.items():
            if isinstance(dist, dists.CategoricalDistribution):
                grid[name] = list(dist.choices)
            elif isinstance(dist, dists.IntDistribution) and not dist.log:
                grid[name] = list(range(dist.low, dist.high + 1, dist.step))
            elif isinstance(dist, dists.FloatDistribution) and dist.step is not None:
                count = round((dist.high - dist.low) / dist.step)
                grid[name] = [dist.low + i * dist.step for i in range(count + 1)]
            else:
                raise LaunchError(f"sampler='grid' needs choices for {name!r}: give a list, or "
                                  "a distribution with a step")
        return grid


def _flattened(space: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items = []
    for name, value in space.items():
        if not isinstance(name, str) or not name or "." in name:
            raise LaunchError(f"space key {prefix}{name!r} must be a non-empty string without "
                              "'.' (nest dicts to group names)")
        if isinstance(value, Mapping):
            items.extend(_flattened(value, f"{prefix}{name}."))
        else:
            items.append((f"{prefix}{name}", value))
    return items


def search_key(*parts: Any) -> str:
    """A short digest naming a search by what defines it."""
    text = json.dumps(parts, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def make_sampler(sampler: Any, space: Space, seed: int | None) -> Any:
    """The Optuna sampler ``sampler`` names ("tpe", "random", "grid", "cmaes"), or the
    sampler object given."""
    optuna = import_optuna()
    samplers = optuna.samplers
    if isinstance(sampler, samplers.BaseSampler):
        return sampler
    if sampler == "tpe":
        return samplers.TPESampler(seed=seed, constant_liar=True)
    if sampler == "random":
        return samplers.RandomSampler(seed=seed)
    if sampler == "grid":
        return samplers.GridSampler(space.grid(), seed=seed)
    if sampler == "cmaes":
        if importlib.util.find_spec("cmaes") is None:  # (else it fails at its first draw)
            raise LaunchError("sampler='cmaes' needs the cmaes package: pip install cmaes")
        return samplers.CmaEsSampler(seed=seed)
    raise LaunchError(f"sampler must be one of {', '.join(SAMPLERS)} or an Optuna sampler, "
                      f"got {sampler!r}")


def make_pruner(pruner: Any, min_resource: int) -> Any:
    """The Optuna pruner ``pruner`` names ("asha": successive halving, "median", None), or
    the pruner object given."""
    pruners = import_optuna().pruners
    if isinstance(pruner, pruners.BasePruner):
        return pruner
    if pruner == "asha":
        return pruners.SuccessiveHalvingPruner(min_resource=min_resource, reduction_factor=3)
    if pruner == "median":
        return pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=min_resource)
    if pruner is None:
        return pruners.NopPruner()
    raise LaunchError(f"pruner must be 'asha', 'median', None or an Optuna pruner, "
                      f"got {pruner!r}")
