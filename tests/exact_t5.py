"""transformers' T5 in float64 throughout, for comparisons at 1e-9 and below.

transformers' T5 computes one thing in float32 even when the model is float64: the mean square of
its RMSNorm (``T5LayerNorm``: ``hidden_states.to(torch.float32).pow(2).mean``). ``float64`` replaces
that function with its own lines minus the cast; everything else — the projections, the buckets and
the bias table, the masks, the feed-forward, the residual wiring, the scaled tied head — is
transformers' code as shipped. (Its buckets are computed in float32 by design: so are ours.) In
float32 the model runs unpatched.
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.t5 import modeling_t5


def float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """T5LayerNorm's float32 cast removed, the function otherwise as transformers writes it."""

    def rms_norm(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    monkeypatch.setattr(modeling_t5.T5LayerNorm, "forward", rms_norm)
