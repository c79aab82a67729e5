"""The command line: ``commands`` (``main``, ``build_parser``: ``python -m dali_backend``, ``dali-backend``),
``cliargs`` (the argument helpers the CLI and ``bench`` share), ``pictures`` (``preview``, what ``demo`` draws).

This package module is light: ``bench`` imports ``cliargs`` without loading the commands (which may
import ``bench``), and ``dali_backend.cli:main`` loads them on first use.
"""

from __future__ import annotations

__all__ = ["build_parser", "main"]


def __getattr__(name: str):
    if name in __all__:
        from . import commands

        return getattr(commands, name)
    raise AttributeError(f"module 'dali_backend.cli' has no attribute {name!r}")
