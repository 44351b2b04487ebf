"""A dropped trace's memory stays in the process: the next traced pass reuses it (``model.heap``).

Counted in minor page faults (pages the kernel had to hand over, zeroed), in a fresh process each
time, since the malloc settings are process-wide and set once.
"""

from __future__ import annotations

import os
import subprocess
import sys

PASSES = """
import resource
from transformer_walkthrough.config import Config, ModelConfig
from transformer_walkthrough.model.heap import keep_freed_memory
from transformer_walkthrough.model.trace import ACTIVATION, ATTENTION, PROBABILITIES
from transformer_walkthrough.model.transformer import init_weights, run_forward

words = [f"w{i}" for i in range(98)]
config = Config(sentence=" ".join(words[:63]), encoder_words=32, vocabulary=("<start>", "<end>", *words),
                model=ModelConfig(d_model=256, num_heads=4, d_ff=1024, num_encoder_layers=2,
                                  num_decoder_layers=2))
w = init_weights(config)
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    trace = run_forward(config, w)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    pages = sum(m.values.nbytes for s in trace for m in s.matrices.values()
                if m.role in (ACTIVATION, ATTENTION, PROBABILITIES)) // 4096
    del trace
print(faults, pages, keep_freed_memory())
"""


def passes(**env: str) -> tuple[int, int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, "-c", PASSES], env={**clean, **env}, capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), int(out[1]), out[2]


def test_the_third_pass_reuses_the_memory_of_the_second() -> None:
    assert os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")  # Linux, as CI: the case that matters
    faults, pages, kept = passes()
    assert kept == "True" and pages > 1500  # 6.9 MB of activations held by each trace
    assert faults < pages / 20, (faults, pages)


def test_a_users_own_malloc_setting_is_kept_and_then_glibc_trims_as_it_likes() -> None:
    # The counter-check: with the user's setting (the default trim, made explicit), nothing is changed
    # and a pass faults in a good part of its trace again.
    faults, pages, kept = passes(MALLOC_TRIM_THRESHOLD_=str(128 * 1024))
    assert kept == "False"
    assert faults > pages / 4, (faults, pages)
