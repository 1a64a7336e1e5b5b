"""Which names and environment entries hold secrets: judged by words and by entropy.

Owns the vocabulary (the secret words, the words that only describe where a
secret is, the variables known to be harmless) and the two judgements built
on it: :func:`is_secret_name` for a flag, variable, header or key, and
:func:`is_secret_env` for an environment entry, which also catches a long
random value under an innocent name. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections import Counter

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
