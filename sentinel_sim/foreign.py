"""Servers that are not vLLM: a text-only server refusing images in its own words, no completions.

``--text-only llama.cpp`` answers an image as llama.cpp's ``llama-server``
without ``--mmproj`` does (its words, from ``tools/server``), with the status
of ``--image-refusal-status``: 400 by default, as most OpenAI-compatible
servers refuse an input they lack; llama-server itself answers its words as a
500 of type ``server_error``. ``--no-completions`` leaves ``/v1/completions``
unrouted (a chat-only server or gateway): aiohttp's plain 404. Together they
are the healthy server that is not vLLM which ``sentinel probe``, the
exporter and ``sentinel doctor`` must not call broken.
"""

from __future__ import annotations

from sentinel_sim.config import SimConfig
from sentinel_sim.openai_request import RequestError

# The words of each server a text-only model refuses an image in.
IMAGE_REFUSALS = {
    # vLLM 0.32, vllm/multimodal/registry.py: the served model name first.
    "vllm": "{model} is not a multimodal model",
    # llama.cpp tools/server (oaicompat_chat_params_parse), without --mmproj.
    "llama.cpp": (
        "image input is not supported - hint: if this is unexpected, "
        "you may need to provide the mmproj"
    ),
}


def image_refused(config: SimConfig) -> RequestError:
    """The error a text-only server answers an image with, in its own words."""
    words = IMAGE_REFUSALS[config.image_refusal].format(model=config.model)
    return RequestError(config.image_refusal_status, words)
