"""The simulated model's "weights": tokenization, chat template, image cost and replies.

Token counts follow simple, stable rules so tests can reason about them:

- text: one token per word or punctuation mark (leading whitespace attached);
- chat: 4 tokens of template per message plus 3 for the assistant turn;
- an image: ``1 + ceil(width / 14) * ceil(height / 14)`` tokens (14-pixel
  patches plus a separator), so a bigger image always costs more and any image
  costs at least 2. The image is really decoded with Pillow first, which is
  what makes preprocessing a place where a hang can live.

Replies are planned in the API process (as vLLM detokenizes there) and
released token by token as the engine reports progress. Under
``--reasoning-parser`` a chat reply first thinks for ``thinking`` tokens
(reasoning text, which vLLM's parser moves out of ``content``), then answers;
a structured-output constraint shapes only the answer, as vLLM applies the
grammar once reasoning has ended.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import re
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

from PIL import Image, UnidentifiedImageError

_TOKEN = re.compile(r"\s*(?:\w+|[^\w\s])|\s+")
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_ASSISTANT = 3
IMAGE_PATCH = 14

_WORDS = (
    "the", "simulated", "model", "answers", "every", "request", "with", "a", "steady",
    "stream", "of", "plausible", "words", "so", "that", "health", "checks", "see", "tokens",
    "arrive", "at", "the", "configured", "rate", "while", "the", "scheduler", "decides",
    "who", "runs", "next",
)  # fmt: skip


def split_tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


class ImageError(ValueError):
    """An image vLLM would refuse with 400 (undecodable, or not a data URL we can read)."""


def image_tokens(url: str) -> int:
    """Decode a ``data:`` URL with Pillow and return its token cost."""
    if not url.startswith("data:"):
        raise ImageError("only data: image URLs can be loaded here (no network access)")
    header, sep, payload = url.partition(",")
    if not sep or ";base64" not in header:
        raise ImageError("image data URL must be base64-encoded")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageError(f"invalid base64 image data: {exc}") from None
    try:
        with Image.open(io.BytesIO(raw)) as image:
            image.load()
            width, height = image.size
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ImageError(f"cannot identify image file: {exc}") from None
    return 1 + math.ceil(width / IMAGE_PATCH) * math.ceil(height / IMAGE_PATCH)


LOST_TOKEN = "!"  # token id 0 of most BPE vocabularies: the argmax of all-zero logits

_THOUGHTS = (
    "Okay", ",", " let", " me", " think", " about", " what", " the", " user", " asked",
    " before", " I", " answer", ".",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Reply:
    """The tokens a request will produce: optional thinking, then a fixed text or word stream."""

    fixed: tuple[str, ...] | None  # structured replies: exactly these tokens, then EOS
    offset: int = 0  # where in the word cycle an unconstrained reply starts
    thinking: int = 0  # leading reasoning tokens (a reasoning parser moves them out of content)
    lost: bool = False  # weights lost (``weights_lost``): one token repeated, as vLLM's "!!!!"

    def _answer(self, start: int, end: int) -> str:
        if self.fixed is not None:
            return "".join(self.fixed[start:end])
        if self.lost:
            return LOST_TOKEN * (end - start)
        return "".join(
            (" " if i else "") + _WORDS[(self.offset + i) % len(_WORDS)] for i in range(start, end)
        )

    def _thought(self, start: int, end: int) -> str:
        return "".join(_THOUGHTS[i % len(_THOUGHTS)] for i in range(start, end))

    def split(self, start: int, end: int) -> tuple[str | None, str | None]:
        """Tokens ``start..end`` as (reasoning, content); None where that part has no token."""
        think_end = min(end, self.thinking)
        reasoning = self._thought(start, think_end) if start < think_end else None
        answer_start = max(start, self.thinking) - self.thinking
        answer_end = end - self.thinking
        content = self._answer(answer_start, answer_end) if answer_end > answer_start else None
        return reasoning, content

    def text(self, start: int, end: int) -> str:
        """Tokens ``start..end`` as plain text, thinking included (no parser separates it)."""
        reasoning, content = self.split(start, end)
        return (reasoning or "") + (content or "")

    @property
    def natural_length(self) -> int | None:
        return None if self.fixed is None else self.thinking + len(self.fixed)


def unconstrained_reply(prompt_text: str, thinking: int = 0) -> Reply:
    return Reply(None, zlib.crc32(prompt_text.encode()) % len(_WORDS), thinking)


def fixed_reply(text: str, thinking: int = 0) -> Reply:
    return Reply(tuple(split_tokens(text)), thinking=thinking)


def model_card(model: str, created: int, max_model_len: int) -> dict[str, Any]:
    """One entry of ``GET /v1/models``, field for field as vLLM 0.32 lists a model."""
    card: dict[str, Any] = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [
            {
                "id": "modelperm-" + uuid.uuid4().hex,
                "object": "model_permission",
                "created": created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }
    return card
