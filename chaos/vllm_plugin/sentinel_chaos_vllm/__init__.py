"""Silent fault injection inside a real vLLM, switched at run time through files.

vLLM calls :func:`register` in every process it starts (the
``vllm.general_plugins`` entry point). Without ``SENTINEL_CHAOS_FAULT_DIR``
it does nothing.
"""

from __future__ import annotations

from .faults import FAULT_DIR_ENV, FAULTS, FaultBoard

__all__ = ["FAULTS", "FAULT_DIR_ENV", "FaultBoard", "register"]


def register() -> None:
    """The entry point vLLM calls; installs the hooks once per process."""
    from .hooks import install

    install()
