"""``/maintenance`` on sentinel's HTTP port: set, show and end the maintenance window.

``POST`` with ``{"seconds": N, "reason": "..."}`` sets the window (replacing
any other), ``DELETE`` ends it, ``GET`` shows it. Every method needs
``Authorization: Bearer <token>``, the token held in ``maintenance_token_file``
(:class:`~sentinel.maintenance.window.TokenFile`: re-read when the file changes,
compared in constant time). Answers, all JSON:

- 404 while the hook is off (no token file configured), saying so;
- 503 while the token file cannot be read or holds no usable token (the log says why);
- 401 for a missing or wrong token, and nothing else;
- 413 for a body over :data:`~sentinel.maintenance.window.MAX_BODY_BYTES`, 408 for one
  that does not arrive within :data:`BODY_TIMEOUT_S`;
- 400 for a body that is not the model's (unknown keys, a text or non-finite
  number, ``seconds`` not positive or beyond ``maintenance_max``);
- 200 with ``{"maintenance": {...} or null, ...}``.

The handlers run on the listener's own thread (``serve.probe_thread``), like
the probes: a request body belongs to that thread's event loop, and the window
is safe to share across threads. Each change is logged (``maintenance_set``,
``maintenance_cleared``, never the token) and counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from sentinel.config.settings import Settings
from sentinel.maintenance.window import (
    MAX_BODY_BYTES,
    MaintenanceRefused,
    MaintenanceRequest,
    MaintenanceWindow,
    TokenFile,
    bearer_token,
    maintenance_json,
)
from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.telemetry.redact import redact_document

log = get_logger("sentinel.maintenance")

MAINTENANCE_PATH = "/maintenance"
BODY_TIMEOUT_S = 5.0
# Refused requests are logged at most this often (with a count), so a client
# guessing tokens cannot flood the log.
UNAUTHORIZED_LOG_INTERVAL_S = 10.0
MAX_ERROR_CHARS = 500
HOOK_OFF = (
    "the maintenance hook is off: sentinel runs without maintenance_token_file "
    "(SENTINEL_MAINTENANCE_TOKEN_FILE, --maintenance-token-file)"
)
TOKEN_UNUSABLE = (
    "the maintenance hook is unavailable: its token file cannot be read or holds "
    "no usable token (sentinel's log says why)"
)
NO_STORE = {"Cache-Control": "no-store"}


@dataclass(slots=True)
class MaintenanceHook:
    """What ``/maintenance`` acts on: the daemon's window, the token (None: off), the clock."""

    window: MaintenanceWindow
    token: TokenFile | None
    clock: Callable[[], float] = time.monotonic
    metrics: SentinelMetrics | None = None
    _refused: int = field(default=0, init=False)
    _refused_logged_at: float | None = field(default=None, init=False)

    @classmethod
    def build(
        cls, settings: Settings, clock: Callable[[], float], metrics: SentinelMetrics
    ) -> MaintenanceHook:
        """The daemon's hook: a window of ``maintenance_max``, its token read now (if any)."""
        window = MaintenanceWindow(
            settings.maintenance_max,
            on_expired=lambda _: metrics.maintenance_changed("expired"),
        )
        path = settings.maintenance_token_file
        token = None if path is None else TokenFile(path)
        if token is not None:
            token.refresh()  # logs whether the hook starts usable, and why not
        return cls(window, token, clock, metrics)

    def status(self) -> dict[str, Any] | None:
        """The window as ``/status`` shows it (None without one)."""
        now = self.clock()
        return maintenance_json(self.window.active(now), now)

    def unauthorized(self, request: web.Request) -> None:
        if self.metrics is not None:
            self.metrics.maintenance_unauthorized.inc()
        self._refused += 1
        now = self.clock()
        last = self._refused_logged_at
        if last is None or now - last >= UNAUTHORIZED_LOG_INTERVAL_S:
            log.warning(
                "maintenance_unauthorized",
                method=request.method,
                peer=request.remote,
                refused=self._refused,
            )
            self._refused, self._refused_logged_at = 0, now


MAINTENANCE_KEY = web.AppKey("sentinel_maintenance", MaintenanceHook)


def _json(data: dict[str, Any], status: int = 200, **headers: str) -> web.Response:
    return web.json_response(redact_document(data), status=status, headers={**NO_STORE, **headers})


def _error(status: int, message: str, **headers: str) -> web.Response:
    return _json({"error": message[:MAX_ERROR_CHARS]}, status, **headers)


def _refusal(request: web.Request, hook: MaintenanceHook) -> web.Response | None:
    """The answer to a request that may not act (None: it may), checked before any body is read."""
    if hook.token is None:
        return _error(404, HOOK_OFF)
    if not hook.token.refresh():
        return _error(503, TOKEN_UNUSABLE)
    if not hook.token.matches(bearer_token(request.headers.getall("Authorization", []))):
        hook.unauthorized(request)
        return _error(401, "unauthorized", **{"WWW-Authenticate": 'Bearer realm="sentinel"'})
    return None


def _window_json(hook: MaintenanceHook, **extra: Any) -> dict[str, Any]:
    now = hook.clock()
    return {
        "maintenance": maintenance_json(hook.window.active(now), now),
        "max_seconds": hook.window.max_seconds,
        **extra,
    }


async def _read_body(request: web.Request) -> bytes | web.Response:
    """The body, or the answer refusing it: over the cap (413) or too slow (408)."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        return _error(413, f"the body must be at most {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            while chunk := await request.content.readany():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    return _error(413, f"the body must be at most {MAX_BODY_BYTES} bytes")
                chunks.append(chunk)
    except TimeoutError:
        return _error(408, f"the body did not arrive within {BODY_TIMEOUT_S:g} s")
    return b"".join(chunks)


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "body"
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        problems.append(f"{where}: {message}")
    return "; ".join(problems)


async def _get(request: web.Request) -> web.Response:
    hook = request.app[MAINTENANCE_KEY]
    return _refusal(request, hook) or _json(_window_json(hook))


async def _post(request: web.Request) -> web.Response:
    hook = request.app[MAINTENANCE_KEY]
    refused = _refusal(request, hook)
    if refused is not None:
        return refused
    body = await _read_body(request)
    if isinstance(body, web.Response):
        return body
    try:
        asked = MaintenanceRequest.model_validate_json(body)
    except ValidationError as exc:
        return _error(400, _describe(exc))
    now = hook.clock()
    replaced = hook.window.active(now)
    try:
        info = hook.window.set(asked.seconds, asked.reason, now)
    except MaintenanceRefused as exc:
        return _error(400, str(exc))
    log.info(
        "maintenance_set",
        seconds=round(info.seconds, 3),
        reason=info.reason,
        replaced=replaced is not None,
        peer=request.remote,
    )
    if hook.metrics is not None:
        hook.metrics.maintenance_changed("set")
    return _json(_window_json(hook))


async def _delete(request: web.Request) -> web.Response:
    hook = request.app[MAINTENANCE_KEY]
    refused = _refusal(request, hook)
    if refused is not None:
        return refused
    ended = hook.window.clear(hook.clock())
    if ended is not None:
        log.info("maintenance_cleared", reason=ended.reason, peer=request.remote)
        if hook.metrics is not None:
            hook.metrics.maintenance_changed("cleared")
    return _json(_window_json(hook, cleared=ended is not None))


def maintenance_routes() -> list[web.RouteDef]:
    """The three routes; the app must hold a :class:`MaintenanceHook` at :data:`MAINTENANCE_KEY`."""
    return [
        web.get(MAINTENANCE_PATH, _get, allow_head=False),
        web.post(MAINTENANCE_PATH, _post),
        web.delete(MAINTENANCE_PATH, _delete),
    ]


__all__ = [
    "BODY_TIMEOUT_S",
    "MAINTENANCE_KEY",
    "MAINTENANCE_PATH",
    "MaintenanceHook",
    "maintenance_routes",
]
