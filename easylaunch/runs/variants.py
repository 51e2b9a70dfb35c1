"""Variants: checked before anything is made, and kept as data where they are recorded
(variant.json, the registry): numbers as numbers, whatever library made them."""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Mapping
from typing import Any

from easylaunch.errors import LaunchError

RESERVED_VARIANT_KEY = "doodad_config"


def _json_key(key: Any) -> str:
    """The string JSON makes of a dict key (1 -> "1", True -> "true", None -> "null")."""
    return key if isinstance(key, str) else json.dumps(key)


def _bad_variant_key(variant: Mapping, path: str = "") -> str | None:
    seen: dict[str, Any] = {}
    for key, value in variant.items():
        where = f"{path}{key}"
        if isinstance(key, (str, int, float, bool)) or key is None:
            text = _json_key(key)
            if text in seen:
                return (f"keys {seen[text]!r} and {key!r} at {path or 'the top level'} both "
                        f"become {text!r} in variant.json (JSON keys are strings)")
            seen[text] = key
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            return f"key {key!r} is a {type(key).__name__}; variant keys must be strings"
        if isinstance(key, str) and "." in key:
            return f"key {where!r} contains '.' (dots separate nested keys)"
        if not path and key == RESERVED_VARIANT_KEY:
            return f"key {key!r} is reserved (the function receives doodad_config separately)"
        if isinstance(value, Mapping):
            problem = _bad_variant_key(value, f"{where}/")
            if problem:
                return problem
    return None


def check_variant(variant: Any, index: int | None = None) -> dict:
    """Return the variant as a dict, or explain what is wrong with it."""
    label = "variant" if index is None else f"variants[{index}]"
    if variant is None:
        return {}
    if not isinstance(variant, Mapping):
        raise LaunchError(f"{label} must be a dict, got {type(variant).__name__}")
    problem = _bad_variant_key(variant)
    if problem:
        raise LaunchError(f"{label}: {problem}; rename it")
    return dict(variant)


def as_data(value: Any, path: str = "") -> tuple[Any, list[str]]:
    """``value`` as JSON can hold it, and the keys (``a.b``) of values kept as their text.

    numpy's scalars become the Python numbers they hold and its arrays lists (numpy is not
    imported: nothing is needed to read them back); tuples become lists; what JSON cannot hold
    otherwise (a Path, a date, a set) becomes its text. The function itself receives the
    variant as it was given.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value, []
    if isinstance(value, Mapping):
        data, texts = {}, []
        for key, item in value.items():
            data[key], more = as_data(item, f"{path}{key}.")
            texts += more
        return data, texts
    if isinstance(value, (list, tuple)):
        items: list[Any] = []
        texts = []
        for item in value:
            converted, more = as_data(item, path)
            items.append(converted)
            texts += more
        return items, texts
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return as_data(value.tolist(), path)  # (a scalar's tolist() is its Python number)
    return str(value), [path.rstrip(".") or "(the variant)"]


def warn_text_values(variants: list[dict]) -> None:
    """One warning naming the keys whose values are recorded as text."""
    keys = sorted({key for variant in variants for key in as_data(variant)[1]})
    if keys:
        warnings.warn(f"variant key(s) {', '.join(map(repr, keys))} hold values JSON cannot "
                      "hold; variant.json and the registry keep them as text (the function "
                      "receives them as they are)", UserWarning, stacklevel=4)


def variant_key(variant: Mapping) -> str:
    """The variant's canonical content as a digest: equal for variants that hold the same data
    (key order aside), whichever process made them. ``1`` and ``1.0`` differ; values JSON
    cannot hold count by their text (:func:`as_data`)."""
    # (keys as JSON writes them first: 2 and "a" would not sort against each other)
    data = json.loads(json.dumps(as_data(variant)[0], allow_nan=True))
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()
