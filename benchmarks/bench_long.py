"""Long prompts in bounded memory: SmolLM2-135M's shape at 512, 2,048 and 8,192 tokens.

Run: python benchmarks/bench_long.py [--tokens 512 2048 8192] [--rounds N] [--peer] [--folder DIR]

The random checkpoint of bench_llama.py (SmolLM2-135M's shape, float32, the Llama 3 style tokenizer
of tests/tiny_tokenizers), made once in DIR or a temporary folder. Each command runs in a fresh
process, stdout to a pipe; its peak RSS is the child's own VmHWM (bench_llama.PEAK). For each
prompt length (a repeated English sentence cut to about that many tokens):
  step       `step --stage masked-attention --layer 29`: peak and time, against the bound
             1.5 × the checkpoint + the stage kept (its matrices, counted by size.trace_size)
  lens       `lens --top-k 5`, and `attention --layer 29`: peak, against the same bound
  run        `run` to a pipe: peak against 2 × the checkpoint + its largest stage, time against step's
  tour       `tour` from a pipe, Enter through every stage to the prediction: peak against run's bound
  generate   `generate --max-len 5`: the key/value cache and each step's last attention rows kept,
             the prompt read a stage at a time: peak against run's bound
  peer       `python -c` importing transformers, loading the checkpoint and one forward with
             output_attentions=True (what bench_llama's step is compared with): time and peak, beside
             step at every length; not run when its attentions alone (layers × heads × n² float32)
             would take more than half of the machine's available memory (said; --no-peer skips it)
Then how the step's peak grows with the prompt: with the stage kept (quadratic in its attention
weights only), not with the pass. A command the budget refuses is said with its one line.
Targets (the issue's): step at 2,048 tokens within its bound and <= 0.5x the peer's time; lens and
attention within the step's bound; run within its own.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))

from base import THREADS, host_line  # noqa: E402  (first: pins the BLAS threads before NumPy loads)
from bench_llama import LAYER, PEAK, THEIRS, make_checkpoint  # noqa: E402

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

    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env_path}" if env_path else str(ROOT)  # the children's
    temporary = None
    folder = args.folder
    if folder is None:
        temporary = tempfile.TemporaryDirectory(prefix="bench-long-")
        folder = Path(temporary.name)
    if not (folder / "model.safetensors").is_file():
        make_checkpoint(folder)
    size = (folder / "model.safetensors").stat().st_size
    config = load(str(folder), "a", "float32", prompt=True).config
    m, vocab = config.model, len(config.vocabulary)
    print(f"SmolLM2-135M's shape, float32, checkpoint {size / MIB:,.0f} MiB, {THREADS} threads, "
          f"best of {args.rounds}")  # fmt: skip

    def best(command: list[str]) -> tuple[float, int | None, str]:
        runs = [measure(command) for _ in range(args.rounds)]
        return min(runs, key=lambda r: r[0])

    growth = []
    for wanted in args.tokens:
        text, n = prompt_of(folder, wanted)
        base = ["--model", str(folder), "--prompt", text]
        kept = trace_size(m, 0, n, vocab, Keep.stages(["masked-attention"], LAYER)).numbers * 4
        largest = trace_size(m, 0, n, vocab, Keep(stream=print)).numbers * 4
        bound, run_bound = 1.5 * size + kept, 2 * size + largest
        print(f"\n{n:,} tokens: the stage kept {kept / MIB:,.0f} MiB, the largest stage "
              f"{largest / MIB:,.0f} MiB; bounds: step {bound / MIB:,.0f} MiB, "
              f"run {run_bound / MIB:,.0f} MiB")  # fmt: skip
        commands = {
            "step": ["step", *base, "-s", "masked-attention", "--layer", str(LAYER)],
            "lens --top-k 5": ["lens", *base, "--top-k", "5"],
            f"attention --layer {LAYER}": ["attention", *base, "--layer", str(LAYER)],
            "run": ["run", *base],
            "generate --max-len 5": ["generate", *base, "--max-len", "5"],
        }
        results = {name: best(command) for name, command in commands.items() if command[0] in args.only}
        if "tour" in args.only:  # every stage from a pipe, streamed: against run's bound
            results["tour, every stage"] = tour_through(base, args.rounds)
        for name, (took, peak, said) in results.items():
            limit = run_bound if name in ("run", "tour, every stage", "generate --max-len 5") else bound
            if peak is None:
                print(f"  {name:22} refused: {said}")
                continue
            ok = "within" if peak <= limit else "OVER"
            print(f"  {name:22} {took:6.1f} s  peak {peak / MIB:7,.0f} MiB = {peak / size:4.2f}x "
                  f"the checkpoint, {ok} its bound ({peak / limit:.2f})")  # fmt: skip
        if "step" in results and results["step"][1] is not None:
            growth.append((n, results["step"][1]))
        if "run" in results and results["run"][1] is not None:
            print(f"  run / step time: {results['run'][0] / results['step'][0]:.1f}x")
        if args.peer and "step" in results:
            attentions = m.num_decoder_layers * m.num_heads * n * n * 4
            if attentions > available() / 2:
                print(f"  transformers not run: its attentions alone would take "
                      f"{attentions / 2**30:,.1f} GiB (this machine has {available() / 2**30:,.1f} GiB "
                      "available)")  # fmt: skip
                continue
            took, peak = peer(folder, text)
            step_took, step_peak, _ = results["step"]
            ratio = (
                f"step / it: {step_took / took:.2f}x  (<= 0.5)" if step_peak is not None else "step refused"
            )
            print(f"  transformers (import, load, forward with attentions) {took:6.1f} s  "
                  f"peak {peak / MIB:7,.0f} MiB; {ratio}")  # fmt: skip
    if len(growth) > 1:
        print("\nthe step's peak as the prompt grows:")
        (n0, p0), *rest = growth
        for n, p in rest:
            print(f"  {n0:,} -> {n:,} tokens ({n / n0:.0f}x): +{(p - p0) / MIB:,.0f} MiB")
    if temporary is not None:
        temporary.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
