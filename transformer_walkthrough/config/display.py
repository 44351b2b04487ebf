"""The ``display:`` section: how numbers are shown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .schema import Checked, doc


@dataclass(frozen=True)
class DisplayConfig(Checked):
    """How numbers are shown (never how they are computed)."""

    _section: ClassVar[str] = "display"

    precision: int = doc("digits after the decimal point", 2)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(0 <= self.precision <= 17, "precision", f"must be 0 to 17, got {self.precision}")
