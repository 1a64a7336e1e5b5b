"""One-shot commands beside the daemon: ``sentinel status``, ``probe`` and ``demo``.

Each module is one subcommand of ``sentinel`` (:mod:`.status`, :mod:`.probe`,
:mod:`.demo`, :mod:`.check_config`), plus the listen addresses ``sentinel run``
tries before anything starts (:mod:`.listeners`). :mod:`sentinel.cli` imports
each only once its subcommand is chosen, so ``sentinel --help`` loads none.

The face holds the names that load no more than the settings do. Left out:
``probe``, ``status`` and ``demo`` (they load structlog, psutil, and for the
demo gRPC and the simulator) and the function ``check_config``, whose name is
its module's.
"""

from sentinel.commands.check_config import add_check_config_arguments
from sentinel.commands.listeners import ListenAddresses

__all__ = ["ListenAddresses", "add_check_config_arguments"]
