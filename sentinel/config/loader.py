"""Configuration: where the settings come from, merged and checked once.

Sources, lowest precedence first: the defaults of :class:`Settings`
(:mod:`sentinel.config.settings`, the model and its ranges), a YAML file
(``--config``), ``SENTINEL_*`` environment variables, command-line flags.
Unknown keys are rejected and every error names the key and where it came
from, so ``sentinel check-config FILE`` and a bad start-up say exactly what to
fix. The API key itself is never a setting: it is read from
``--api-key-file`` (``SENTINEL_API_KEY_FILE``) or ``SENTINEL_API_KEY`` when
needed and never logged.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sentinel.canary.catalog import CatalogError, apply_overrides, load_catalog
from sentinel.capped import FileTooLarge, read_capped_file
from sentinel.cli_flags import deprecated
from sentinel.config.settings import RENAMED, Settings

__all__ = [
    "ENV_PREFIX",
    "FIELDS",
    "MAX_CONFIG_BYTES",
    "STRUCTURED",
    "ConfigError",
    "effective_config",
    "env_name",
    "load_settings",
    "read_api_key",
    "unknown_env",
]

ENV_PREFIX = "SENTINEL_"
# A settings file is a page of YAML; anything much larger is a wrong path.
MAX_CONFIG_BYTES = 1024 * 1024


class ConfigError(Exception):
    """A configuration problem, with the key and the source in its message."""


FIELDS = tuple(Settings.model_fields)
# The nested sections: a variable or flag gives the whole mapping as YAML (or JSON flow).
STRUCTURED = frozenset({"canaries", "restart_budget"})


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def load_settings(
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> Settings:
    """Merge the sources and validate once; raise :class:`ConfigError` naming the culprit."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if config_file is None and env.get(env_name("config")):
        config_file = Path(env[env_name("config")])
    if config_file is not None:
        for key, value in _current_names(_read_file(config_file), str(config_file)).items():
            merged[key] = value
            origin[key] = str(config_file)
    unknown = unknown_env(env)
    if unknown:
        raise ConfigError(
            f"unknown environment variable{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(unknown)} (known: {ENV_PREFIX}<setting>, e.g. {env_name('target')})"
        )
    for field, name in _env_names(env):
        value = env[name]
        where = f"environment variable {name}"
        _check_text(value, where)
        merged[field] = _parse_mapping(value, where) if field in STRUCTURED else value
        origin[field] = where
    for key, value in _current_names(flags or {}, None).items():
        if value is not None:
            where = f"flag --{key.replace('_', '-')}"
            if key in STRUCTURED and isinstance(value, str):  # one YAML mapping, as the variable
                _check_text(value, where)
                value = _parse_mapping(value, where)
            merged[key] = value
            origin[key] = where
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, origin, config_file)) from None
    _check_catalog_deadlines(settings, origin, config_file)
    return settings


def _current_names(given: Mapping[str, Any], where: str | None) -> dict[str, Any]:
    """``given`` with each renamed key (:data:`RENAMED`) under its new name, noted on stderr.

    ``where``: the file the keys come from (None: they are flags). A renamed
    key given beside its new name is refused: which one was meant cannot be
    told.
    """
    current: dict[str, Any] = {}
    for key, value in given.items():
        new = RENAMED.get(key)
        if new is None:
            current[key] = value
            continue
        old_name, new_name = (_flag(key), _flag(new)) if where is None else (key, new)
        if new in given:
            raise ConfigError(
                f"{where or 'flags'}: {old_name} and {new_name} both given; "
                f"{old_name} is the old name of {new_name}"
            )
        deprecated("sentinel", old_name if where is None else f"{key} (in {where})", new_name)
        current[new] = value
    return current


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _env_names(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(setting, the variable that sets it) for every setting ``env`` sets, old names included.

    An old variable (:data:`RENAMED`) counts, with one note on stderr, where
    its new one is not set. Both set, the new one wins, with a note naming
    what is left unread: unlike a file's keys or the flags, variables come in
    layers (the shipped manifests set the new name, an older overlay patches
    the old one in), and refusing them would hold the pod at its startup
    probe.
    """
    found = [(field, env_name(field)) for field in FIELDS if env_name(field) in env]
    for old, new in RENAMED.items():
        if env_name(old) not in env:
            continue
        if env_name(new) in env:
            if env[env_name(old)] != env[env_name(new)]:
                print(
                    f"sentinel: {env_name(old)} ({env[env_name(old)]!r}) is the old name of "
                    f"{env_name(new)}, which is set too and wins ({env[env_name(new)]!r})",
                    file=sys.stderr,
                )
            continue
        deprecated("sentinel", env_name(old), env_name(new))
        found.append((new, env_name(old)))
    return found


def _check_catalog_deadlines(
    settings: Settings, origin: Mapping[str, str], config_file: Path | None
) -> None:
    """The windows against every enabled canary's deadline, the catalog's included.

    :class:`Settings` checks the deadlines it is given; the catalog's own are
    only known here. A catalog that does not load is reported where it is
    loaded, with its own message.
    """
    try:
        specs = apply_overrides(load_catalog(settings.catalog).specs, settings.canaries)
    except (CatalogError, OSError):
        return
    try:
        settings.check_windows({s.name: s.deadline for s in specs if s.enabled})
    except ValueError as exc:
        window = str(exc).split(maxsplit=1)[0]  # the setting the message is about
        where = _where((window, "canaries"), origin, config_file)
        raise ConfigError(f"{where}: {exc}") from None


# Variables that are not settings but are read under the prefix, and the shapes
# Kubernetes injects for a Service named ``sentinel...`` (service links), which
# a pod receives whether it wants them or not.
OTHER_ENV = frozenset({ENV_PREFIX + "CONFIG", ENV_PREFIX + "API_KEY"})
SERVICE_LINK = re.compile(
    r"^[A-Z0-9_]*_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_\d+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$"
)


def unknown_env(env: Mapping[str, str]) -> list[str]:
    """``SENTINEL_*`` variables that name no setting: a typo there would be silently ignored."""
    known = {env_name(field) for field in (*FIELDS, *RENAMED)} | OTHER_ENV
    return sorted(
        name
        for name in env
        if name.startswith(ENV_PREFIX) and name not in known and not SERVICE_LINK.match(name)
    )


def _check_text(value: str, where: str) -> None:
    """An environment value that was not valid UTF-8 arrives with surrogates: refuse it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{where}: not valid UTF-8 text") from None


def _parse_mapping(value: str, where: str) -> Any:
    """A structured variable (``SENTINEL_CANARIES``): YAML or JSON flow, as in the file."""
    data = _load_yaml(value, where)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping such as {{text: {{interval: 10}}}}")
    return data


def _load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load``, with every way it can fail as one line naming ``where``.

    A deeply nested document exhausts the recursion limit inside PyYAML's
    composer; that is a malformed input too, not a crash.
    """
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {_one_line(str(exc))}") from None
    except RecursionError:
        raise ConfigError(f"{where}: not valid YAML: nested too deeply") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _read_file(path: Path) -> dict[str, Any]:
    try:
        raw = read_capped_file(path, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except FileTooLarge:
        raise ConfigError(
            f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KiB; not a settings file"
        ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    data = _load_yaml(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


# A word of an error message that may name a setting.
_WORD = re.compile(r"[a-z][a-z0-9_]*")


def _where(keys: Iterable[str], origin: Mapping[str, str], config_file: Path | None) -> str:
    """Where the values of ``keys`` came from: each flag, variable or file once, in order.

    Where every one of them is a default, the file (what it did not set is what
    it left at the default), else "settings".
    """
    sources = dict.fromkeys(origin[key] for key in keys if key in origin)
    return ", ".join(sources) or (str(config_file) if config_file else "settings")


def _describe(exc: ValidationError, origin: Mapping[str, str], config_file: Path | None) -> str:
    """One line per error, naming the source of the value it is about.

    An error of one key names where that key came from; a cross-field one
    (``hang_window must exceed two scrape intervals``) names the source of
    every setting its message mentions, so ``--hang-window 3`` is blamed even
    when the other side is a default.
    """
    lines = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"])
        message = error["msg"]
        if error["loc"]:
            keys: Iterable[str] = (str(error["loc"][0]),)
        else:
            keys = (word for word in _WORD.findall(message) if word in Settings.model_fields)
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{_where(keys, origin, config_file)}: {loc or '(settings)'}: {message}")
    return "\n".join(lines)


def read_api_key(
    source: Settings | Path | None = None, env: Mapping[str, str] | None = None
) -> str | None:
    """The target's API key: the key file, else ``SENTINEL_API_KEY``; never logged.

    The one reader for the daemon and ``sentinel probe``. ``source`` is the
    settings (their ``api_key_file``) or a key file named directly (``probe
    --api-key-file``); without one, ``SENTINEL_API_KEY_FILE`` names the file.
    A key file is read the way secret mounts and editors write it: a UTF-8
    byte-order mark and surrounding whitespace (the trailing newline) are not
    part of the key. A file of more than one line is refused rather than sent
    whole, since no server would accept it and the error would name neither
    the file nor the cause; the message names the file, never its content.
    """
    env = os.environ if env is None else env
    key_file = source.api_key_file if isinstance(source, Settings) else source
    if key_file is None and env.get(ENV_PREFIX + "API_KEY_FILE"):
        key_file = Path(env[ENV_PREFIX + "API_KEY_FILE"])
    if key_file is None:
        from_env = env.get(ENV_PREFIX + "API_KEY", "").removeprefix("\ufeff").strip()
        if from_env:
            _check_text(from_env, f"environment variable {ENV_PREFIX}API_KEY")
        return from_env or None
    try:
        text = key_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ConfigError(f"api_key_file: cannot read {key_file}: {reason}") from None
    key = text.removeprefix("\ufeff").strip()
    if not key:
        raise ConfigError(f"api_key_file: {key_file} is empty")
    if len(key.splitlines()) > 1:
        raise ConfigError(
            f"api_key_file: {key_file} holds more than one line; it must hold the key alone"
        )
    return key


def effective_config(settings: Settings) -> dict[str, Any]:
    """The settings as JSON-able data, for ``/status`` and diagnostics bundles."""
    return settings.model_dump(mode="json")
