"""The encoder alone (configs/bert-style.yaml: fill-mask, learned positions and a segment table summed
with E, a LayerNorm of the sum, post-norm layers with GELU, the masked-language-model head) against
the canonical implementation, transformers' own ``BertForMaskedLM`` (eager), loaded with the same
weights: the forward, stage by stage, and every gradient of the masked-language-model loss.

The map from our parameters to BERT's is written out here, by hand, as the reference's side of the
comparison: the converter (checkpoints/bert.py) is not used, so a mistake there is not repeated here.
BERT computes in the model's dtype throughout (no float32 casts): float64 agrees to rounding.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import load_config
from transformer_walkthrough.model.backprop import backward, next_tokens
from transformer_walkthrough.model.training import examples, train
from transformer_walkthrough.model.transformer import Weights, init_weights, run_forward

BERT_PATH = Path(__file__).resolve().parents[1] / "configs" / "bert-style.yaml"
BERT = load_config(BERT_PATH)


def _perturbed(config, seed: int = 7) -> Weights:
    """The seed's weights with every gamma, beta and bias moved off its first value (1 or 0): a
    swapped norm or a dropped bias would otherwise be invisible."""
    w = init_weights(config)
    rng = np.random.default_rng(seed)
    for name in w:
        if name.endswith(("/gamma", "/beta")) or "/b" in name:
            w[name][:] = w[name] + rng.uniform(-0.5, 0.5, size=w[name].shape)
    return w


def bert_names(config) -> dict[str, tuple[str, str]]:
    """BERT's parameter name -> (ours, how ours becomes BERT's: "" as is, "T" transposed, "q"/"k"/"v"
    the query's, key's or value's third of W_QKV (transposed) or b_QKV)."""
    names = {
        "bert.embeddings.word_embeddings.weight": ("encoder.embedding/E", ""),
        "bert.embeddings.position_embeddings.weight": ("encoder.embedding/P", ""),
        "bert.embeddings.token_type_embeddings.weight": ("encoder.embedding/T", ""),
        "bert.embeddings.LayerNorm.weight": ("encoder.embedding-norm/gamma", ""),
        "bert.embeddings.LayerNorm.bias": ("encoder.embedding-norm/beta", ""),
        "cls.predictions.transform.dense.weight": ("output.transform/W_dense", "T"),
        "cls.predictions.transform.dense.bias": ("output.transform/b_dense", ""),
        "cls.predictions.transform.LayerNorm.weight": ("output.transform/gamma", ""),
        "cls.predictions.transform.LayerNorm.bias": ("output.transform/beta", ""),
        "cls.predictions.bias": ("output.logits/b", ""),
    }
    for n in range(config.model.num_encoder_layers):
        ours, theirs = f"encoder.{n}", f"bert.encoder.layer.{n}"
        for part in ("query", "key", "value"):
            names[f"{theirs}.attention.self.{part}.weight"] = (f"{ours}.self-attention/W_QKV", part[0])
            names[f"{theirs}.attention.self.{part}.bias"] = (f"{ours}.self-attention/b_QKV", part[0])
        names |= {
            f"{theirs}.attention.output.dense.weight": (f"{ours}.self-attention/W_O", "T"),
            f"{theirs}.attention.output.dense.bias": (f"{ours}.self-attention/b_O", ""),
            f"{theirs}.attention.output.LayerNorm.weight": (f"{ours}.add-norm-1/gamma", ""),
            f"{theirs}.attention.output.LayerNorm.bias": (f"{ours}.add-norm-1/beta", ""),
            f"{theirs}.intermediate.dense.weight": (f"{ours}.feed-forward/W_1", "T"),
            f"{theirs}.intermediate.dense.bias": (f"{ours}.feed-forward/b_1", ""),
            f"{theirs}.output.dense.weight": (f"{ours}.feed-forward/W_2", "T"),
            f"{theirs}.output.dense.bias": (f"{ours}.feed-forward/b_2", ""),
            f"{theirs}.output.LayerNorm.weight": (f"{ours}.add-norm-2/gamma", ""),
            f"{theirs}.output.LayerNorm.bias": (f"{ours}.add-norm-2/beta", ""),
        }
    return names


def as_theirs(a: np.ndarray, how: str, d: int) -> np.ndarray:
    """One of our arrays (or its gradient) in BERT's layout (``bert_names``)."""
    if how == "T":
        return a.T
    if how in ("q", "k", "v"):
        k = "qkv".index(how)
        return a[:, k * d : (k + 1) * d].T if a.ndim == 2 else a[k * d : (k + 1) * d]
    return a


def bert_for_masked_lm(config, w: Weights) -> torch.nn.Module:
    """transformers' BertForMaskedLM in float64, holding exactly the weights ``w``."""
    from transformers import BertConfig, BertForMaskedLM

    m = config.model
    hf = BertConfig(
        vocab_size=len(config.vocabulary), hidden_size=m.d_model, num_hidden_layers=m.num_encoder_layers,
        num_attention_heads=m.num_heads, intermediate_size=m.d_ff, hidden_act="gelu",
        max_position_embeddings=m.max_positions, type_vocab_size=m.segments, layer_norm_eps=m.layer_norm_eps,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, tie_word_embeddings=m.tie_embeddings,
        pad_token_id=None,  # the toy has no [PAD]: BERT's row 0 would get no gradient from its lookups
    )  # fmt: skip
    hf._attn_implementation = "eager"
    model = BertForMaskedLM(hf).double().eval()
    params = dict(model.named_parameters())
    names = bert_names(config)
    assert set(params) == set(names)  # every one of BERT's parameters is one of ours
    with torch.no_grad():
        for name, (ours, how) in names.items():
            params[name].copy_(torch.from_numpy(np.ascontiguousarray(as_theirs(w[ours], how, m.d_model))))
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight  # tied
    return model


SEGMENTS = [0, 0, 0, 0, 1, 1, 1]  # two segments, so that T's second row is read and learned too


@pytest.mark.parametrize("segments", [None, SEGMENTS], ids=["one sentence", "two segments"])
def test_every_stage_and_gradient_equals_bert_for_masked_lm(segments: list[int] | None) -> None:
    w = _perturbed(BERT)
    ids = BERT.token_ids(BERT.source_tokens)
    trace = run_forward(BERT, w, source_ids=ids, segment_ids=segments,
                        answer_ids=[BERT.index[a] if a else -1 for a in BERT.answers])  # fmt: skip
    ours = backward(trace, w)
    model = bert_for_masked_lm(BERT, w)
    labels = torch.tensor([[a if a >= 0 else -100 for a in next_tokens(trace)]])
    token_types = torch.tensor([segments or [0] * len(ids)])
    out = model(torch.tensor([ids]), token_type_ids=token_types, labels=labels, output_hidden_states=True,
                output_attentions=True)  # fmt: skip
    out.loss.backward()

    def close(a: np.ndarray, b: torch.Tensor, tol: float = 1e-10) -> None:
        b = b.detach().numpy()
        assert np.abs(a - b).max() <= tol * max(1.0, np.abs(b).max()), np.abs(a - b).max()

    # hidden_states[0] is the embedding LayerNorm's output; hidden_states[n + 1] layer n's.
    close(trace["encoder.embedding-norm"]["output"], out.hidden_states[0][0])
    for n in range(BERT.model.num_encoder_layers):
        stage = trace[f"encoder.{n}.self-attention"]
        for h in range(BERT.model.num_heads):
            close(stage[f"A{h + 1}"], out.attentions[n][0, h])
        close(trace[f"encoder.{n}.add-norm-2"]["output"], out.hidden_states[n + 1][0])
    close(trace["output.logits"]["logits"], out.logits[0])
    assert math.isclose(ours.loss, out.loss.item(), rel_tol=1e-12)

    # Every gradient, in BERT's layout: W = Eᵀ gathers both uses of E in each model.
    params = dict(model.named_parameters())
    for name, (mine, how) in bert_names(BERT).items():
        theirs, grad = params[name].grad.numpy(), as_theirs(ours.weights[mine], how, BERT.model.d_model)
        scale = max(1.0, float(np.abs(theirs).max()))
        assert np.abs(grad - theirs).max() <= 1e-8 * scale, (name, np.abs(grad - theirs).max())
    assert {mine for mine, _ in bert_names(BERT).values()} == set(w)  # and every one of ours is BERT's
    if segments:  # the second segment's row learns from the rows that read it, and only those
        assert np.abs(ours.weights["encoder.embedding/T"][1]).max() > 0


def test_training_masks_each_word_in_turn_and_learns_the_blank() -> None:
    """Five words, five examples: each with one word behind [MASK], the answer that word."""
    made = examples(BERT)
    words = ["the", "cat", "is", "sleeping", "comfortably"]
    assert len(made) == len(words)
    mask = BERT.index["[MASK]"]
    for i, example in enumerate(made):  # row 0 is [CLS]: word i is row i + 1
        assert example.source_ids[i + 1] == mask and example.source_ids.count(mask) == 1
        assert example.answer_ids == [-1] * (i + 1) + [BERT.index[words[i]]] + [-1] * (len(words) - i)
    w = init_weights(BERT)
    losses = train(BERT, w)  # the config's 150 steps
    assert losses[-1] < losses[0] / 10
    trace = run_forward(BERT, w)
    assert [(p.expected, p.word) for p in trace.prediction] == [("sleeping", "sleeping")]


def test_cli_run_ends_with_the_blank_and_generate_refuses(runner: CliRunner) -> None:
    result = runner.invoke(app, ["run", "-c", str(BERT_PATH)])
    assert result.exit_code == 0, result.output
    assert "the most likely word at each blank" in result.output
    assert "[MASK] (pos 4)" in result.output
    result = runner.invoke(app, ["generate", "-c", str(BERT_PATH)])
    assert result.exit_code == 2
    assert "fill-mask model (encoder-only) has no next token" in result.output


def test_your_own_sentence_is_source_alone_and_the_configs_blank_hides_its_word(
    runner: CliRunner, tmp_path: Path
) -> None:
    from transformer_walkthrough.model.lens import logit_lens

    # the same sentence written in a config file: what --source must equal
    written = tmp_path / "dog.yaml"
    text = BERT_PATH.read_text(encoding="utf-8")
    written.write_text(text.replace("The cat is sleeping comfortably.", "the dog is barking loudly"), "utf-8")
    trace = run_forward(load_config(written))
    assert trace.source_tokens == ("[CLS]", "the", "dog", "is", "[MASK]", "loudly", "[SEP]")
    lens = logit_lens(trace)
    result = runner.invoke(
        app, ["lens", "-c", str(BERT_PATH), "--source", "the dog is barking loudly", "--full"]
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert next(line for line in lines if line.lstrip().startswith("after")).split()[1:] == list(
        trace.source_tokens
    )
    for layer in range(lens.layers):
        at = next(k for k, line in enumerate(lines) if line.lstrip().startswith(f"layer {layer} "))
        words = [trace.vocabulary[t] for t in lens.top(1)[layer, :, 0]]
        assert lines[at].split()[2:] == words
        assert [n for n in lines[at + 1].split() if n != "✓"] == [
            f"{lens.probabilities[layer, i, t]:.2f}" for i, t in enumerate(lens.top(1)[layer, :, 0])
        ]
    assert next(line for line in lines if "true word" in line).split()[2:][4] == "barking"  # the hidden word
    run = runner.invoke(app, ["run", "-c", str(BERT_PATH), "--source", "the dog is barking loudly"])
    assert run.exit_code == 0 and "[MASK] (pos 4)   " in run.stdout and "barking" in run.stdout
    for args, message in [
        (
            ["--source", "the dog is barking", "--target", "loudly"],
            "--target: an encoder-only model has no decoder",
        ),
        (
            ["--source", "the dog"],
            "blanks: 3 is no word of the sentence (0 to 1) (given on the command line)",
        ),
        (["--target", "barking"], "the toy needs both --source"),
    ]:
        bad = runner.invoke(app, ["run", "-c", str(BERT_PATH), *args])
        assert bad.exit_code == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1, bad.stderr
        assert message in bad.stderr


def test_the_attention_has_no_mask_and_says_so() -> None:
    trace = run_forward(BERT)
    stage = trace["encoder.0.self-attention"]
    assert "M" not in stage and "No mask: every token sees every token" in stage.explanation
    assert (stage["A1"][:, -1] > 0).all()  # the first token attends to the last one too


def test_an_untied_model_and_roberta_offset_run_and_verify() -> None:
    from transformer_walkthrough.compare.verify import recompute

    for change in ({"tie_embeddings": False}, {"position_offset": 2}, {"segments": 0}):
        config = dataclasses.replace(BERT, model=dataclasses.replace(BERT.model, **change))
        trace = run_forward(config, _perturbed(config))
        assert all(c.ok for c in recompute(trace)), change
        if "position_offset" in change:
            stage = trace["encoder.embedding"]
            assert (stage["position"] == stage["P"][2:9]).all()
