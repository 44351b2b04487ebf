"""The paper's base size (Table 3), shared by the benchmarks: d_model 512, 8 heads, d_ff 2048,
6 + 6 layers, 64 source and 64 target tokens; 1,708 matrices in its trace.

Importing this module pins NumPy's BLAS threads (and PyTorch's, through ``THREADS``) to the same
number, unless the caller already chose one: ratios between libraries mean nothing otherwise.
"""

from __future__ import annotations

import os

THREADS = int(os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "2")))
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))

from transformer_walkthrough.config import Config, ModelConfig  # noqa: E402  (after the threads)

N_TOKENS = 64
VOCAB = 1000
WORDS = [f"w{i}" for i in range(VOCAB - 2)]


def base_config(dtype: str = "float32", layers: int = 6) -> Config:
    """Base size, with a 64 + 64-token sentence of made-up words."""
    model = ModelConfig(d_model=512, num_heads=8, d_ff=2048, num_encoder_layers=layers,
                        num_decoder_layers=layers, scale_embeddings=True, dtype=dtype)  # fmt: skip
    sentence = " ".join(WORDS[: 2 * N_TOKENS - 1])  # 64 for the encoder, 63 + <start> for the decoder
    return Config(
        sentence=sentence, encoder_words=N_TOKENS, vocabulary=("<start>", "<end>", *WORDS), model=model
    )
