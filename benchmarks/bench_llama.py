"""SmolLM2-135M's shape, ours against transformers: forward, cached generation, end to end, memory.

Run: python benchmarks/bench_llama.py [--quick] [--rounds N] [--e2e-rounds N] [--folder DIR]

A random checkpoint of SmolLM2-135M's shape is made here with transformers (LlamaConfig: d_model
576, 9 query heads over 3 key/value heads, 30 layers, SwiGLU d_ff 1,536, a 49,152-row embedding
table tied to the output, rope_theta 100,000, RMSNorm eps 1e-5, 8,192 positions; ``save_pretrained``,
float32), in DIR or a temporary folder, with the Llama 3 style tokenizer of tests/tiny_tokenizers
(364 tokens: our tokenizer pads the table's unused rows). The prompt is 32 tokens, BOS included.
One process, the same weights, the same threads (base.py pins NumPy's and PyTorch's). Each figure
is a ratio against its peer measured in the same run, in turns (``best_times``): the best run of
each against the best of its peer, and the median over turns of the two within a turn:
  1 forward    run_forward (every matrix recorded, weights loaded) vs LlamaForCausalLM, eager,
               torch.no_grad(); and vs the same with output_attentions=True
  2 generate   20 tokens, continue_prompt (our key/value cache) vs generate(do_sample=False,
               max_new_tokens=20), eos disabled on both sides so that both make 20
  3 step       `walkthrough step --model DIR --prompt … --stage masked-attention --layer 29`, a
               fresh process, stdout to a pipe, vs `python -c` importing transformers, loading the
               checkpoint and its tokenizer and running one forward (the attention of layer 29)
  4 run        `walkthrough run --model DIR --prompt …` to a pipe: an absolute bar, printed with
               the machine's copy bandwidth beside it
  5 memory     peak RSS (VmHWM, read by the child itself: ru_maxrss carries the parent's over
               through exec) of the `step` of 3 and of the `run` of 4, against model.safetensors
  6 floor      the forward against the bytes of weights it reads divided by the copy bandwidth
               (np.copyto of 512 MB, bytes read + written per second, best of several)
Beside 1, the forward's matrix products alone (per layer W_QKV, W_O, W_gate, W_up, W_down; then
the tied output layer, Eᵀ), NumPy on our (in, out) weights against torch.nn.functional.linear on
transformers' (out, in) ones, q/k/v apart as it runs them: how much of the gap is the BLAS
(NumPy's OpenBLAS against torch's MKL), and how much of our forward is anything but products.
Targets: 1 <= 1.0x, 2 <= 1.0x, 3 <= 0.5x, 4 <= 5 s, 5 <= 1.5x; 6 has none (it says how far the
forward is from reading its weights once).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # tests.tiny_tokenizers, and this tree's transformer_walkthrough

from base import THREADS  # noqa: E402  (first: pins the BLAS threads before NumPy loads)
from bench_forward import paired_ratio, quartiles, turn_ratios  # noqa: E402
from harness import begin, checkpoint, options  # noqa: E402

PROMPT = "The cat sat on the mat. The dog ate the bone! A quick brown fox jumps"  # 32 tokens with BOS
N_PROMPT = 32
NEW_TOKENS = 20
LAYER = 29
SHAPE = dict(
    hidden_size=576, num_attention_heads=9, num_key_value_heads=3, num_hidden_layers=30,
    intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
    rms_norm_eps=1e-5, max_position_embeddings=8192, hidden_act="silu",
)  # fmt: skip
COPY_BYTES = 512 * 2**20

# The peer of `walkthrough step … --layer 29`: what a learner would otherwise run to see the same attention.
THEIRS = """
import sys, torch, transformers
torch.set_num_threads(int(sys.argv[3]))
tok = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
model = transformers.LlamaForCausalLM.from_pretrained(sys.argv[1], attn_implementation="eager").eval()
with torch.no_grad():
    out = model(torch.tensor([tok(sys.argv[2])["input_ids"]]), output_attentions=True)
print(out.attentions[int(sys.argv[4])][0])
"""

# Runs the CLI in this process and reports its own peak RSS on stderr as it exits.
PEAK = """
import atexit, re, runpy, sys
def hwm():
    with open("/proc/self/status") as f:
        print("VmHWM", int(re.search(r"VmHWM:\\s+(\\d+) kB", f.read()).group(1)) * 1024, file=sys.stderr)
atexit.register(hwm)
sys.argv = ["walkthrough", *sys.argv[1:]]
runpy.run_module("transformer_walkthrough", run_name="__main__")
"""


def make_checkpoint(folder: Path) -> None:
    """A random LlamaForCausalLM of SmolLM2-135M's shape (float32, save_pretrained) and a tokenizer."""
    import torch
    import transformers

    from tests.tiny_tokenizers import llama3_style

    folder.mkdir(parents=True, exist_ok=True)
    tiny = llama3_style(folder)
    config = transformers.LlamaConfig(**SHAPE, bos_token_id=tiny.bos, eos_token_id=tiny.eos)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(folder)


def cli(folder: Path, command: str, *extra: str) -> list[str]:
    return ["-m", "transformer_walkthrough", command, "--model", str(folder), "--prompt", PROMPT, *extra]


STEP = ("step", "--stage", "masked-attention", "--layer", str(LAYER))


def best_of(commands: dict[str, list[str]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each fresh process (stdout and stderr to pipes), ``rounds`` times, in turns."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            start = time.perf_counter()
            subprocess.run([sys.executable, *command], capture_output=True, check=True)
            times[name].append(time.perf_counter() - start)
    return times


def peak_rss(command: list[str]) -> int:
    """VmHWM of a fresh process running ``walkthrough`` with ``command``'s arguments."""
    child = [sys.executable, "-c", PEAK, *command[2:]]
    done = subprocess.run(child, capture_output=True, text=True, check=True)
    return int([line for line in done.stderr.splitlines() if line.startswith("VmHWM")][-1].split()[1])


def copy_bandwidth(repeats: int = 5) -> float:
    """Bytes read + written per second by np.copyto of a 512 MB float32 array, the best of ``repeats``."""
    import numpy as np

    src = np.ones(COPY_BYTES // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best


def best_times(fns: dict[str, Callable[[], object]], rounds: int, repeats: int = 3) -> dict[str, list[float]]:
    """Seconds of each function in each of ``rounds`` turns: the best of a block of ``repeats`` runs.

    As bench_forward.block_times (blocks in turns, a pause and a warm-up run before each), but the
    best of a block, not its median: on a shared two-core machine another process's burst can
    triple one run, and the fastest run is the one that it spared."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(0.4)
            fn()
            block = []
            for _ in range(repeats):
                start = time.perf_counter()
                fn()
                block.append(time.perf_counter() - start)
            times[name].append(min(block))
    return times


def product_runners(ours: list, theirs: list) -> tuple[Callable[[], None], Callable[[], None]]:
    """The forward's matrix products alone, ours (NumPy's ``a @ b``) and transformers' (torch's
    ``linear(a, b)``, which multiplies by bᵀ), each pair as the forward multiplies them."""
    import torch

    def numpy_products() -> None:
        for a, b in ours:
            a @ b

    def torch_products() -> None:
        with torch.no_grad():
            for a, b in theirs:
                torch.nn.functional.linear(a, b)

    return numpy_products, torch_products


def products(w: object, reference: object, n: int) -> tuple[object, object]:
    """The forward's matrix products on random rows of its shapes: NumPy's and torch's (see above)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    d, d_ff = SHAPE["hidden_size"], SHAPE["intermediate_size"]
    x, h = (rng.standard_normal((n, k)).astype(np.float32) for k in (d, d_ff))
    ours = []
    for i in range(SHAPE["num_hidden_layers"]):
        attn, mlp = f"decoder.{i}.masked-attention", f"decoder.{i}.feed-forward"
        ours += [(x, w[f"{attn}/W_QKV"]), (x, w[f"{attn}/W_O"]), (x, w[f"{mlp}/W_gate"])]
        ours += [(x, w[f"{mlp}/W_up"]), (h, w[f"{mlp}/W_down"])]
    ours.append((x, w["decoder.embedding/E"].T))
    xt, ht = torch.from_numpy(x), torch.from_numpy(h)
    theirs = []
    for layer in reference.model.layers:  # type: ignore[attr-defined]
        a, m = layer.self_attn, layer.mlp
        theirs += [(xt, a.q_proj.weight), (xt, a.k_proj.weight), (xt, a.v_proj.weight), (xt, a.o_proj.weight)]
        theirs += [(xt, m.gate_proj.weight), (xt, m.up_proj.weight), (ht, m.down_proj.weight)]
    theirs.append((xt, reference.lm_head.weight))  # type: ignore[attr-defined]

    return product_runners(ours, theirs)


def main() -> int:
    args = begin(options(__doc__))

    import numpy as np
    import torch
    import transformers

    from transformer_walkthrough.checkpoints.run import continue_prompt, load
    from transformer_walkthrough.model.generation import generated_ids
    from transformer_walkthrough.model.training import parameters
    from transformer_walkthrough.model.transformer import run_forward

    folder = checkpoint(args.folder, make_checkpoint, "a random SmolLM2-135M-shaped checkpoint")
    size = (folder / "model.safetensors").stat().st_size

    start = time.perf_counter()
    loaded = load(str(folder), PROMPT, "float32", prompt=True)
    load_time = time.perf_counter() - start
    config, w, ids = loaded.config, loaded.weights, loaded.ids
    assert len(ids) == N_PROMPT, len(ids)
    no_eos = loaded._replace(checkpoint=dataclasses.replace(loaded.checkpoint, eos_token_id=None))
    reference = transformers.LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    prompt = torch.tensor([ids])
    mask = torch.ones_like(prompt)

    def theirs_forward() -> object:
        with torch.no_grad():
            return reference(prompt)

    def theirs_attentions() -> object:
        with torch.no_grad():
            return reference(prompt, output_attentions=True)

    def theirs_generate() -> list[int]:
        with torch.no_grad():
            out = reference.generate(
                prompt, attention_mask=mask, do_sample=False, num_beams=1, max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS, pad_token_id=0,
            )  # fmt: skip
        return out[0, N_PROMPT:].tolist()

    def ours_generate() -> list[int]:
        return generated_ids(continue_prompt(no_eos, NEW_TOKENS).steps)[N_PROMPT:]  # the prompt's ids first

    ours_tokens, their_tokens = ours_generate(), theirs_generate()
    same = ours_tokens == their_tokens and len(ours_tokens) == NEW_TOKENS
    trace = run_forward(config, w, target_ids=ids)
    logits = trace["output.logits"]["logits"]
    gap = np.abs(logits - theirs_forward().logits[0].numpy()).max()
    dtypes = sorted({str(m.values.dtype) for stage in trace for m in stage.matrices.values()})
    del trace

    bandwidth = copy_bandwidth()
    weight_bytes = sum(a.nbytes for a in parameters(w))
    floor = weight_bytes / bandwidth

    numpy_products, torch_products = products(w, reference, N_PROMPT)
    turns = best_times(
        {
            "NumPy products": numpy_products,
            "torch products": torch_products,
            "ours forward": lambda: run_forward(config, w, target_ids=ids),
            "transformers forward": theirs_forward,
            "transformers attentions": theirs_attentions,
            "ours generate": ours_generate,
            "transformers generate": theirs_generate,
        },
        args.rounds,
    )
    t = {name: min(times) for name, times in turns.items()}

    ours_step, theirs_step = cli(folder, *STEP), ["-c", THEIRS, str(folder), PROMPT, str(THREADS), str(LAYER)]
    ours_run = cli(folder, "run")
    e2e = best_of({"step": ours_step, "theirs": theirs_step, "run": ours_run}, args.e2e_rounds)
    step_peak, run_peak = peak_rss(ours_step), peak_rss(ours_run)

    def ratio(ours: str, theirs: str) -> str:
        r = paired_ratio(turns, ours, theirs)
        spread = quartiles(turn_ratios(turns, ours, theirs))
        return (
            f"best {t[ours] * 1e3:5.0f} ms vs {t[theirs] * 1e3:5.0f} ms: {t[ours] / t[theirs]:.2f}x; "
            f"paired {r:.2f}x (middle half {spread})"
        )

    mib = 2**20
    print(
        f"SmolLM2-135M's shape (d_model 576, 9 heads over 3 key/value heads, 30 layers, d_ff 1,536, "
        f"49,152-token vocabulary, tied), float32, {N_PROMPT}-token prompt, {THREADS} threads each "
        f"(NumPy's OpenBLAS, torch {torch.__version__}), {args.rounds} rounds"
    )
    print(f"checkpoint {size / mib:,.0f} MiB; load (config, weights, tokenizer) {load_time:.2f} s; "
          f"trace dtypes {', '.join(dtypes)}")  # fmt: skip
    print(f"logits: max |ours - transformers| = {gap:.1e}; the same {NEW_TOKENS} greedy tokens: {same}")
    forward, attentions = (
        ratio("ours forward", "transformers forward"),
        ratio("ours forward", "transformers attentions"),
    )
    generate = ratio("ours generate", "transformers generate")
    blas = ratio("NumPy products", "torch products")
    share = t["NumPy products"] / t["ours forward"]
    print(f"1 forward, full trace vs eager               {forward}  (<= 1.0)")
    print(f"  vs eager with output_attentions=True       {attentions}")
    print(f"  its products alone, NumPy vs torch linear  {blas}")
    print(f"  (the products are {share:.0%} of our traced forward)")
    print(f"2 generate {NEW_TOKENS}, cache vs greedy generate     {generate}  (<= 1.0)")
    s, th = min(e2e["step"]), min(e2e["theirs"])
    print(f"3 step --stage masked-attention --layer {LAYER} vs python -c transformers: "
          f"{s:.2f} s vs {th:.2f} s: {s / th:.2f}x (best of {args.e2e_rounds})  (<= 0.5)")  # fmt: skip
    print(f"4 run to a pipe {min(e2e['run']):.2f} s (best of {args.e2e_rounds})  (<= 5 s); "
          f"copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + written)")  # fmt: skip
    print(f"5 peak RSS: step {step_peak / mib:,.0f} MiB = {step_peak / size:.2f}x the checkpoint, "
          f"run {run_peak / mib:,.0f} MiB = {run_peak / size:.2f}x  (<= 1.5)")  # fmt: skip
    print(f"6 forward vs the floor of reading its weights once ({weight_bytes / mib:,.0f} MiB at "
          f"{bandwidth / 1e9:.1f} GB/s = {floor * 1e3:.0f} ms): best {t['ours forward'] / floor:.1f}x "
          f"(transformers eager {t['transformers forward'] / floor:.1f}x)")  # fmt: skip
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
