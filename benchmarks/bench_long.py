"""Long prompts in bounded memory: SmolLM2-135M's shape at 512, 2,048 and 8,192 tokens.

Run: python benchmarks/bench_long.py [--tokens 512 2048 8192] [--rounds N] [--peer] [--folder DIR]

The random checkpoint of bench_llama.py (SmolLM2-135M's shape, float32, the Llama 3 style tokenizer
of tests/tiny_tokenizers), made once in DIR or a temporary folder. Each command runs in a fresh
process, stdout to a pipe; its peak RSS is the child's own VmHWM (bench_llama.PEAK). For each
prompt length (a repeated English sentence cut to about that many tokens):
  step       `step --stage masked-attention --layer 29`: peak and time, against the bound
             1.5 × the checkpoint + the stage kept (its matrices, counted by size.trace_size);
             and with `--head 1` (the stage of one head: the 8,192-token prompt fits), against
             the same bound of its own stage; then the step's matrix products alone, timed here
             in NumPy as the step multiplies them (bench_llama.product_runners): how much of it
             is BLAS-bound, and the rest
  lens       `lens --top-k 5`, and `attention --layer 29`: peak, against the same bound
  run        `run` to a pipe: peak against 2 × the checkpoint + its largest stage, time against step's
  tour       `tour` from a pipe, Enter through every stage to the prediction: peak against run's bound
  generate   `generate --max-len 5`: the key/value cache and each step's last attention rows kept,
             the prompt read a stage at a time: peak against run's bound
  peer       `python -c` importing transformers, loading the checkpoint and one forward with
             output_attentions=True (what bench_llama's step is compared with): time and peak, beside
             step at every length, and its forward's products alone in torch; not run when its
             attentions alone (layers × heads × n² float32) would take more than half of the
             machine's available memory (said; --no-peer skips it)
Then how the peak of `step --head 1` grows with the prompt: with the stage kept (quadratic in its
attention weights only), not with the pass. A command the budget refuses is said with its one line.
Targets (the issue's): step at 2,048 tokens within its bound and <= 0.5x the peer's time (what is
not a product no slower than the peer's); lens and attention within the step's bound; run within
its own.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))

from base import THREADS, host_line  # noqa: E402  (first: pins the BLAS threads before NumPy loads)
from bench_llama import LAYER, PEAK, THEIRS, make_checkpoint, product_runners  # noqa: E402
from harness import checkpoint, children_import_this_checkout  # noqa: E402

SENTENCE = "The cat sat on the mat. The dog ate the bone! A quick brown fox jumps over the lazy dog. "
MIB = 2**20


def prompt_of(folder: Path, tokens: int) -> tuple[str, int]:
    """A text of about ``tokens`` tokens (BOS included): the sentence repeated, cut at a word."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(folder)
    words = (SENTENCE * (tokens // 8 + 1)).split(" ")
    low, high = 1, len(words)
    while low < high:  # the most words whose tokens fit
        mid = (low + high + 1) // 2
        if len(tok(" ".join(words[:mid]))["input_ids"]) <= tokens:
            low = mid
        else:
            high = mid - 1
    text = " ".join(words[:low])
    return text, len(tok(text)["input_ids"])


def measure(args: list[str]) -> tuple[float, int | None, str]:
    """Seconds, peak RSS (None when refused) and the last line of stderr of a fresh process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK, *args], capture_output=True, text=True)
    took = time.perf_counter() - start
    lines = done.stderr.splitlines()
    peak = [int(line.split()[1]) for line in lines if line.startswith("VmHWM")]
    said = next((line for line in lines if line.startswith("error:")), "")
    return took, (peak[-1] if done.returncode == 0 and peak else None), said


def tour_through(base: list[str], rounds: int) -> tuple[float, int | None, str]:
    """``tour`` driven from a pipe, as tests/test_tour.py drives it (a line is a key): Enter on
    every page, through every stage to the prediction, where Enter ends it. Seconds, peak RSS
    (None when refused) and its error line, the best of ``rounds``: the tour streams its stages,
    so its peak should be run's, a stage at a time, whatever it has shown."""
    runs = []
    for _ in range(rounds):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", PEAK, "tour", *base], input="\n" * 2000,
                              capture_output=True, text=True)  # fmt: skip
        took = time.perf_counter() - start
        lines = done.stderr.splitlines()
        peak = [int(line.split()[1]) for line in lines if line.startswith("VmHWM")]
        said = next((line for line in lines if line.startswith("error:")), "")
        pages = done.stdout.count(" of ")  # each page's header: "stage k of N · …"
        runs.append((took, peak[-1] if done.returncode == 0 and peak and pages else None, said))
    return min(runs, key=lambda r: r[0])


def peer(folder: Path, text: str) -> tuple[float, int]:
    """Seconds and peak RSS of importing transformers, loading, one forward with output_attentions=True."""
    hwm = (
        "import re; status = open('/proc/self/status').read()\n"
        "print('VmHWM', int(re.search(r'VmHWM:\\s+(\\d+) kB', status)[1]) * 1024)"
    )
    code = (
        THEIRS.replace("print(out.attentions[int(sys.argv[4])][0])", "out.attentions[int(sys.argv[4])][0]")
        + hwm
    )
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, str(folder), text, str(THREADS), str(LAYER)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    took = time.perf_counter() - start
    return took, int(done.stdout.split()[-1])


def step_products(w: object, m: object, n: int, head: int | None, peer: bool) -> tuple[list, list]:
    """The matrix products of `step --stage masked-attention --layer 29` on n tokens, as the pairs
    (a, b) that bench_llama's product_runners multiplies, on random rows of the right shapes.

    Ours (NumPy's a @ b), as the step multiplies them: layers 0-28 whole (W_QKV, W_O, the
    feed-forward), their attention in blocks of queries against only the keys each block sees
    (``functional.attention_in_blocks``); layer 29's projections and its attention whole, every
    head's or with ``head`` one head's (the others' in blocks); the pass stops there. Transformers'
    (torch's linear(a, b) = a·bᵀ; only when ``peer``): its forward's, every layer's projections,
    feed-forward and eager attention (Q_h·K_hᵀ and A_h·V_h of every head) and the output layer over
    every position."""
    import numpy as np

    from transformer_walkthrough.model import functional as F

    rng = np.random.default_rng(0)
    d, d_ff, h, G, d_k = m.d_model, m.d_ff, m.num_heads, m.kv_heads, m.d_k
    share = h // G

    def rows(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    x, c, hidden = rows(n, d), rows(n, h * d_k), rows(n, d_ff)
    k, v = rows(n, d_k), rows(n, d_k)
    at_once = min(F.CAUSAL_ROWS, max(1, F.SCORES_AT_ONCE // (share * n)))
    q_block, a_block = rows(share * at_once, d_k), rows(share * at_once, n)
    blocked = []  # one layer's attention in blocks: each group's Q·Kᵀ and A·V, the keys seen so far
    for first in range(0, n, at_once):
        stop = min(first + at_once, n)
        height = share * (stop - first)
        blocked += [(q_block[:height], k[:stop].T), (a_block[:height, :stop], v[:stop])] * G
    ours = []
    for i in range(LAYER + 1):
        attn, mlp = f"decoder.{i}.masked-attention", f"decoder.{i}.feed-forward"
        ours += [(x, w[f"{attn}/W_QKV"]), (c, w[f"{attn}/W_O"])]
        if i < LAYER:
            ours += [(x, w[f"{mlp}/W_gate"]), (x, w[f"{mlp}/W_up"]), (hidden, w[f"{mlp}/W_down"]), *blocked]
    if head is None:  # every head's S and A whole: each group's query heads one above the other
        q, a = rows(share * n, d_k), rows(share * n, n)
        ours += [(q, k.T), (a, v)] * G
    else:
        q, a = rows(n, d_k), rows(n, n)
        ours += [(q, k.T), (a, v), *blocked]
    theirs = []
    if peer:
        import torch

        shapes = [(n, d), (n, d_ff), (n, d_k), (n, d_k), (n, n), (d_k, n)]
        tx, th, tq, tk, ta, tv = (torch.from_numpy(rows(*shape)) for shape in shapes)
        weights = [(h * d_k, d), (G * d_k, d), (d, h * d_k), (d_ff, d), (d, d_ff)]
        weight = {shape: torch.from_numpy(rows(*shape)) for shape in weights}
        for _ in range(m.num_decoder_layers):
            theirs += [(tx, weight[h * d_k, d]), (tx, weight[G * d_k, d]), (tx, weight[G * d_k, d])]
            theirs += [(tq, tk), (ta, tv)] * h  # eager attention: Q_h·K_hᵀ, A_h·V_h, every head
            theirs += [
                (tx, weight[d, h * d_k]),
                (tx, weight[d_ff, d]),
                (tx, weight[d_ff, d]),
                (th, weight[d, d_ff]),
            ]
        theirs.append(
            (tx, torch.from_numpy(np.ascontiguousarray(w["decoder.embedding/E"])))
        )  # the output layer
    return ours, theirs


# Times the step's matrix products alone in a fresh process, as the step's own (no torch loaded
# beside NumPy's threads): argv folder, tokens, head (0: every head); prints the seconds and how many.
PRODUCTS = """
import sys, time
sys.path[:0] = [sys.argv[4], sys.argv[4] + "/benchmarks"]
from bench_long import step_products
from bench_llama import product_runners
from transformer_walkthrough.checkpoints.run import load
loaded = load(sys.argv[1], "a", "float32", prompt=True)
m, n, head = loaded.config.model, int(sys.argv[2]), int(sys.argv[3]) or None
ours, _ = step_products(loaded.weights, m, n, head, peer=False)
run = product_runners(ours, [])[0]
start = time.perf_counter()
run()
print(time.perf_counter() - start, len(ours))
"""


def products_alone(folder: Path, n: int, head: int | None) -> tuple[float, int]:
    """Seconds of the step's matrix products alone (``step_products``) in a fresh process, and how many."""
    done = subprocess.run([sys.executable, "-c", PRODUCTS, str(folder), str(n), str(head or 0), str(ROOT)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    took, many = done.stdout.split()
    return float(took), int(many)


def fastest(fn: object, runs: int = 2) -> float:
    """The fastest of ``runs`` runs of ``fn``, after one to warm up when there are several (seconds)."""
    if runs > 1:
        fn()  # type: ignore[operator]
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best


def available() -> int:
    """Bytes of memory the machine has available now (MemAvailable)."""
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--rounds", type=int, default=1, help="runs of each process (the best is kept)")
    parser.add_argument("--no-peer", dest="peer", action="store_false",
                        help="do not time transformers (about 4.5 GB at 2,048)")  # fmt: skip
    parser.add_argument("--folder", type=Path, help="keep the checkpoint here (made once)")
    every = ["step", "lens", "attention", "run", "tour", "generate"]
    parser.add_argument("--only", nargs="+", choices=every, default=every, help="the commands measured")
    args = parser.parse_args()
    print(host_line(), flush=True)

    from transformer_walkthrough.checkpoints.run import load
    from transformer_walkthrough.model.size import trace_size
    from transformer_walkthrough.model.trace import Keep

    children_import_this_checkout()
    folder = checkpoint(args.folder, make_checkpoint, "a random SmolLM2-135M-shaped checkpoint")
    size = (folder / "model.safetensors").stat().st_size
    loaded = load(str(folder), "a", "float32", prompt=True)
    config, weights = loaded.config, loaded.weights
    m, vocab = config.model, len(config.vocabulary)
    print(f"SmolLM2-135M's shape, float32, checkpoint {size / MIB:,.0f} MiB, {THREADS} threads, "
          f"best of {args.rounds}")  # fmt: skip

    growth = []
    for wanted in args.tokens:
        text, n = prompt_of(folder, wanted)
        base = ["--model", str(folder), "--prompt", text]
        kept = trace_size(m, 0, n, vocab, Keep.stages(["masked-attention"], LAYER)).numbers * 4
        one = trace_size(m, 0, n, vocab, Keep.stages(["masked-attention"], LAYER, 1)).numbers * 4
        largest = trace_size(m, 0, n, vocab, Keep(stream=print)).numbers * 4
        bound, head_bound, run_bound = 1.5 * size + kept, 1.5 * size + one, 2 * size + largest
        print(f"\n{n:,} tokens: the stage kept {kept / MIB:,.0f} MiB (of head 1 alone {one / MIB:,.0f} MiB), "
              f"the largest stage {largest / MIB:,.0f} MiB; bounds: step {bound / MIB:,.0f} MiB, "
              f"step --head 1 {head_bound / MIB:,.0f} MiB, run {run_bound / MIB:,.0f} MiB")  # fmt: skip
        step = ["step", *base, "-s", "masked-attention", "--layer", str(LAYER)]
        commands = {
            "step": step,
            "step --head 1": [*step, "--head", "1"],
            "lens --top-k 5": ["lens", *base, "--top-k", "5"],
            f"attention --layer {LAYER}": ["attention", *base, "--layer", str(LAYER)],
            "run": ["run", *base],
            "generate --max-len 5": ["generate", *base, "--max-len", "5"],
        }
        results, alone = {}, {}
        for name, command in commands.items():
            if command[0] not in args.only:
                continue
            runs, products = [], []
            for _ in range(args.rounds):
                runs.append(measure(command))
                if name.startswith("step") and runs[-1][1] is not None:
                    # its matrix products alone, in a fresh process right after it: on a shared
                    # machine, the same minute's load (the fastest of each is kept)
                    products.append(products_alone(folder, n, 1 if name.endswith("1") else None))
                    alone[name] = min(products)
            results[name] = min(runs, key=lambda r: r[0])
        if "tour" in args.only:  # every stage from a pipe, streamed: against run's bound
            results["tour, every stage"] = tour_through(base, args.rounds)
        for name, (took, peak, said) in results.items():
            streamed = ("run", "tour, every stage", "generate --max-len 5")
            limit = run_bound if name in streamed else head_bound if name == "step --head 1" else bound
            if peak is None:
                print(f"  {name:22} refused: {said}")
                continue
            ok = "within" if peak <= limit else "OVER"
            print(f"  {name:22} {took:6.1f} s  peak {peak / MIB:7,.0f} MiB = {peak / size:4.2f}x "
                  f"the checkpoint, {ok} its bound ({peak / limit:.2f})")  # fmt: skip
        if "step --head 1" in results and results["step --head 1"][1] is not None:
            growth.append((n, results["step --head 1"][1]))
        if "run" in results and results["run"][1] is not None and results["step"][1] is not None:
            print(f"  run / step time: {results['run'][0] / results['step'][0]:.1f}x")
        if "step" not in results or "step --head 1" not in results:
            continue
        attentions = m.num_decoder_layers * m.num_heads * n * n * 4
        runs_peer = attentions <= available() / 2
        # The step's matrix products alone: how much of the step is BLAS-bound.
        ran = {name: results[name][0] for name in ("step", "step --head 1") if results[name][1] is not None}
        for name in ran:
            products, many = alone[name]
            print(f"  {name:22} its products alone (NumPy, {many:,}) {products:6.1f} s = "
                  f"{products / ran[name]:.2f} of it; the rest {ran[name] - products:5.1f} s")  # fmt: skip
        alone = {name: products for name, (products, _) in alone.items()}
        if not args.peer:
            continue
        if not runs_peer:
            print(f"  transformers not run: its attentions alone would take "
                  f"{attentions / 2**30:,.1f} GiB (this machine has {available() / 2**30:,.1f} GiB "
                  "available)")  # fmt: skip
            continue
        took, peak = peer(folder, text)
        _, theirs = step_products(weights, m, n, None, peer=True)
        theirs_alone = fastest(product_runners([], theirs)[1], 2 if n <= 2048 else 1)
        print(f"  transformers (import, load, forward with attentions) {took:6.1f} s  "
              f"peak {peak / MIB:7,.0f} MiB; its products alone (torch) {theirs_alone:5.1f} s, "
              f"the rest {took - theirs_alone:5.1f} s")  # fmt: skip
        for name, step_took in ran.items():
            print(f"  {name:22} / transformers: {step_took / took:.2f}x (<= 0.5); its products alone / "
                  f"transformers {alone[name] / took:.2f}x; the rest / its rest "
                  f"{(step_took - alone[name]) / (took - theirs_alone):.2f}x (<= 1)")  # fmt: skip
    if len(growth) > 1:
        print("\nthe peak of step --head 1 as the prompt grows:")
        (n0, p0), *rest = growth
        for n, p in rest:
            print(f"  {n0:,} -> {n:,} tokens ({n / n0:.0f}x): +{(p - p0) / MIB:,.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
