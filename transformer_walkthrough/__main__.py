"""``python -m transformer_walkthrough`` works like ``walkthrough``."""

from .cli import main

main()
