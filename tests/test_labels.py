"""Issue 22, point 11: a piece that is only a space mark is labelled by its position in brackets,
and the training bar's loss keeps its digits when it is small."""

from __future__ import annotations

from transformer_walkthrough.model.trace import token_labels
from transformer_walkthrough.views.terminal import loss_text


def test_a_bare_space_mark_is_labelled_with_its_position_in_brackets() -> None:
    assert token_labels(["▁the", "▁", "▁cat", "▁", "▁the"]) == ("▁the@0", "▁ (1)", "▁cat", "▁ (3)", "▁the@4")
    assert token_labels(["Ġ", "a", "ĠĠ", "Ġ"]) == ("Ġ (0)", "a", "ĠĠ", "Ġ (3)")
    assert token_labels(["▁", "x"]) == ("▁", "x")  # once: no position needed


def test_the_training_bar_shows_a_small_loss_in_significant_digits() -> None:
    assert loss_text(1.9459) == "1.9459"
    assert float(loss_text(3.25e-5)) == 3.25e-5 and "e-05" in loss_text(3.25e-5)  # not "0.0000"
    assert float(loss_text(0.0123)) == 0.0123
