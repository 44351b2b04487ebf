"""``config``: the effective config printed as YAML, to save and edit."""

import typer

from .app import app, user_errors
from .options import ConfigOption, PrecisionOption, SeedOption


@app.command("config")
@user_errors
def show_config(
    config: ConfigOption = None, seed: SeedOption = None, precision: PrecisionOption = None
) -> None:
    """Print the effective config as YAML (save it, edit it)."""
    from ..config import config_to_yaml, load_config

    typer.echo(config_to_yaml(load_config(config, seed=seed, precision=precision)), nl=False)
