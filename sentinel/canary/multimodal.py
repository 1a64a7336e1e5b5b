"""The multimodal canary: exercises image preprocessing with an image no cache has seen.

vLLM caches processed images (``vllm:mm_cache_hits_total``), so every run
changes a few pixels of the catalog's image (derived from the nonce) and
re-encodes it as PNG. The reply passes when it generated tokens and
``usage.prompt_tokens`` is larger than for the same prompt without the image:
the proof that the image reached the model rather than being dropped on the
way.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import re
from collections.abc import Mapping
from importlib.resources.abc import Traversable
from pathlib import PurePosixPath
from typing import Any

from PIL import Image, UnidentifiedImageError

from sentinel.canary.capability import missing_endpoint, refuses_capability
from sentinel.canary.protocol import (
    NONCE_FIELD,
    OK,
    CanaryRequest,
    Judgement,
    KindDefaults,
    PathKind,
    Reply,
    base_body,
    nothing_generated,
    thought_cut_short,
)
from sentinel.canary.result import Reason
from sentinel.canary.spec import CHAT_ENDPOINT, MULTIMODAL, CanarySpec, SpecFieldError

# A text-only server refuses the image in its own words; any 4xx naming the
# input and saying it is not supported is read so (replies.refuses_capability).
# vLLM 0.32, vllm/multimodal/registry.py, MultiModalRegistry.create_processor:
#   raise ValueError(f"{model_name} is not a multimodal model")
# answered as 400 {"error": {"message": "<model> is not a multimodal model",
# "type": "BadRequestError", "param": null, "code": 400}}.
IMAGE_SUBJECT = re.compile(r"image|vision|multi-?modal|\bmedia\b", re.IGNORECASE)
# llama.cpp's llama-server without --mmproj (tools/server, oaicompat_chat_params_parse)
# throws "image input is not supported - hint: if this is unexpected, you may need
# to provide the mmproj", which it answers as a 500 of type server_error. The one
# 5xx read as a refusal of the kind, and only in these exact words.
SERVER_ERROR_REFUSALS = ("image input is not supported",)

MAX_IMAGE_BYTES = 1 << 20
NONCE_PIXELS = 4  # pixels of the top row rewritten per run: enough to defeat the cache


def stamp_image(image: bytes, nonce: str) -> bytes:
    """The catalog image with a few pixels set from ``nonce``, re-encoded as PNG."""
    with Image.open(io.BytesIO(image)) as source:
        picture = source.convert("RGB")
    digest = hashlib.sha256(nonce.encode()).digest()
    width = picture.width
    for i in range(min(NONCE_PIXELS, width)):
        r, g, b = digest[3 * i : 3 * i + 3]
        picture.putpixel((i, 0), (r, g, b))
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _with_image(messages: list[Any], url: str) -> list[Any]:
    """Put the image in front of the text of the last user message."""
    messages = copy.deepcopy(messages)
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content", "")
            parts: list[Any] = (
                list(content) if isinstance(content, list) else [{"type": "text", "text": content}]
            )
            message["content"] = [{"type": "image_url", "image_url": {"url": url}}, *parts]
            return messages
    raise ValueError("the request has no user message to attach the image to")


class MultimodalCanary(PathKind):
    """Sends the catalog image (stamped with the nonce) with the template's last user message.

    Cost: the baseline (the same prompt without the image, ``max_tokens`` 1,
    not streamed) is one extra text-only request per server, model and spec;
    the runner caches it, so steady state is one request per run. The baseline
    carries no nonce (the runner caches it by its body); it keeps the chat
    template arguments, so both prompts render alike.

    Where the generated text lands does not matter here (the proof is the
    prompt token count), so a reasoning-only reply is judged like any other,
    except one cut at ``max_tokens`` while thinking: INCONCLUSIVE; prompt
    tokens prove the image reached the model, thinking or not, so no server
    makes it unvalidatable.
    """

    kind = MULTIMODAL
    unsupported_skipped = True  # images refused as unsupported: a text-only model, not a fault
    traffic_counter = "mm_queries"  # images preprocessed: vllm:mm_cache_queries
    defaults = KindDefaults(deadline=10.0, interval=10.0)
    spec_fields = frozenset({"image"})
    endpoints = frozenset({CHAT_ENDPOINT})

    def load_fields(self, given: Mapping[str, Any], assets: Traversable) -> Mapping[str, Any]:
        """Read the image beside the catalog; it must be small and decode as a picture."""
        relative = given["image"]
        if not isinstance(relative, str):
            raise SpecFieldError("image", "must be a path relative to the catalog directory")
        try:
            data = assets.joinpath(*PurePosixPath(relative).parts).read_bytes()
        except OSError as exc:
            problem = f"cannot read {relative!r}: {exc.strerror or exc}"
            raise SpecFieldError("image", problem) from None
        if len(data) > MAX_IMAGE_BYTES:
            raise SpecFieldError("image", f"{relative!r} is over {MAX_IMAGE_BYTES} bytes")
        try:
            with Image.open(io.BytesIO(data)) as picture:
                picture.load()
        except (UnidentifiedImageError, OSError) as exc:
            raise SpecFieldError("image", f"{relative!r} is not an image: {exc}") from None
        return {"image": data}

    def build(self, spec: CanarySpec, *, model: str, nonce: str) -> CanaryRequest:
        assert spec.image is not None, "the catalog requires an image for multimodal canaries"
        body = base_body(spec, model=model, nonce=nonce)
        baseline = base_body(spec, model=model, nonce=nonce)
        baseline.pop(NONCE_FIELD)
        baseline["stream"] = False
        baseline.pop("stream_options", None)
        baseline["max_tokens"] = 1
        body["messages"] = _with_image(body["messages"], data_url(stamp_image(spec.image, nonce)))
        return CanaryRequest(body=body, nonce=nonce, baseline_body=baseline)

    def judge(
        self, sent: CanaryRequest, reply: Reply, *, baseline_prompt_tokens: int | None
    ) -> Judgement:
        empty = nothing_generated(reply) or thought_cut_short(reply)
        if empty is not None:  # no generated token proves no work; a cut thought proves nothing
            return empty
        if reply.prompt_tokens is None:
            return Judgement(Reason.BAD_BODY, "reply has no usage.prompt_tokens")
        if baseline_prompt_tokens is None:
            return Judgement(Reason.BAD_BODY, "no baseline prompt token count")
        if reply.prompt_tokens <= baseline_prompt_tokens:
            return Judgement(
                Reason.IMAGE_NOT_CONSUMED,
                f"prompt_tokens {reply.prompt_tokens} with the image, "
                f"{baseline_prompt_tokens} without it",
            )
        return OK

    def rejection(self, status: int, message: str) -> Reason | None:
        """UNSUPPORTED: images refused in so many words, or no chat endpoint at all."""
        said = message.lstrip().lower()
        if (
            refuses_capability(status, message, IMAGE_SUBJECT)
            or missing_endpoint(status, message)
            or (status == 500 and said.startswith(SERVER_ERROR_REFUSALS))
        ):
            return Reason.UNSUPPORTED
        return None


CANARY = MultimodalCanary()
