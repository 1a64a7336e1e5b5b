"""Redaction of secrets in everything sentinel emits: bundles, Events, logs, HTTP views.

Owns the one definition of "looks like a secret" and the one entry point,
:func:`redact`, that every sink calls on its way out (bundle files, Event
messages, log events with their rendered tracebacks, ``/status``,
``/incidents``, metric labels, ``probe`` output). The specialised functions
(:func:`redact_argv`, :func:`redact_env`, ...) are what :func:`redact` uses for
shapes it can recognise; callers that know they hold an argv or an environment
call those directly so the shape is not guessed.

A secret is recognised two ways, because each alone misses real leaks:

- **by name**: the value of a flag, variable, header or JSON/YAML key whose
  name, split into words (``_``, ``-``, ``.``, camelCase), has a secret word
  (``password``, ``passphrase``, ``token``, ``auth``, ``creds``, ``pat``,
  ``dsn``, ``cookie``, ``key`` ...). A name whose last word only describes
  where or what the secret is (``KEY_PATH``, ``--key-file``,
  ``HF_TOKEN_DIR``, ``AUTH_TYPE``) is not a secret, so bundles keep their
  paths;
- **by shape**: URL userinfo (``scheme://user:pw@host``), ``Authorization``
  values, well-known token formats (cloud access keys, GitHub and Slack
  tokens, JWTs, ``sk-`` keys, PEM private keys) wherever they appear, and long
  high-entropy environment values unless the variable is known to be harmless.

The name of a secret stays visible and only its value is replaced, so an
operator can still see *that* ``HF_TOKEN`` was set. :class:`SecretScrubber`
adds a second line of defence: values found to be secret are remembered and
replaced wherever else they show up (a stack dump, a config echo).

Everything here is pure; nothing reads files, the clock or the network.

The package is one entry point with two helpers behind it: ``names`` (which
names and environment entries are secret) and ``shapes`` (token formats and
pairs in free text and URLs). Callers import from this package only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any, overload

from sentinel.telemetry.redact.names import (
    REDACTED,
    is_secret_env,
    is_secret_name,
    looks_random,
)
from sentinel.telemetry.redact.shapes import redact_text, redact_url

__all__ = [
    "REDACTED",
    "SecretScrubber",
    "is_secret_env",
    "is_secret_name",
    "looks_random",
    "redact",
    "redact_argv",
    "redact_document",
    "redact_env",
    "redact_headers",
    "redact_text",
    "redact_url",
    "redact_value",
    "secret_values_in_argv",
    "secret_values_in_env",
    "secret_values_in_value",
    "structlog_processor",
]

# -- structures ----------------------------------------------------------------


def redact_argv(argv: Sequence[str]) -> list[str]:
    """Replace secret flag values (``--flag value``, ``--flag=value``) and secret shapes."""
    out: list[str] = []
    redact_next = False
    for arg in argv:
        if redact_next:
            redact_next = False
            if not arg.startswith("-"):
                out.append(REDACTED)
                continue
        if arg.startswith("-") and "=" in arg:
            flag, _, _value = arg.partition("=")
            out.append(f"{flag}={REDACTED}" if is_secret_name(flag) else redact_text(arg))
            continue
        if arg.startswith("-") and is_secret_name(arg):
            redact_next = True
        out.append(arg if arg.startswith("-") else redact_text(arg))
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Keep every variable name; replace secret values (by name, shape or entropy)."""
    return {
        name: (REDACTED if is_secret_env(name, value) else redact_text(value))
        for name, value in env.items()
    }


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Keep every header name; replace credentials (Authorization, cookies, API keys)."""
    return {
        name: (REDACTED if is_secret_name(name) else redact_text(value))
        for name, value in headers.items()
    }


def redact_value(value: Any) -> Any:
    """Redact a nested JSON-like value: secret-named keys lose their value, strings are scanned.

    Lists of strings are redacted as an argv, so a ``cmdline`` field keeps its
    shape and ``["--api-key", "x"]`` loses ``x``.
    """
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and is_secret_name(key) and _is_scalar(item):
                out[key] = REDACTED if item not in (None, "") else item
            elif (
                isinstance(key, str)
                and key.lower() in ("environ", "env", "environment")
                and (isinstance(item, Mapping) and all(isinstance(v, str) for v in item.values()))
            ):
                out[key] = redact_env(item)
            else:
                out[key] = redact_value(item)
        return out
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list | tuple):
        if value and all(isinstance(item, str) for item in value):
            return redact_argv(value)
        return [redact_value(item) for item in value]
    return value


def _is_scalar(value: Any) -> bool:
    # A secret-named key holding a structure ("api_key": {"file": ...}) is
    # descended into instead of blanked, so its harmless parts stay.
    return not isinstance(value, Mapping | list | tuple)


@overload
def redact(value: str) -> str: ...
@overload
def redact(value: Mapping[str, Any]) -> dict[str, Any]: ...
@overload
def redact(value: Any) -> Any: ...
def redact(value: Any) -> Any:
    """The one entry point: whatever a sink is about to emit, with its secrets replaced.

    Strings are scanned as free text; mappings, lists and tuples are walked
    (lists and tuples come back as lists); anything else is returned as is.
    The input is never modified.
    """
    return redact_value(value)


def redact_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON document (``/status``, ``/incidents``) fit to serve, as a new dict."""
    result: dict[str, Any] = redact_value(document)
    return result


# -- remembered values ---------------------------------------------------------

# Values shorter than this are not scrubbed from free text: replacing "1" or
# "on" everywhere would destroy the bundle and protect nothing.
_MIN_SCRUB_LENGTH = 6


def secret_values_in_argv(argv: Sequence[str]) -> list[str]:
    """The values :func:`redact_argv` removes by flag name, for a :class:`SecretScrubber`."""
    found: list[str] = []
    for index, arg in enumerate(argv):
        if not arg.startswith("-"):
            continue
        if "=" in arg:
            flag, _, value = arg.partition("=")
            if is_secret_name(flag) and value:
                found.append(value)
        elif is_secret_name(arg) and index + 1 < len(argv) and not argv[index + 1].startswith("-"):
            found.append(argv[index + 1])
    return found


def secret_values_in_env(env: Mapping[str, str]) -> list[str]:
    """The values :func:`redact_env` removes, for a :class:`SecretScrubber`."""
    return [value for name, value in env.items() if value and is_secret_env(name, value)]


class SecretScrubber:
    """Remembers secret values and replaces them wherever they appear.

    Name-based redaction cannot see a secret that turns up under an innocent
    name (a stack dump's local variable, a config echo); once a value is known
    to be a secret, this replaces every occurrence of it. A multi-line value is
    remembered line by line too, so a fragment of it is caught as well.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        self.add_all(values)

    def add(self, value: str) -> None:
        for candidate in {value, value.strip(), *(line.strip() for line in value.splitlines())}:
            if len(candidate) >= _MIN_SCRUB_LENGTH and candidate != REDACTED:
                self._values.add(candidate)

    def add_all(self, values: Iterable[str]) -> None:
        for value in values:
            self.add(value)

    def __len__(self) -> int:
        return len(self._values)

    def scrub_text(self, text: str) -> str:
        # Longest first so a secret containing another is replaced whole.
        for secret in sorted(self._values, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, REDACTED)
        return redact_text(text)

    def scrub(self, value: Any) -> Any:
        """Name- and shape-based redaction of a nested value, then known values removed."""
        return self._scrub(redact_value(value))

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {
                (self.scrub_text(k) if isinstance(k, str) else k): self._scrub(v)
                for k, v in value.items()
            }
        if isinstance(value, str):
            return self.scrub_text(value)
        if isinstance(value, list | tuple):
            return [self._scrub(item) for item in value]
        return value


def structlog_processor(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor: redact every field of a log event, in place.

    Place it after the processors that render exceptions and stacks into
    strings (``format_exc_info``, ``StackInfoRenderer``), so a secret inside an
    exception message is removed from the rendered traceback too.
    """
    fields = {k: v for k, v in event_dict.items() if k not in _LOG_INTERNALS}
    event_dict.update(redact_value(fields))
    return event_dict


# Keys structlog and the stdlib bridge keep for themselves: objects, not text.
_LOG_INTERNALS = frozenset({"_record", "_from_structlog", "exc_info", "_logger", "_name"})


def secret_values_in_value(value: Any) -> list[str]:
    """String values under secret-named keys of a nested value (a config), for a scrubber.

    The configured API key is the case in point: once known, it is removed
    from an error body that echoes it back under an innocent name.
    """
    found: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and is_secret_name(key) and isinstance(item, str) and item:
                found.append(item)
            else:
                found.extend(secret_values_in_value(item))
    elif isinstance(value, list | tuple):
        for item in value:
            found.extend(secret_values_in_value(item))
    return found
