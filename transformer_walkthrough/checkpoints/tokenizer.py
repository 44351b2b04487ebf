"""Marian's tokenizer, equal to ``transformers.MarianTokenizer``: SentencePiece pieces, then vocab.json ids.

A sentence is cut into pieces by a SentencePiece model (``source.spm`` for the encoder's text,
``target.spm`` for the decoder's), each piece is looked up in ``vocab.json`` (a piece it lacks is
``<unk>``: Marian's ids are not SentencePiece's), and ``</s>`` is appended. A leading language code
such as ``>>fr<<`` is a token of its own. The literal strings ``</s>``, ``<unk>`` and ``<pad>`` in a
text are those special tokens, as in ``transformers``.

The files are untrusted. A ``.spm`` is refused unread when it is not a regular file (a FIFO would
block for ever) or over ``MAX_SPM_BYTES`` (opus-mt's are ~800 kB; a sparse 9 GB file would be read
whole). SentencePiece (C++) runs in-process: it validates its model proto and returns an error
for every malformed one tried (truncated, random bytes, a declared length of 4 GB, flipped bytes,
an empty or overlong piece, NaN scores, a bad charsmap, byte_fallback without byte pieces), where
the ``tokenizers`` library aborted or panicked on such files (``native``); what it raises is
caught, whatever its class (a piece that is not UTF-8 raises UnicodeDecodeError when read).

``source_vocabulary`` and ``target_vocabulary`` are display labels, escaped for a terminal
(``bpe.escape``: no ESC, no OSC title, no bidi override, lone surrogates as <U+DCxx>); decoding
reads the pieces as vocab.json spells them (``_target_pieces``), so the translation is the
checkpoint's (the CLI escapes it when it prints it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..regular_files import read_regular
from .bpe import COMPACT, MAX_TOKENIZER_BYTES, OPS, escape
from .errors import CheckpointError, first_line
from .jsonfile import MAX_TOKEN_ID, read_json, shown
from .native import NativeProcess
from .tokenizer_check import check_tokenizer

UNK, EOS, PAD = "<unk>", "</s>", "<pad>"
SPIECE_UNDERLINE = "▁"
MAX_SPM_BYTES = 50_000_000  # opus-mt's .spm files are ~800 kB, the largest SentencePiece models ~20 MB


def _read_vocab(path: Path) -> dict[str, int]:
    """``vocab.json``: piece -> id, every id a non-negative int below MAX_TOKEN_ID."""
    try:
        vocab = read_json(path, what="a readable vocabulary")
    except FileNotFoundError:
        raise CheckpointError(f"{path.parent}: missing tokenizer file {path.name}") from None
    if not isinstance(vocab, dict):
        raise CheckpointError(f"{path}: not a vocabulary (expected a JSON object of piece -> id)")
    for piece, i in vocab.items():
        if type(i) is not int or not 0 <= i < MAX_TOKEN_ID:
            raise CheckpointError(f"{path}: piece {shown(piece)} has id {shown(i)}, not an id")
    if UNK not in vocab:
        raise CheckpointError(f"{path}: the vocabulary has no {UNK}")
    return vocab


def _load_spm(path: Path) -> Any:
    """The SentencePiece model at ``path``, once it is a regular file of at most MAX_SPM_BYTES: its
    bytes read here (``read_regular``) and handed over, so that the library never opens a path that
    could have been swapped for a FIFO since the check."""
    import sentencepiece

    try:
        data = read_regular(path, "a SentencePiece model", MAX_SPM_BYTES, CheckpointError)
    except FileNotFoundError:
        raise CheckpointError(f"{path.parent}: missing tokenizer file {path.name}") from None
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(data)
    except Exception as err:  # RuntimeError for a malformed proto: never a traceback
        raise CheckpointError(f"{path}: not a SentencePiece model ({first_line(err)})") from None
    return processor


def _spm_call(path: Path, work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``work(*args, **kwargs)`` of a SentencePiece model; what it raises (a piece that is not
    UTF-8) is one line."""
    try:
        return work(*args, **kwargs)
    except Exception as err:
        raise CheckpointError(f"{path}: SentencePiece failed ({first_line(err)})") from None


class MarianTokenizer:
    """Text -> ids and ids -> text for a Marian checkpoint, as ``transformers.MarianTokenizer`` does.

    ``source_vocabulary`` and ``target_vocabulary`` are tuples of pieces indexed by id (the same
    tuple unless the checkpoint has a separate ``target_vocab.json``), each at least ``size`` and
    ``target_size`` long (the rows of the encoder's and the decoder's embedding tables; the target
    defaults to ``size``): an id the vocabulary file skips is its SentencePiece piece. Both are
    the pieces as a terminal may show them (``escape``); ``decode`` reads the pieces themselves.
    """

    def __init__(self, folder: str | Path, size: int | None = None, target_size: int | None = None):
        folder = Path(folder)
        self.folder = folder
        self.separate_vocabs = bool(_tokenizer_config(folder).get("separate_vocabs", False))
        self.spm_source = _load_spm(folder / "source.spm")
        self.spm_target = _load_spm(folder / "target.spm")
        self.source_ids = _read_vocab(folder / "vocab.json")
        self.target_ids = self.source_ids
        if self.separate_vocabs:
            self.target_ids = _read_vocab(folder / "target_vocab.json")
        # transformers decodes with the source model unless the vocabularies are separate.
        decoding_spm = self.spm_target if self.separate_vocabs else self.spm_source
        self._decoding_spm = decoding_spm
        self._decoding_file = folder / ("target.spm" if self.separate_vocabs else "source.spm")
        target_size = size if target_size is None else target_size
        source_pieces = _pieces_by_id(self.source_ids, self.spm_source, size, folder / "source.spm")
        target_pieces = source_pieces
        if self.separate_vocabs or target_size != size:
            target_pieces = _pieces_by_id(self.target_ids, decoding_spm, target_size, self._decoding_file)
        # The same tuple when the pieces are shared (run.checkpoint_config asks ``is``).
        self.source_vocabulary = _labels(source_pieces)
        self.target_vocabulary = (
            self.source_vocabulary if target_pieces is source_pieces else _labels(target_pieces)
        )
        # SentencePiece takes UTF-8 only: a lone surrogate of vocab.json is decoded as its label.
        self._target_pieces = tuple(_no_surrogates(p) for p in target_pieces)
        self.unk_id = self.source_ids[UNK]
        self.eos_id = self.source_ids.get(EOS, self.unk_id)
        self.pad_id = self.source_ids.get(PAD)
        specials = [t for t in (EOS, UNK, PAD) if t in self.source_ids]
        self._special = re.compile("(" + "|".join(re.escape(t) for t in specials) + ")")
        self._special_ids = {self.source_ids[t] for t in specials}

    def source_pieces(self, text: str) -> list[str]:
        """The encoder's pieces of ``text`` (without the ``</s>`` that ``encode_source`` appends)."""
        return self._pieces(text, self.spm_source, self.folder / "source.spm")

    def target_pieces(self, text: str) -> list[str]:
        """The decoder's pieces of ``text`` (without ``</s>``)."""
        return self._pieces(text, self.spm_target, self.folder / "target.spm")

    def encode_source(self, text: str) -> list[int]:
        """The encoder's input ids: source pieces looked up in vocab.json, then ``</s>``."""
        return [self.source_ids.get(p, self.unk_id) for p in self.source_pieces(text)] + [self.eos_id]

    def encode_target(self, text: str) -> list[int]:
        """The decoder's label ids: target pieces looked up in the target vocabulary, then ``</s>``."""
        unk = self.target_ids.get(UNK, self.unk_id)
        return [self.target_ids.get(p, unk) for p in self.target_pieces(text)] + [self.eos_id]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of decoder ids, as ``MarianTokenizer.decode`` (specials skipped or kept as words)."""
        pieces, out, run = self._target_pieces, "", []
        for i in ids:
            if i in self._special_ids:
                if not skip_special_tokens:
                    out += self._decode_pieces(run) + pieces[i] + " "
                    run = []
            else:
                run.append(pieces[i] if 0 <= i < len(pieces) else UNK)
        out += self._decode_pieces(run)
        return out.replace(SPIECE_UNDERLINE, " ").strip()

    def _decode_pieces(self, pieces: list[str]) -> str:
        return _spm_call(self._decoding_file, self._decoding_spm.decode_pieces, pieces)

    def _pieces(self, text: str, spm: Any, file: Path) -> list[str]:
        pieces: list[str] = []
        for part in self._special.split(text):
            if not part:
                continue
            if self._special.fullmatch(part):
                pieces.append(part)
                continue
            if part.startswith(">>") and (end := part.find("<<")) != -1:  # a language code, e.g. >>fr<<
                pieces.append(part[: end + 2])
                part = part[end + 2 :]
            pieces.extend(_spm_call(file, spm.encode, part, out_type=str))
        return pieces


def _tokenizer_config(folder: Path) -> dict:
    path = folder / "tokenizer_config.json"
    if not path.exists():
        return {}  # absent; a FIFO or a device there is refused by read_json, not taken as absent
    config = read_json(path)
    return config if isinstance(config, dict) else {}


def _pieces_by_id(vocab: dict[str, int], spm: Any, size: int | None, spm_file: Path) -> tuple[str, ...]:
    """The vocabulary as a tuple indexed by id; an id vocab.json skips is the SentencePiece piece of
    that id (as transformers' fallback), and a later piece with an id already taken wins (as there)."""
    n = max(max(vocab.values()) + 1, size or 0)
    pieces: list[str | None] = [None] * n
    for piece, i in vocab.items():
        pieces[i] = piece
    if None in pieces:
        spm_size = spm.get_piece_size()
        pieces = [
            p if p is not None else (_spm_call(spm_file, spm.id_to_piece, i) if i < spm_size else UNK)
            for i, p in enumerate(pieces)
        ]
    return tuple(pieces)  # type: ignore[arg-type]


def _labels(pieces: tuple[str, ...]) -> tuple[str, ...]:
    """The pieces as a terminal may show them (``escape``): the same tuple when all are printable."""
    if all(p.isprintable() for p in pieces):
        return pieces
    return tuple(escape(p) for p in pieces)


def _no_surrogates(piece: str) -> str:
    """``piece`` with each lone surrogate (valid in JSON's ``\\udc80``, not in UTF-8) as <U+DC80>."""
    try:
        piece.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(f"<U+{ord(c):04X}>" if 0xD800 <= ord(c) <= 0xDFFF else c for c in piece)
    return piece


class T5Tokenizer:
    """Text -> ids and ids -> text for a T5 or Flan-T5 checkpoint, as ``transformers.T5Tokenizer``:
    the SentencePiece unigram model of ``spiece.model`` (its ids are the model's: ``<pad>`` 0,
    ``</s>`` 1, ``<unk>`` 2), then the ``extra_ids`` sentinels (``<extra_id_0>`` the last id:
    tokenizer_config.json's ``extra_ids``, 100 by default), then ``</s>`` appended. The literal
    special tokens in a text (``</s>``, ``<extra_id_3>``) are those tokens. Both stacks read the
    same pieces (one tuple), padded to ``size`` (the embedding table's rows: t5-small has 32,128
    rows for 32,100 pieces) with labels of rows no piece names.

    A folder with ``tokenizer.json`` and no ``spiece.model`` (as many on the hub) is read as
    ``AutoTokenizer`` reads it: the same unigram pieces (the sentinels among them), its normalizer
    (SentencePiece's nmt_nfkc charsmap: ``Precompiled``), its Metaspace pre-tokenizer and its
    ``$A </s>`` template, run by the ``tokenizers`` library once the file has passed the
    allow-list (``tokenizer_check``: what T5's file holds and nothing more).
    """

    def __init__(self, folder: str | Path, size: int | None = None):
        folder = Path(folder)
        self.file = folder / "spiece.model"
        self.spm: Any = None
        self._library: NativeProcess | None = None
        if not self.file.exists() and (folder / "tokenizer.json").exists():
            self.file = folder / "tokenizer.json"
            pieces, specials, n = self._from_json(self.file)
        else:
            pieces, specials, n = self._from_spm(folder)
        if EOS not in specials:
            raise CheckpointError(f"{self.file}: the tokenizer has no {EOS}")
        if size is not None and size < len(pieces):
            raise CheckpointError(
                f"{folder}: the tokenizer has {len(pieces)} pieces, the embedding table {size} rows"
            )
        pieces += [f"<row {i}>" for i in range(len(pieces), size or 0)]  # rows no piece names
        self._pieces = tuple(pieces)
        self.source_vocabulary = self.target_vocabulary = _labels(self._pieces)
        self.eos_id, self.pad_id = specials[EOS], specials.get(PAD)
        self._specials = specials
        self._special = re.compile(
            "(" + "|".join(re.escape(t) for t in sorted(specials, key=len, reverse=True)) + ")"
        )
        self._pieces_of_spm = n

    def _from_spm(self, folder: Path) -> tuple[list[str], dict[str, int], int]:
        """spiece.model's pieces, then the sentinels; the special pieces by text; how many are the model's."""
        self.spm = _load_spm(self.file)
        extra = _tokenizer_config(folder).get("extra_ids", 100)
        if type(extra) is not int or not 0 <= extra <= 10_000:
            raise CheckpointError(
                f"{folder / 'tokenizer_config.json'}: extra_ids is {shown(extra)}, not a count"
            )
        n = self.spm.get_piece_size()
        pieces = [_spm_call(self.file, self.spm.id_to_piece, i) for i in range(n)]
        pieces += [f"<extra_id_{extra - 1 - k}>" for k in range(extra)]
        specials = {p: i for i, p in enumerate(pieces) if p in (EOS, UNK, PAD) or p.startswith("<extra_id_")}
        return pieces, specials, n

    def _from_json(self, path: Path) -> tuple[list[str], dict[str, int], int]:
        """tokenizer.json's unigram pieces (the sentinels among them), checked; its special tokens
        by text (the added tokens marked special); how many pieces it has."""
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise CheckpointError(
                "T5's tokenizer.json needs tokenizers: pip install 'transformer-walkthrough[models]'"
            ) from None
        spec = check_tokenizer(read_json(path, MAX_TOKENIZER_BYTES, what="a readable tokenizer"), path,
                               models=("Unigram",))  # fmt: skip
        pieces = [_no_surrogates(piece) for piece, _ in spec["model"]["vocab"]]
        n = len(pieces)
        specials = {t["content"]: t["id"] for t in spec["added_tokens"] if t.get("special") and t["id"] < n}
        text = json.dumps(spec, ensure_ascii=False, separators=COMPACT)
        self._library = NativeProcess(str(path), lambda: Tokenizer.from_str(text), OPS)
        return pieces, specials, n

    def pieces(self, text: str) -> list[int]:
        """The ids of ``text``'s pieces (without the ``</s>`` that ``encode_source`` appends)."""
        ids: list[int] = []
        for part in self._special.split(text):
            if part in self._specials:
                ids.append(self._specials[part])
            elif part:
                ids.extend(_spm_call(self.file, self.spm.encode, part))
        return ids

    def encode_source(self, text: str) -> list[int]:
        """The encoder's input ids: the pieces, then ``</s>`` (tokenizer.json's template appends it)."""
        if self._library is None:
            return [*self.pieces(text), self.eos_id]
        ids = self._library.call("encode", text, doing="encoding the text")
        if not isinstance(ids, list) or any(not (type(i) is int and 0 <= i < len(self._pieces)) for i in ids):
            raise CheckpointError(f"{self.file}: encoding gave an id that is not one of the pieces")
        return ids

    encode_target = encode_source  # the labels: the same pieces, then </s>

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of ids, as ``T5Tokenizer.decode``: the pieces joined, each ▁ a space, the first
        piece's ▁ dropped (transformers' Metaspace decoder); special tokens (and rows no piece
        names) skipped, or kept as words."""
        special = set(self._specials.values())
        ordinary = range(self._pieces_of_spm)
        pieces = [
            self._pieces[i] for i in (int(i) for i in ids)
            if (i in special and not skip_special_tokens) or (i in ordinary and i not in special)
        ]  # fmt: skip
        text = "".join(pieces).replace(SPIECE_UNDERLINE, " ")
        return text[1:] if pieces and pieces[0].startswith(SPIECE_UNDERLINE) else text
