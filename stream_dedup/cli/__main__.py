"""``python -m stream_dedup.cli [ARGS]``: the same as the ``stream-dedup`` console script."""

import sys

from . import main

sys.exit(main())
