"""Redaction of secrets in everything sentinel writes: bundles, summaries and logs.

Owns the one definition of "looks like a secret" and every way of removing one:
argv lists (``--api-key value`` and ``--api-key=value``), environment mappings,
HTTP header mappings, free text (stack dumps, command lines, log messages) and
arbitrary nested JSON values. The name of a secret stays visible and only its
value is replaced, so an operator can still see *that* ``HF_TOKEN`` was set.

Names are matched word by word rather than by substring so that
``--max-num-batched-tokens`` or ``TOKENIZERS_PARALLELISM`` stay readable while
``HF_TOKEN``, ``OPENAI_API_KEY``, ``apiKey`` and ``DB_PASSWORD`` do not.

:class:`SecretScrubber` adds a second line of defence: the secret *values*
found in argv and environments are remembered and replaced wherever else they
show up (a stack dump, a metrics label, a config echo).

Everything here is pure; nothing reads files, the clock or the network.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

REDACTED = "<redacted>"

# Words that make a name secret when a word of the name ends with them.
_SECRET_SUFFIXES = (
    "token",
    "key",
    "secret",
    "secrets",
    "password",
    "passwd",
    "credential",
    "credentials",
)
# Words that make a name secret when a word of the name starts with them.
_SECRET_PREFIXES = ("secret", "password", "passwd", "credential")
# Header (and key) names that carry credentials without saying so.
_SECRET_NAMES = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}
)

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# Values shorter than this are not scrubbed from free text: replacing "1" or
# "on" everywhere would destroy the bundle and protect nothing.
_MIN_SCRUB_LENGTH = 6


def is_secret_name(name: str) -> bool:
    """Whether a flag, variable, header or JSON key names a secret value."""
    stripped = name.strip().lstrip("-")
    if stripped.lower() in _SECRET_NAMES:
        return True
    for word in _WORD_SPLIT.split(stripped):
        lowered = word.lower()
        if not lowered:
            continue
        if lowered.endswith(_SECRET_SUFFIXES) or lowered.startswith(_SECRET_PREFIXES):
            return True
    return False


def redact_argv(argv: Sequence[str]) -> list[str]:
    """Replace the values of secret flags, in both ``--flag value`` and ``--flag=value`` form."""
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
            out.append(f"{flag}={REDACTED}" if is_secret_name(flag) else arg)
            continue
        if arg.startswith("-") and is_secret_name(arg):
            redact_next = True
        out.append(redact_text(arg) if not arg.startswith("-") else arg)
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Keep every variable name; replace the values of secret-named ones."""
    return {
        name: (REDACTED if is_secret_name(name) else redact_text(value))
        for name, value in env.items()
    }


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Keep every header name; replace credentials (Authorization, cookies, API keys)."""
    return {name: (REDACTED if is_secret_name(name) else value) for name, value in headers.items()}


_FLAG_IN_TEXT = re.compile(r"(?P<flag>--?[A-Za-z][\w.-]*)(?P<sep>=|[ \t]+)(?P<value>[^\s\"',]+)")
_ASSIGN_IN_TEXT = re.compile(
    r"(?<![\w-])(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<sep>=)(?P<value>[^\s\"',&]+)"
)
_AUTH_IN_TEXT = re.compile(
    r"(?P<name>(?:proxy-)?authorization)(?P<sep>[\"']?\s*[:=]\s*[\"']?)"
    r"(?P<scheme>(?:bearer|basic|token|digest)\s+)?(?P<value>[^\s\"',]+)",
    re.IGNORECASE,
)
_QUOTED_PAIR_IN_TEXT = re.compile(
    r"(?P<q>[\"'])(?P<name>[^\"']+)(?P=q)(?P<sep>\s*:\s*)(?P<vq>[\"'])(?P<value>[^\"']*)(?P=vq)"
)
_BEARER_IN_TEXT = re.compile(r"(?P<scheme>\bbearer\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})", re.I)


def redact_text(text: str) -> str:
    """Redact secrets embedded in free text: flags, ``NAME=value``, headers, quoted pairs."""
    if not text:
        return text

    def flag(m: re.Match[str]) -> str:
        if not is_secret_name(m["flag"]) or m["value"].startswith("-") or m["value"] == REDACTED:
            return m[0]
        return f"{m['flag']}{m['sep']}{REDACTED}"

    def assign(m: re.Match[str]) -> str:
        if not is_secret_name(m["name"]) or m["value"] == REDACTED:
            return m[0]
        return f"{m['name']}{m['sep']}{REDACTED}"

    def auth(m: re.Match[str]) -> str:
        return f"{m['name']}{m['sep']}{m['scheme'] or ''}{REDACTED}"

    def quoted(m: re.Match[str]) -> str:
        if not is_secret_name(m["name"]) or m["value"] in ("", REDACTED):
            return m[0]
        return f"{m['q']}{m['name']}{m['q']}{m['sep']}{m['vq']}{REDACTED}{m['vq']}"

    text = _AUTH_IN_TEXT.sub(auth, text)
    text = _BEARER_IN_TEXT.sub(lambda m: f"{m['scheme']}{REDACTED}", text)
    text = _QUOTED_PAIR_IN_TEXT.sub(quoted, text)
    text = _FLAG_IN_TEXT.sub(flag, text)
    return _ASSIGN_IN_TEXT.sub(assign, text)


def redact_value(value: Any) -> Any:
    """Redact a nested JSON-like value: secret-named keys lose their value, strings are scanned.

    Lists that look like an argv (a string list with a secret flag in it) are
    redacted as argv, so a ``cmdline`` field keeps its shape.
    """
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and is_secret_name(key) and _is_scalar_secret(item):
                out[key] = REDACTED if item not in (None, "") else item
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


def _is_scalar_secret(value: Any) -> bool:
    # A secret-named key holding a mapping (e.g. "tokens": {...} would not match,
    # but "api_key": {"file": ...}) is descended into instead of blanked.
    return not isinstance(value, Mapping | list | tuple)


def secret_values_in_argv(argv: Sequence[str]) -> list[str]:
    """The values :func:`redact_argv` would remove, for a :class:`SecretScrubber`."""
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
    """The values :func:`redact_env` would remove, for a :class:`SecretScrubber`."""
    return [value for name, value in env.items() if is_secret_name(name) and value]


class SecretScrubber:
    """Remembers secret values and replaces them wherever they appear.

    Name-based redaction cannot see a secret that turns up under an innocent
    name (a stack dump's local variable, a URL, a config echo); once a value is
    known to be a secret, this replaces every occurrence of it.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        self.add_all(values)

    def add(self, value: str) -> None:
        if len(value) >= _MIN_SCRUB_LENGTH and value != REDACTED:
            self._values.add(value)

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
        """Name-based redaction of a nested value, then known values removed everywhere."""
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
    """A structlog processor: redact every field of every log event before it is rendered."""
    redacted = redact_value(dict(event_dict))
    event_dict.clear()
    event_dict.update(redacted)
    return event_dict
