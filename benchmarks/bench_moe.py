"""A small mixture of experts, ours against transformers: the traced forward, `step` end to end, memory.

Run: python benchmarks/bench_moe.py [--quick] [--rounds N] [--e2e-rounds N] [--folder DIR]

A random checkpoint of OLMoE's layout scaled down is made here with transformers (OlmoeConfig:
d_model 512, 8 heads, 16 layers, 16 experts of width 256, each token to 4 of them, their
probabilities kept as they are, QK-norm over the whole projections; ``save_pretrained``, float32),
in DIR or a temporary folder, with the Qwen2 style tokenizer of tests/tiny_tokenizers (a 364-row
table). The prompt is 64 tokens. One process, the same weights, the same threads (base.py pins
NumPy's and PyTorch's). Each figure is a ratio against its peer measured in the same run, in turns
(``bench_llama.best_times``): the best run of each against the best of its peer, and the median over
turns of the two within a turn:
  1 forward   run_forward (every matrix recorded: each expert's on the tokens routed to it) vs
              OlmoeForCausalLM, eager attention and eager experts (a Python loop over the experts
              that got a token), torch.no_grad(); beside it, the forward's matrix products alone,
              NumPy on our (in, out) weights (per layer W_QKV, W_O, W_router, and each expert's
              W_gate, W_up, W_down on as many rows as it was routed) against torch's linear on
              transformers' (out, in) ones: how much of our forward is anything but products
  2 step      `walkthrough step --model DIR --prompt … --stage experts --layer 15`, a fresh process,
              stdout to a pipe, vs `python -c` importing transformers, loading the checkpoint and
              its tokenizer and running one forward (the router logits of layer 15)
  3 memory    peak RSS (VmHWM, read by the child itself) of the `step` of 2, against model.safetensors
Targets: 1 <= 1.0x, 2 <= 0.5x, 3 <= 1.5x. The machine these run on may be shared: a ratio is a
pair measured side by side, and its middle half says how much one turn can be trusted.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # tests.tiny_tokenizers, and this tree's transformer_walkthrough

from base import THREADS  # noqa: E402  (first: pins the BLAS threads before NumPy loads)
from bench_forward import paired_ratio, quartiles, turn_ratios  # noqa: E402
from bench_llama import best_of, best_times, peak_rss, product_runners  # noqa: E402
from harness import begin, checkpoint, options  # noqa: E402

PROMPT = " ".join(["the cat is sleeping comfortably"] * 3) + " a"  # 64 tokens of the tiny tokenizer
N_PROMPT = 64
LAYER = 15
SHAPE = dict(
    hidden_size=512, intermediate_size=256, num_hidden_layers=16, num_attention_heads=8,
    num_key_value_heads=8, num_experts=16, num_experts_per_tok=4, max_position_embeddings=512,
    norm_topk_prob=False,
)  # fmt: skip
STEP = ("step", "--stage", "experts", "--layer", str(LAYER))

# The peer of `walkthrough step … --stage experts --layer 15`: what a learner would otherwise run to
# see the same router.
THEIRS = """
import sys, torch, transformers
torch.set_num_threads(int(sys.argv[3]))
tok = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
model = transformers.OlmoeForCausalLM.from_pretrained(
    sys.argv[1], attn_implementation="eager", experts_implementation="eager").eval()
with torch.no_grad():
    out = model(torch.tensor([tok(sys.argv[2])["input_ids"]]), output_router_logits=True)
print(out.router_logits[int(sys.argv[4])])
"""


def make_checkpoint(folder: Path) -> None:
    """A random OlmoeForCausalLM of the shape above (float32, save_pretrained) and a tokenizer."""
    import torch
    import transformers

    from tests import tiny_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    tiny_tokenizers.qwen2_style(folder)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    config = transformers.OlmoeConfig(
        **SHAPE, vocab_size=len(tok), eos_token_id=tok.eos_token_id, bos_token_id=None, pad_token_id=None
    )
    torch.manual_seed(0)
    transformers.OlmoeForCausalLM(config).save_pretrained(folder)


def products(w: object, trace: object, reference: object, n: int) -> tuple[object, object]:
    """The forward's matrix products, NumPy's and torch's, on random rows of their shapes: each
    expert's on as many rows as the trace routed to it (see above)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    d, d_e = SHAPE["hidden_size"], SHAPE["intermediate_size"]
    x, h = (rng.standard_normal((n, k)).astype(np.float32) for k in (d, d_e))
    ours, theirs = [], []
    xt, ht = torch.from_numpy(x), torch.from_numpy(h)
    for i, layer in enumerate(reference.model.layers):  # type: ignore[attr-defined]
        attn, moe = f"decoder.{i}.masked-attention", f"decoder.{i}.experts"
        ours += [(x, w[f"{attn}/W_QKV"]), (x, w[f"{attn}/W_O"]), (x, w[f"{moe}/W_router"])]
        a = layer.self_attn
        theirs += [(xt, a.q_proj.weight), (xt, a.k_proj.weight), (xt, a.v_proj.weight), (xt, a.o_proj.weight)]
        theirs.append((xt, layer.mlp.gate.weight))
        chosen = np.rint(trace[moe]["chosen"]).astype(int)  # type: ignore[index]
        gate_up, down = (
            layer.mlp.experts.gate_up_proj,
            layer.mlp.experts.down_proj,
        )  # (E, 2·d_e, d), (E, d, d_e)
        for e in range(SHAPE["num_experts"]):
            r = int(np.sum(chosen == e))
            if r:
                ours += [(x[:r], w[f"{moe}/expert{e}.W_gate"]), (x[:r], w[f"{moe}/expert{e}.W_up"])]
                ours.append((h[:r], w[f"{moe}/expert{e}.W_down"]))
                theirs += [(xt[:r], gate_up[e]), (ht[:r], down[e])]
    ours.append((x, w["decoder.embedding/E"].T if "output.logits/W" not in w else w["output.logits/W"]))
    theirs.append((xt, reference.lm_head.weight))  # type: ignore[attr-defined]

    return product_runners(ours, theirs)


def main() -> int:
    args = begin(options(__doc__))

    import numpy as np
    import torch
    import transformers

    from transformer_walkthrough.checkpoints.run import load
    from transformer_walkthrough.model.transformer import run_forward

    folder = checkpoint(args.folder, make_checkpoint, "a random OLMoE-shaped checkpoint")
    size = (folder / "model.safetensors").stat().st_size

    loaded = load(str(folder), PROMPT, "float32", prompt=True)
    config, w, ids = loaded.config, loaded.weights, loaded.ids
    assert len(ids) == N_PROMPT, len(ids)
    reference = transformers.OlmoeForCausalLM.from_pretrained(
        folder, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    tokens = torch.tensor([ids])

    def theirs_forward() -> object:
        with torch.no_grad():
            return reference(tokens)

    trace = run_forward(config, w, target_ids=ids)
    gap = np.abs(trace["output.logits"]["logits"] - theirs_forward().logits[0].numpy()).max()
    with torch.no_grad():
        router = reference(tokens, output_router_logits=True).router_logits[LAYER].numpy()
    router_gap = np.abs(trace[f"decoder.{LAYER}.experts"]["router_logits"] - router).max()
    numpy_products, torch_products = products(w, trace, reference, N_PROMPT)
    idle = sum(
        len(set(range(SHAPE["num_experts"])) - set(np.rint(s["chosen"]).astype(int).ravel()))
        for s in trace
        if s.kind == "experts"
    )
    del trace

    turns = best_times(
        {
            "NumPy products": numpy_products,
            "torch products": torch_products,
            "ours forward": lambda: run_forward(config, w, target_ids=ids),
            "transformers forward": theirs_forward,
        },
        args.rounds,
    )
    t = {name: min(times) for name, times in turns.items()}
    ours_step = [
        "-m",
        "transformer_walkthrough",
        STEP[0],
        "--model",
        str(folder),
        "--prompt",
        PROMPT,
        *STEP[1:],
    ]
    theirs_step = ["-c", THEIRS, str(folder), PROMPT, str(THREADS), str(LAYER)]
    e2e = best_of({"step": ours_step, "theirs": theirs_step}, args.e2e_rounds)
    step_peak = peak_rss(ours_step)

    def ratio(ours: str, theirs: str) -> str:
        r = paired_ratio(turns, ours, theirs)
        spread = quartiles(turn_ratios(turns, ours, theirs))
        return (
            f"best {t[ours] * 1e3:5.0f} ms vs {t[theirs] * 1e3:5.0f} ms: {t[ours] / t[theirs]:.2f}x; "
            f"paired {r:.2f}x (middle half {spread})"
        )

    mib = 2**20
    print(
        f"OLMoE's layout scaled down (d_model 512, 8 heads, 16 layers, 16 experts of width 256, top 4), "
        f"float32, {N_PROMPT}-token prompt, {THREADS} threads each (NumPy's OpenBLAS, torch "
        f"{torch.__version__}), {args.rounds} rounds; {idle} of the 256 layer-experts got no token"
    )
    print(f"checkpoint {size / mib:,.0f} MiB; logits: max |ours - transformers| = {gap:.1e}; "
          f"router logits of layer {LAYER}: {router_gap:.1e}")  # fmt: skip
    share = t["NumPy products"] / t["ours forward"]
    forward = ratio("ours forward", "transformers forward")
    print(f"1 forward, full trace vs eager experts       {forward}  (<= 1.0)")
    print(f"  its products alone, NumPy vs torch linear  {ratio('NumPy products', 'torch products')}")
    print(f"  (the products are {share:.0%} of our traced forward)")
    s, th = min(e2e["step"]), min(e2e["theirs"])
    print(f"2 step --stage experts --layer {LAYER} vs python -c transformers: "
          f"{s:.2f} s vs {th:.2f} s: {s / th:.2f}x (best of {args.e2e_rounds})  (<= 0.5)")  # fmt: skip
    print(f"3 peak RSS of step {step_peak / mib:,.0f} MiB = {step_peak / size:.2f}x the checkpoint  (<= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
