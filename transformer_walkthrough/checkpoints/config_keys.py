"""config.json's values read and checked, one reader for each kind of value: a positive integer, a
number, true or false, a token id, the end token's ids, the rotary parameters.

Every converter of Llama's layer (``decoder.py``, and the families of ``llama.py``, ``moe.py``,
``gemma.py``) reads the same kinds of value, and each kind is refused the same way wherever it is
read: one line that names the file and the key and quotes the value (``shown``), never a traceback
from far away. A reader takes the value as config.json has it, after the family's defaults are
filled in (``family.with_defaults``), and returns it checked.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .errors import CheckpointError
from .jsonfile import shown

ROPE_TYPES = ("default", "linear", "llama3")  # any other type (yarn, dynamic, longrope) is refused


def positive_int(config: dict[str, Any], key: str, path: Path) -> int:
    """config.json's ``key``, an integer of at least 1 (``true`` is no integer here)."""
    value = config[key]
    if type(value) is not int or value < 1:
        raise CheckpointError(f"{path}: {key} is {shown(value)}, not a positive integer")
    return value


def number(value: Any, key: str, path: Path, low: float = 0.0) -> float:
    """config.json's ``key``, a finite number above ``low``: JSON's integers have no bound, and
    one of 400 digits is no float (its conversion would overflow far from here, naming no key)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > low:
        raise CheckpointError(f"{path}: {key} is {shown(value)}, not a number above {low:g}")
    try:
        converted = float(value)
    except OverflowError:  # an int past the largest float
        converted = math.inf
    if converted == math.inf:
        raise CheckpointError(f"{path}: {key} is {shown(value)}, not a finite number")
    return converted


def boolean(config: dict[str, Any], key: str, path: Path) -> bool:
    """config.json's ``key``, true or false (``0`` and ``"false"`` are neither)."""
    value = config[key]
    if type(value) is not bool:
        raise CheckpointError(f"{path}: {key} is {shown(value)}, not true or false")
    return value


def token_id(config: dict[str, Any], key: str, path: Path) -> int | None:
    """config.json's ``key``, one token id (an integer from 0) or null (none)."""
    value = config[key]
    if value is not None and (type(value) is not int or value < 0):
        raise CheckpointError(f"{path}: {key} is {shown(value)}, not a token id")
    return value


def end_ids(value: Any, path: Path) -> int | tuple[int, ...] | None:
    """``eos_token_id``: one id, a list of them (Llama 3: ``<|end_of_text|>`` and ``<|eot_id|>``),
    or null."""
    if value is None:
        return None
    ids = value if isinstance(value, list) else [value]
    if not 0 < len(ids) <= 64 or any(type(i) is not int or i < 0 for i in ids):
        raise CheckpointError(f"{path}: eos_token_id is {shown(value)}, not a token id or a list of them")
    return tuple(ids) if isinstance(value, list) else value


def rope(raw: dict[str, Any], config: dict[str, Any], path: Path, name: str | None = None) -> dict[str, Any]:
    """The rotary parameters as transformers 5 standardises them (``convert_rope_params_to_dict``):
    ``rope_scaling`` (older files) or ``rope_parameters``, its ``type`` or ``rope_type`` (default
    "default"), its ``rope_theta`` or the top-level one (default: the family's, or 10,000); llama3's
    ``original_max_position_embeddings`` defaults to max_position_embeddings. ``name``: the key a
    refusal names, when not the file's own (Gemma 3's ``rope_parameters.full_attention``)."""
    parameters = raw.get("rope_parameters")  # [] or false: transformers refuses them (rope_scaling's: none)
    if parameters is not None and not isinstance(parameters, dict):
        raise CheckpointError(f"{path}: {name or 'rope_parameters'} is {shown(parameters)}, not an object")
    given = raw.get("rope_scaling") or parameters or {}
    key = name or ("rope_scaling" if raw.get("rope_scaling") else "rope_parameters")
    if not isinstance(given, dict):
        raise CheckpointError(f"{path}: {key} is {shown(given)}, not an object")
    found = dict(given)
    kind = found.get("rope_type", found.get("type", "default"))
    if not isinstance(kind, str) or kind not in ROPE_TYPES:
        raise CheckpointError(
            f"{path}: {key}'s rope type {shown(kind)} is not supported (supported: {', '.join(ROPE_TYPES)})"
        )
    for partial in (found.get("partial_rotary_factor"), raw.get("partial_rotary_factor")):
        if partial not in (None, 1.0):  # null: transformers rotates whole heads, as when it is absent
            raise CheckpointError(
                f"{path}: partial_rotary_factor is not 1: only whole heads are rotated here"
            )
    found["rope_type"] = kind
    found["rope_theta"] = found.get("rope_theta", config.get("rope_theta", 10000.0))  # defaults filled in
    if number(found["rope_theta"], "rope_theta", path) <= 1:
        raise CheckpointError(f"{path}: rope_theta is {shown(found['rope_theta'])}, not more than 1")
    if kind in ("linear", "llama3"):
        number(found.get("factor"), f"{key}.factor", path)
    if kind == "llama3":
        found.setdefault("original_max_position_embeddings", config["max_position_embeddings"])
        low = number(found.get("low_freq_factor"), f"{key}.low_freq_factor", path)
        high = number(found.get("high_freq_factor"), f"{key}.high_freq_factor", path)
        if not low < high:
            raise CheckpointError(
                f"{path}: {key}: low_freq_factor ({low:g}) must be below high_freq_factor ({high:g})"
            )
        original = found["original_max_position_embeddings"]
        if type(original) is not int or original < 1:
            raise CheckpointError(
                f"{path}: {key}.original_max_position_embeddings is {shown(original)}, not a positive integer"
            )
    return found


def rope_keys(found: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig's rotary keys of checked parameters (``rope``): the base, the scaling and its numbers."""
    keys: dict[str, Any] = {"rope_theta": float(found["rope_theta"]), "rope_scaling": found["rope_type"]}
    if found["rope_type"] == "linear":
        keys["rope_factor"] = float(found["factor"])
    if found["rope_type"] == "llama3":
        keys.update(
            rope_factor=float(found["factor"]),
            rope_low_freq_factor=float(found["low_freq_factor"]),
            rope_high_freq_factor=float(found["high_freq_factor"]),
            rope_original_max_positions=found["original_max_position_embeddings"],
        )
    return keys
