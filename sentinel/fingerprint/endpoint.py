"""``/fingerprint`` on sentinel's HTTP port: show the correctness fingerprint, or re-baseline it.

``GET`` shows the model and weight version served, the fingerprint in force
and the recent checks against it (token ids, no text), like ``/status``.
``POST`` (``{"reason": "..."}``, optional) is the operator's re-baseline: the
next correctness check records a new fingerprint for the weights served now.
It takes the maintenance hook's bearer token (``maintenance_token_file``) and
answers as ``/maintenance`` does when it is refused: 404 while the hook is
off, 401 for a missing or wrong token, 413/408 for a body too large or too
slow, 400 for one that is not the model's. A re-baseline is logged
(``fingerprint_rebaseline_requested``).

Served on the listener's own thread; the book is only told through
:meth:`~sentinel.fingerprint.book.FingerprintBook.request_rebaseline` (a note under a
lock) and read through its published document.
"""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sentinel.fingerprint.book import FingerprintBook
from sentinel.maintenance.endpoint import (
    MAINTENANCE_KEY,
    _describe,
    _error,
    _json,
    _read_body,
    _refusal,
)

FINGERPRINT_PATH = "/fingerprint"
HOOK_OFF = (
    "re-baselining takes the maintenance hook's token: sentinel runs without "
    "maintenance_token_file (SENTINEL_MAINTENANCE_TOKEN_FILE, --maintenance-token-file)"
)


class RebaselineRequest(BaseModel):
    """The body of ``POST /fingerprint``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    reason: str = Field(default="operator's command", min_length=1, max_length=200)


def fingerprint_routes(book: FingerprintBook) -> list[web.RouteDef]:
    """``GET`` and ``POST /fingerprint`` over ``book``."""

    async def show(request: web.Request) -> web.Response:
        return _json({"correctness": book.published})

    async def rebaseline(request: web.Request) -> web.Response:
        hook = request.app.get(MAINTENANCE_KEY)
        if hook is None:
            return _error(404, HOOK_OFF)
        refused = _refusal(request, hook)
        if refused is not None:
            return refused
        if book.spec is None:
            return _error(404, "no correctness check runs: there is no fingerprint to re-take")
        body = await _read_body(request)
        if isinstance(body, web.Response):
            return body
        try:
            asked = RebaselineRequest.model_validate_json(body or b"{}")
        except ValidationError as exc:
            return _error(400, _describe(exc))
        book.request_rebaseline(f"{asked.reason} (from {request.remote})")
        return _json({"rebaseline": "requested", "correctness": book.published})

    return [
        web.get(FINGERPRINT_PATH, show, allow_head=False),
        web.post(FINGERPRINT_PATH, rebaseline),
    ]
