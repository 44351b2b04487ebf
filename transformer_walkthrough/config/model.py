"""The ``model:`` section: the network's sizes and conventions, and the invariants between them."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import InitVar, dataclass
from typing import ClassVar, Literal

from .conventions import (
    ACTIVATIONS,
    ATTENTION_BIASES,
    BIASED_POSITIONS,
    DTYPES,
    FEED_FORWARDS,
    FINAL_NORMS,
    LAYER_TYPES,
    NORM_PLACEMENTS,
    NORMS,
    OUTPUT_HEADS,
    POSITIONAL_ENCODINGS,
    QK_NORMS,
    ROPE_SCALINGS,
    ROTATED_POSITIONS,
    SCORE_SCALES,
    TASKS,
)
from .schema import Checked, choice, coerce, doc, quote


@dataclass(frozen=True)
class ModelConfig(Checked):
    """The network's sizes and conventions (paper §3)."""

    _section: ClassVar[str] = "model"
    # Keys read but not kept: norm_first, the older spelling of norm_placement (pre or post).
    _aliases: ClassVar[tuple[str, ...]] = ("norm_first",)

    d_model: int = doc("width of every token vector", 4)
    num_heads: int = doc("attention heads; each works in d_k = d_model / num_heads dims", 2)
    head_dim: int | None = doc(
        "each head's d_k when it is not d_model / num_heads (Mistral Nemo); omit", None
    )
    num_kv_heads: int | None = doc(
        "key/value heads, each read by num_heads / num_kv_heads query heads (grouped-query; "
        "1: multi-query); omit for one per query head",
        None,
    )
    d_ff: int = doc("width of the feed-forward hidden layer", 8)
    num_encoder_layers: int = doc("encoder layers stacked", 1)
    num_decoder_layers: int = doc("decoder layers stacked; 0: encoder-only (task: fill-mask, BERT)", 1)
    task: Literal[tuple(TASKS)] = choice(TASKS, "next-token", "; ")
    output_head: Literal[tuple(OUTPUT_HEADS)] = choice(OUTPUT_HEADS, "per-position", " or ")
    norm_placement: Literal[tuple(NORM_PLACEMENTS)] | None = doc(
        "where each sublayer's norm sits: " + "; ".join(f"{k}: {v}" for k, v in NORM_PLACEMENTS.items()),
        None,  # read as post (or as norm_first says): ``__post_init__``
    )
    final_norm: Literal[FINAL_NORMS] = doc(
        "a norm atop each stack; auto: unless post-norm (as nn.Transformer, GPT-2)", "auto"
    )
    norm: Literal[tuple(NORMS)] = choice(NORMS, "layernorm", " or ")
    activation: Literal[tuple(ACTIVATIONS)] = choice(ACTIVATIONS, "relu")
    feed_forward: Literal[tuple(FEED_FORWARDS)] = choice(FEED_FORWARDS, "standard", " or ")
    ffn_bias: bool = doc("false: no feed-forward biases b_1, b_2 (gated: b_gate, b_up, b_down)", True)
    positional_encoding: Literal[tuple(POSITIONAL_ENCODINGS)] = choice(POSITIONAL_ENCODINGS, "sinusoidal")
    max_positions: int = doc("rows of the learned position table P", 64)
    position_offset: int = doc(
        "the row of P that the first position reads (RoBERTa: padding_idx + 1 = 2); 0: row 0", 0
    )
    segments: int = doc(
        "rows of the segment table T, added to each token by its sentence (BERT: 2); 0: none", 0
    )
    embedding_norm: bool = doc("true: a norm of the embeddings' sum, before the first layer (BERT)", False)
    relative_buckets: int = doc(
        "relative: rows of the bias table, one per bucket of distances (T5: 32); the encoder gives "
        "half to keys after the query, half to keys before",
        32,
    )
    relative_max_distance: int = doc(
        "relative: the distance where the log-spaced buckets end; farther keys share the last (T5: 128)",
        128,
    )
    rope_theta: float = doc("rotary's base: pair i of a head turns by pos / rope_theta^(2i/d_k)", 10000.0)
    rope_scaling: Literal[tuple(ROPE_SCALINGS)] = choice(ROPE_SCALINGS, "default")
    rope_factor: float = doc("rope_scaling's factor: how many times longer the context is made", 1.0)
    rope_low_freq_factor: float = doc(
        "llama3: pairs slower than original / this turn rope_factor× slower", 1.0
    )
    rope_high_freq_factor: float = doc("llama3: pairs faster than original / this keep their angle", 4.0)
    rope_original_max_positions: int = doc("llama3: the context length the model was trained on", 8192)
    sliding_window: int | None = doc(
        "each position sees itself and the sliding_window − 1 before it, no further (Mistral); omit: all",
        None,
    )
    layer_types: tuple[Literal[tuple(LAYER_TYPES)], ...] | None = doc(
        "one entry per decoder layer, sliding (its self-attention sees the last sliding_window "
        "positions) or full (every earlier one), as Gemma 2 and 3; omit: every layer as sliding_window says",
        None,
    )
    local_rope_theta: float | None = doc(
        "rotary's base in the sliding layers of layer_types (Gemma 3: 10,000, its full layers' "
        "rope_theta 1,000,000); omit: rope_theta in every layer",
        None,
    )
    tie_embeddings: bool = doc(
        "true: one table E for both stacks and the output, W = Eᵀ (the paper §3.4)", False
    )
    output_bias: bool = doc("false: the output layer has no bias b (GPT-2)", True)
    output_transform: bool = doc(
        "true: dense → activation → norm before the output layer (BERT's masked-language-model head)", False
    )
    scale_tied_output: bool = doc(
        "true: the top stack's rows times d_model^-0.5 before the tied output layer W = Eᵀ (T5)", False
    )
    scale_embeddings: bool = doc("true: multiply embeddings by sqrt(d_model), as the paper", False)
    attention_bias: Literal[ATTENTION_BIASES] = doc(
        "true: attention gets biases b_Q, b_K, b_V, b_O; qkv: b_Q, b_K, b_V only (Qwen2)", False
    )
    qk_norm: Literal[QK_NORMS] = doc(
        "head: an RMSNorm of each head's queries and keys (gamma_Q, gamma_K), before the rotation "
        "(Qwen3, Gemma 3); whole: one RMSNorm over the whole projection, every head's columns at once, "
        "before the split into heads (OLMo 2, OLMoE)",
        False,
    )
    experts: int = doc(
        "experts in each sparse layer's feed-forward, a router choosing experts_per_token of them for "
        "each token (Mixtral); 0: one plain feed-forward",
        0,
    )
    experts_per_token: int | None = doc("k: the experts each token is sent to (top k of the router's)", None)
    expert_d_ff: int | None = doc("each expert's hidden width; omit: d_ff", None)
    shared_experts: int = doc(
        "1: an expert every token goes through, scaled by a sigmoid gate of its own (Qwen2-MoE); 0: none", 0
    )
    shared_expert_d_ff: int | None = doc("the shared expert's hidden width; omit: expert_d_ff", None)
    norm_topk: bool = doc(
        "true: the k chosen probabilities divided by their sum (Mixtral, Qwen3-MoE); false: kept (OLMoE)",
        True,
    )
    sparse_step: int = doc(
        "every sparse_step-th layer has experts (layers step−1, 2·step−1, …; Qwen2-MoE)", 1
    )
    dense_layers: tuple[int, ...] = doc(
        "layers that keep a plain feed-forward though experts is set (Qwen2-MoE's mlp_only_layers)", ()
    )
    router_aux_loss_coef: float = doc(
        "training: the load-balancing loss E·Σ fᵢ·Pᵢ (Switch Transformer) is added times this", 0.01
    )
    score_scale: Literal[tuple(SCORE_SCALES)] | float = doc(
        "what the scores Q·Kᵀ are divided by: d_k: √d_k (the paper); none: nothing (T5); a positive "
        "number n: √n (Gemma's query_pre_attn_scalar)",
        "d_k",
    )
    attention_softcap: float | None = doc(
        "c: each score s becomes c·tanh(s / c) after the scaling, before the mask: never beyond ±c "
        "(Gemma 2: 50); omit: none",
        None,
    )
    logit_softcap: float | None = doc("c: each logit z becomes c·tanh(z / c) (Gemma 2: 30); omit: none", None)
    layer_norm_eps: float = doc("the norm's eps: under its square root, added to var or mean(x²)", 1.0e-5)
    dtype: Literal[tuple(DTYPES)] = choice(DTYPES, "float64", " or ")
    # The older switch, still read: true is norm_placement: pre, false is post. Not kept as a field,
    # so that one field says where the norms sit.
    norm_first: InitVar[bool | None] = None

    def __post_init__(self, norm_first: bool | None) -> None:
        super().__post_init__()
        self._place_norms(coerce(norm_first, bool | None, self._key("norm_first")))
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
        for name in ("head_dim", "sliding_window"):  # below 2³¹: NumPy computes with them
            value = getattr(self, name)
            self._require(
                value is None or 0 < value < 2**31, name,
                f"must be a positive integer or omitted, got {value}" if value is None or value < 1
                else f"must be below 2³¹ (a count of positions or dimensions), got {quote(value)}",
            )  # fmt: skip
        self._require(self.rope_factor > 0, "rope_factor", f"must be positive, got {self.rope_factor:g}")
        self._require(
            self.rope_scaling != "llama3" or 0 < self.rope_low_freq_factor < self.rope_high_freq_factor,
            "rope_high_freq_factor",
            f"llama3 needs 0 < rope_low_freq_factor < rope_high_freq_factor; got "
            f"{self.rope_low_freq_factor:g} and {self.rope_high_freq_factor:g}",
        )
        self._require(
            self.rope_scaling == "default" or self.positional_encoding in ROTATED_POSITIONS,
            "rope_scaling",
            f"{self.rope_scaling} stretches rotary's frequencies: it needs positional_encoding: rotary",
        )
        self._require(
            self.rope_original_max_positions > 0,
            "rope_original_max_positions",
            f"must be a positive integer, got {self.rope_original_max_positions}",
        )
        self._require(
            self.relative_buckets >= 4,
            "relative_buckets",
            f"must be 4 or more (the encoder halves them by direction, then keeps half of each for "
            f"exact distances: at least one exact bucket each way), got {self.relative_buckets}",
        )
        self._require(
            self.relative_max_distance > self.relative_buckets // 2,
            "relative_max_distance",
            f"{self.relative_max_distance} is within the exact range: the first relative_buckets // 2 "
            f"= {self.relative_buckets // 2} distances have a bucket each, so the log-spaced buckets "
            "must end beyond it",
        )
        self._require(
            not self.scale_tied_output or self.tie_embeddings,
            "scale_tied_output",
            "rescales the rows before the tied output layer W = Eᵀ: it needs tie_embeddings: true",
        )
        self._require(self.layer_norm_eps > 0, "layer_norm_eps", "must be positive")
        for name in ("attention_softcap", "logit_softcap", "local_rope_theta"):
            value = getattr(self, name)
            said = "" if value is None else f"{value:g}"
            self._require(
                value is None or value > 0, name, f"must be a positive number or omitted, got {said}"
            )
        self._require(
            self.attention_softcap is None or not self.biases_positions,
            "attention_softcap",
            "caps the scores before the mask, and relative positions add their bias there too: no model "
            "does both, so their order is undefined; omit one",
        )
        if self.layer_types is not None:
            self._require(
                len(self.layer_types) == self.num_decoder_layers,
                "layer_types",
                f"has {len(self.layer_types)} entr{'y' if len(self.layer_types) == 1 else 'ies'} for "
                f"{self.num_decoder_layers} decoder layers: one per layer",
            )
            self._require(
                "sliding" not in self.layer_types or self.sliding_window is not None,
                "layer_types",
                "has sliding layers but no sliding_window says how far back they see",
            )
        self._require(
            self.local_rope_theta is None or (self.layer_types is not None and not self.adds_positions),
            "local_rope_theta",
            "is the rotary base of layer_types' sliding layers: it needs layer_types and "
            "positional_encoding: rotary",
        )
        self._require(
            self.local_rope_theta is None or self.local_rope_theta > 1,
            "local_rope_theta",
            f"must be more than 1, got {self.local_rope_theta or 0:g}",
        )
        self._require(
            isinstance(self.score_scale, str) or self.score_scale > 0,
            "score_scale",
            f"must be d_k, none or a positive number, got {self.score_scale:g}"
            if not isinstance(self.score_scale, str)
            else "",
        )
        self._require(self.rope_theta > 1, "rope_theta", f"must be more than 1, got {self.rope_theta:g}")
        self._require(
            self.positional_encoding not in ROTATED_POSITIONS or self.d_k % 2 == 0,
            "positional_encoding",
            f"rotary turns pairs of a head's dimensions, so each head's d_k must be even; it is {self.d_k}",
        )
        # YAML's true is Python's True, and 1 == True: only the spellings of FINAL_NORMS pass.
        for name, values in (
            ("final_norm", FINAL_NORMS),
            ("attention_bias", ATTENTION_BIASES),
            ("qk_norm", QK_NORMS),
        ):
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
        self._check_experts()
        self._require(
            not (self.tie_embeddings and self.output_head == "flatten"),
            "tie_embeddings",
            "the flatten head's W has d_model rows per decoder position, so it cannot be Eᵀ; "
            "use output_head: per-position",
        )

    def _check_experts(self) -> None:
        """The mixture of experts' sizes, each against the others."""
        E, k = self.experts, self.experts_per_token
        self._require(E >= 0, "experts", f"must be 0 (a plain feed-forward) or more, got {E}")
        if E == 0:
            for name in ("experts_per_token", "expert_d_ff", "shared_expert_d_ff"):
                self._require(
                    getattr(self, name) is None, name, "is set but model.experts is 0: there are no experts"
                )
            self._require(self.shared_experts == 0, "shared_experts", "is set but model.experts is 0")
            return
        self._require(k is not None, "experts_per_token", f"must be given with model.experts: {E} (1 to {E})")
        assert k is not None
        self._require(0 < k <= E, "experts_per_token", f"must be 1 to model.experts = {E}, got {k}")
        for name in ("expert_d_ff", "shared_expert_d_ff"):
            value = getattr(self, name)
            self._require(
                value is None or value > 0, name, f"must be a positive integer or omitted, got {value}"
            )
        self._require(
            self.shared_experts in (0, 1), "shared_experts", f"must be 0 or 1, got {self.shared_experts}"
        )
        self._require(
            self.sparse_step > 0, "sparse_step", f"must be a positive integer, got {self.sparse_step}"
        )
        layers = self.num_decoder_layers
        for i in self.dense_layers:
            self._require(
                type(i) is int and 0 <= i < layers,
                "dense_layers",
                f"holds {quote(i)}: the decoder's layers are 0 to {layers - 1}",
            )
        self._require(
            self.router_aux_loss_coef >= 0,
            "router_aux_loss_coef",
            f"must be 0 or more, got {self.router_aux_loss_coef:g}",
        )

    def sparse(self, layer: int) -> bool:
        """Whether layer ``layer`` has experts instead of one feed-forward (``sparse_layer``)."""
        return sparse_layer(self.experts, self.sparse_step, self.dense_layers, layer)

    @property
    def d_expert(self) -> int:
        """Each expert's hidden width: ``expert_d_ff``, or d_ff."""
        return self.d_ff if self.expert_d_ff is None else self.expert_d_ff

    @property
    def d_shared(self) -> int:
        """The shared expert's hidden width: ``shared_expert_d_ff``, or each expert's."""
        return self.d_expert if self.shared_expert_d_ff is None else self.shared_expert_d_ff

    def _place_norms(self, norm_first: bool | None) -> None:
        """``norm_placement`` from itself or, when omitted, from the older ``norm_first``."""
        said = None if norm_first is None else ("pre" if norm_first else "post")
        self._require(
            said is None or self.norm_placement in (None, said),
            "norm_first",
            f"{str(norm_first).lower()} says {said}-norm, but norm_placement is {self.norm_placement}: "
            "give norm_placement alone",
        )
        object.__setattr__(self, "norm_placement", self.norm_placement or said or "post")

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
        if self.final_norm == "auto":  # the stream leaves the last layer unnormed unless post-norm
            return self.norm_placement != "post"
        return bool(self.final_norm)

    @property
    def kv_heads(self) -> int:
        """Key/value heads: ``num_kv_heads``, or one per query head."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def adds_positions(self) -> bool:
        """Whether positions are added to the embedding (a positional-encoding stage), or applied
        inside attention (``ROTATED_POSITIONS``, ``BIASED_POSITIONS``)."""
        return self.positional_encoding not in ROTATED_POSITIONS + BIASED_POSITIONS

    @property
    def biases_positions(self) -> bool:
        """Whether positions are a learned bias added to each head's scores in self-attention, by
        the bucket of the distance key − query (``BIASED_POSITIONS``: T5)."""
        return self.positional_encoding in BIASED_POSITIONS

    def window(self, layer: int | None) -> int | None:
        """How far back decoder layer ``layer``'s self-attention sees: ``sliding_window``, or every
        position (None) in a full layer of ``layer_types``; None for a layer outside the decoder."""
        if self.layer_types is not None and layer is not None and self.layer_types[layer] == "full":
            return None
        return self.sliding_window

    def local(self, layer: int | None) -> bool:
        """Whether decoder layer ``layer`` turns its queries and keys by ``local_rope_theta`` (a
        sliding layer of ``layer_types``, when the local base is given), unscaled as Gemma 3's."""
        return (
            self.local_rope_theta is not None and layer is not None and self.layer_types[layer] == "sliding"
        )

    def theta(self, layer: int | None) -> float:
        """Rotary's base in decoder layer ``layer``: ``local_rope_theta`` in a local one, else rope_theta."""
        return self.local_rope_theta if self.local(layer) else self.rope_theta  # type: ignore[return-value]

    @property
    def score_divisor(self) -> float | None:
        """The number whose square root divides the scores (``score_scale``): d_k, the number
        given, or None when they are not divided."""
        if self.score_scale == "none":
            return None
        return float(self.d_k) if self.score_scale == "d_k" else float(self.score_scale)

    @property
    def d_k(self) -> int:
        """Width of one head's queries, keys and values: ``head_dim``, or d_model / num_heads."""
        return self.d_model // self.num_heads if self.head_dim is None else self.head_dim


def sparse_layer(experts: int, sparse_step: int, dense_layers: Collection[int], layer: int) -> bool:
    """Whether layer ``layer`` has experts instead of one feed-forward: experts set, the layer on
    the step and not among the dense ones, as Qwen2-MoE decides it (``layer not in mlp_only_layers
    and (layer + 1) % decoder_sparse_step == 0``)."""
    return experts > 0 and (layer + 1) % sparse_step == 0 and layer not in dense_layers
