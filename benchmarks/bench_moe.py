"""A small mixture of experts, ours against transformers: the traced forward, `step` end to end, memory.

Run: python benchmarks/bench_moe.py [--rounds N] [--folder DIR]

A random checkpoint of OLMoE's layout scaled down is made here with transformers (OlmoeConfig:
d_model 512, 8 heads, 16 layers, 16 experts of width 256, 4 a token, QK-norm over the whole
projections, a 364-row table; ``save_pretrained``, float32), in DIR or a temporary folder, with the
Qwen2 style tokenizer of tests/tiny_tokenizers. The prompt is 64 tokens. One process, the same
weights, the same threads (base.py pins NumPy's and PyTorch's). Each figure is the best of
``rounds`` runs taken in turns:
  1 forward   run_forward (every matrix recorded, each expert's on its tokens) vs OlmoeForCausalLM,
              eager attention and eager experts (a Python loop over the experts), torch.no_grad();
              beside it, the forward's matrix products alone, in NumPy (per layer W_QKV, W_O,
              W_router, and each expert's W_gate, W_up, W_down on the rows routed to it)
  2 step      `walkthrough step --model DIR --prompt … --stage experts --layer 15`, a fresh process,
              vs `python -c` importing transformers, loading the checkpoint and running one forward
  3 memory    peak RSS of the `step` of 2 against model.safetensors
Targets: 1 <= 1.0x, 2 <= 0.5x, 3 <= 1.5x.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from base import host_line

# isort: split


ROOT = Path(__file__).resolve().parents[1]
PROMPT_WORDS = 64
LAYER = 15


def build(folder: Path) -> None:
    """The random checkpoint and its tokenizer, saved in ``folder``."""
    import torch
    import transformers

    sys.path.insert(0, str(ROOT))
    from tests import tiny_tokenizers

    tiny_tokenizers.qwen2_style(folder)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    config = transformers.OlmoeConfig(
        vocab_size=len(tok), hidden_size=512, intermediate_size=256, num_hidden_layers=16,
        num_attention_heads=8, num_key_value_heads=8, num_experts=16, num_experts_per_tok=4,
        max_position_embeddings=512, eos_token_id=tok.eos_token_id, bos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.OlmoeForCausalLM(config).save_pretrained(folder)


def prompt() -> str:
    return " ".join(["the cat is sleeping comfortably"] * (PROMPT_WORDS // 5 + 1))


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def products(trace) -> float:
    """The forward's matrix products alone, on the recorded inputs and weights."""
    pairs = []
    for stage in trace:
        if stage.kind == "masked-attention":
            pairs += [(stage["X"], stage.get("W_QKV", None)), (stage["concat"], stage["W_O"])]
        if stage.kind == "experts":
            pairs.append((stage["X"], stage["W_router"]))
            for e in range(stage["router_probs"].shape[1]):
                x = stage[f"expert{e}.X"]
                pairs += [(x, stage[f"expert{e}.W_gate"]), (x, stage[f"expert{e}.W_up"]),
                          (stage[f"expert{e}.hidden"], stage[f"expert{e}.W_down"])]  # fmt: skip
    pairs = [(a, b) for a, b in pairs if b is not None]
    start = time.perf_counter()
    for a, b in pairs:
        a @ b
    return time.perf_counter() - start


def child(args: list[str]) -> tuple[float, int]:
    """Seconds and peak RSS (kB, VmHWM read by the child) of a fresh process."""
    code = (
        "import runpy, sys, atexit\n"
        "def hwm():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM'): sys.stderr.write('HWM ' + line.split()[1] + '\\n')\n"
        "atexit.register(hwm)\n"
        f"sys.argv = {args!r}\n"
        "runpy.run_module(sys.argv[0], run_name='__main__')\n"
    )
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    kb = [int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("HWM ")]
    return seconds, kb[-1] if kb else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None)
    opts = parser.parse_args()
    print(host_line())
    with tempfile.TemporaryDirectory() as tmp:
        folder = opts.folder or Path(tmp) / "olmoe-small"
        if not (folder / "model.safetensors").exists():
            folder.mkdir(parents=True, exist_ok=True)
            build(folder)
        import torch
        import transformers

        from transformer_walkthrough.checkpoints.run import walk_prompt

        text = prompt()
        walk = walk_prompt(str(folder), text, "float32")
        ids = list(walk.trace.target_ids)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
        ).eval()
        ours = best(lambda: walk_prompt(str(folder), text, "float32"), opts.rounds)
        with torch.no_grad():
            theirs = best(lambda: model(torch.tensor([ids])), opts.rounds)
        mm = min(products(walk.trace) for _ in range(opts.rounds))
        print(f"1 forward   {len(ids)} tokens: ours {ours * 1e3:.0f} ms (products alone {mm * 1e3:.0f} ms), "
              f"transformers eager {theirs * 1e3:.0f} ms: {ours / theirs:.2f}x (target <= 1.0x)")  # fmt: skip
        step_s, step_kb = child(["transformer_walkthrough", "step", "--model", str(folder), "--prompt", text,
                                 "--stage", "experts", "--layer", str(LAYER)])  # fmt: skip
        load = (
            "import torch, transformers\n"
            f"m = transformers.AutoModelForCausalLM.from_pretrained({str(folder)!r}, "
            "attn_implementation='eager', experts_implementation='eager')\n"
            f"t = transformers.AutoTokenizer.from_pretrained({str(folder)!r})\n"
            f"with torch.no_grad(): m(**t({text!r}, return_tensors='pt'))\n"
        )
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", load], check=True, capture_output=True)
        peer = time.perf_counter() - start
        print(f"2 step      ours {step_s:.2f} s, transformers import+load+forward {peer:.2f} s: "
              f"{step_s / peer:.2f}x (target <= 0.5x)")  # fmt: skip
        size = (folder / "model.safetensors").stat().st_size
        print(f"3 memory    step's peak RSS {step_kb / 1024:.0f} MB, checkpoint {size / 2**20:.0f} MB: "
              f"{step_kb * 1024 / size:.2f}x (target <= 1.5x)")  # fmt: skip


if __name__ == "__main__":
    main()
