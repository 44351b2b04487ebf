"""BERT's and DistilBERT's WordPiece tokenizer read from a checkpoint's folder, equal to
``transformers.AutoTokenizer`` (5.18): from tokenizer.json (BertTokenizerFast's layout) or from
vocab.txt alone, as many bert-base checkpoints ship (``tokenizer_folder.from_vocab_txt`` builds
the spec ``BertTokenizer.__init__`` builds, with the casing, accents and CJK splitting that
tokenizer_config.json says). The checked spec, the child process that runs the library and the
labels' escaping are ``bpe.BPETokenizer``'s: this class only insists that the model is WordPiece.

The text is normalized (``do_lower_case``: lower-cased and accents stripped; each CJK character a
word of its own), cut into words at spaces and punctuation, and each word into the longest
pieces of the vocabulary from its start (bert-base-uncased: ``embeddings`` -> ``em ##bed
##ding ##s``). A word with no
such cut, or longer than 100 characters, is ``[UNK]``. ``encode`` puts ``[CLS]`` first and
``[SEP]`` last.

Labels are the vocabulary's tokens as they are, escaped for the terminal (``bpe.escape``):
``##bed`` stays ``##bed``, ``[CLS]``, ``[SEP]``, ``[MASK]`` as they are. Why not ``‿ily`` or
BPE's ``·``: a WordPiece token never holds a space (the pre-tokenizer cuts there), so there is no
space to show; the ``##`` is part of the token itself (``##bed`` and ``bed`` are two entries
with two ids), it is how the BERT paper, transformers' ``convert_ids_to_tokens`` and every
tutorial write it, and a learner who checks a label against any of them finds the same text.
"""

from __future__ import annotations

from pathlib import Path

from .bpe import BPETokenizer
from .errors import CheckpointError


class WordPieceTokenizer(BPETokenizer):
    """Text -> ids and ids -> text for a BERT or DistilBERT checkpoint, as
    ``AutoTokenizer.from_pretrained(folder)`` does.

    ``mask_token``/``mask_id`` (``[MASK]``), ``cls_id`` (``[CLS]``, also ``bos_id``), ``sep_id``
    (``[SEP]``, also ``suffix_ids``), ``vocabulary`` and ``labels`` (the same tokens, escaped);
    ``decode`` joins ``##`` pieces and applies transformers' ``clean_up_tokenization`` when the
    config's ``clean_up_tokenization_spaces`` is true.
    """

    def __init__(self, folder: str | Path, size: int | None = None):
        super().__init__(folder, size)
        if not self.wordpiece:
            raise CheckpointError(f"{self.path}: not a WordPiece tokenizer (its model is BPE)")
