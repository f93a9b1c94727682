"""``python -m gpuplan``: the same as the ``gpuplan`` command."""

import sys

from gpuplan.cli import main

sys.exit(main())
