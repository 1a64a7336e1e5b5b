"""``sentinel check-config FILE``: validate a settings file and print what it makes effective.

What a reviewer of a config change wants to read before it ships: whether it
enforces (a confirmed hang fails liveness) or only observes, the target, the
canaries that will be sent and those that will not (and why), and every
setting that differs from its default. ``--env`` applies the ``SENTINEL_*``
environment over the file, as ``sentinel run`` would; without it the file
is judged alone, so the same file checks the same anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from sentinel.canary.catalog import CatalogError, apply_overrides, load_catalog
from sentinel.canary.spec import CanarySpec
from sentinel.config.loader import ConfigError, effective_config, load_settings
from sentinel.config.settings import Settings
from sentinel.exitcode import ExitCode

EPILOG = "exit codes: 0 valid, 2 invalid (one line on stderr naming the file and the key)"


def add_check_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("file", type=Path)
    parser.add_argument(
        "--env",
        action="store_true",
        help="apply the SENTINEL_* environment over the file, as sentinel run does",
    )


def check_config(path: Path, *, with_env: bool = False) -> int:
    """Validate ``path`` (raises :class:`ConfigError`), print the effective configuration."""
    settings = load_settings(path, env=dict(os.environ) if with_env else {}, flags={})
    try:
        catalog = load_catalog(settings.catalog)
        specs = apply_overrides(catalog.specs, settings.canaries, str(path))
    except CatalogError as exc:
        raise ConfigError(str(exc)) from None
    for line in describe(path, settings, specs, with_env=with_env):
        print(line)
    return ExitCode.OK


def describe(
    path: Path, settings: Settings, specs: tuple[CanarySpec, ...], *, with_env: bool
) -> list[str]:
    """The lines ``check-config`` prints, in the order a reviewer reads them."""
    sent = [s for s in specs if s.enabled]
    off = [s for s in specs if not s.enabled]
    mode = (
        "true: a confirmed hang fails liveness (the kubelet restarts the server)"
        if settings.enforce
        else "false: observe only (everything reported, liveness stays 200)"
    )
    lines = [
        f"{path}: ok" + (" (with the SENTINEL_* environment applied)" if with_env else ""),
        f"target: {settings.target}",
        f"enforce: {mode}",
        "canaries: "
        + (", ".join(f"{s.name} ({s.kind}, every {s.interval:g}s)" for s in sent) or "none"),
    ]
    if off:
        lines.append("not sent: " + ", ".join(f"{s.name} ({_why_off(s, settings)})" for s in off))
    changed = changed_settings(settings)
    lines.append(
        "set here: "
        + (", ".join(f"{k}={json.dumps(v)}" for k, v in changed.items()) or "nothing (defaults)")
    )
    return lines


def changed_settings(settings: Settings) -> dict[str, Any]:
    """The settings that differ from their defaults (secrets are files: their paths show)."""
    now, default = effective_config(settings), effective_config(Settings())
    return {k: _set_only(v) for k, v in now.items() if v != default.get(k)}


def _set_only(value: Any) -> Any:
    """A nested setting without its unset (None) members: what the file said."""
    if isinstance(value, dict):
        return {k: _set_only(v) for k, v in value.items() if v is not None}
    return value


def _why_off(spec: CanarySpec, settings: Settings) -> str:
    override = settings.canaries.get(spec.name)
    if override is not None and override.enabled is False:
        return "disabled by this configuration"
    return "disabled in the catalog"
