"""Lines of ``explain`` read back: a line is its words with numbers in it, each number checked
against the value it shows to the digits it is printed with (more for an operand than for a
result: ``model.cell``), not against a pinned spelling."""

from __future__ import annotations

import re

_NUMBER = r"\(?−?\d+\.\d+\)?"


def reads(template: str, line: str, *values: float, search: bool = False) -> None:
    """``line`` is ``template`` with each "{}" a number that shows its value: within one unit of its
    last printed digit, and printed to 4 decimals or more (``explain``'s default); with ``search``,
    the line ends so."""
    parts = re.split(r"(\{\})", template)
    pattern = "".join(re.escape(part) if part != "{}" else f"({_NUMBER})" for part in parts)
    found = re.search(pattern + "$", line) if search else re.fullmatch(pattern, line)
    assert found, f"{line!r} does not read {template!r}"
    for text, value in zip(found.groups(), values, strict=True):
        digits = len(text.strip("()").split(".")[1])
        assert digits >= 4 and abs(float(text.strip("()").replace("−", "-")) - value) <= 10.0**-digits, (
            line,
            text,
            value,
        )


def shows(text: str, template: str, *values: float) -> None:
    """Somewhere in ``text``, ``template`` with each "{}" a number that shows its value (as
    ``reads``: within one unit of its last printed digit, 4 decimals or more)."""
    parts = re.split(r"(\{\})", template)
    pattern = "".join(re.escape(part) if part != "{}" else f"({_NUMBER})" for part in parts)
    for found in re.finditer(pattern, text):
        numbers = [t.strip("()") for t in found.groups()]
        if all(
            len(t.split(".")[1]) >= 4 and abs(float(t.replace("−", "-")) - v) <= 10.0 ** -len(t.split(".")[1])
            for t, v in zip(numbers, values, strict=True)
        ):
            return
    raise AssertionError(f"{template!r} with {values} is not in {text!r}")
