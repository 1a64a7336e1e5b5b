"""The target's URL, read once for the daemon's clients and its process attribution."""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

import httpx


def tls_context(target: str) -> ssl.SSLContext:
    """The one TLS context both clients share: CA certificates only for an https target.

    httpx alone loads the CA bundle per client (1.4 MB and 0.1 s each), unused over
    http; there the context trusts no one, so a redirect to https fails closed.
    """
    if httpx.URL(target).scheme == "https":
        return httpx.create_ssl_context()
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def target_port(target: str) -> int | None:
    """The port the target listens on, the scheme's default when the URL names none.

    Process attribution finds the API server by it; without it attribution is off.
    """
    url = httpx.URL(target)
    return url.port or {"http": 80, "https": 443}.get(url.scheme)


def http_url_error(url: str) -> str | None:
    """Why ``url`` is no usable http(s) URL (scheme, host, port), or None when it is.

    Checked where a URL comes in (a flag, a setting), so a malformed one is a
    one-line usage error there rather than an exception deep in a client.
    """
    try:
        parts = urlsplit(url)
        port = parts.port  # parsed on access: a bad or out-of-range port raises here
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if not parts.hostname:
        return "names no host"
    if port == 0:
        return "port 0 is no port"
    return None
