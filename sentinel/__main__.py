"""``python -m sentinel``: the same as the ``sentinel`` command."""

import sys

from sentinel.cli import main

sys.exit(main())
