"""Configuration: the settings model (each setting declared once) and its sources.

:mod:`.settings` is the typed model of every knob of ``sentinel run`` (ranges
and cross-field rules checked once); :mod:`.loader` merges its sources (flags,
environment, file) and reads the API key. The loader is left out of the face:
it loads YAML and the canary catalog, which a reader of the model does not need.
"""

from sentinel.config.settings import CanaryOverride, RestartBudget, Settings, split_host_port

__all__ = ["CanaryOverride", "RestartBudget", "Settings", "split_host_port"]
