"""The YAML config: one frozen dataclass per section, built and checked by ``load_config``.

Every key is optional; a missing key takes the default below, which is the article's example.
The dataclasses are the specification: their fields are the only keys a file may use, their
types are checked, and each field's ``doc`` becomes a comment in ``walkthrough config``.
Invariants (``d_model`` divisible by ``num_heads``, every word in the vocabulary, …) are checked
in ``__post_init__``, so a config built in Python is held to the same rules as one read from YAML.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from .errors import ConfigError, close_matches

START, END = "<start>", "<end>"
SPECIAL_TOKENS = (START, END)
# A fill-mask model's (BERT's): the sentence is read between [CLS] and [SEP], a blank is [MASK].
CLS, SEP, MASK = "[CLS]", "[SEP]", "[MASK]"
FILL_MASK_TOKENS = (CLS, SEP, MASK)
MAX_FILE_BYTES = 4_000_000  # a config is a page of YAML; a 50,257-word vocabulary is about 0.5 MB
QUOTE = 40  # characters of a value quoted in a message
MAX_DATASET = 1_000  # training.dataset's pairs: the toy learns its sentence and a few more


def _doc(text: str, default: Any) -> Any:
    return field(default=default, metadata={"doc": text})


# Each convention's values, defined here once, each with its note in `walkthrough config`. The
# field's type in ModelConfig (so its check and its message) is made from them. The export schema,
# the converters, the test strategies and every dispatch on a value (functional, kinds, verify,
# explain, the torch reference) are tested against them (test_conventions.py, test_export.py): a
# value added here and forgotten there fails a test, and a dispatch given a value it lacks raises.
OUTPUT_HEADS = {"per-position": "(the paper)", "flatten": "(the article's literal step)"}
FINAL_NORMS = ("auto", True, False)
ATTENTION_BIASES = (False, True, "qkv")  # qkv: on the projections only, none on W_O (Qwen2)
ACTIVATIONS = {"relu": "(the paper)", "gelu": "(erf)", "gelu-tanh": "(GPT-2)", "silu": "= x·σ(x) (Marian)"}
FEED_FORWARDS = {
    "standard": "act(X·W_1)·W_2 (the paper)",
    "gated": "(act(X·W_gate) ⊙ X·W_up)·W_down (silu: SwiGLU, Llama)",
}
NORMS = {"layernorm": "(the paper)", "rmsnorm": "= gamma ⊙ x / √(mean(x²) + eps), no beta (T5, Llama)"}
POSITIONAL_ENCODINGS = {
    "sinusoidal": "(the paper)",
    "sinusoidal-halves": "(Marian)",
    "learned": "table P (GPT-2)",
    "rotary": "each head's Q, K turned by pos (Llama)",
}
# transformers' rope_type: how rotary's frequencies are stretched past the length a model was
# trained on (rope_factor and, for llama3, the three rope_* fields below).
ROPE_SCALINGS = {
    "default": "(none)",
    "linear": "every θ_i / rope_factor",
    "llama3": "the slow pairs' θ_i / rope_factor, the fast ones kept, a blend between (Llama 3.1)",
}
# What the model is trained to do, so what its output layer predicts and for which rows.
TASKS = {
    "next-token": "each decoder position predicts the token after it (the paper, GPT)",
    "fill-mask": "encoder-only: each [MASK] predicts the word hidden there (BERT)",
    "encode": "encoder-only, no output layer: the vectors alone (a checkpoint without its MLM head)",
}
DTYPES = {"float64": "(exact to print)", "float32": "(fast when large)"}
# Positions applied inside attention, to the queries and keys, rather than added to the embedding:
# such a model has no positional-encoding stage.
ROTATED_POSITIONS: tuple[str, ...] = ("rotary",)

# The switches whose parameters have other names or shapes, with their values: a --weights file
# made under another setting of one of them is recognised, and the message says which.
SWITCHES: dict[str, tuple[Any, ...]] = {
    "norm_first": (False, True),
    "norm": tuple(NORMS),
    "final_norm": FINAL_NORMS,
    "positional_encoding": tuple(POSITIONAL_ENCODINGS),
    "tie_embeddings": (False, True),
    "attention_bias": ATTENTION_BIASES,
    "output_bias": (True, False),
    "feed_forward": tuple(FEED_FORWARDS),
    "ffn_bias": (True, False),
    "segments": (0, 2),
    "embedding_norm": (False, True),
    "output_transform": (False, True),
}

# What PyTorch's own transformer layers can be (``verify --against torch``), by field: any other
# value has no counterpart there, and is compared with transformers' models in the tests instead.
TORCH_LAYERS: dict[str, tuple[Any, ...]] = {
    "output_head": ("per-position",),
    "num_kv_heads": (None,),  # nn.MultiheadAttention: as many key/value heads as query heads
    "head_dim": (None,),  # and d_model / num_heads dimensions each
    "sliding_window": (None,),
    "attention_bias": (False, True),
    "positional_encoding": tuple(p for p in POSITIONAL_ENCODINGS if p not in ROTATED_POSITIONS),
    "feed_forward": ("standard",),
    "ffn_bias": (True,),  # nn.TransformerEncoderLayer's bias=False drops the LayerNorms' too
    "norm": ("layernorm",),
    "task": ("next-token",),  # encoder-only models are compared with transformers' BERT instead
    "segments": (0,),
    "embedding_norm": (False,),
    "output_transform": (False,),
    "position_offset": (0,),
}

# Hugging Face's names for our activations (config.json's activation_function), read by every
# checkpoint converter; any other name is refused, never approximated.
HF_ACTIVATIONS = {
    "gelu_new": "gelu-tanh",
    "gelu_pytorch_tanh": "gelu-tanh",
    "gelu": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


def _choice(notes: dict[str, str], default: str, sep: str = ", ") -> Any:
    """A field whose comment names each of its values with its note; its type, ``Literal[tuple(notes)]``,
    takes only them (``_coerce``)."""
    return _doc(sep.join(f"{value} {note}" for value, note in notes.items()), default)


def tokenize(sentence: str) -> list[str]:
    """Lower-case words with the punctuation stripped: "The cat is." -> ["the", "cat", "is"]."""
    return re.findall(r"[\w']+", sentence.lower())


class _Checked:
    """Checks each field's value against its annotation; the section name prefixes messages."""

    _section: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = _coerce(getattr(self, f.name), hints[f.name], self._key(f.name))
            object.__setattr__(self, f.name, value)

    def _key(self, name: str) -> str:
        return f"{self._section}.{name}" if self._section else name

    def _require(self, ok: bool, name: str, message: str) -> None:
        if not ok:
            raise ConfigError(f"{self._key(name)}: {message}")


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Return ``value`` as type ``hint``, or raise ConfigError naming ``key``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # X | None
        if value is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)]
        return _coerce(value, hint, key)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: must be one of {', '.join(map(str, args))}; got {quote(value)}")
        return value
    if origin is tuple:  # tuple[str, ...], or a fixed length: tuple[str, str]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {_describe(value)}")
        if Ellipsis not in args and len(value) != len(args):
            raise ConfigError(f"{key}: expected a list of {len(args)}, got {len(value)}: {quote(value)}")
        if args == (str, Ellipsis) and all(type(v) is str and v.isprintable() for v in value):
            return tuple(value)  # the common case, a long vocabulary, in one pass
        kinds = [args[0]] * len(value) if Ellipsis in args else list(args)
        return tuple(_coerce(v, t, f"{key}[{i}]") for i, (v, t) in enumerate(zip(value, kinds, strict=True)))
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        raise ConfigError(f"{key}: expected a section of keys, got {_describe(value)}")
    if hint is float:
        # PyYAML reads 1e-5 (no dot) as a string; accept it as the number it plainly is.
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an integer too large for a float
                number = math.inf
            if not math.isfinite(number):
                raise ConfigError(f"{key}: must be a finite number, got {quote(value)}")
            return number
        raise ConfigError(f"{key}: expected a number, got {_describe(value)}")
    if hint is str and isinstance(value, str) and not value.isprintable():
        bad = next((ch for ch in value if _is_control(ch)), None)
        if bad is not None:
            raise ConfigError(f"{key}: contains the control character {bad!r}; got {quote(value)}")
        return value
    # bool is a subclass of int in Python, but `d_model: true` is a mistake, not a 1.
    if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    names = {int: "an integer", bool: "true or false", str: "a string"}
    raise ConfigError(f"{key}: expected {names.get(hint, hint.__name__)}, got {_describe(value)}")


def _describe(value: Any) -> str:
    kind = {dict: "a section", list: "a list", type(None): "nothing"}.get(type(value))
    return kind or f"{quote(value)} ({type(value).__name__})"


def _is_control(ch: str) -> bool:
    return ch in "\x7f" or ord(ch) < 32 or 0x80 <= ord(ch) < 0xA0 or ch in "\u2028\u2029"


def quote(value: Any, limit: int = QUOTE) -> str:
    """A value as a message quotes it: ``repr`` (control characters escaped), cut to a short prefix.

    An alias bomb or a megabyte string must not become a megabyte error line.
    """
    import reprlib

    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    short = reprlib.Repr()  # keyword arguments only from Python 3.12
    short.maxlevel, short.maxlist, short.maxtuple, short.maxdict = 2, 4, 4, 4
    short.maxstring = short.maxother = limit
    try:
        text = short.repr(value)
    except ValueError:  # an integer nested in a list, too long to print
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class ModelConfig(_Checked):
    """The network's sizes and conventions (paper §3)."""

    _section: ClassVar[str] = "model"

    d_model: int = _doc("width of every token vector", 4)
    num_heads: int = _doc("attention heads; each works in d_k = d_model / num_heads dims", 2)
    head_dim: int | None = _doc(
        "each head's d_k when it is not d_model / num_heads (Mistral Nemo); omit", None
    )
    num_kv_heads: int | None = _doc(
        "key/value heads, each read by num_heads / num_kv_heads query heads (grouped-query; "
        "1: multi-query); omit for one per query head",
        None,
    )
    d_ff: int = _doc("width of the feed-forward hidden layer", 8)
    num_encoder_layers: int = _doc("encoder layers stacked", 1)
    num_decoder_layers: int = _doc("decoder layers stacked; 0: encoder-only (task: fill-mask, BERT)", 1)
    task: Literal[tuple(TASKS)] = _choice(TASKS, "next-token", "; ")
    output_head: Literal[tuple(OUTPUT_HEADS)] = _choice(OUTPUT_HEADS, "per-position", " or ")
    norm_first: bool = _doc(
        "true: pre-norm x + Sublayer(LN(x)); false: post-norm LN(x + Sublayer(x)), the paper", False
    )
    final_norm: Literal[FINAL_NORMS] = _doc(
        "a norm atop each stack; auto: when norm_first (as nn.Transformer, GPT-2)", "auto"
    )
    norm: Literal[tuple(NORMS)] = _choice(NORMS, "layernorm", " or ")
    activation: Literal[tuple(ACTIVATIONS)] = _choice(ACTIVATIONS, "relu")
    feed_forward: Literal[tuple(FEED_FORWARDS)] = _choice(FEED_FORWARDS, "standard", " or ")
    ffn_bias: bool = _doc("false: no feed-forward biases b_1, b_2 (gated: b_gate, b_up, b_down)", True)
    positional_encoding: Literal[tuple(POSITIONAL_ENCODINGS)] = _choice(POSITIONAL_ENCODINGS, "sinusoidal")
    max_positions: int = _doc("rows of the learned position table P", 64)
    position_offset: int = _doc(
        "the row of P that the first position reads (RoBERTa: padding_idx + 1 = 2); 0: row 0", 0
    )
    segments: int = _doc(
        "rows of the segment table T, added to each token by its sentence (BERT: 2); 0: none", 0
    )
    embedding_norm: bool = _doc("true: a norm of the embeddings' sum, before the first layer (BERT)", False)
    rope_theta: float = _doc("rotary's base: pair i of a head turns by pos / rope_theta^(2i/d_k)", 10000.0)
    rope_scaling: Literal[tuple(ROPE_SCALINGS)] = _choice(ROPE_SCALINGS, "default")
    rope_factor: float = _doc("rope_scaling's factor: how many times longer the context is made", 1.0)
    rope_low_freq_factor: float = _doc(
        "llama3: pairs slower than original / this turn rope_factor× slower", 1.0
    )
    rope_high_freq_factor: float = _doc("llama3: pairs faster than original / this keep their angle", 4.0)
    rope_original_max_positions: int = _doc("llama3: the context length the model was trained on", 8192)
    sliding_window: int | None = _doc(
        "each position sees itself and the sliding_window − 1 before it, no further (Mistral); omit: all",
        None,
    )
    tie_embeddings: bool = _doc(
        "true: one table E for both stacks and the output, W = Eᵀ (the paper §3.4)", False
    )
    output_bias: bool = _doc("false: the output layer has no bias b (GPT-2)", True)
    output_transform: bool = _doc(
        "true: dense → activation → norm before the output layer (BERT's masked-language-model head)", False
    )
    scale_embeddings: bool = _doc("true: multiply embeddings by sqrt(d_model), as the paper", False)
    attention_bias: Literal[ATTENTION_BIASES] = _doc(
        "true: attention gets biases b_Q, b_K, b_V, b_O; qkv: b_Q, b_K, b_V only (Qwen2)", False
    )
    layer_norm_eps: float = _doc("the norm's eps: under its square root, added to var or mean(x²)", 1.0e-5)
    dtype: Literal[tuple(DTYPES)] = _choice(DTYPES, "float64", " or ")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("d_model", "num_heads", "d_ff", "max_positions"):
            value = getattr(self, name)
            self._require(value > 0, name, f"must be a positive integer, got {value}")
        for name, only in (("num_encoder_layers", "decoder-only"), ("num_decoder_layers", "encoder-only")):
            value = getattr(self, name)
            self._require(value >= 0, name, f"must be 0 ({only}) or more, got {value}")
        self._require(
            self.num_encoder_layers + self.num_decoder_layers > 0,
            "num_decoder_layers",
            "a model needs layers: num_encoder_layers and num_decoder_layers are both 0",
        )
        self._require(
            self.encoder_only == (self.task != "next-token"),
            "task",
            f"{self.task} reads one stack: it needs num_decoder_layers: 0 (encoder-only), got "
            f"{self.num_decoder_layers}"
            if self.task != "next-token"
            else "an encoder-only model (num_decoder_layers: 0) has no next token to predict: "
            "use task: fill-mask",
        )
        self._require(
            not (self.encoder_only and self.output_head == "flatten"),
            "output_head",
            "the flatten head predicts once from every decoder position; an encoder-only model "
            "predicts at each blank: use output_head: per-position",
        )
        for name in ("segments", "position_offset"):
            value = getattr(self, name)
            self._require(value >= 0, name, f"must be 0 or more, got {value}")
        self._require(
            self.segments == 0 or self.encoder_only,
            "segments",
            "segment embeddings mark the sentences an encoder-only model reads; this model has a decoder",
        )
        self._require(
            self.position_offset == 0 or self.positional_encoding == "learned",
            "position_offset",
            f"is a row of the learned table P; positional_encoding is {self.positional_encoding}",
        )
        self._require(
            self.position_offset < self.max_positions,
            "position_offset",
            f"{self.position_offset} leaves no row of P (max_positions = {self.max_positions})",
        )
        self._require(
            self.head_dim is not None or self.d_model % self.num_heads == 0,
            "d_model",
            f"{self.d_model} is not divisible by model.num_heads = {self.num_heads} "
            "(each head takes d_model / num_heads dimensions, unless head_dim says otherwise)",
        )
        for name in ("head_dim", "sliding_window"):
            value = getattr(self, name)
            self._require(
                value is None or value > 0, name, f"must be a positive integer or omitted, got {value}"
            )
        self._require(self.rope_factor > 0, "rope_factor", f"must be positive, got {self.rope_factor:g}")
        self._require(
            self.rope_scaling != "llama3" or 0 < self.rope_low_freq_factor < self.rope_high_freq_factor,
            "rope_high_freq_factor",
            f"llama3 needs 0 < rope_low_freq_factor < rope_high_freq_factor; got "
            f"{self.rope_low_freq_factor:g} and {self.rope_high_freq_factor:g}",
        )
        self._require(
            self.rope_scaling == "default" or not self.adds_positions,
            "rope_scaling",
            f"{self.rope_scaling} stretches rotary's frequencies: it needs positional_encoding: rotary",
        )
        self._require(
            self.rope_original_max_positions > 0,
            "rope_original_max_positions",
            f"must be a positive integer, got {self.rope_original_max_positions}",
        )
        self._require(self.layer_norm_eps > 0, "layer_norm_eps", "must be positive")
        self._require(self.rope_theta > 1, "rope_theta", f"must be more than 1, got {self.rope_theta:g}")
        self._require(
            self.adds_positions or self.d_k % 2 == 0,
            "positional_encoding",
            f"rotary turns pairs of a head's dimensions, so each head's d_k must be even; it is {self.d_k}",
        )
        # YAML's true is Python's True, and 1 == True: only the spellings of FINAL_NORMS pass.
        for name, values in (("final_norm", FINAL_NORMS), ("attention_bias", ATTENTION_BIASES)):
            value = getattr(self, name)
            self._require(
                isinstance(value, (str, bool)),
                name,
                f"must be one of {', '.join(str(v).lower() for v in values)}; got {quote(value)}",
            )
        if self.num_kv_heads is not None:
            self._require(
                0 < self.num_kv_heads <= self.num_heads and self.num_heads % self.num_kv_heads == 0,
                "num_kv_heads",
                f"{self.num_kv_heads} does not divide model.num_heads = {self.num_heads} (each key/value "
                "head serves the same number of query heads)",
            )
        self._require(
            not (self.tie_embeddings and self.output_head == "flatten"),
            "tie_embeddings",
            "the flatten head's W has d_model rows per decoder position, so it cannot be Eᵀ; "
            "use output_head: per-position",
        )

    @property
    def decoder_only(self) -> bool:
        """No encoder stack and no cross-attention: the GPT-style model."""
        return self.num_encoder_layers == 0

    @property
    def encoder_only(self) -> bool:
        """No decoder stack: the encoder's rows go to the output layer (BERT's fill-mask)."""
        return self.num_decoder_layers == 0

    @property
    def sums_embeddings(self) -> bool:
        """Whether one embedding stage sums the token's row of E, its position's and its segment's
        (an encoder-only model, as BERT's embeddings), instead of a positional-encoding stage after it."""
        return self.encoder_only and self.adds_positions

    @property
    def has_final_norm(self) -> bool:
        """Whether each stack ends on a norm of its own (``final_norm`` with ``auto`` resolved)."""
        return self.norm_first if self.final_norm == "auto" else bool(self.final_norm)

    @property
    def kv_heads(self) -> int:
        """Key/value heads: ``num_kv_heads``, or one per query head."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def adds_positions(self) -> bool:
        """Whether positions are added to the embedding (a positional-encoding stage), or applied
        inside attention (``ROTATED_POSITIONS``)."""
        return self.positional_encoding not in ROTATED_POSITIONS

    @property
    def d_k(self) -> int:
        """Width of one head's queries, keys and values: ``head_dim``, or d_model / num_heads."""
        return self.d_model // self.num_heads if self.head_dim is None else self.head_dim


@dataclass(frozen=True)
class DisplayConfig(_Checked):
    """How numbers are shown (never how they are computed)."""

    _section: ClassVar[str] = "display"

    precision: int = _doc("digits after the decimal point", 2)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(0 <= self.precision <= 17, "precision", f"must be 0 to 17, got {self.precision}")


@dataclass(frozen=True)
class TrainingConfig(_Checked):
    """How `walkthrough train` learns: Adam on the mean next-token cross-entropy."""

    _section: ClassVar[str] = "training"

    steps: int = _doc("Adam steps", 150)
    learning_rate: float = _doc("Adam's step size", 0.03)
    dataset: tuple[tuple[str, str], ...] = _doc(
        "more [source, target] pairs to learn besides the sentence", ()
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(0 < self.steps <= 100_000, "steps", f"must be 1 to 100,000, got {self.steps}")
        self._require(
            self.learning_rate > 0, "learning_rate", f"must be positive, got {self.learning_rate:g}"
        )
        # Every training step is a pass over every pair: 50,000 pairs made one step take 97 s.
        self._require(
            len(self.dataset) <= MAX_DATASET,
            "dataset",
            f"holds {len(self.dataset):,} pairs; at most {MAX_DATASET:,} (each step trains on every pair)",
        )
        for k, (source, _) in enumerate(self.dataset):
            self._require(bool(tokenize(source)), f"dataset[{k}]", f"has no source words: {quote(source)}")


@dataclass(frozen=True)
class Config(_Checked):
    """The whole walkthrough: the sentence, how it is split, the vocabulary, the seed, the model."""

    sentence: str = _doc("lower-cased, punctuation stripped", "The cat is sleeping comfortably.")
    encoder_words: int = _doc("the first words feed the encoder; the rest the decoder (encoder-only: all)", 3)
    vocabulary: tuple[str, ...] | None = _doc("omit to build it from the sentence", None)
    blanks: tuple[int, ...] = _doc(
        "task fill-mask: the words hidden behind [MASK], by position from 0 (3: sleeping)", ()
    )
    seed: int = _doc("the same seed gives the same weights on every machine", 42)
    model: ModelConfig = field(default_factory=ModelConfig)
    display: DisplayConfig = field(default_factory=DisplayConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        words = tokenize(self.sentence)
        pair_words = [w for pair in self.training.dataset for text in pair for w in tokenize(text)]
        self._require(len(words) >= 2, "sentence", f"needs at least two words, got {quote(self.sentence)}")
        if self.model.encoder_only:
            self._require(
                self.encoder_words == len(words),
                "encoder_words",
                f"must be {len(words)}, the sentence's words: an encoder-only model reads them all, "
                f"got {self.encoder_words}",
            )
        elif self.model.decoder_only:
            self._require(
                self.encoder_words == 0,
                "encoder_words",
                f"must be 0 when model.num_encoder_layers is 0 (a decoder-only model has no encoder "
                f"to feed), got {self.encoder_words}",
            )
        else:
            self._require(
                1 <= self.encoder_words < len(words),
                "encoder_words",
                f"must be 1 to {len(words) - 1} (the sentence has {len(words)} words and the decoder "
                f"needs at least one), got {self.encoder_words}"
                + ("; 0 needs model.num_encoder_layers: 0 (decoder-only)" if self.encoder_words == 0 else ""),
            )
        self._require(self.seed >= 0, "seed", f"must be 0 or more, got {self.seed}")
        self._check_blanks(words)
        vocabulary = self.vocabulary
        specials = self.special_tokens
        if vocabulary is None:
            # Special tokens first, then the words in order of first appearance.
            vocabulary = tuple(dict.fromkeys([*specials, *words, *pair_words]))
            object.__setattr__(self, "vocabulary", vocabulary)
        counts = collections.Counter(vocabulary)  # one pass: a 50,257-word vocabulary is instant
        repeated = sorted(w for w, n in counts.items() if n > 1)
        self._require(
            not repeated, "vocabulary", f"lists {', '.join(map(quote, repeated[:3]))} twice"
            + (f" ({len(repeated)} words in all)" if len(repeated) > 3 else "")
        )  # fmt: skip
        missing = [w for w in dict.fromkeys([*specials, *words, *pair_words]) if w not in counts]
        self._require(
            not missing,
            "vocabulary",
            f"has no {', '.join(map(quote, missing[:3]))}{' …' if len(missing) > 3 else ''}: it holds "
            f"{', '.join(vocabulary[:10])}{' …' if len(vocabulary) > 10 else ''} (the sentence is "
            f"lower-cased; {', '.join(specials[:-1])} and {specials[-1]} are always needed)",
        )
        check_size(self)

        if self.model.positional_encoding == "learned":
            longest = max(len(t) for pair in self.pairs for t in pair)
            rows = self.model.max_positions - self.model.position_offset
            self._require(
                longest <= rows,
                "model.max_positions",
                f"learned positions have {rows} rows"
                + (f" from row {self.model.position_offset}" if self.model.position_offset else "")
                + f", but a sentence needs {longest}",
            )

    def _check_blanks(self, words: list[str]) -> None:
        """A fill-mask sentence has its blanks, each a word of it, once; no other task has any."""
        if self.model.task != "fill-mask":
            self._require(
                not self.blanks, "blanks", f"are for model.task: fill-mask; the task is {self.model.task}"
            )
            return
        self._require(
            bool(self.blanks),
            "blanks",
            "a fill-mask model needs a word to hide behind [MASK]: give its position, e.g. blanks: [3]",
        )
        bad = [b for b in self.blanks if not 0 <= b < len(words)]
        self._require(
            not bad, "blanks", f"{bad[0] if bad else 0} is no word of the sentence (0 to {len(words) - 1})"
        )
        self._require(len(set(self.blanks)) == len(self.blanks), "blanks", "lists a word twice")

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """The tokens every vocabulary of this task holds: <start> and <end>, or [CLS], [SEP], [MASK]."""
        return FILL_MASK_TOKENS if self.model.encoder_only else SPECIAL_TOKENS

    @property
    def source_tokens(self) -> tuple[str, ...]:
        """The encoder's input: the first ``encoder_words`` words; an encoder-only model's, the
        whole sentence between [CLS] and [SEP], each blank's word hidden behind [MASK]."""
        words = tokenize(self.sentence)
        if self.model.encoder_only:
            return masked(words, self.blanks)
        return tuple(words[: self.encoder_words])

    @property
    def target_tokens(self) -> tuple[str, ...]:
        """The decoder's input: the remaining words wrapped in <start> … <end> (none: encoder-only)."""
        if self.model.encoder_only:
            return ()
        return (START, *tokenize(self.sentence)[self.encoder_words :], END)

    @property
    def answers(self) -> tuple[str | None, ...]:
        """Per row of the encoder-only model's input, the word hidden there, None where none is."""
        if not self.model.encoder_only:
            return ()
        return answers(tokenize(self.sentence), self.blanks)

    @property
    def sentences(self) -> list[list[str]]:
        """Each sentence a fill-mask model learns from, as words: the config's, then each dataset
        pair's two texts read as one sentence."""
        more = [tokenize(f"{s} {t}") for s, t in self.training.dataset]
        return [tokenize(self.sentence), *more]

    @property
    def pairs(self) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """What training learns: (source tokens, decoder tokens) for the sentence, then the dataset."""
        if self.model.encoder_only:  # one stack: each sentence feeds the encoder, no decoder
            return [(masked(words, ()), ()) for words in self.sentences]
        if self.model.decoder_only:  # no encoder: the whole pair feeds the decoder
            more = [((), (START, *tokenize(s), *tokenize(t), END)) for s, t in self.training.dataset]
        else:
            more = [(tuple(tokenize(s)), (START, *tokenize(t), END)) for s, t in self.training.dataset]
        return [(self.source_tokens, self.target_tokens), *more]

    def vocabulary_of(self, side: str) -> tuple[str, ...]:
        """The pieces that name the embedding rows of ``side`` ("encoder", "decoder", or "output",
        the output layer's columns): the toy has one vocabulary for all three (a checkpoint whose
        encoder has its own vocabulary says so in ``CheckpointConfig``)."""
        if side not in ("encoder", "decoder", "output"):
            raise ValueError(f"no side {side!r}: encoder, decoder or output")
        return self.vocabulary or ()

    def token_ids(self, tokens: tuple[str, ...]) -> list[int]:
        """Each token's row in the embedding table."""
        index = self.index
        return [index[t] for t in tokens]

    mask_token: ClassVar[str] = MASK  # a fill-mask model's blank (a checkpoint's may be <mask>)

    @property
    def mask_id(self) -> int | None:
        """The blank's row in the vocabulary, None when it has none."""
        return self.index.get(self.mask_token)

    @property
    def index(self) -> dict[str, int]:
        """Each word's row in the embedding table, built once."""
        cached = self.__dict__.get("_index")
        if cached is None:
            cached = {word: i for i, word in enumerate(self.vocabulary or ())}
            object.__setattr__(self, "_index", cached)
        return cached


def masked(words: list[str], blanks: tuple[int, ...]) -> tuple[str, ...]:
    """An encoder-only model's input: [CLS], the words with each blank hidden behind [MASK], [SEP]."""
    return (CLS, *(MASK if i in blanks else w for i, w in enumerate(words)), SEP)


def answers(words: list[str], blanks: tuple[int, ...]) -> tuple[str | None, ...]:
    """Each row of ``masked(words, blanks)``: the word a blank hides there, None on every other row."""
    return (None, *(w if i in blanks else None for i, w in enumerate(words)), None)


MAX_BYTES = 1 << 31  # 2 GiB of matrices in the trace: the paper's base model (d_model 512, 6+6 layers) fits
# Matrices printed by `run`: the base model prints about 1,600, SmolLM2-135M about 3,900, Llama 3.2 1B
# about 6,000, Mistral 7B (whose weights pass the memory budget only on a large machine) 12,500.
MAX_TABLES = 20_000


def check_size(config: Config) -> None:
    """Refuse, before any work, a config whose trace would not fit in memory or on a screen.

    The message says what it would need and which key, set back to its default, saves the most.
    """
    model = config.model
    words = len(tokenize(config.sentence))
    # The sizes the trace's size is counted from, each under the key that sets it, and the key's default.
    sizes = {
        "model.d_model": (model.d_model, 4), "model.num_heads": (model.num_heads, 2),
        "model.d_ff": (model.d_ff, 8), "model.num_encoder_layers": (model.num_encoder_layers, 1),
        "model.num_decoder_layers": (model.num_decoder_layers, 1),
        "sentence": (max(len(s) for s, _ in config.pairs), 3),
        "sentence (decoder)": (max([len(t) for _, t in config.pairs] + [words - config.encoder_words]), 4),
        "vocabulary": (len(config.vocabulary or ()), 7),
        "model.max_positions": (model.max_positions if model.positional_encoding == "learned" else 0, 64),
    }  # fmt: skip

    learned = model.positional_encoding == "learned"

    def cost(key: str | None = None) -> tuple[float, float]:
        from .model.size import trace_size  # the model layer counts what its walk records

        values = {k: default if k == key else value for k, (value, default) in sizes.items()}
        fields = {k.removeprefix("model."): v for k, v in values.items() if k.startswith("model.")}
        if not learned:
            del fields["max_positions"]
        try:
            m = dataclasses.replace(model, **fields) if key and key.startswith("model.") else model
        except ConfigError:  # that key at its default does not fit the others: no way out
            return math.inf, math.inf
        size = trace_size(m, values["sentence"], values["sentence (decoder)"], values["vocabulary"])
        return size.numbers * (8 if model.dtype == "float64" else 4), size.tables

    need, tables = cost()
    if need <= MAX_BYTES and tables <= MAX_TABLES:
        return
    over = 0 if need > MAX_BYTES else 1
    key = min(sizes, key=lambda k: cost(k)[over]).removesuffix(" (decoder)")
    if need > MAX_BYTES:
        what = f"about {need / 2**30:,.1f} GiB of matrices; the limit is {MAX_BYTES / 2**30:g} GiB"
    else:
        what = f"{tables:,} matrices to show; the limit is {MAX_TABLES:,}"
    raise ConfigError(f"{key}: this model would need {what}; lower {key}")


# The sections of the file and the dataclass each one builds.
SECTIONS: dict[str, type] = {"model": ModelConfig, "display": DisplayConfig, "training": TrainingConfig}


def _check_keys(mapping: dict, cls: type, where: str) -> None:
    """Reject a key ``cls`` has no field for, suggesting the close one (d_modle -> d_model)."""
    allowed = [f.name for f in dataclasses.fields(cls)]
    for key in mapping:
        if key in allowed:
            continue
        prefix = f"{where}." if where else ""
        hint = close_matches(str(key)[:100], allowed)
        # A key put in the wrong section (d_model at the top) is worth pointing at too.
        elsewhere = [
            f"{name}.{key}"
            for name, section in SECTIONS.items()
            if section is not cls and key in [f.name for f in dataclasses.fields(section)]
        ]
        suggestion = elsewhere[0] if elsewhere else (f"{prefix}{hint[0]}" if hint else None)
        plain = isinstance(key, str) and key.isprintable() and len(key) <= QUOTE
        message = f"unknown key {prefix}{key if plain else quote(key)}"
        if suggestion:
            message += f"; did you mean {suggestion}?"
        else:
            message += f" (known keys: {', '.join(prefix + a for a in allowed)})"
        raise ConfigError(message)


def config_from_dict(data: dict | None) -> Config:
    """Build a Config from parsed YAML, checking every key and value."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping of keys at the top, got {_describe(data)}")
    _check_keys(data, Config, "")
    kwargs = dict(data)
    for name, section in SECTIONS.items():
        if name in data:
            if not isinstance(data[name], dict):
                raise ConfigError(f"{name}: expected a section of keys, got {_describe(data[name])}")
            _check_keys(data[name], section, name)
            kwargs[name] = section(**data[name])
    return Config(**kwargs)


def load_config(
    path: str | Path | None = None,
    *,
    seed: int | None = None,
    precision: int | None = None,
    sentence: tuple[str, str | None] | None = None,
) -> Config:
    """Read a YAML config (the dataclasses' defaults, the article's example, when ``path`` is None)
    and apply overrides.

    ``sentence`` is (source, target): your own words instead of the config's sentence, the source
    feeding the encoder (the whole feeding the decoder of a decoder-only model; an encoder-only
    model's is the source alone, target None: ``_own_sentence``). The vocabulary is
    built from them unless the file lists one (the default's is the article's sentence's).

    Only plain YAML is read (``yaml.safe_load``); any problem raises ConfigError with one line
    that names the file and, where it can, the line or the key.
    """
    import yaml  # deferred: `walkthrough --help` should not pay for it

    if path is None:
        return _override(Config(), None, sentence, seed, precision)
    source = Path(path)
    text = _read_text(source)
    try:
        data = _safe_load(text)  # yaml.safe_load that also refuses aliases
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: {_yaml_problem(err)}") from None
    except ConfigError as err:  # an alias
        raise ConfigError(f"{source}: {err}") from None
    except ValueError as err:  # an integer of more than 4,300 digits, say
        raise ConfigError(f"{source}: {quote(str(err), 80)}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply") from None
    try:
        config = config_from_dict(data)
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
    return _override(config, data, sentence, seed, precision)


NEEDS_BOTH = (
    "the toy needs both --source (the encoder's words) and --target (the decoder's), "
    'e.g. --source "the dog is" --target "barking loudly"'
)


def _own_sentence(config: Config, source: str, target: str | None) -> tuple[str, int]:
    """Your words instead of the config's sentence, and how many of them the encoder reads.

    An encoder-decoder reads the source and decodes the target; a decoder-only model reads both
    as one text; an encoder-only model (BERT) reads one sentence, the source alone, with the
    config's blanks hiding its words."""
    if config.model.encoder_only:
        if target is not None:
            raise ConfigError(
                "--target: an encoder-only model has no decoder: give your sentence as --source alone "
                "(the config's blanks hide its words)"
            )
        return source, len(tokenize(source))
    if target is None:
        raise ConfigError(NEEDS_BOTH)
    return f"{source} {target}", 0 if config.model.decoder_only else len(tokenize(source))


def _override(
    config: Config,
    data: Any,
    sentence: tuple[str, str | None] | None,
    seed: int | None,
    precision: int | None,
) -> Config:
    """The config with the command line's options applied (``data``: what the file said, if any)."""
    try:  # options given on the command line: the file is not to blame for them
        if sentence is not None:
            text, encoder_words = _own_sentence(config, *sentence)
            listed = isinstance(data, dict) and "vocabulary" in data
            config = dataclasses.replace(
                config,
                sentence=text,
                encoder_words=encoder_words,
                vocabulary=config.vocabulary if listed else None,
                training=dataclasses.replace(config.training, dataset=()),  # its words are not yours
            )
        if seed is not None:
            config = dataclasses.replace(config, seed=seed)
        if precision is not None:
            config = dataclasses.replace(
                config, display=dataclasses.replace(config.display, precision=precision)
            )
    except ConfigError as err:
        raise ConfigError(f"{err} (given on the command line)") from None
    return config


def _read_text(source: Path) -> str:
    """The file's text, refused before reading when it is not a regular file or too large to be a
    config (``read_regular``: a FIFO cannot hang the command; /dev/zero is not regular either)."""
    from .files.regular import read_regular

    try:
        data = read_regular(source, "a YAML config", MAX_FILE_BYTES, ConfigError)
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        where = f"{err.reason} at byte {err.start}"
        raise ConfigError(f"{source}: cannot be read ({where}; expected UTF-8)") from None


def _safe_load(text: str) -> Any:
    """``yaml.safe_load`` (LibYAML's loader when installed: 50x faster), refusing aliases.

    ``*name`` can repeat a node until memory runs out; a config never needs one. The document is
    parsed once into its node graph, where an alias is a node reached a second time (nothing is
    expanded yet), and only a graph without one is built into Python values.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        seen: set[int] = set()
        todo = [root]
        while todo:
            node = todo.pop()
            if id(node) in seen:
                mark = node.start_mark
                raise ConfigError(
                    f"line {mark.line + 1}, column {mark.column + 1}: this value is repeated by an alias; "
                    "YAML aliases (*name) are not allowed: write the value out"
                )
            seen.add(id(node))
            if isinstance(node, yaml.MappingNode):
                todo += [part for pair in node.value for part in pair]
            elif isinstance(node, yaml.SequenceNode):
                todo += node.value
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _yaml_problem(err: Exception) -> str:
    """One line for a YAML error: where it is and what is wrong."""
    mark = getattr(err, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    tag = re.search(r"tag:yaml.org,2002:(\S+?)'", problem)
    if "constructor" in problem and tag:
        return f"{where}the tag !!{tag.group(1)} is not allowed (only plain YAML is read)"
    context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
    if context and start is not None and mark is not None and start.line != mark.line:
        context += f" at line {start.line + 1}"  # where the broken construct began
    return f"{where}malformed YAML: {problem}" + (f" ({context})" if context else "")


def config_to_dict(config: Config) -> dict[str, Any]:
    """The config as plain data (lists, not tuples), keys in the YAML's order."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return [plain(v) for v in value] if isinstance(value, tuple) else value

    return plain(config)


CONFIG_HEADER = """\
# transformer-walkthrough config. Every key is optional: a missing one takes the value shown
# here, the article's example. Run `walkthrough config` to print the effective config.
"""


def config_to_yaml(config: Config) -> str:
    """The config as commented YAML that ``load_config`` reads back to an equal Config."""
    import yaml

    def scalar(value: Any) -> str:
        text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=True)
        return text.removesuffix("\n").removesuffix("\n...")

    def line(indent: str, f: dataclasses.Field, value: Any) -> str:
        text = f"{indent}{f.name}: {scalar(value)}"
        doc = f.metadata.get("doc")
        return f"{text:<32} # {doc}" if doc else text

    lines = [CONFIG_HEADER.rstrip("\n")]
    data = config_to_dict(config)
    for f in dataclasses.fields(config):
        if dataclasses.is_dataclass(getattr(config, f.name)):
            lines.append(f"{f.name}:")
            section = getattr(config, f.name)
            lines.extend(line("  ", g, data[f.name][g.name]) for g in dataclasses.fields(section))
        else:
            lines.append(line("", f, data[f.name]))
    return "\n".join(lines) + "\n"
