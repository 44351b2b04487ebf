"""A checkpoint folder saved again by transformers in small shards (``model.safetensors.index.json``)."""

from __future__ import annotations

import shutil
from pathlib import Path


def sharded_copy(folder: Path, to: Path, model_class: type, shard: str = "20KB") -> Path:
    """``folder``'s model saved again by ``model_class.save_pretrained`` in shards of at most ``shard``,
    with the folder's tokenizer files beside them."""
    model_class.from_pretrained(folder).save_pretrained(to, max_shard_size=shard)
    for file in folder.iterdir():
        if not file.name.startswith(("model", "pytorch_model")) and not (to / file.name).exists():
            shutil.copy(file, to)
    return to
