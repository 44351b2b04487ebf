"""The one error class the library raises for bad input; the CLI turns it into exit code 2."""


class WalkthroughError(Exception):
    """Bad input from the user: a config, a stage name, an export path. Message is one line."""


class ConfigError(WalkthroughError):
    """The YAML config cannot be read or does not describe a valid model."""


class StageError(WalkthroughError):
    """A stage or matrix name that the trace does not have."""


class ExportError(WalkthroughError):
    """An export path that cannot be written."""


def close_matches(word: str, candidates: list[str], cutoff: float = 0.6) -> list[str]:
    """The candidate spelled most like ``word``, for a "did you mean" (difflib loads only then)."""
    import difflib

    return difflib.get_close_matches(word, candidates, n=1, cutoff=cutoff)
