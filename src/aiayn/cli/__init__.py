"""The ``aiayn`` command line: one module per command group, each holding its parser next to its handler
(``main`` assembles them). It imports no torch until a command needs it."""

from aiayn.cli.main import main

__all__ = ["main"]
