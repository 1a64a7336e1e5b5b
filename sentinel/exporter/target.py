"""A ``/probe`` target: parsed, resolved once, and connected to at exactly that address.

``target=`` is ``host:port`` or ``http(s)://host[:port][/v1]``; anything else
(credentials, a query, another path) is a bad request. The name is resolved
once with the event loop's ``getaddrinfo``; the allowlist judges that answer
and the client built here connects to the one address it judged, whatever
the name resolves to by then: the URL keeps the name, so the ``Host`` header
and TLS server name are the name's, and the transport swaps in the address
below them. The client never follows redirects, reads no proxy settings from
the environment, and refuses any request to another host.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from sentinel.exporter.allowlist import normal_name

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_TARGET_CHARS = 1024
MAX_ADDRESSES = 64  # addresses of one name that are checked; more is no plausible answer

Resolver = Callable[[str, int], Awaitable[list[str]]]


class TargetError(ValueError):
    """``target=`` is not a target: the answer is 400 with this message."""


class ResolveError(Exception):
    """The name did not resolve: the probe fails with reason ``resolve``."""


@dataclass(frozen=True, slots=True)
class Target:
    scheme: str
    host: str  # as given, without IPv6 brackets
    port: int

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The server root: the key of per-target state and the runner's base URL."""
        return f"{self.scheme}://{self.netloc}"

    @property
    def is_address(self) -> bool:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True


def parse_target(text: str) -> Target:
    """``host:port`` or ``http(s)://host[:port][/v1]``; :class:`TargetError` otherwise."""
    text = text.strip()
    if not text:
        raise TargetError("target is empty")
    if len(text) > MAX_TARGET_CHARS:
        raise TargetError(f"target longer than {MAX_TARGET_CHARS} characters")
    bare = "://" not in text
    try:
        parts = urlsplit(f"http://{text}" if bare else text)
        port = parts.port
    except ValueError as exc:
        raise TargetError(f"target {text!r}: {exc}") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise TargetError(f"target {text!r}: scheme must be http or https")
    if parts.username is not None or parts.password is not None:
        raise TargetError(f"target {text!r}: credentials in the target are not accepted")
    if parts.query or parts.fragment:
        raise TargetError(f"target {text!r}: no query or fragment")
    if parts.path.rstrip("/") not in ("", "/v1"):
        raise TargetError(f"target {text!r}: the path may only be /v1")
    host = parts.hostname or ""
    if not host:
        raise TargetError(f"target {text!r}: no host")
    if port is None:
        if bare:
            raise TargetError(f"target {text!r}: host:port needs a port")
        port = DEFAULT_PORTS[parts.scheme]
    if port == 0:
        raise TargetError(f"target {text!r}: port 0")
    return Target(parts.scheme, host, port)


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to for TCP (the event loop's ``getaddrinfo``)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


async def resolve(target: Target, resolver: Resolver = system_resolver) -> list[str]:
    """The target's addresses, in the resolver's order, each once; :class:`ResolveError`."""
    if target.is_address:
        return [target.host]
    try:
        found = await resolver(target.host, target.port)
    except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError
        raise ResolveError(f"{target.host}: {exc}") from None
    addresses = list(dict.fromkeys(found))
    if not addresses:
        raise ResolveError(f"{target.host}: no address")
    if len(addresses) > MAX_ADDRESSES:
        raise ResolveError(f"{target.host}: more than {MAX_ADDRESSES} addresses")
    return addresses


class PinnedTransport(httpx.AsyncBaseTransport):
    """Sends every request for ``target`` to ``address``; refuses requests for anything else.

    The request's URL keeps the name until here, so its ``Host`` header was
    set from it; the URL's host is then replaced by the address, and the TLS
    server name (httpcore's ``sni_hostname`` extension) is set to the name.
    """

    def __init__(self, target: Target, address: str, inner: httpx.AsyncBaseTransport) -> None:
        self._target = target
        self._address = address.partition("%")[0]
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if (
            url.scheme != self._target.scheme
            or normal_name(url.host) != normal_name(self._target.host)
            or (url.port or DEFAULT_PORTS[url.scheme]) != self._target.port
        ):
            raise httpx.ConnectError(
                f"refused: {url.host} is not the probed target", request=request
            )
        request.url = url.copy_with(host=self._address)
        extensions: dict[str, Any] = dict(request.extensions)
        if url.scheme == "https" and not self._target.is_address:
            extensions["sni_hostname"] = self._target.host
        request.extensions = extensions
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def pinned_client(target: Target, address: str, tls: ssl.SSLContext) -> httpx.AsyncClient:
    """A client for one probe: connects only to ``address``, keeps the name for Host and SNI.

    ``tls``: one context shared by every probe (building one loads the CA
    bundle, tens of milliseconds of CPU: per probe it would be most of a probe's cost).
    """
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=2)
    inner = httpx.AsyncHTTPTransport(verify=tls, limits=limits, trust_env=False, retries=0)
    return httpx.AsyncClient(
        transport=PinnedTransport(target, address, inner),
        follow_redirects=False,
        trust_env=False,
    )
