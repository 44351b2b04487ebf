"""A dropped trace's memory stays in the process: the next traced pass reuses it (``model.heap``).

Counted in minor page faults (pages the kernel had to hand over, zeroed), in a fresh process each
time, since the malloc settings are process-wide and set once.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from transformer_walkthrough.model import heap

PASSES = """
import resource
from transformer_walkthrough.config import Config, ModelConfig
from transformer_walkthrough.model import transformer
from transformer_walkthrough.model.trace import ACTIVATION, ATTENTION, PROBABILITIES

words = [f"w{i}" for i in range(98)]
config = Config(sentence=" ".join(words[:63]), encoder_words=32, vocabulary=("<start>", "<end>", *words),
                model=ModelConfig(d_model=256, num_heads=4, d_ff=1024, num_encoder_layers=2,
                                  num_decoder_layers=2))
w = transformer.init_weights(config)
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    trace = transformer.run_forward(config, w)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    pages = sum(m.values.nbytes for s in trace for m in s.matrices.values()
                if m.role in (ACTIVATION, ATTENTION, PROBABILITIES)) // 4096
    del trace
from transformer_walkthrough.model.heap import keep_freed_memory
print(faults, pages, keep_freed_memory())
"""


def passes(**env: str) -> tuple[int, int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, "-c", PASSES], env={**clean, **env}, capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), int(out[1]), out[2]


def test_the_third_pass_reuses_the_memory_of_the_second() -> None:
    assert heap._glibc(), "CI runs on Linux with glibc: the case this module is for"
    faults, pages, kept = passes()
    assert kept == "True" and pages > 1500  # 6.9 MB of activations held by each trace
    assert faults < pages / 20, (faults, pages)


def test_with_the_users_own_trim_threshold_nothing_is_set_and_passes_fault_again() -> None:
    # The counter-check. (glibc left entirely alone is no fixed baseline: whether it trims after a
    # pass depends on where the arrays fell, from 0 to 1,180 faults here, run to run.)
    faults, pages, kept = passes(MALLOC_TRIM_THRESHOLD_="131072")  # glibc's default, said explicitly
    assert kept == "False"
    assert faults > pages / 4, (faults, pages)


def test_a_threshold_among_the_tunables_is_the_users_too() -> None:
    assert passes(GLIBC_TUNABLES="glibc.malloc.mmap_threshold=65536")[2] == "False"


def test_other_malloc_settings_do_not_opt_out() -> None:
    # MALLOC_ARENA_MAX (set by many container images) and CPU tunables say nothing of trimming.
    assert passes(MALLOC_ARENA_MAX="2", GLIBC_TUNABLES="glibc.cpu.hwcaps=-AVX512F")[2] == "True"


def test_nothing_is_set_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_glibc(name: str) -> str:
        raise ValueError(f"unrecognized configuration name {name}")

    monkeypatch.setattr(os, "confstr", not_glibc)
    assert heap._glibc() is False
    assert heap.keep_freed_memory.__wrapped__() is False  # the uncached function: returns before mallopt
