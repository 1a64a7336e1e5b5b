"""``python -m sentinel.diagnostics``: the capture child (:mod:`sentinel.diagnostics.child`).

The daemon starts its capture child here rather than at the child module, so
:func:`~sentinel.boot.boot` runs before the capture's imports, as in the daemon.
"""

import sys

from sentinel.boot import boot

boot()

from sentinel.diagnostics.child import main  # noqa: E402  # after the boot, by design

sys.exit(main())
