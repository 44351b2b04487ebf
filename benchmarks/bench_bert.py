"""bert-base-uncased's shape, ours against transformers: the traced forward and `step` end to end.

Run: python benchmarks/bench_bert.py [--quick] [--rounds N] [--e2e-rounds N] [--folder DIR]

A random checkpoint of bert-base-uncased's shape is made here with transformers (BertConfig: d_model
768, 12 heads, 12 layers, d_ff 3,072, GELU, 512 positions, 2 segment rows, a 30,522-row embedding
table tied to the MLM head; ``BertForMaskedLM``, random init, ``save_pretrained``, float32), in DIR
or a temporary folder, with a WordPiece tokenizer of bert-base-uncased's layout and size
(tests/tiny_tokenizers' bert_style, its vocabulary padded with made-up words to 30,522 tokens;
tokenizer.json and vocab.txt). The sentence is 16 tokens, [CLS], [SEP] and one [MASK] included.
One process, the same weights, the same threads (base.py pins NumPy's and PyTorch's). Each figure
is a ratio against its peer measured in the same run, in turns (bench_llama.best_times): the best
run of each against the best of its peer, and the median over turns of the two within a turn:
  1 forward    run_forward (every matrix recorded, weights loaded) vs BertForMaskedLM, eager,
               torch.no_grad(); and vs the same with output_attentions=True
  2 step       `walkthrough step --model DIR --prompt … --stage self-attention --layer 11`, a fresh
               process, stdout to a pipe, vs `python -c` importing transformers, loading the
               checkpoint and its tokenizer and running one forward (the attention of layer 11)
Beside 1, the forward's matrix products alone (per layer W_QKV, W_O, W_1, W_2; then the head's
W_dense and the tied output layer, Eᵀ), NumPy on our (in, out) weights against
torch.nn.functional.linear on transformers' (out, in) ones, q/k/v apart as it runs them: how much of
the gap is the BLAS, and how much of our forward is anything but products.
Targets: 1 <= 1.0x, 2 <= 0.5x. The first line names the host (base.host_line).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # tests.tiny_tokenizers, and this tree's transformer_walkthrough

from base import THREADS  # noqa: E402  (first: pins the BLAS threads before NumPy loads)
from bench_forward import paired_ratio, quartiles, turn_ratios  # noqa: E402
from bench_llama import best_of, best_times, product_runners  # noqa: E402
from harness import begin, checkpoint, options  # noqa: E402

PROMPT = "The cat is [MASK] comfortably on the mat, and the dog sat."
N_PROMPT = 16
LAYER = 11
SHAPE = dict(
    vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
    intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=2,
    layer_norm_eps=1e-12, pad_token_id=0, tie_word_embeddings=True,
)  # fmt: skip

# The peer of `walkthrough step … --layer 11`: what a learner would otherwise run to see the same attention.
THEIRS = """
import sys, torch, transformers
torch.set_num_threads(int(sys.argv[3]))
tok = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
model = transformers.BertForMaskedLM.from_pretrained(sys.argv[1], attn_implementation="eager").eval()
with torch.no_grad():
    out = model(torch.tensor([tok(sys.argv[2])["input_ids"]]), output_attentions=True)
print(out.attentions[int(sys.argv[4])][0])
"""


def bert_base_tokenizer(folder: Path) -> None:
    """bert-base-uncased's tokenizer layout (tests.tiny_tokenizers.bert_style) with its vocabulary
    padded to 30,522 tokens by made-up words, in tokenizer.json and vocab.txt alike."""
    from tests.tiny_tokenizers import bert_style

    bert_style(folder)
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    for n in range(SHAPE["vocab_size"] - len(vocab)):
        vocab[f"w{n}"] = len(vocab)
    (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    (folder / "vocab.txt").write_text(
        "\n".join(sorted(vocab, key=vocab.__getitem__)) + "\n", encoding="utf-8"
    )


def make_checkpoint(folder: Path) -> None:
    """A random BertForMaskedLM of bert-base-uncased's shape (float32, save_pretrained) and a tokenizer."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    bert_base_tokenizer(folder)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(transformers.BertConfig(**SHAPE)).save_pretrained(folder)


def products(w: object, reference: object, n: int) -> tuple[object, object]:
    """The forward's matrix products on random rows of its shapes: NumPy's and torch's (see above)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    x, h = (
        rng.standard_normal((n, k)).astype(np.float32)
        for k in (SHAPE["hidden_size"], SHAPE["intermediate_size"])
    )
    ours = []
    for i in range(SHAPE["num_hidden_layers"]):
        attn, ffn = f"encoder.{i}.self-attention", f"encoder.{i}.feed-forward"
        ours += [(x, w[f"{attn}/W_QKV"]), (x, w[f"{attn}/W_O"]), (x, w[f"{ffn}/W_1"]), (h, w[f"{ffn}/W_2"])]
    ours += [(x, w["output.transform/W_dense"]), (x, w["encoder.embedding/E"].T)]
    xt, ht = torch.from_numpy(x), torch.from_numpy(h)
    theirs = []
    for layer in reference.bert.encoder.layer:  # type: ignore[attr-defined]
        a = layer.attention
        theirs += [(xt, a.self.query.weight), (xt, a.self.key.weight), (xt, a.self.value.weight)]
        theirs += [
            (xt, a.output.dense.weight),
            (xt, layer.intermediate.dense.weight),
            (ht, layer.output.dense.weight),
        ]
    head = reference.cls.predictions  # type: ignore[attr-defined]
    theirs += [(xt, head.transform.dense.weight), (xt, head.decoder.weight)]

    return product_runners(ours, theirs)


def cli(folder: Path, command: str, *extra: str) -> list[str]:
    return ["-m", "transformer_walkthrough", command, "--model", str(folder), "--prompt", PROMPT, *extra]


def main() -> int:
    args = begin(options(__doc__))

    import numpy as np
    import torch
    import transformers

    from transformer_walkthrough.checkpoints.run import load
    from transformer_walkthrough.model.transformer import run_forward

    folder = checkpoint(args.folder, make_checkpoint, "a random bert-base-uncased-shaped checkpoint")
    size = (folder / "model.safetensors").stat().st_size

    start = time.perf_counter()
    loaded = load(str(folder), PROMPT, "float32", prompt=True)
    load_time = time.perf_counter() - start
    config, w, ids = loaded.config, loaded.weights, loaded.ids
    assert len(ids) == N_PROMPT, len(ids)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    assert ids == tok(PROMPT).input_ids
    reference = transformers.BertForMaskedLM.from_pretrained(folder, attn_implementation="eager").eval()
    prompt = torch.tensor([ids])

    def theirs_forward() -> object:
        with torch.no_grad():
            return reference(prompt)

    def theirs_attentions() -> object:
        with torch.no_grad():
            return reference(prompt, output_attentions=True)

    trace = run_forward(config, w, source_ids=ids)
    out = theirs_attentions()
    logits, expected = trace["output.logits"]["logits"], out.logits[0].numpy()
    gap = float(np.abs(logits - expected).max() / np.abs(expected).max())
    A = trace[f"encoder.{LAYER}.self-attention"]["A1"]
    a_gap = float(np.abs(A - out.attentions[LAYER][0, 0].numpy()).max())
    blank = ids.index(loaded.checkpoint.mask_id)
    same = list(np.argsort(-logits[blank])[:5]) == list(np.argsort(-expected[blank])[:5])
    dtypes = sorted({str(m.values.dtype) for stage in trace for m in stage.matrices.values()})
    del trace

    numpy_products, torch_products = products(w, reference, N_PROMPT)
    turns = best_times(
        {
            "NumPy products": numpy_products,
            "torch products": torch_products,
            "ours forward": lambda: run_forward(config, w, source_ids=ids),
            "transformers forward": theirs_forward,
            "transformers attentions": theirs_attentions,
        },
        args.rounds,
    )
    t = {name: min(times) for name, times in turns.items()}
    ours_step = cli(folder, "step", "--stage", "self-attention", "--layer", str(LAYER))
    theirs_step = ["-c", THEIRS, str(folder), PROMPT, str(THREADS), str(LAYER)]
    e2e = best_of({"step": ours_step, "theirs": theirs_step}, args.e2e_rounds)

    def ratio(ours: str, theirs: str) -> str:
        r = paired_ratio(turns, ours, theirs)
        spread = quartiles(turn_ratios(turns, ours, theirs))
        return (
            f"best {t[ours] * 1e3:5.0f} ms vs {t[theirs] * 1e3:5.0f} ms: {t[ours] / t[theirs]:.2f}x; "
            f"paired {r:.2f}x (middle half {spread})"
        )

    print(
        f"bert-base-uncased's shape (d_model 768, 12 heads, 12 layers, d_ff 3,072, 30,522-token "
        f"vocabulary, tied), float32, {N_PROMPT}-token sentence, {THREADS} threads each "
        f"(NumPy's OpenBLAS, torch {torch.__version__}), {args.rounds} rounds"
    )
    print(f"checkpoint {size / 2**20:,.0f} MiB; load (config, weights, tokenizer) {load_time:.2f} s; "
          f"trace dtypes {', '.join(dtypes)}")  # fmt: skip
    print(f"logits: max |ours - transformers| / max |theirs| = {gap:.1e}; A1 of layer {LAYER}: max gap "
          f"{a_gap:.1e}; the same top 5 at the blank: {same}")  # fmt: skip
    forward, attentions = (
        ratio("ours forward", "transformers forward"),
        ratio("ours forward", "transformers attentions"),
    )
    print(f"1 forward, full trace vs eager               {forward}  (<= 1.0)")
    print(f"  vs eager with output_attentions=True       {attentions}")
    share = t["NumPy products"] / t["ours forward"]
    print(f"  its products alone, NumPy vs torch linear  {ratio('NumPy products', 'torch products')}")
    print(f"  (the products are {share:.0%} of our traced forward)")
    s, th = min(e2e["step"]), min(e2e["theirs"])
    print(f"2 step --stage self-attention --layer {LAYER} vs python -c transformers: "
          f"{s:.2f} s vs {th:.2f} s: {s / th:.2f}x (best of {args.e2e_rounds})  (<= 0.5)")  # fmt: skip
    return 0 if same and gap <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
