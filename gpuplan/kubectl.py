"""``kubectl gpuplan``: the command line as a kubectl plugin (the ``kubectl-gpuplan`` executable).

kubectl runs any ``kubectl-NAME`` on the PATH as ``kubectl NAME``; installed with gpuplan, this one
gives ``kubectl gpuplan plan PLAN.yaml`` (nodes read from the current context, read only) and
``kubectl gpuplan status [NAME] [-n NS]``, with the same options and exit codes as ``gpuplan``.
"""

from __future__ import annotations

import sys

from gpuplan.cli import main as cli_main


def main() -> int:
    return cli_main(sys.argv[1:], prog="kubectl gpuplan")


if __name__ == "__main__":
    sys.exit(main())
