"""A matrix's row formatted at once writes what format_value writes of each of its numbers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from transformer_walkthrough.model.numbers import format_value, format_values

# Ordinary numbers, the ones that round to -0.00, the edges of scientific notation, ±∞ and NaN.
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-1e-3, 1e-3),
    st.sampled_from([-0.0, -0.004, -0.005, -0.0049999, 999_999.994, 999_999.996, -1e6, 1e6, 9.5e99]),
)


@given(st.lists(NUMBERS, max_size=12), st.integers(0, 6))
def test_a_row_is_its_numbers_one_by_one(row, precision):
    assert format_values(row, precision) == [format_value(v, precision) for v in row]


def test_negative_zero_loses_its_sign_and_nothing_else_does():
    assert format_values([-0.001, -0.01, 0.0, -0.0], 2) == ["0.00", "-0.01", "0.00", "0.00"]
    assert format_values([-0.4, -0.6, float("-inf")], 0) == ["0", "-1", "-∞"]
