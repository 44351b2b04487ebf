"""The error function erf for whole arrays, which NumPy lacks: exact GELU needs it (``functional.gelu``).

erf(x) = 2/√π ∫₀ˣ e^(−t²) dt. W. J. Cody's rational Chebyshev approximations ("Rational Chebyshev
approximations for the error function", Math. Comp. 23, 1969, as in Netlib's specfun CALERF), one
per interval of |x|. A test holds them to the C library's ``math.erf`` within 4 ulp (3 at worst,
about 4e-16 relative); ``math.erf`` cell by cell would be exact, and 3 to 5 times slower.

A float32 array takes ``erf32``: the same approximations evaluated in float32, half the memory
traffic and 2.5 times faster (a BERT layer's GELU over 16 × 3,072 numbers: 1.1 ms instead of 2.6),
within 3 float32 ulp of ``math.erf`` (a test holds it to 4), as close as float32 can be held.
"""

from __future__ import annotations

import numpy as np

# |x| ≤ 0.46875:     erf(x) = x·A(x²)/B(x²)
_A = (1.85777706184603153e-1, 3.16112374387056560e0, 1.13864154151050156e2, 3.77485237685302021e2,
      3.20937758913846947e3)  # fmt: skip
_B = (1.0, 2.36012909523441209e1, 2.44024637934444173e2, 1.28261652607737228e3, 2.84423683343917062e3)
# 0.46875 < |x| ≤ 4:  erfc(|x|) = e^(−x²)·C(|x|)/D(|x|)
_C = (2.15311535474403846e-8, 5.64188496988670089e-1, 8.88314979438837594e0, 6.61191906371416295e1,
      2.98635138197400131e2, 8.81952221241769090e2, 1.71204761263407058e3, 2.05107837782607147e3,
      1.23033935479799725e3)  # fmt: skip
_D = (1.0, 1.57449261107098347e1, 1.17693950891312499e2, 5.37181101862009858e2, 1.62138957456669019e3,
      3.29079923573345963e3, 4.36261909014324716e3, 3.43936767414372164e3, 1.23033935480374942e3)  # fmt: skip
# |x| > 4:           erfc(|x|) = e^(−x²)/|x|·(1/√π − z·P(z)/Q(z)), z = 1/x²
_P = (1.63153871373020978e-2, 3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
      1.60837851487422766e-2, 6.58749161529837803e-4)  # fmt: skip
_Q = (1.0, 2.56852019228982242e0, 1.87295284992346047e0, 5.27905102951428412e-1, 6.05183413124413191e-2,
      2.33520497626869185e-3)  # fmt: skip
_ONE_OVER_SQRT_PI = 5.6418958354775628695e-1
_BIG = 26.543  # erfc(|x|) < 2⁻¹⁰⁷⁴ beyond: erf(x) is ±1 exactly


def _poly(coefficients: tuple[float, ...], z: np.ndarray) -> np.ndarray:
    """c₀·zⁿ + c₁·zⁿ⁻¹ + … + cₙ, by Horner's rule."""
    out = np.full_like(z, coefficients[0])
    for c in coefficients[1:]:
        out *= z
        out += c
    return out


def erf(x: np.ndarray) -> np.ndarray:
    """erf of every element, in float64 (the caller casts); erf(±0) = ±0, erf(±∞) = ±1, NaN stays NaN.

    The two common intervals are computed over the whole array, each on |x| clipped into its own
    range, and one is picked per element: picking by a mask costs as much as computing both
    (half the elements of a layer's input fall on each side of 0.46875, in no order a branch
    could predict). The rare |x| > 4 is computed where it occurs.

    Cody computes e^(−x²) as e^(−s²)·e^(−(x−s)(x+s)), s = x cut to sixteenths, so that erfc keeps
    its last digits where it is tiny; erf = 1 − erfc does not need them, and this makes one exp.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.abs(x)
    z = np.minimum(y, 0.46875)
    small = np.copysign(z, x) * _poly(_A, z * z) / _poly(_B, z * z)  # x itself where it is used
    t = np.clip(y, 0.46875, 4.0)  # NaN stays NaN
    erfc = np.asarray(np.exp(-t * t) * _poly(_C, t) / _poly(_D, t))  # an array even for a 0-d x
    large = y > 4.0
    if large.any():
        t = np.minimum(y[large], _BIG)  # beyond, erfc is below 2⁻¹⁰⁷⁴: erf is ±1 exactly
        z = 1.0 / (t * t)
        tail = np.exp(-t * t) * (_ONE_OVER_SQRT_PI - z * _poly(_P, z) / _poly(_Q, z)) / t
        erfc[large] = np.where(t < _BIG, tail, 0.0)
    return np.where(y <= 0.46875, small, np.copysign(1.0 - erfc, x))


_F32 = {name: tuple(np.float32(c) for c in cs) for name, cs in (("A", _A), ("B", _B), ("C", _C), ("D", _D))}


def erf32(x: np.ndarray) -> np.ndarray:
    """erf of every element of a float32 array, in float32: Cody's two common intervals as in
    ``erf``; past |x| = 4, erfc(|x|) < 1.6e-8 is below half a float32 ulp of 1, so erf is ±1."""
    x = np.asarray(x, dtype=np.float32)
    y = np.abs(x)
    z = np.minimum(y, np.float32(0.46875))
    zz = z * z
    small = np.copysign(z, x) * _poly(_F32["A"], zz) / _poly(_F32["B"], zz)
    t = np.clip(y, np.float32(0.46875), np.float32(4.0))  # NaN stays NaN
    erfc = np.exp(-t * t) * _poly(_F32["C"], t) / _poly(_F32["D"], t)
    erfc[y > 4.0] = 0.0
    return np.where(y <= 0.46875, small, np.copysign(np.float32(1.0) - erfc, x))
