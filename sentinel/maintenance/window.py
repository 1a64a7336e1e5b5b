"""The maintenance window: "paused until", set through sentinel's own interface.

Some servers pause without saying so: an RL controller that pauses vLLM
through its Python API (weight sync, a long rollout switch) leaves no
``/is_paused`` to read, and a paused engine looks exactly like a hung one.
The controller (or an operator) tells sentinel instead, through the
``/maintenance`` endpoint (:mod:`sentinel.maintenance.endpoint`) or ``sentinel
maintenance set``, and the evidence gathering reads :meth:`MaintenanceWindow.active`.

A window is bounded on every side: at most one is held, its length is at most
``maintenance_max`` (a longer request is refused, not clipped, so the caller
learns its pause is not covered), it ends by itself at ``until`` (monotonic
seconds, the daemon's clock), and its ``reason`` is operator text cleaned of
control characters and capped in length, since it is shown in ``/status`` and
in logs.

The bearer token that guards the endpoint is read here too (:class:`TokenFile`):
from a file, re-read when the file changes on disk (Kubernetes rotates Secret
mounts by swapping a symlink), and compared in constant time.

Pure of I/O but for the token file: no event loop, no HTTP, so every layer,
the verdict included, may import :class:`MaintenanceInfo`.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sentinel.capped import FileTooLarge, read_capped_file, read_capped_stream
from sentinel.telemetry.logging import get_logger

log = get_logger("sentinel.maintenance")

# What /status and the logs show of the operator's text.
REASON_MAX_CHARS = 200
# A request body: {"seconds": N, "reason": "..."} is well under this.
MAX_BODY_BYTES = 4 * 1024
# A token file is one line; a larger file is the wrong file.
MAX_TOKEN_FILE_BYTES = 4 * 1024
# Shorter tokens are guessable; ``openssl rand -hex 32`` gives 64 characters.
MIN_TOKEN_CHARS = 16
# Unicode categories replaced by a space in a reason: controls, format characters
# (bidirectional overrides, zero-width joiners), surrogates, private use,
# unassigned, and line/paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


class MaintenanceRefused(ValueError):
    """A window that may not be set; the message says why, fit to show the caller."""


@dataclass(frozen=True, slots=True)
class MaintenanceInfo:
    """The window in force: until when (monotonic), why, and since when (monotonic)."""

    until: float
    reason: str
    since: float

    @property
    def seconds(self) -> float:
        """The length asked for."""
        return self.until - self.since

    def remaining(self, now: float) -> float:
        return max(0.0, self.until - now)


def maintenance_json(info: MaintenanceInfo | None, now: float) -> dict[str, Any] | None:
    """The maintenance window (``/status``'s ``maintenance``, ``/maintenance``), None without one.

    Ages, not timestamps: ``for`` since it was set, ``remaining`` until it ends,
    ``seconds`` its whole length.
    """
    if info is None:
        return None
    return {
        "reason": info.reason,
        "seconds": round(info.seconds, 3),
        "remaining": round(info.remaining(now), 3),
        "for": round(now - info.since, 3),
    }


def sanitize_reason(reason: str) -> str:
    """One line of visible text, at most :data:`REASON_MAX_CHARS` characters.

    Control and format characters (newlines, ANSI escapes, bidirectional
    overrides) become spaces, runs of whitespace one space; a longer text is cut
    with an ellipsis, so a log line or ``/status`` cannot be forged or flooded.
    """
    cleaned = "".join(" " if unicodedata.category(c) in _UNPRINTABLE else c for c in reason)
    text = " ".join(cleaned.split())
    if len(text) > REASON_MAX_CHARS:
        text = text[: REASON_MAX_CHARS - 1].rstrip() + "\u2026"
    return text


class MaintenanceWindow:
    """At most one maintenance window, bounded by ``max_seconds``.

    Safe to use from several threads (the HTTP listener sets it, the daemon's
    loop reads it): the window is one immutable record swapped under a lock.
    ``on_expired`` is called once with a window that ran out, when
    :meth:`active` first sees it gone.
    """

    def __init__(
        self,
        max_seconds: float,
        *,
        on_expired: Callable[[MaintenanceInfo], None] | None = None,
    ) -> None:
        if not (math.isfinite(max_seconds) and max_seconds > 0):
            raise ValueError(f"max_seconds must be a positive finite number, got {max_seconds}")
        self.max_seconds = max_seconds
        self._on_expired = on_expired
        self._lock = threading.Lock()
        self._current: MaintenanceInfo | None = None

    def set(self, seconds: float, reason: str, now: float) -> MaintenanceInfo:
        """Hold a window of ``seconds`` from ``now``, replacing any other.

        Raises :class:`MaintenanceRefused` for a length that is not positive and
        finite, one beyond ``max_seconds`` (refused, never clipped), or a reason
        with no visible text.
        """
        if isinstance(seconds, bool) or not math.isfinite(seconds) or seconds <= 0:
            raise MaintenanceRefused(f"seconds must be a positive finite number, got {seconds!r}")
        if seconds > self.max_seconds:
            raise MaintenanceRefused(
                f"seconds must be at most {self.max_seconds:g} (maintenance_max), "
                f"got {seconds:g}; ask for a shorter window and renew it"
            )
        text = sanitize_reason(reason)
        if not text:
            raise MaintenanceRefused("reason must hold some visible text")
        info = MaintenanceInfo(until=now + seconds, reason=text, since=now)
        with self._lock:
            self._current = info
        return info

    def clear(self, now: float | None = None) -> MaintenanceInfo | None:
        """End the window; return it if it was still in force at ``now`` (any, without ``now``)."""
        with self._lock:
            previous, self._current = self._current, None
        if previous is None or (now is not None and now >= previous.until):
            return None
        return previous

    def active(self, now: float) -> MaintenanceInfo | None:
        """The window in force at ``now``, or None; a window that ran out is dropped here."""
        with self._lock:
            current = self._current
            if current is None or now < current.until:
                return current
            self._current = None
        log.info("maintenance_expired", reason=current.reason, seconds=round(current.seconds, 3))
        if self._on_expired is not None:
            self._on_expired(current)
        return None


class MaintenanceRequest(BaseModel):
    """The body of ``POST /maintenance``: unknown keys, text numbers, NaN and infinity refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    seconds: float = Field(gt=0)
    reason: str = Field(min_length=1, max_length=REASON_MAX_CHARS)


class TokenError(Exception):
    """A token file that cannot serve; the message names the file, never its content."""


def parse_token(raw: bytes, path: Path | str) -> str:
    """The token in a file's bytes: one line of visible ASCII, at least :data:`MIN_TOKEN_CHARS`.

    A UTF-8 byte-order mark and surrounding whitespace (the trailing newline)
    are not part of it, as with the API key file.
    """
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        raise _too_large(path)
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff").strip()
    except UnicodeDecodeError:
        raise TokenError(f"{path}: not UTF-8 text") from None
    if not text:
        raise TokenError(f"{path}: empty")
    if len(text.splitlines()) > 1:
        raise TokenError(f"{path}: holds more than one line; it must hold the token alone")
    if not all("!" <= c <= "~" for c in text):
        raise TokenError(f"{path}: the token must be printable ASCII without spaces")
    if len(text) < MIN_TOKEN_CHARS:
        raise TokenError(
            f"{path}: the token is shorter than {MIN_TOKEN_CHARS} characters "
            "(make one with: openssl rand -hex 32)"
        )
    return text


def read_token(path: Path) -> str:
    """The token held in ``path`` (the CLI's reader); raises :class:`TokenError`."""
    try:
        raw = read_capped_file(path, MAX_TOKEN_FILE_BYTES)
    except OSError as exc:
        raise TokenError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except FileTooLarge:
        raise _too_large(path) from None
    return parse_token(raw, path)


def _too_large(path: Path | str) -> TokenError:
    return TokenError(f"{path}: larger than {MAX_TOKEN_FILE_BYTES} bytes; not a token file")


def _digest(token: str) -> bytes:
    # Comparing fixed-length digests keeps the token's length out of the timing too.
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


class TokenFile:
    """The bearer token in a file, re-read whenever the file changes on disk.

    Each :meth:`check` costs one ``stat``: the file is read again only when
    its identity (device, inode, size, modification time) changed, which is
    what a Kubernetes Secret rotation (a new file behind a swapped symlink) or
    an edit looks like. A file that cannot be read or holds no usable token
    closes the hook (:attr:`problem` says why) until it is fixed; each change of
    state is logged once, never the token.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._identity: tuple[int, int, int, int] | None = None
        self._digest: bytes | None = None
        self.problem: str | None = None
        self.loads = 0  # how many times a token was read (start and rotations)

    def refresh(self) -> bool:
        """Re-read the file if it changed; return whether a usable token is held."""
        try:
            identity = _identity(os.stat(self.path))
            if identity == self._identity:
                return self._digest is not None
            with open(self.path, "rb") as handle:
                # The identity of what is read, not of what stat saw a moment earlier.
                identity = _identity(os.fstat(handle.fileno()))
                raw = read_capped_stream(handle, MAX_TOKEN_FILE_BYTES)
        except OSError as exc:
            self._identity = None  # tried again at the next request
            self._fail(f"{self.path}: cannot read: {exc.strerror or exc}")
            return False
        except FileTooLarge:
            self._identity = identity  # not read (or logged) again until it changes
            self._fail(str(_too_large(self.path)))
            return False
        self._identity = identity  # an unchanged bad file is not read (or logged) again
        try:
            token = parse_token(raw, self.path)
        except TokenError as exc:
            self._fail(str(exc))
            return False
        rotated = self.loads > 0
        self._digest = _digest(token)
        self.loads += 1
        self.problem = None
        log.info("maintenance_token_loaded", token_file=str(self.path), rotated=rotated)
        return True

    def check(self, presented: str | None) -> bool:
        """Whether ``presented`` is the file's current token (re-read first if it changed)."""
        return self.refresh() and self.matches(presented)

    def matches(self, presented: str | None) -> bool:
        """Whether ``presented`` is the token last read, compared in constant time."""
        if presented is None or self._digest is None:
            return False
        return hmac.compare_digest(_digest(presented), self._digest)

    def _fail(self, problem: str) -> None:
        self._digest = None
        if problem != self.problem:
            log.warning("maintenance_token_unusable", problem=problem)
        self.problem = problem


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def bearer_token(authorization: list[str]) -> str | None:
    """The token of the one ``Authorization: Bearer <token>`` header, or None."""
    if len(authorization) != 1:
        return None
    scheme, _, token = authorization[0].strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


__all__ = [
    "MAX_BODY_BYTES",
    "MIN_TOKEN_CHARS",
    "REASON_MAX_CHARS",
    "MaintenanceInfo",
    "MaintenanceRefused",
    "MaintenanceRequest",
    "MaintenanceWindow",
    "TokenError",
    "TokenFile",
    "bearer_token",
    "maintenance_json",
    "parse_token",
    "read_token",
    "sanitize_reason",
]
