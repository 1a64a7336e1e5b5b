"""Secrets recognised by their shape in free text and URLs, wherever they appear.

Owns the patterns (URL userinfo, ``Authorization`` values, well-known token
formats, PEM private keys, ``--flag value`` and ``name=value`` pairs) and
:func:`redact_text` / :func:`redact_url`, which apply them; a pair is judged
by its name through :mod:`sentinel.telemetry.redact.names`. Pure: no I/O.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from sentinel.telemetry.redact.names import REDACTED, is_secret_env, is_secret_name

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


# A regular expression holds the GIL for its whole scan (about 30 ms per MB for
# these), which would stall sentinel's probe thread behind a bundle's metrics or
# stack text; longer texts are redacted piece by piece, each about this long.
CHUNK_CHARS = 32 * 1024
_RISKY_TAIL = re.compile(
    r"(?:[:=]|\b(?:bearer|basic|token|digest|negotiate|aws4-hmac-sha256|authorization))\Z",
    re.IGNORECASE,
)


def redact_text(text: str) -> str:
    """Redact secrets in free text: shapes first, then ``name value`` pairs by name."""
    if len(text) <= CHUNK_CHARS:
        return _redact_piece(text)
    # A private key block may span pieces: it is found in the whole text first.
    text = _PEM_BLOCK.sub(REDACTED, text)
    return "".join(_redact_piece(piece) for piece in _pieces(text, CHUNK_CHARS))


def _pieces(text: str, size: int) -> list[str]:
    """``text`` cut at line ends, ``size`` characters or a little more each.

    Every shape is matched within a line except a separator's whitespace
    (``name =\n value``, ``Bearer\n token``), so a cut is never made where the
    text before it ends in ``:``, ``=`` or a scheme word, or the text after it
    starts with ``:`` or ``=``: there the cut moves on to the next line end.
    """
    pieces: list[str] = []
    start = 0
    while len(text) - start > size:
        cut = text.find("\n", start + size)
        while cut != -1 and not _safe_cut(text, cut):
            cut = text.find("\n", cut + 1)
        if cut == -1:
            break
        pieces.append(text[start : cut + 1])
        start = cut + 1
    pieces.append(text[start:])
    return pieces


def _safe_cut(text: str, at: int) -> bool:
    before = text[max(0, at - 64) : at].rstrip()
    after = text[at : at + 64].lstrip()
    if not before or not after:  # only whitespace nearby: a separator may hide in it
        return False
    return not (_RISKY_TAIL.search(before) or after[0] in ":=")


def _redact_piece(text: str) -> str:
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
