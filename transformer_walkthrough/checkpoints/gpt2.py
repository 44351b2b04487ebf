"""A GPT-2 checkpoint converted to this project's parameter names and layout.

GPT-2 is the decoder of Figure 1 alone, with the conventions the config names, each read from
``config.json`` rather than assumed: pre-norm layers (``x + Sublayer(LayerNorm(x))``) and a
LayerNorm atop the stack (``ln_f``), the tanh form of GELU (``activation_function: gelu_new``), a
learned position table ``wpe`` instead of sinusoids, embeddings not scaled by √d_model, biases on
every projection, and the output layer tied to the embedding table ``wte`` with no bias.

GPT-2's projections are ``Conv1D`` modules, whose weight is already stored ``(d_in, d_out)`` and
applied as ``x·W + b``: this project's layout, so nothing is transposed. ``attn.c_attn`` is
``[W_Q | W_K | W_V]`` side by side, head h using the h-th block of d_k columns of each third,
exactly our ``W_QKV``.

Two layouts of the same tensors are read: the hub's (``wte.weight``, ``h.0.attn.c_attn.weight``,
with the causal mask saved as a buffer ``h.N.attn.bias`` and, in older files, ``h.N.attn.masked_bias``)
and ``save_pretrained``'s (``transformer.wte.weight``, …, no buffers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import HF_ACTIVATIONS  # activation_function's names for ours
from ..model.architecture import DECODER
from .bpe import BPETokenizer
from .budget import Budget, out_of_memory
from .errors import CheckpointError
from .family import Block, Family, Param, Tensor, check_finite, convert, first_tensor, with_defaults
from .jsonfile import shown
from .tensors import Taker, check_layers, float_dtype, read_config_json, read_weights

# GPT2Config's defaults (transformers), for the keys an older config.json leaves out.
CONFIG_DEFAULTS: dict[str, Any] = {
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_inner": None,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
    "bos_token_id": 50256,
    "eos_token_id": 50256,
}

# Options of GPT2Config that change the arithmetic in ways this project does not model: the value
# that keeps GPT-2's arithmetic, and why another is refused.
UNSUPPORTED = {
    "scale_attn_weights": (True, "attention scores not divided by √d_k"),
    "scale_attn_by_inverse_layer_idx": (False, "attention scores divided by the layer's number"),
    "add_cross_attention": (False, "cross-attention layers"),
}


@dataclass
class GPT2Checkpoint:
    """A GPT-2 checkpoint in this project's terms: model config keys, named weights, tokenizer.

    The fields of ``checkpoint.Checkpoint``: GPT-2 has no start token (the prompt's ids are the
    decoder's input as they are: ``decoder_start_token_id`` is None), pads with ``<|endoftext|>``
    (its eos), and its generation bans nothing and forces nothing.
    """

    family: Family
    model: dict[str, Any]
    weights: dict[str, np.ndarray]
    tokenizer: BPETokenizer
    bos_token_id: int | None
    eos_token_id: int | None
    source: str
    decoder_start_token_id: None = None
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    forced_eos_token_id: int | None = None

    @property
    def pad_token_id(self) -> int | None:
        """GPT-2 has no pad token; transformers pads with eos, and so does this."""
        return self.eos_token_id


# Our parameter <- their tensor (after the ``transformer.`` prefix of save_pretrained's files).
# Their weights are Conv1D's, already (d_in, d_out): none is transposed, and attn.c_attn is W_QKV.
# GPT-2 is pre-norm: ln_1 before the attention (sublayer 1), ln_2 before the MLP (sublayer 2).
NAME_MAP = (
    Block(DECODER, prefix="h.{n}.", layers="layers", params=(
        Param("norm-1/gamma", Tensor("ln_1.weight", "d")),
        Param("norm-1/beta", Tensor("ln_1.bias", "d")),
        Param("masked-attention/W_QKV", Tensor("attn.c_attn.weight", "d", "qkv")),
        Param("masked-attention/b_QKV", Tensor("attn.c_attn.bias", "qkv")),
        Param("masked-attention/W_O", Tensor("attn.c_proj.weight", "d", "d")),
        Param("masked-attention/b_O", Tensor("attn.c_proj.bias", "d")),
        Param("norm-2/gamma", Tensor("ln_2.weight", "d")),
        Param("norm-2/beta", Tensor("ln_2.bias", "d")),
        Param("feed-forward/W_1", Tensor("mlp.c_fc.weight", "d", "ff")),
        Param("feed-forward/b_1", Tensor("mlp.c_fc.bias", "ff")),
        Param("feed-forward/W_2", Tensor("mlp.c_proj.weight", "ff", "d")),
        Param("feed-forward/b_2", Tensor("mlp.c_proj.bias", "d")),
    )),
    Block(DECODER, (
        Param("final-norm/gamma", Tensor("ln_f.weight", "d")),
        Param("final-norm/beta", Tensor("ln_f.bias", "d")),
    )),
)  # fmt: skip


def sizes(m: Mapping[str, Any]) -> dict[str, int]:
    """The map's size names, from the model's keys."""
    d = m["d_model"]
    return {"d": d, "qkv": 3 * d, "ff": m["d_ff"], "layers": m["num_decoder_layers"]}


def load_gpt2(path: str | Path, dtype: str | np.dtype = "float32", name: str | None = None) -> GPT2Checkpoint:
    """The GPT-2 checkpoint in folder ``path``, converted; ``name`` (a hub id) is used in ``source``.

    What reading and converting allocate is charged to one ``Budget`` before it is allocated."""
    folder = Path(path)
    with out_of_memory(folder):
        return _load(folder, float_dtype(dtype), name)


def _load(folder: Path, dtype: np.dtype, name: str | None) -> GPT2Checkpoint:
    config = _read_config(folder)
    d_model = config["n_embd"]
    model = {
        "d_model": d_model,
        "num_heads": config["n_head"],
        "d_ff": config["n_inner"] or 4 * d_model,
        "num_encoder_layers": 0,
        "num_decoder_layers": config["n_layer"],
        "norm_first": True,
        "final_norm": True,
        "activation": HF_ACTIVATIONS[config["activation_function"]],
        "positional_encoding": "learned",
        "max_positions": config["n_positions"],
        "tie_embeddings": config["tie_word_embeddings"],
        "output_bias": False,
        "attention_bias": True,
        "scale_embeddings": False,
        "layer_norm_eps": float(config["layer_norm_epsilon"]),
    }
    budget = Budget()
    tensors, file = read_weights(folder, budget)
    weights = _convert(tensors, config, model, dtype, f"{folder / file}", budget)
    vocab_size = weights["decoder.embedding/E"].shape[0]
    tokenizer = BPETokenizer(folder, size=vocab_size)
    return GPT2Checkpoint(
        family=GPT2,
        model=model,
        weights=weights,
        tokenizer=tokenizer,
        bos_token_id=config["bos_token_id"],
        eos_token_id=config["eos_token_id"],
        source=f"{name or folder} ({file})",
    )


def _read_config(folder: Path) -> dict[str, Any]:
    """config.json with GPT2Config's defaults filled in, every value this converter uses checked."""
    path = folder / "config.json"
    raw = read_config_json(folder)
    if raw.get("model_type") != GPT2.model_type:
        raise CheckpointError(
            f"{path}: model_type is {shown(raw.get('model_type'))}; only 'gpt2' checkpoints are read here"
        )
    keep_none = {"n_inner", "bos_token_id", "eos_token_id"}
    config = with_defaults(GPT2, raw, keep_none)
    for key in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
        if type(config[key]) is not int or config[key] < 1:
            raise CheckpointError(f"{path}: {key} is {shown(config[key])}, not a positive integer")
    if config["n_inner"] is not None and (type(config["n_inner"]) is not int or config["n_inner"] < 1):
        raise CheckpointError(
            f"{path}: n_inner is {shown(config['n_inner'])}, not a positive integer or null"
        )
    if config["n_embd"] % config["n_head"]:
        raise CheckpointError(
            f"{path}: n_embd ({config['n_embd']}) is not divisible by n_head ({config['n_head']})"
        )
    eps = config["layer_norm_epsilon"]
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1:
        raise CheckpointError(f"{path}: layer_norm_epsilon is {shown(eps)}, not a small positive number")
    for key in ("bos_token_id", "eos_token_id"):
        if config[key] is not None and (type(config[key]) is not int or config[key] < 0):
            raise CheckpointError(f"{path}: {key} is {shown(config[key])}, not a token id")
    if type(config["tie_word_embeddings"]) is not bool:
        raise CheckpointError(
            f"{path}: tie_word_embeddings is {shown(config['tie_word_embeddings'])}, not true or false"
        )
    activation = config["activation_function"]
    if not isinstance(activation, str) or activation not in HF_ACTIVATIONS:  # a list is not hashable
        raise CheckpointError(
            f"{path}: activation_function {shown(activation)} is not supported "
            f"(supported: {', '.join(HF_ACTIVATIONS)})"
        )
    for key, (value, what) in UNSUPPORTED.items():
        if config[key] != value:
            raise CheckpointError(f"{path}: {key} is {shown(config[key])}: {what} are not supported")
    return config


def _convert(
    tensors: Mapping[str, np.ndarray], config: dict[str, Any], model: dict[str, Any], dtype: np.dtype,
    where: str, budget: Budget,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Our named weights from GPT-2's tensors (``NAME_MAP`` walked forward, then the tables), every
    shape checked against config.json first, and the layers and the memory counted before the
    first row is made."""
    d, n_pos, vocab = config["n_embd"], config["n_positions"], config["vocab_size"]
    names = set(tensors)
    # save_pretrained writes GPT2LMHeadModel's names (transformer.wte.weight, lm_head.weight); the
    # hub's files hold GPT2Model's (wte.weight). One layout per file: a mixture is not GPT-2's.
    prefix = "transformer." if any(n.startswith("transformer.") for n in names) else ""
    check_layers(names, first_tensor(GPT2.stacks[0], prefix), "n_layer", config["n_layer"], where)
    taker = Taker(tensors, where)
    taker.charge(budget, dtype)
    take = taker.take
    weights = convert(GPT2.rows(model, prefix), taker, dtype)

    wte = take(f"{prefix}wte.weight", (vocab, d), ("vocab_size", "n_embd"))
    weights["decoder.embedding/E"] = np.ascontiguousarray(wte, dtype=dtype)
    weights["decoder.positional-encoding/P"] = np.ascontiguousarray(
        take(f"{prefix}wpe.weight", (n_pos, d), ("n_positions", "n_embd")), dtype=dtype
    )
    tied = config["tie_word_embeddings"]
    if "lm_head.weight" in names:
        lm_head = take("lm_head.weight", (vocab, d), ("vocab_size", "n_embd"))
        if tied and not np.array_equal(lm_head, wte):
            raise CheckpointError(
                f"{where}: lm_head.weight differs from {prefix}wte.weight, which config.json says "
                "it is (tie_word_embeddings)"
            )
        if not tied:
            weights["output.logits/W"] = np.ascontiguousarray(lm_head.T, dtype=dtype)
    elif not tied:
        raise CheckpointError(f"{where}: missing tensor lm_head.weight (tie_word_embeddings is false)")

    # The causal mask as old versions saved it (a lower-triangular table, and the -10⁴ it filled
    # with): this project makes its mask, as transformers now does; only the shapes are checked.
    for n in range(config["n_layer"]):
        for buffer, want in (("bias", (1, 1, n_pos, n_pos)), ("masked_bias", ())):
            name = f"{prefix}h.{n}.attn.{buffer}"
            if name in names:
                take(name, want)  # its shape checked, its values not used
    taker.refuse_unused(GPT2.name)
    check_finite(weights, where)
    return weights


GPT2 = Family(
    model_type="gpt2",
    name="GPT-2",
    architecture="decoder-only",
    transformers="GPT2LMHeadModel",
    tokenizer=BPETokenizer,
    defaults=CONFIG_DEFAULTS,
    name_map=NAME_MAP,
    sizes=sizes,
    size_keys={"d": "n_embd", "qkv": "3 × n_embd", "ff": "n_inner"},
    context_key="n_positions",
    load=load_gpt2,
)
FAMILIES = (GPT2,)
