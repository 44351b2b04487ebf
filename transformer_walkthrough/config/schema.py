"""The schema: fields that carry their docs, the check of every value against its type, and the
check of every key, which names the offending one and suggests the near one.

A field's ``doc`` becomes its comment in ``walkthrough config``; a section's dataclass is held to its
annotations in ``__post_init__`` (``Checked``), so a config built in Python meets the same rules as
one read from YAML, with the same messages.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import types
import typing
from dataclasses import field
from typing import Any, ClassVar, Literal

from ..errors import ConfigError, close_matches

QUOTE = 40  # characters of a value quoted in a message


def doc(text: str, default: Any) -> Any:
    """A field with its default and its doc, the comment ``walkthrough config`` writes beside it."""
    return field(default=default, metadata={"doc": text})


def choice(notes: dict[str, str], default: str, sep: str = ", ") -> Any:
    """A field whose comment names each of its values with its note; its type, ``Literal[tuple(notes)]``,
    takes only them (``coerce``)."""
    return doc(sep.join(f"{value} {note}" for value, note in notes.items()), default)


class Checked:
    """Checks each field's value against its annotation; the section name prefixes messages."""

    _section: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = coerce(getattr(self, f.name), hints[f.name], self._key(f.name))
            object.__setattr__(self, f.name, value)

    def _key(self, name: str) -> str:
        return f"{self._section}.{name}" if self._section else name

    def _require(self, ok: bool, name: str, message: str) -> None:
        if not ok:
            raise ConfigError(f"{self._key(name)}: {message}")


def coerce(value: Any, hint: Any, key: str) -> Any:
    """Return ``value`` as type ``hint``, or raise ConfigError naming ``key``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # X | None, or a name or a number (Y | float)
        if value is None and type(None) in args:
            return None
        hints = [a for a in args if a is not type(None)]
        for each in hints[:-1]:  # the first that takes the value, in the annotation's order
            with contextlib.suppress(ConfigError):
                return coerce(value, each, key)
        if len(hints) == 1:
            return coerce(value, hints[0], key)
        with contextlib.suppress(ConfigError):
            return coerce(value, hints[-1], key)
        raise ConfigError(f"{key}: must be {' or '.join(map(_spelled, hints))}; got {quote(value)}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: must be one of {', '.join(map(str, args))}; got {quote(value)}")
        return value
    if origin is tuple:  # tuple[str, ...], or a fixed length: tuple[str, str]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {describe(value)}")
        if Ellipsis not in args and len(value) != len(args):
            raise ConfigError(f"{key}: expected a list of {len(args)}, got {len(value)}: {quote(value)}")
        if args == (str, Ellipsis) and all(type(v) is str and v.isprintable() for v in value):
            return tuple(value)  # the common case, a long vocabulary, in one pass
        kinds = [args[0]] * len(value) if Ellipsis in args else list(args)
        return tuple(coerce(v, t, f"{key}[{i}]") for i, (v, t) in enumerate(zip(value, kinds, strict=True)))
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        raise ConfigError(f"{key}: expected a section of keys, got {describe(value)}")
    if hint is float:
        # PyYAML reads 1e-5 (no dot) as a string; accept it as the number it plainly is.
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an integer too large for a float
                number = math.inf
            if not math.isfinite(number):
                raise ConfigError(f"{key}: must be a finite number, got {quote(value)}")
            return number
        raise ConfigError(f"{key}: expected a number, got {describe(value)}")
    if hint is str and isinstance(value, str) and not value.isprintable():
        bad = next((ch for ch in value if _is_control(ch)), None)
        if bad is not None:
            raise ConfigError(f"{key}: contains the control character {bad!r}; got {quote(value)}")
        return value
    # bool is a subclass of int in Python, but `d_model: true` is a mistake, not a 1.
    if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    names = {int: "an integer", bool: "true or false", str: "a string"}
    raise ConfigError(f"{key}: expected {names.get(hint, hint.__name__)}, got {describe(value)}")


def _spelled(hint: Any) -> str:
    """What a type takes, in a message's words: "one of d_k, none", "a number"."""
    if typing.get_origin(hint) is Literal:
        return f"one of {', '.join(map(str, typing.get_args(hint)))}"
    return {float: "a number", int: "an integer", bool: "true or false", str: "a string"}.get(hint, str(hint))


def describe(value: Any) -> str:
    kind = {dict: "a section", list: "a list", type(None): "nothing"}.get(type(value))
    return kind or f"{quote(value)} ({type(value).__name__})"


def _is_control(ch: str) -> bool:
    return ch in "\x7f" or ord(ch) < 32 or 0x80 <= ord(ch) < 0xA0 or ch in "\u2028\u2029"


def quote(value: Any, limit: int = QUOTE) -> str:
    """A value as a message quotes it: ``repr`` (control characters escaped), cut to a short prefix.

    An alias bomb or a megabyte string must not become a megabyte error line.
    """
    import reprlib

    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    short = reprlib.Repr()  # keyword arguments only from Python 3.12
    short.maxlevel, short.maxlist, short.maxtuple, short.maxdict = 2, 4, 4, 4
    short.maxstring = short.maxother = limit
    try:
        text = short.repr(value)
    except ValueError:  # an integer nested in a list, too long to print
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_keys(mapping: dict, cls: type, where: str, sections: dict[str, type]) -> None:
    """Reject a key ``cls`` has no field for, suggesting the close one (d_modle -> d_model).

    ``sections`` are the file's sections by name, where a key put in the wrong one is looked for."""
    allowed = [f.name for f in dataclasses.fields(cls)] + list(getattr(cls, "_aliases", ()))
    for key in mapping:
        if key in allowed:
            continue
        prefix = f"{where}." if where else ""
        hint = close_matches(str(key)[:100], allowed)
        # A key put in the wrong section (d_model at the top) is worth pointing at too.
        elsewhere = [
            f"{name}.{key}"
            for name, section in sections.items()
            if section is not cls and key in [f.name for f in dataclasses.fields(section)]
        ]
        suggestion = elsewhere[0] if elsewhere else (f"{prefix}{hint[0]}" if hint else None)
        plain = isinstance(key, str) and key.isprintable() and len(key) <= QUOTE
        message = f"unknown key {prefix}{key if plain else quote(key)}"
        if suggestion:
            message += f"; did you mean {suggestion}?"
        else:
            message += f" (known keys: {', '.join(prefix + a for a in allowed)})"
        raise ConfigError(message)
