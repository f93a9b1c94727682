"""The ``gpuplan.commands`` entry point: ``gpuplan loadtest``, loaded for nothing but its help.

``gpuplan --help`` lists every sub-command, so a plugin must cost nothing until it runs: gpuplan
reads :data:`HELP` to list it and calls :func:`main` with the arguments after its name. The load
tester's own parser (:mod:`loadtest.cli`) imports its whole measuring stack, so it is imported
only then.
"""

from __future__ import annotations

from collections.abc import Sequence

HELP = "load-test a service: capacity search, classify, compare strategies"


def main(argv: Sequence[str]) -> int:
    from loadtest.cli import main as run

    return run(argv, prog="gpuplan")
