"""The limits a trace is held to before any work: its matrices' memory and how many ``run`` prints.

The model counts what a config's trace would hold from its walk of Figure 1 and refuses it over
either (``model.size.check_config``), before any weight is drawn or read.
"""

from __future__ import annotations

MAX_BYTES = 1 << 31  # 2 GiB of matrices in the trace: the paper's base model (d_model 512, 6+6 layers) fits
# Matrices printed by `run`: the base model prints about 1,600, SmolLM2-135M about 3,900, Llama 3.2 1B
# about 6,000, Mistral 7B (whose weights pass the memory budget only on a large machine) 12,500.
MAX_TABLES = 20_000
