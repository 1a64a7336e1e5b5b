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
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any, overload
from urllib.parse import urlsplit, urlunsplit

REDACTED = "<redacted>"

# -- names ---------------------------------------------------------------------

# A word of a name that ends with one of these makes the name secret
# ("apikey", "hftoken", "dbpassword", "oauth", "mycreds").
_SECRET_SUFFIXES = (
    "token",
    "key",
    "secret",
    "secrets",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
    "creds",
    "auth",
    "authorization",
    "cookie",
    "jwt",
    "dsn",
    "signature",
)
# A word that starts with one of these makes the name secret ("secretname",
# "passwordfile" is caught by the harmless last word instead).
_SECRET_PREFIXES = ("secret", "password", "passwd", "passphrase", "credential")
# Words that are secret only as the last word of a name (``GITHUB_PAT``,
# ``DB_PASS``): as suffixes they would catch "compass" or "bypass", and as a
# leading word "pass_config" (a vLLM compilation setting).
_SECRET_LAST_WORDS = frozenset({"pat", "pwd", "pass", "pw", "pin", "otp", "sig"})
# A last word saying the value is *about* a secret, not the secret: a path,
# a file, a type. ``--key-file /etc/tls/key.pem`` stays readable.
_HARMLESS_LAST_WORDS = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "filename",
        "dir",
        "directory",
        "type",
        "kind",
        "name",
        "names",
        "header",
        "env",
        "var",
        "length",
        "len",
        "size",
        "count",
        "enabled",
        "required",
        "mode",
        "format",
        "prefix",
        "ttl",
        "timeout",
        "expiry",
        "expires",
        "algorithm",
        "alg",
        "scheme",
        "source",
        "url",
        "endpoint",
        "host",
        "port",
    }
)
# Whole names that look secret by their words and are not.
_HARMLESS_NAMES = frozenset({"pwd", "oldpwd"})

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(name: str) -> bool:
    """Whether a flag, variable, header or JSON key names a secret value."""
    stripped = name.strip().lstrip("-")
    if stripped.lower() in _HARMLESS_NAMES:
        return False
    words = [w.lower() for w in _WORD_SPLIT.split(stripped) if w]
    if not words or (len(words) > 1 and words[-1] in _HARMLESS_LAST_WORDS):
        return False
    return words[-1] in _SECRET_LAST_WORDS or any(
        w.endswith(_SECRET_SUFFIXES) or w.startswith(_SECRET_PREFIXES) for w in words
    )


# -- shapes --------------------------------------------------------------------

# userinfo ends at the last "@" before the host; quotes and whitespace end it
# too, so a URL inside JSON or a sentence does not swallow what follows.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#\"'<>]+)@")
_AUTH_IN_TEXT = re.compile(
    r"(?P<name>\b(?:proxy-)?authorization)(?P<sep>[\"']?\s*[:=]\s*[\"']?)"
    r"(?P<scheme>(?:bearer|basic|token|digest|negotiate|aws4-hmac-sha256)\s+)?"
    r"(?P<value>[^\s\"'][^\r\n\"']*)",
    re.IGNORECASE,
)
_BEARER_IN_TEXT = re.compile(
    r"(?P<scheme>\b(?:bearer|basic)\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})", re.I
)
# Token formats that are secret whatever they are called.
_TOKEN_SHAPES = re.compile(
    "|".join(
        (
            r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16}\b",  # AWS key ids
            r"\bgh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
            r"\bgithub_pat_[A-Za-z0-9_]{20,}",
            r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab
            r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",  # JWT
            r"\bsk-[A-Za-z0-9][A-Za-z0-9_-]{15,}",  # OpenAI/Anthropic-style keys
            r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
            r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
            r"\bhf_[A-Za-z0-9]{30,}",  # Hugging Face
            r"\bAIza[0-9A-Za-z_-]{35}",  # Google API keys
            r"\bnpm_[A-Za-z0-9]{36}",
        )
    )
)
_PEM_BLOCK = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----.*?"
    r"(?:-----END[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\Z)",
    re.DOTALL,
)
_FLAG_IN_TEXT = re.compile(
    r"(?P<flag>(?<![\w-])--?[A-Za-z][\w.-]*)(?P<sep>=|[ \t]+)(?P<value>[^\s\"',]+)"
)
# NAME=value, name: value, name='value' (env dumps, kwargs reprs, exception text).
_ASSIGN_IN_TEXT = re.compile(
    r"(?<![\w.-])(?P<name>[A-Za-z_][\w.-]*?)(?:"
    r"(?P<sep>\s*=\s*)(?P<q>[\"']?)(?P<value>[^\s\"',&;]+)"
    # "name: value"; a value that is itself followed by ":" is the next name
    # ("failed: password: x"), so it is not consumed here.
    r"|(?P<csep>:(?!//)\s*)(?P<cq>[\"']?)(?P<cvalue>[^\s\"',&;:]++)(?!:))"
)
_QUOTED_PAIR_IN_TEXT = re.compile(
    r"(?P<q>[\"'])(?P<name>[^\"'\n]+)(?P=q)(?P<sep>\s*:\s*)(?P<vq>[\"'])(?P<value>(?:\\.|(?!(?P=vq)).)*)(?P=vq)"
)
_SCHEME_WORDS = frozenset({"bearer", "basic", "token", "digest", "negotiate"})


def _redact_userinfo(m: re.Match[str]) -> str:
    return f"{m['scheme']}{REDACTED}@"


def redact_text(text: str) -> str:
    """Redact secrets in free text: shapes first, then ``name value`` pairs by name."""
    if not text:
        return text

    def auth(m: re.Match[str]) -> str:
        if m["value"].startswith(REDACTED):
            return m[0]
        return f"{m['name']}{m['sep']}{m['scheme'] or ''}{REDACTED}"

    def flag(m: re.Match[str]) -> str:
        value = m["value"]
        if not is_secret_name(m["flag"]) or value.startswith("-") or value.startswith(REDACTED):
            return m[0]
        return f"{m['flag']}{m['sep']}{REDACTED}"

    def assign(m: re.Match[str]) -> str:
        value, sep, quote = (
            (m["value"], m["sep"], m["q"])
            if m["sep"] is not None
            else (m["cvalue"], m["csep"], m["cq"])
        )
        name = m["name"]
        if value.startswith(REDACTED) or value.lower() in _SCHEME_WORDS:
            return m[0]
        # An upper-case NAME=value is an environment entry: judged as one.
        env_like = sep.strip() == "=" and name.isupper()
        if not (is_secret_env(name, value) if env_like else is_secret_name(name)):
            return m[0]
        return f"{m['name']}{sep}{quote}{REDACTED}"

    def quoted(m: re.Match[str]) -> str:
        if not is_secret_name(m["name"]) or m["value"] in ("", REDACTED):
            return m[0]
        return f"{m['q']}{m['name']}{m['q']}{m['sep']}{m['vq']}{REDACTED}{m['vq']}"

    text = _PEM_BLOCK.sub(REDACTED, text)
    text = _URL_USERINFO.sub(_redact_userinfo, text)
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    text = _AUTH_IN_TEXT.sub(auth, text)
    text = _BEARER_IN_TEXT.sub(lambda m: f"{m['scheme']}{REDACTED}", text)
    text = _QUOTED_PAIR_IN_TEXT.sub(quoted, text)
    text = _FLAG_IN_TEXT.sub(flag, text)
    return _ASSIGN_IN_TEXT.sub(assign, text)


def redact_url(url: str) -> str:
    """A URL fit to show: userinfo and secret-named query values replaced.

    For the target URL in ``/status`` and the start-up log line:
    ``http://user:pw@vllm:8000/v1`` becomes ``http://<redacted>@vllm:8000/v1``.
    Anything that does not parse as a URL goes through :func:`redact_text`.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = "&".join(
        f"{name}={REDACTED}" if sep and is_secret_name(name) else f"{name}{sep}{value}"
        for name, sep, value in (pair.partition("=") for pair in parts.query.split("&"))
    )
    return redact_text(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))


# -- environment values by entropy ---------------------------------------------

# Variables whose values are known not to be secrets, however random they look
# (a pod name's hash, a CUDA UUID, a build digest). Matched on the whole name
# or, for the families, on its prefix or suffix. Names that look secret by
# their words are redacted regardless of this list.
_HARMLESS_ENV = frozenset(
    {
        "PATH",
        "HOSTNAME",
        "HOME",
        "PWD",
        "OLDPWD",
        "SHELL",
        "USER",
        "LOGNAME",
        "LANG",
        "TERM",
        "TZ",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "VIRTUAL_ENV",
        "POD_NAME",
        "POD_NAMESPACE",
        "POD_UID",
        "POD_IP",
        "NODE_NAME",
        "HOST_IP",
        "GPG_KEY_ID",
        "_",
    }
)
_HARMLESS_ENV_PREFIXES = (
    "CUDA_",
    "NVIDIA_",
    "NV_",
    "NCCL_",
    "CUDNN_",
    "TORCH_",
    "PYTORCH_",
    "TRITON_",
    "OMP_",
    "MKL_",
    "KUBERNETES_",
    "LC_",
    "XDG_",
    "PYTHON",
    "PIP_",
    "HF_HUB_",
    "TRANSFORMERS_",
    "SENTINEL_",
    "VLLM_",
)
_HARMLESS_ENV_SUFFIXES = (
    "_VERSION",
    "_PATH",
    "_DIR",
    "_HOME",
    "_FILE",
    "_HOST",
    "_PORT",
    "_ADDR",
    "_MODEL",
    "_NAME",
    "_SHA",
    "_COMMIT",
    "_DIGEST",
    "_REVISION",
)
_RANDOM_LOOKING = re.compile(r"[A-Za-z0-9_-]{20,}|[A-Za-z0-9+/]{20,}={0,2}")
_MIN_ENTROPY_BITS = 3.5  # per character; English words and identifiers score lower


def _is_harmless_env(name: str) -> bool:
    upper = name.upper()
    return (
        upper in _HARMLESS_ENV
        or upper.startswith(_HARMLESS_ENV_PREFIXES)
        or upper.endswith(_HARMLESS_ENV_SUFFIXES)
        or "_SERVICE_" in upper  # Kubernetes service links: FOO_SERVICE_HOST, ..._PORT_8000_TCP
    )


def looks_random(value: str) -> bool:
    """A long, high-entropy token with letters and digits: a key, not a word or a path."""
    if len(value) < 20 or not _RANDOM_LOOKING.fullmatch(value):
        return False
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= _MIN_ENTROPY_BITS


def is_secret_env(name: str, value: str) -> bool:
    """Whether an environment variable's whole value must go: by name, or by looking random."""
    if is_secret_name(name):
        return True
    return not _is_harmless_env(name) and looks_random(value.strip())


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
