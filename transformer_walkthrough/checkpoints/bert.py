"""A BERT, RoBERTa or DistilBERT checkpoint converted to this project's parameter names and layout.

The three are one architecture, the encoder of Figure 1 alone, with the conventions the config
names, each read from ``config.json`` rather than assumed: learned positions (``P``) and, for BERT
and RoBERTa, a segment table (``T``, ``type_vocab_size`` rows; every token of one sentence reads
row 0) added to the token's row of ``E``, a LayerNorm on that sum (``embedding_norm``), post-norm
layers (``LayerNorm(x + Sublayer(x))``, the paper's) with GELU in the feed-forward, attention
without a mask (every token sees every token), and a masked-language-model head: ``dense`` →
GELU → LayerNorm (``output_transform``), then ``W = Eᵀ`` (tied) plus a bias of its own.

- ``bert``: positions from 0. ``BertForMaskedLM``'s files (``save_pretrained``) name every tensor
  ``bert.…`` and the head ``cls.predictions.…``; the hub's bert-base-* are ``BertForPreTraining``
  files, which also carry ``bert.pooler.dense`` and ``cls.seq_relationship`` (the next-sentence
  head, read from the pooled ``[CLS]``): both accepted, their shapes checked, not shown (they
  predict no token). Older files name the LayerNorms' parameters ``LayerNorm.gamma`` and
  ``LayerNorm.beta``, which transformers renames to ``weight`` and ``bias``; so does this.
- ``roberta``: BERT with another tokenizer (byte-level BPE, ``<s> … </s>``, ``<mask>``), one
  segment row, the head ``lm_head.dense/layer_norm/decoder`` + ``lm_head.bias`` — and its positions
  start at ``padding_idx + 1``: fairseq numbers tokens from the pad id on, so with
  ``pad_token_id`` 1 the first token (``<s>``) reads row 2 of ``P``, and rows 0 and 1 are never
  read by a sentence. ``position_offset`` says so, and a sentence may have
  ``max_position_embeddings - 2`` tokens, not ``max_position_embeddings``. (transformers also gives
  a ``<pad>`` inside the text the pad's position and does not count it; this project numbers every
  token, so a prompt should not hold the pad token.) Its head's GELU is always the erf form
  (``RobertaLMHead`` calls ``gelu``, whatever ``hidden_act`` says): another ``hidden_act`` is
  refused rather than given two activations.
- ``distilbert``: no segment table, 6 layers of other names (``attention.q_lin/k_lin/v_lin/out_lin``,
  ``sa_layer_norm``, ``ffn.lin1/lin2``, ``output_layer_norm``), the head ``vocab_transform``,
  ``vocab_layer_norm``, ``vocab_projector`` (whose own bias is the output bias), config keys
  ``dim``, ``n_heads``, ``hidden_dim``, ``n_layers``, ``activation``, and every LayerNorm's eps
  fixed at 1e-12 (transformers ignores any eps in its config). ``sinusoidal_pos_embds`` only says
  how the table was first filled: the file stores it as weights, transformers reads it from there,
  and so does this (it is shown as the learned ``P`` it is).

A plain ``BertModel``/``RobertaModel``/``DistilBertModel`` file (no prefix, no head) converts with
``task: encode``: the encoder alone, no output stages; it cannot fill a blank.

The projections are ``nn.Linear``, stored ``(out, in)`` and applied as ``x·Wᵀ``: each is
transposed to this project's ``(in, out)``, and query, key and value are set side by side as
``W_QKV = [W_Q | W_K | W_V]`` (head h: the h-th block of d_k columns of each third). Buffers of
older files (``embeddings.position_ids``, ``embeddings.token_type_ids``: the positions 0, 1, 2, …
and the segment 0 of every token) are shape-checked and not used: the model makes them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import HF_ACTIVATIONS  # hidden_act's names for ours
from ..model.architecture import ENCODER, OUTPUT, stage_id
from .bpe import BPETokenizer
from .budget import Budget, out_of_memory
from .errors import CheckpointError
from .family import Block, Family, Param, Tensor, check_finite, convert, find, first_tensor, with_defaults
from .jsonfile import shown
from .tensors import Taker, check_layers, float_dtype, read_config_json, read_weights, transposed
from .wordpiece import WordPieceTokenizer

# transformers 5's BertConfig and RobertaConfig defaults, for the keys an older config.json leaves out.
_BERT_LIKE: dict[str, Any] = {
    "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072, "num_hidden_layers": 12,
    "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
    "tie_word_embeddings": True, "position_embedding_type": "absolute", "is_decoder": False,
    "add_cross_attention": False,
}  # fmt: skip
# config.json's keys for the sizes this converter reads, by what they mean.
_BERT_KEYS = {
    "d_model": "hidden_size", "num_heads": "num_attention_heads", "d_ff": "intermediate_size",
    "layers": "num_hidden_layers", "activation": "hidden_act",
}  # fmt: skip
_DISTILBERT_KEYS = {
    "d_model": "dim", "num_heads": "n_heads", "d_ff": "hidden_dim", "layers": "n_layers",
    "activation": "activation",
}  # fmt: skip
DISTILBERT_EPS = 1e-12  # nn.LayerNorm(config.dim, eps=1e-12) in every DistilBERT module


def _size_keys(keys: Mapping[str, str]) -> dict[str, str]:
    """config.json's key behind each size name of the map (``Family.size_keys``)."""
    return {"d": keys["d_model"], "ff": keys["d_ff"], "positions": "max_position_embeddings",
            "segments": "type_vocab_size"}  # fmt: skip


def has_segments(m: Mapping[str, Any]) -> bool:
    return m["segments"] > 0


def has_head(m: Mapping[str, Any]) -> bool:
    """The file has the masked-language-model head (``task: fill-mask``), not the encoder alone."""
    return bool(m["output_transform"])


def _linear(ours: str, module: str, d_in: str, d_out: str) -> tuple[Param, Param]:
    """nn.Linear's (out, in) weight transposed to our (in, out) ``W_…``, and its bias ``b_…``."""
    stage, name = ours.split("/")
    return (
        Param(f"{stage}/W_{name}", Tensor(f"{module}.weight", d_out, d_in), transposed=True),
        Param(f"{stage}/b_{name}", Tensor(f"{module}.bias", d_out)),
    )


def _norm(stage: str, module: str) -> tuple[Param, Param]:
    """A LayerNorm's rows: its weight as ``gamma``, its bias as ``beta``."""
    return (
        Param(f"{stage}/gamma", Tensor(f"{module}.weight", "d")),
        Param(f"{stage}/beta", Tensor(f"{module}.bias", "d")),
    )


def _qkv(query: str, key: str, value: str) -> tuple[Param, Param]:
    """W_QKV = [W_Q | W_K | W_V], b_QKV = [b_Q | b_K | b_V]: head h, the h-th d_k columns of each third."""
    modules = (query, key, value)
    return (
        Param("self-attention/W_QKV", *(Tensor(f"{m}.weight", "d", "d") for m in modules), transposed=True),
        Param("self-attention/b_QKV", *(Tensor(f"{m}.bias", "d") for m in modules)),
    )


def _name_map(
    embeddings: tuple[Param, ...], layer: str, attention: tuple[str, str, str, str], norm_1: str,
    ff: tuple[str, str], norm_2: str, head: tuple[str, str],
) -> tuple[Block, ...]:  # fmt: skip
    """A family's map: the embedding's tables and norm, each layer (post-norm: add-norm-k after
    sublayer k), the MLM head's dense layer and norm (when the file has the head). The word table
    and the output layer are _convert's own lines (tied, and named twice in some files)."""
    query, key, value, out = attention
    return (
        Block(ENCODER, embeddings),
        Block(ENCODER, prefix=layer, layers="layers", params=(
            *_qkv(query, key, value),
            *_linear("self-attention/O", out, "d", "d"),
            *_norm("add-norm-1", norm_1),
            *_linear("feed-forward/1", ff[0], "d", "ff"),
            *_linear("feed-forward/2", ff[1], "ff", "d"),
            *_norm("add-norm-2", norm_2),
        )),
        Block(OUTPUT, (*_linear("transform/dense", head[0], "d", "d"), *_norm("transform", head[1])),
              when=has_head, in_body=False),
    )  # fmt: skip


_BERT_BODY = dict(
    embeddings=(
        Param("embedding/P", Tensor("embeddings.position_embeddings.weight", "positions", "d")),
        Param("embedding/T", Tensor("embeddings.token_type_embeddings.weight", "segments", "d"),
              when=has_segments),
        *_norm("embedding-norm", "embeddings.LayerNorm"),
    ),
    layer="encoder.layer.{n}.",
    attention=(
        "attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
    ),
    norm_1="attention.output.LayerNorm", ff=("intermediate.dense", "output.dense"), norm_2="output.LayerNorm",
)  # fmt: skip


def sizes(m: Mapping[str, Any]) -> dict[str, int]:
    """The map's size names, from the model's keys."""
    return {"d": m["d_model"], "ff": m["d_ff"], "layers": m["num_encoder_layers"],
            "positions": m["max_positions"], "segments": m["segments"]}  # fmt: skip


@dataclass(frozen=True)
class BertFamily(Family):
    """A BERT-like family's record: what its files hold besides the map's rows."""

    keys: Mapping[str, str]  # config.json's key for each size this converter reads, by what it means
    body: str  # the base model's prefix in a head model's file
    word: str  # the word table, under the body: E
    decoder: str  # the head's output layer: its weight is E (tied), its bias the output bias
    bias: str | None  # the head's own bias parameter, which transformers ties to decoder.bias
    pooler: bool  # the file may hold the body's pooler.dense (d, d): accepted, not shown
    next_sentence: bool  # … and the next-sentence head cls.seq_relationship (2, d): accepted, not shown
    buffers: tuple[str, ...]  # under the body: (1, max_position_embeddings) integer buffers

    @property
    def head(self) -> str:
        """The head's first tensor: the file has the MLM head exactly when it holds it."""
        return self.name_map[-1].params[0].theirs[0].name


@dataclass
class BertCheckpoint:
    """A BERT-family checkpoint in this project's terms (the fields of ``checkpoint.Checkpoint``).

    Nothing is generated: no start token, no end token, nothing banned or forced. ``mask_token``
    and ``mask_id`` are the blank the prompt holds (``[MASK]``, RoBERTa's ``<mask>``);
    ``mlm_head`` says whether the file has the head that fills it (``task: fill-mask``) or is
    the encoder alone (``task: encode``).
    """

    family: BertFamily
    model: dict[str, Any]
    weights: dict[str, np.ndarray]
    tokenizer: BPETokenizer
    pad_token_id: int | None
    mask_token: str | None
    mask_id: int | None
    mlm_head: bool
    source: str
    decoder_start_token_id: None = None
    eos_token_id: None = None
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    forced_eos_token_id: int | None = None


def load_bert(path: str | Path, dtype: str | np.dtype = "float32", name: str | None = None) -> BertCheckpoint:
    """The BERT, RoBERTa or DistilBERT checkpoint in folder ``path``, converted; ``name`` (a hub id)
    is used in ``source``.

    What reading and converting allocate is charged to one ``Budget`` before it is allocated."""
    folder = Path(path)
    with out_of_memory(folder):
        return _load(folder, float_dtype(dtype), name)


def _load(folder: Path, dtype: np.dtype, name: str | None) -> BertCheckpoint:
    config = read_config(folder)
    family: BertFamily = config["family"]
    budget = Budget()
    tensors, file = read_weights(folder, budget)
    head = family.head in tensors
    if family is ROBERTA and config["hidden_act"] != "gelu" and head:
        raise CheckpointError(
            f"{folder / 'config.json'}: hidden_act is {shown(config['hidden_act'])}, but RoBERTa's MLM "
            "head always uses gelu: two activations in one model are not supported"
        )
    offset = config["pad_token_id"] + 1 if family is ROBERTA else 0
    model = {
        "d_model": config["d_model"],
        "num_heads": config["num_heads"],
        "d_ff": config["d_ff"],
        "num_encoder_layers": config["layers"],
        "num_decoder_layers": 0,
        "task": "fill-mask" if head else "encode",
        "segments": config["segments"],
        "embedding_norm": True,
        "output_transform": head,
        "position_offset": offset,
        "norm_first": False,
        "final_norm": False,
        "activation": HF_ACTIVATIONS[config["activation"]],
        "positional_encoding": "learned",
        "max_positions": config["max_position_embeddings"],
        "tie_embeddings": head and config["tie_word_embeddings"],
        "output_bias": True,
        "attention_bias": True,
        "scale_embeddings": False,
        "layer_norm_eps": config["eps"],
    }
    weights = _convert(tensors, config, model, dtype, f"{folder / file}", budget)
    tokenizer = family.tokenizer(folder, size=config["vocab_size"])
    if head and tokenizer.mask_id is None:
        raise CheckpointError(
            f"{folder}: the tokenizer has no mask token (tokenizer_config.json's mask_token, in its "
            "vocabulary): a fill-mask model needs the blank it fills"
        )
    if head and tokenizer.mask_id >= tokenizer.rows:  # a prompt could never hold its blank
        raise CheckpointError(
            f"{folder}: the mask token {tokenizer.mask_token!r} is id {tokenizer.mask_id}, but the embedding "
            f"table only has {tokenizer.rows} rows: a fill-mask model needs the blank it fills"
        )
    return BertCheckpoint(
        family=family,
        model=model,
        weights=weights,
        tokenizer=tokenizer,
        pad_token_id=config["pad_token_id"],
        mask_token=tokenizer.mask_token,
        mask_id=tokenizer.mask_id,
        mlm_head=head,
        source=f"{name or folder} ({file})",
    )


def _positive_int(config: dict[str, Any], key: str, path: Path) -> int:
    value = config[key]
    if type(value) is not int or value < 1:
        raise CheckpointError(f"{path}: {key} is {shown(value)}, not a positive integer")
    return value


def read_config(folder: Path) -> dict[str, Any]:
    """config.json with its family's defaults filled in, every value this converter uses checked.

    Adds ``family`` (the record of its model_type) and, whatever the family calls them:
    ``d_model``, ``num_heads``, ``d_ff``, ``layers``, ``activation`` (the config's name for it),
    ``segments`` (rows of T: 0 for DistilBERT) and ``eps``."""
    path = folder / "config.json"
    raw = read_config_json(folder)
    family = find(FAMILIES, raw.get("model_type"))  # compared, never hashed: a list is no model_type
    if not isinstance(family, BertFamily):
        raise CheckpointError(
            f"{path}: model_type is {shown(raw.get('model_type'))}; this converter reads "
            f"{', '.join(f.model_type for f in FAMILIES)}"
        )
    config = with_defaults(family, raw, keep_none=("pad_token_id",))
    config["family"] = family
    keys = family.keys
    for ours, theirs in keys.items():
        config[ours] = config[theirs]
    sizes = [keys[k] for k in ("d_model", "num_heads", "d_ff", "layers")]
    for key in ("vocab_size", "max_position_embeddings", *sizes):
        _positive_int(config, key, path)
    d, heads = config["d_model"], config["num_heads"]
    if d % heads:
        raise CheckpointError(
            f"{path}: {keys['d_model']} ({d}) is not divisible by {keys['num_heads']} ({heads})"
        )
    activation = config["activation"]
    if not isinstance(activation, str) or activation not in HF_ACTIVATIONS:  # a list is not hashable
        raise CheckpointError(
            f"{path}: {keys['activation']} {shown(activation)} is not supported "
            f"(supported: {', '.join(HF_ACTIVATIONS)})"
        )
    if type(config["tie_word_embeddings"]) is not bool:
        raise CheckpointError(
            f"{path}: tie_word_embeddings is {shown(config['tie_word_embeddings'])}, not true or false"
        )
    pad = config["pad_token_id"]
    if pad is not None and (type(pad) is not int or pad < 0):
        raise CheckpointError(f"{path}: pad_token_id is {shown(pad)}, not a token id")
    if family is DISTILBERT:
        config["segments"], config["eps"] = 0, DISTILBERT_EPS
        return config
    _bert_like(config, path)
    return config


def _bert_like(config: dict[str, Any], path: Path) -> None:
    """BERT's and RoBERTa's own keys checked: the segment table, the eps, what is refused."""
    config["segments"] = _positive_int(config, "type_vocab_size", path)
    eps = config["layer_norm_eps"]
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1:
        raise CheckpointError(f"{path}: layer_norm_eps is {shown(eps)}, not a small positive number")
    config["eps"] = float(eps)
    kind = config["position_embedding_type"]
    if kind != "absolute":
        raise CheckpointError(
            f"{path}: position_embedding_type is {shown(kind)}: only 'absolute' (a learned table P) "
            "is supported"
        )
    for key, what in (("is_decoder", "BERT as a decoder (a causal mask) is"),
                      ("add_cross_attention", "cross-attention layers are")):  # fmt: skip
        if config[key] is not False:
            raise CheckpointError(f"{path}: {key} is {shown(config[key])}: {what} not supported")
    if config["family"] is ROBERTA:
        pad = config["pad_token_id"]
        if pad is None:
            raise CheckpointError(
                f"{path}: pad_token_id is null, but RoBERTa's positions start at pad_token_id + 1"
            )
        if pad + 1 >= config["max_position_embeddings"]:
            raise CheckpointError(
                f"{path}: pad_token_id is {pad}: RoBERTa's positions start at pad_token_id + 1 = {pad + 1}, "
                f"past the {config['max_position_embeddings']} rows of the position table"
            )


def _stored(name: str, names: set[str]) -> str:
    """A tensor's name as the file has it: a LayerNorm's ``weight`` and ``bias``, or the ``gamma``
    and ``beta`` of older files (transformers renames ``LayerNorm.gamma``/``LayerNorm.beta``; only
    modules so named)."""
    module, _, kind = name.rpartition(".")
    renamed = kind in ("weight", "bias") and module.endswith("LayerNorm")
    if renamed and f"{module}.gamma" in names and f"{module}.weight" not in names:
        return f"{module}.{ {'weight': 'gamma', 'bias': 'beta'}[kind] }"
    return name


def _convert(
    tensors: Mapping[str, np.ndarray], config: dict[str, Any], model: dict[str, Any], dtype: np.dtype,
    where: str, budget: Budget,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Our named weights from the family's tensors (the word table, the map walked forward, the
    output layer), every shape checked against config.json first, and the layers and the memory
    counted before the first is made."""
    family: BertFamily = config["family"]
    d, vocab, n_pos = config["d_model"], config["vocab_size"], config["max_position_embeddings"]
    names = set(tensors)
    # A head model's file (save_pretrained of *ForMaskedLM, the hub's BertForPreTraining) names its
    # body bert.…; a base model's file (BertModel) has no prefix. One layout per file.
    body = family.body if any(n.startswith(family.body) for n in names) else ""
    check_layers(names, first_tensor(family.stacks[0], body), family.keys["layers"], config["layers"], where)
    taker = Taker(tensors, where, stored=functools.partial(_stored, names=names))
    taker.charge(budget, dtype)
    take = taker.take

    E = take(f"{body}{family.word}.weight", (vocab, d), ("vocab_size", family.keys["d_model"]))
    weights = {f"{stage_id(ENCODER, 'embedding')}/E": np.ascontiguousarray(E, dtype=dtype)}
    weights |= convert(family.rows(model, body), taker, dtype)
    if model["output_transform"]:
        output = _output_layer(take, names, family, E, config, dtype, where, body)
        weights |= {f"{stage_id(OUTPUT, 'logits')}/{local}": w for local, w in output.items()}
    for buffer in family.buffers:  # older files: the positions 0, 1, … and segment 0, made by the model here
        if body + buffer in names:
            take(body + buffer, (1, n_pos))  # its shape checked, its values not used
    # The hub's BertForPreTraining files: the pooler (tanh of a dense layer on [CLS]) and the
    # next-sentence head on it; they predict no token, so they are not shown.
    others = [(f"{body}pooler.dense", d)] * family.pooler + [
        ("cls.seq_relationship", 2)
    ] * family.next_sentence
    for module, rows in others:
        if f"{module}.weight" in names or f"{module}.bias" in names:
            take(f"{module}.weight", (rows, d))  # the shapes checked, the values not used
            take(f"{module}.bias", (rows,))
    taker.refuse_unused(family.name)
    check_finite(weights, where)
    return weights


def _output_layer(
    take: Any, names: set[str], L: BertFamily, E: np.ndarray, config: dict[str, Any], dtype: np.dtype,
    where: str, body: str,
) -> dict[str, np.ndarray]:  # fmt: skip
    """The output layer's W (only when not tied: W = Eᵀ otherwise) and b.

    The head's forward applies ``decoder`` (nn.Linear, with a bias). Tied (``tie_word_embeddings``),
    transformers makes ``decoder.weight`` the embedding table and ``decoder.bias`` the head's own
    ``bias``: a file may hold either or both, and both must then agree. Untied, ``decoder`` is its
    own layer, and the head's ``bias`` (if the file has it) is not used."""
    vocab, d = config["vocab_size"], config["d_model"]
    tied = config["tie_word_embeddings"]
    weight, bias = f"{L.decoder}.weight", f"{L.decoder}.bias"
    out: dict[str, np.ndarray] = {}
    if weight in names:
        W = take(weight, (vocab, d))
        if tied and not np.array_equal(W, E):
            raise CheckpointError(
                f"{where}: {weight} differs from {body}{L.word}.weight, which config.json says it is "
                "(tie_word_embeddings)"
            )
        if not tied:
            out["W"] = transposed(W, dtype)
    elif not tied:
        raise CheckpointError(f"{where}: missing tensor {weight} (tie_word_embeddings is false)")
    if L.bias is None:  # DistilBERT: the projector's own bias, tied or not
        b = take(bias, (vocab,))
    elif tied:  # one parameter under two names: either, or both when they agree
        present = [n for n in (L.bias, bias) if n in names] or [L.bias]
        b, *other = (take(n, (vocab,)) for n in present)
        if other and not np.array_equal(b, other[0]):
            raise CheckpointError(
                f"{where}: {bias} differs from {L.bias}, which transformers ties it to (tie_word_embeddings)"
            )
    else:
        if bias not in names:
            raise CheckpointError(
                f"{where}: missing tensor {bias} (tie_word_embeddings is false: the output layer's own bias)"
            )
        b = take(bias, (vocab,))
        if L.bias in names:
            take(L.bias, (vocab,))  # in transformers' model, but not in its forward: shape checked only
    out["b"] = np.ascontiguousarray(b, dtype=dtype)
    return out


BERT = BertFamily(
    model_type="bert", name="BERT", architecture="encoder-only", transformers="BertForMaskedLM",
    tokenizer=WordPieceTokenizer,
    defaults={**_BERT_LIKE, "vocab_size": 30522, "pad_token_id": 0},
    name_map=_name_map(
        **_BERT_BODY, head=("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm")
    ),
    sizes=sizes, size_keys=_size_keys(_BERT_KEYS), load=load_bert, keys=_BERT_KEYS, body="bert.",
    word="embeddings.word_embeddings",
    decoder="cls.predictions.decoder", bias="cls.predictions.bias", pooler=True, next_sentence=True,
    buffers=("embeddings.position_ids", "embeddings.token_type_ids"),
)  # fmt: skip
ROBERTA = dataclasses.replace(
    BERT, model_type="roberta", name="RoBERTa", transformers="RobertaForMaskedLM", tokenizer=BPETokenizer,
    defaults={**_BERT_LIKE, "vocab_size": 50265, "pad_token_id": 1},
    name_map=_name_map(**_BERT_BODY, head=("lm_head.dense", "lm_head.layer_norm")),
    body="roberta.", decoder="lm_head.decoder", bias="lm_head.bias", next_sentence=False,
)  # fmt: skip
DISTILBERT = BertFamily(
    model_type="distilbert", name="DistilBERT", architecture="encoder-only",
    transformers="DistilBertForMaskedLM", tokenizer=WordPieceTokenizer,
    defaults={
        "vocab_size": 30522, "dim": 768, "n_heads": 12, "hidden_dim": 3072, "n_layers": 6,
        "max_position_embeddings": 512, "activation": "gelu", "pad_token_id": 0,
        "tie_word_embeddings": True, "sinusoidal_pos_embds": False,
    },
    name_map=_name_map(
        embeddings=(
            Param("embedding/P", Tensor("embeddings.position_embeddings.weight", "positions", "d")),
            *_norm("embedding-norm", "embeddings.LayerNorm"),
        ),
        layer="transformer.layer.{n}.",
        attention=("attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin"),
        norm_1="sa_layer_norm", ff=("ffn.lin1", "ffn.lin2"), norm_2="output_layer_norm",
        head=("vocab_transform", "vocab_layer_norm"),
    ),
    sizes=sizes, size_keys=_size_keys(_DISTILBERT_KEYS), load=load_bert, keys=_DISTILBERT_KEYS,
    body="distilbert.", word="embeddings.word_embeddings", decoder="vocab_projector", bias=None,
    pooler=False, next_sentence=False, buffers=("embeddings.position_ids",),
)  # fmt: skip
FAMILIES = (BERT, ROBERTA, DISTILBERT)
