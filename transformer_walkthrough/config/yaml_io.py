"""YAML in and out: ``load_config`` reads a file safely (plain YAML only, no aliases, a regular
file of bounded size) and applies the command line's options; ``config_to_yaml`` writes the
commented config that ``walkthrough config`` prints and ``load_config`` reads back.

YAML is imported inside the functions: ``walkthrough --help`` should not pay for it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .display import DisplayConfig
from .model import ModelConfig
from .schema import check_keys, describe, quote
from .sentence import Config
from .tokens import tokenize
from .training import TrainingConfig

MAX_FILE_BYTES = 4_000_000  # a config is a page of YAML; a 50,257-word vocabulary is about 0.5 MB


# The sections of the file and the dataclass each one builds.
SECTIONS: dict[str, type] = {"model": ModelConfig, "display": DisplayConfig, "training": TrainingConfig}


def config_from_dict(data: dict | None) -> Config:
    """Build a Config from parsed YAML, checking every key and value."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping of keys at the top, got {describe(data)}")
    check_keys(data, Config, "", SECTIONS)
    kwargs = dict(data)
    for name, section in SECTIONS.items():
        if name in data:
            if not isinstance(data[name], dict):
                raise ConfigError(f"{name}: expected a section of keys, got {describe(data[name])}")
            check_keys(data[name], section, name, SECTIONS)
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
        return override(Config(), None, sentence, seed, precision)
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
    return override(config, data, sentence, seed, precision)


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


def override(
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
    from ..regular_files import read_regular

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
