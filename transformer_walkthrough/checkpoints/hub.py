"""Where a checkpoint's files are: a folder given by its path, or a hub id fetched into the hub's cache."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from ..regular_files import open_regular, read_regular
from .errors import CheckpointError
from .jsonfile import values_at_most

# What a Marian, GPT-2, Llama or BERT folder needs, and nothing else (the hub's opus-mt, gpt2 and
# bert-base repos also hold TensorFlow, Flax and Rust weights of the same size, which a download
# must not fetch). vocab.txt: BERT's WordPiece vocabulary, all that some bert-base folders have.
CONFIG_AND_TOKENIZER = (
    "config.json", "generation_config.json", "tokenizer_config.json",
    "source.spm", "target.spm", "vocab.json", "target_vocab.json", "tokenizer.json",
    "merges.txt", "special_tokens_map.json", "vocab.txt", "spiece.model",
)  # fmt: skip
# In order of preference: one safetensors file, the index of a sharded one, torch's format.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
TORCH_SHARD_INDEX = "pytorch_model.bin.index.json"  # not read: refused with a way out

# The hub's rule for repository ids: [namespace/]name, letters, digits, '-', '_', '.'.
# Matched whole (``fullmatch``: a "$" would let "org/m\n" through, and \w is ASCII only).
_HUB_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}", re.ASCII)
_COMMIT = re.compile(rb"([0-9a-f]{40})\s*")
MAX_REF_BYTES = 4096  # a ref holds one commit hash: 40 characters
# A commit's tree listing (trees/<commit>.json): ~150 bytes and 6 JSON values a file of the repo,
# so these allow a repo of 300,000 files, and parsing a flood of them takes ~100 MB at most.
_TREE = re.compile(r"[0-9a-f]{40}\.json")
MAX_TREE_BYTES = 50_000_000
MAX_TREE_VALUES = 2_000_000
MAX_TOKEN_BYTES = 1_000_000  # the hub token (~40 bytes) and stored_tokens (a few per user)


def _offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it, but read now rather than at its import."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def expanded(model: str) -> Path:
    """``model`` as a path, ``~`` expanded; ``~user`` of no such user (or no home) as it is."""
    try:
        return Path(model).expanduser()
    except RuntimeError:  # "Could not determine home directory."
        return Path(model)


def resolve(model: str) -> Path:
    """The folder holding ``model``'s files: ``model`` itself if it is a folder, else a hub id's snapshot.

    A hub id (``Helsinki-NLP/opus-mt-en-de``) is fetched with ``huggingface_hub`` into its usual
    cache (HF_HUB_CACHE or HF_HOME), config, tokenizer and one set of weights only; when the files
    are cached, no network is needed (and with HF_HUB_OFFLINE=1 none is tried).
    """
    path = expanded(model)
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(f"{model}: not a folder; pass the checkpoint's folder or a hub id")
    if ".." in model or "--" in model or not _HUB_ID.fullmatch(model):
        raise CheckpointError(f"{model}: no such folder, and not a hub id (like Helsinki-NLP/opus-mt-en-de)")
    return _download(model)


def _download(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    from .safetensors_file import shard_files

    offline = _offline()
    commit = _check_cache(repo_id, offline)

    def fetch(*patterns: str, revision: str | None = None) -> Path:
        return Path(
            snapshot_download(
                repo_id, revision=revision, allow_patterns=list(patterns), local_files_only=offline
            )
        )

    try:
        # config, tokenizer, and the weights' one file or index (torch's shard index too, to refuse
        # it). Offline, the commit refs/main names, as read here: the client would read the ref
        # whole, a trailing newline too, and find no snapshot of that name.
        first = (*CONFIG_AND_TOKENIZER, *WEIGHT_FILES[:2], TORCH_SHARD_INDEX)
        folder = fetch(*first, revision=commit if offline else None)
        if (folder / WEIGHT_FILES[0]).is_file():
            return folder
        # The rest from the same commit (the snapshot's folder is named by it), should main move.
        if (folder / WEIGHT_FILES[1]).is_file():  # a sharded checkpoint: the shards its index names
            return fetch(*shard_files(folder / WEIGHT_FILES[1]), revision=folder.name)
        if (folder / TORCH_SHARD_INDEX).is_file():  # read_weights refuses it, saying what to do
            return folder
        return fetch(WEIGHT_FILES[2], revision=folder.name)  # older repos have only torch's format
    except CheckpointError:
        raise
    except Exception as err:  # the hub client's errors span HTTP, OS and its own classes
        raise CheckpointError(_download_failure(repo_id, err, offline)) from None


def _check_cache(repo_id: str, offline: bool) -> str | None:
    """Every file of the hub's cache that the hub client would read for ``repo_id``, checked first:
    it reads them with a plain ``open()``, so a FIFO there would block for ever and ``/dev/zero``
    read until memory runs out. Returns the commit the cache's ``refs/main`` names (None: not cached).

    The files: ``refs/main`` (``_cached_commit``); the commits' tree listings, ``trees/<commit>.json``
    (read offline to tell a complete snapshot; online, the listing of the commit the hub names,
    which is not known before: each is checked), regular and bounded, their JSON values counted;
    online, the token files (``HF_TOKEN_PATH`` and ``stored_tokens`` beside it), regular and
    bounded. The snapshot's own files are the checkpoint's, each read as such later."""
    from huggingface_hub import constants

    repo = Path(constants.HF_HUB_CACHE).expanduser() / f"models--{repo_id.replace('/', '--')}"
    commit = _cached_commit(repo / "refs" / "main")
    trees = repo / "trees"
    listings = [trees / f"{commit}.json"] if offline and commit else []
    if not offline:
        with contextlib.suppress(OSError):  # no folder, or one not to be listed: the client fails alike
            listings = sorted(p for p in trees.iterdir() if _TREE.fullmatch(p.name))
    for path in listings:
        _check_tree(path)
    if not offline:
        tokens = (constants.HF_TOKEN_PATH, getattr(constants, "HF_STORED_TOKENS_PATH", None))
        for path in filter(None, tokens):  # stored_tokens: newer clients only
            try:
                with open_regular(path, "a hub token file", MAX_TOKEN_BYTES, CheckpointError):
                    pass
            except FileNotFoundError:
                pass  # no token: the hub is asked anonymously
    return commit


def _cached_commit(ref: Path) -> str | None:
    """The commit of the cache's ``refs/main``, which the hub client reads whole (offline, or when
    the hub cannot be reached) and joins to a path: refused unless it is a regular file holding a
    commit hash, so that ``../..`` does not name a folder outside the cache. A hash followed by
    whitespace (a newline) is that hash; None when there is no ref."""
    if not os.path.lexists(ref):
        return None  # not cached yet (or no cache): the hub client says so, or downloads it
    try:
        data = read_regular(ref, "a hub cache's ref (a commit hash)", MAX_REF_BYTES, CheckpointError)
    except FileNotFoundError:
        return None  # a link to nothing: as if not cached
    commit = _COMMIT.fullmatch(data)
    if not commit:
        raise CheckpointError(f"{ref}: not a commit hash; delete the file (or the cached model) and retry")
    return commit[1].decode("ascii")


def _check_tree(path: Path) -> None:
    """A commit's tree listing, which the hub client parses whole with ``json.load``: a regular file
    of at most ``MAX_TREE_BYTES`` and ``MAX_TREE_VALUES`` JSON values (a flood of ``{},`` would
    take 70 bytes of memory for each 3 of the file), or absent."""
    what = "a hub cache's file listing"
    try:
        data = read_regular(path, what, MAX_TREE_BYTES, CheckpointError)
    except FileNotFoundError:
        return  # no listing: the hub client does without
    if values_at_most(data) > MAX_TREE_VALUES:
        raise CheckpointError(
            f"{path}: more than {MAX_TREE_VALUES:,} JSON values, too many for {what}; "
            "delete the file (or the cached model) and retry"
        )


def _download_failure(repo_id: str, err: Exception, offline: bool) -> str:
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    how = (
        "run once with network access to cache it, or download the model's folder "
        "(config.json, the weights and the tokenizer's files) and pass its path"
    )
    if isinstance(err, RepositoryNotFoundError):
        return f"{repo_id}: no such model on the hub (or it is private or gated)"
    if offline:
        return f"{repo_id}: not in the local hub cache and HF_HUB_OFFLINE is set: {how}"
    if isinstance(err, LocalEntryNotFoundError):
        return f"{repo_id}: the hub cannot be reached and the model is not in the local cache: {how}"
    detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"{repo_id}: download failed ({detail}): {how}"
