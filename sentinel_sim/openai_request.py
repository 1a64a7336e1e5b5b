"""The request side of the OpenAI-compatible port: vLLM's error shape and request parsing.

Owns what a generation request means before the engine sees it: the prompt
and its token count, the image parts, the integer fields, and the errors vLLM
answers with (``{"error": {"message", "type", "param", "code"}}``, ``code``
the HTTP status; validation failures typed ``Bad Request`` with
``body.<field>`` as param).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web

from sentinel_sim.model import CHAT_TOKENS_ASSISTANT, CHAT_TOKENS_PER_MESSAGE, count_tokens
from sentinel_sim.structured import Constraint

PRIORITY_HEADER = "X-Vllm-Priority"
# Pins a request to one data-parallel engine, as vLLM's OpenAI server does.
DP_RANK_HEADER = "X-data-parallel-rank"
# vLLM 0.32's ChatTemplateResolutionError (vllm/renderers/hf.py), a ValueError
# answered 400 BadRequestError, for a tokenizer that defines no chat template.
NO_CHAT_TEMPLATE = (
    "As of transformers v4.44, default chat template is no longer allowed, so you must "
    "provide a chat template if the tokenizer does not define one."
)
_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    500: "InternalServerError",
    501: "NotImplementedError",
    503: "ServiceUnavailableError",
}


class RequestError(Exception):
    """Becomes a vLLM-shaped error response."""

    def __init__(self, status: int, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


class ValidationFailure(RequestError):
    """A body that does not fit the request schema.

    vLLM rejects these in request validation, before its own checks, with the
    type ``Bad Request`` and the offending field as ``body.<field>``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(400, f"1 validation error: {message}", param=f"body.{field}")


def error_response(
    status: int, message: str, *, param: str | None = None, err_type: str | None = None
) -> web.Response:
    if err_type is None:
        err_type = _ERROR_TYPES.get(status, HTTPStatus(status).phrase.replace(" ", "") + "Error")
    body = {"error": {"message": message, "type": err_type, "param": param, "code": status}}
    return web.json_response(body, status=status)


@dataclass(slots=True)
class Prepared:
    """A validated generation request, ready for the engine."""

    prompt_text: str
    prompt_tokens: int
    image_urls: list[str]
    constraint: Constraint | None
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    priority: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    engine: int | None = None  # the data-parallel engine it is pinned to (None: balanced)
    thinking: int = 0  # reasoning tokens before the answer (--reasoning-parser)
    logprobs: Mapping[str, Any] | None = None  # what was asked of log-probabilities (logprobs.py)
    remote: bool = False  # its KV comes from a prefill worker (``kv_transfer_params``)


def chat_prompt(body: Mapping[str, Any]) -> tuple[str, int, list[str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValidationFailure("messages", "messages must be a non-empty list")
    texts: list[str] = []
    tokens = CHAT_TOKENS_ASSISTANT
    images: list[str] = []
    for message in messages:
        if not isinstance(message, Mapping) or "role" not in message:
            raise RequestError(400, "each message needs a role")
        tokens += CHAT_TOKENS_PER_MESSAGE
        content = message.get("content")
        if content is None:
            continue
        if isinstance(content, str):
            texts.append(content)
            tokens += count_tokens(content)
            continue
        if not isinstance(content, list):
            raise ValidationFailure(
                "messages", "message content must be a string or a list of parts"
            )
        for part in content:
            if not isinstance(part, Mapping):
                raise RequestError(400, "content parts must be objects")
            kind = part.get("type")
            if kind == "text":
                text = str(part.get("text", ""))
                texts.append(text)
                tokens += count_tokens(text)
            elif kind == "image_url":
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, Mapping) else image
                if not isinstance(url, str):
                    raise RequestError(400, "image_url.url must be a string")
                images.append(url)
            else:
                raise RequestError(400, f"Unknown part type: {kind}")
    return "\n".join(texts), tokens, images


def completion_prompt(body: Mapping[str, Any]) -> tuple[str, int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt, 1 + count_tokens(prompt)  # + BOS
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return " ".join(map(str, prompt)), len(prompt)
    raise RequestError(400, "prompt must be a string or a list of token ids")


def remote_prefill(body: Mapping[str, Any]) -> bool:
    """The request's KV is prefilled elsewhere: a disaggregation proxy's ``kv_transfer_params``.

    The proxy sends the prefill worker's answer on with ``do_remote_prefill``
    true (NIXL's and Mooncake's connectors read it on the decode node).
    """
    params = body.get("kv_transfer_params")
    return isinstance(params, Mapping) and params.get("do_remote_prefill") is True


def int_field(body: Mapping[str, Any], name: str, default: int | None) -> int | None:
    value = body.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"{name} must be an integer")
    return value


def data_parallel_rank(headers: Mapping[str, str], engines: int) -> int | None:
    """The engine ``X-data-parallel-rank`` pins the request to, as vLLM reads it.

    A value that is not an integer is ignored (vLLM's
    ``_get_data_parallel_rank`` returns None); one outside the engines is a
    400, vLLM's ``data_parallel_rank N is out of range [0, size).``
    """
    text = headers.get(DP_RANK_HEADER)
    if text is None:
        return None
    try:
        rank = int(text)
    except ValueError:
        return None
    if not 0 <= rank < engines:
        raise RequestError(400, f"data_parallel_rank {rank} is out of range [0, {engines}).")
    return rank
