"""Load generator for OpenAI-compatible servers (the simulator, real vLLM, anything similar).

Closed loop (``--concurrency N`` workers, each sending its next request when
the last one ends) or open loop (``--rate R`` requests per second, at most
``--concurrency`` in flight). A request mix draws each request's kind from
``text``, ``structured`` (a JSON schema with a fresh enum nonce, so grammar
caches are bypassed) and ``multimodal`` (a small PNG with one pixel varied per
request, so image caches are bypassed). Prints throughput and latency
percentiles; ``--json`` for machines.

Importable::

    result = await run_load(LoadConfig(target="http://127.0.0.1:8000", duration=5))
    print(result.summary()["requests_per_s"])

``python -m chaos.load --target URL [--concurrency N | --rate R] --duration S ...``
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import random
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jsonschema
from PIL import Image
from rich.console import Console
from rich.table import Table

KINDS = ("text", "structured", "multimodal")
STRUCTURED_MIN_TOKENS = 48


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """What to send, how hard and for how long."""

    target: str
    model: str | None = None  # None: the first model listed by /v1/models
    concurrency: int = 8  # closed loop workers, or the in-flight cap with `rate`
    rate: float | None = None  # open loop: requests per second
    duration: float = 10.0
    max_requests: int | None = None
    prompt_tokens: int = 16
    max_tokens: int = 16
    ignore_eos: bool = True
    stream: bool = False
    priority: int | None = None
    mix: Mapping[str, float] = field(default_factory=lambda: {"text": 1.0})
    endpoint: str = "chat"  # "chat" | "completions" (completions carry text only)
    timeout: float = 60.0
    seed: int | None = None
    # Sent as each request's ``kv_transfer_params`` (None: none): what a
    # disaggregation proxy hands a decode node, e.g. ``{"do_remote_prefill": True, ...}``.
    kv_transfer_params: Mapping[str, Any] | None = None


@dataclass(slots=True)
class Sample:
    kind: str
    ok: bool
    latency: float
    ttft: float | None = None
    completion_tokens: int = 0
    error: str | None = None


@dataclass(slots=True)
class LoadResult:
    """Every request's outcome plus the wall-clock window they ran in."""

    samples: list[Sample] = field(default_factory=list)
    elapsed: float = 0.0

    def summary(self) -> dict[str, Any]:
        ok = [s for s in self.samples if s.ok]
        latencies = [s.latency for s in ok]
        ttfts = [s.ttft for s in ok if s.ttft is not None]
        elapsed = self.elapsed or 1e-9
        return {
            "requests": len(self.samples),
            "completed": len(ok),
            "errors": dict(Counter(s.error for s in self.samples if not s.ok)),
            "elapsed_s": round(self.elapsed, 3),
            "requests_per_s": round(len(ok) / elapsed, 1),
            "output_tokens_per_s": round(sum(s.completion_tokens for s in ok) / elapsed, 1),
            "latency_s": percentiles(latencies),
            "ttft_s": percentiles(ttfts),
            "by_kind": dict(Counter(s.kind for s in ok)),
        }


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    if len(values) == 1:
        only = round(values[0], 4)
        return {"p50": only, "p90": only, "p99": only, "max": only}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {
        "p50": round(cuts[49], 4),
        "p90": round(cuts[89], 4),
        "p99": round(cuts[98], 4),
        "max": round(max(values), 4),
    }


def _png(nonce: int) -> str:
    image = Image.new("RGB", (64, 64), (40, 90, 160))
    image.putpixel((nonce % 64, (nonce // 64) % 64), (nonce % 256, 7, 7))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


class _Workload:
    """Builds request bodies; one per call, with fresh nonces."""

    def __init__(self, config: LoadConfig, model: str) -> None:
        self.config = config
        self.model = model
        self.random = random.Random(config.seed)
        kinds = [k for k, w in config.mix.items() if w > 0]
        unknown = set(kinds) - set(KINDS)
        if unknown or not kinds:
            raise ValueError(f"mix kinds must be among {KINDS}, got {sorted(config.mix)}")
        self.kinds = kinds
        self.weights = [config.mix[k] for k in kinds]
        words = max(1, config.prompt_tokens - 8)  # leave room for the chat template
        self.prompt = " ".join(["word"] * words)
        self.counter = 0

    def next(self) -> tuple[str, str, dict[str, Any], dict[str, Any] | None]:
        """(kind, path, body, schema) for the next request."""
        self.counter += 1
        kind = self.random.choices(self.kinds, self.weights)[0]
        config = self.config
        body: dict[str, Any] = {"model": self.model, "max_tokens": config.max_tokens}
        if config.ignore_eos:
            body["ignore_eos"] = True
        if config.priority is not None:
            body["priority"] = config.priority
        if config.kv_transfer_params is not None:
            body["kv_transfer_params"] = dict(config.kv_transfer_params)
        if config.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        schema: dict[str, Any] | None = None
        if config.endpoint == "completions":
            body["prompt"] = self.prompt
            return "text", "/v1/completions", body, None
        content: Any = self.prompt
        if kind == "structured":
            nonce = f"ok-{uuid.uuid4().hex[:8]}"
            schema = {
                "type": "object",
                "properties": {"status": {"type": "string", "enum": [nonce]}},
                "required": ["status"],
            }
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "load", "schema": schema},
            }
            body.pop("ignore_eos", None)
            # room for the whole JSON reply, or every structured reply is cut short
            body["max_tokens"] = max(config.max_tokens, STRUCTURED_MIN_TOKENS)
        elif kind == "multimodal":
            content = [
                {"type": "text", "text": self.prompt},
                {"type": "image_url", "image_url": {"url": _png(self.counter)}},
            ]
        body["messages"] = [{"role": "user", "content": content}]
        return kind, "/v1/chat/completions", body, schema


def _valid(content: str | None, schema: dict[str, Any]) -> bool:
    try:
        jsonschema.validate(json.loads(content or ""), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


async def _discover_model(session: aiohttp.ClientSession, target: str) -> str:
    async with session.get(target + "/v1/models") as response:
        response.raise_for_status()
        data = await response.json()
    return str(data["data"][0]["id"])


async def _one(
    session: aiohttp.ClientSession,
    target: str,
    kind: str,
    path: str,
    body: dict[str, Any],
    schema: dict[str, Any] | None,
    deadline_s: float,
) -> Sample:
    start = time.monotonic()
    ttft: float | None = None
    tokens = 0
    try:
        async with asyncio.timeout(deadline_s):
            async with session.post(target + path, json=body) as response:
                if response.status != 200:
                    await response.read()
                    return Sample(
                        kind, False, time.monotonic() - start, error=f"http_{response.status}"
                    )
                if body.get("stream"):
                    text_parts: list[str] = []
                    async for raw in response.content:
                        line = raw.strip()
                        if not line.startswith(b"data: "):
                            continue
                        data = line[6:]
                        if data == b"[DONE]":
                            break
                        chunk = json.loads(data)
                        for choice in chunk.get("choices") or []:
                            piece = (choice.get("delta") or {}).get("content") or choice.get("text")
                            if piece:
                                if ttft is None:
                                    ttft = time.monotonic() - start
                                text_parts.append(piece)
                        if chunk.get("usage"):
                            tokens = int(chunk["usage"]["completion_tokens"])
                    content = "".join(text_parts)
                else:
                    reply = await response.json(content_type=None)
                    tokens = int(reply["usage"]["completion_tokens"])
                    choice = reply["choices"][0]
                    content = (choice.get("message") or {}).get("content") or choice.get("text")
        if schema is not None and not _valid(content, schema):
            return Sample(kind, False, time.monotonic() - start, error="schema")
    except TimeoutError:
        return Sample(kind, False, time.monotonic() - start, error="timeout")
    except aiohttp.ClientConnectionError:
        return Sample(kind, False, time.monotonic() - start, error="connect")
    except (ValueError, KeyError, TypeError, IndexError):
        return Sample(kind, False, time.monotonic() - start, error="bad_body")
    except aiohttp.ClientError as exc:
        return Sample(kind, False, time.monotonic() - start, error=type(exc).__name__)
    return Sample(kind, True, time.monotonic() - start, ttft, tokens)


async def run_load(config: LoadConfig) -> LoadResult:
    """Run the load described by ``config`` and return every sample."""
    target = config.target.rstrip("/")
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=config.timeout)
    result = LoadResult()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        model = config.model or await _discover_model(session, target)
        workload = _Workload(config, model)
        start = time.monotonic()
        end = start + config.duration
        budget = config.max_requests

        def take() -> bool:
            nonlocal budget
            if time.monotonic() >= end:
                return False
            if budget is not None:
                if budget <= 0:
                    return False
                budget -= 1
            return True

        async def send() -> None:
            kind, path, body, schema = workload.next()
            sample = await _one(session, target, kind, path, body, schema, config.timeout)
            result.samples.append(sample)

        if config.rate is None:

            async def worker() -> None:
                while take():
                    await send()

            async with asyncio.TaskGroup() as group:
                for _ in range(config.concurrency):
                    group.create_task(worker())
        else:
            interval = 1.0 / config.rate
            slots = asyncio.Semaphore(config.concurrency)

            async def paced() -> None:
                try:
                    await send()
                finally:
                    slots.release()

            async with asyncio.TaskGroup() as group:
                next_at = start
                while take():
                    await slots.acquire()
                    group.create_task(paced())
                    next_at += interval
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)  # pacing the open loop, not waiting on state
        result.elapsed = time.monotonic() - start
    return result


def render(summary: Mapping[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="load result")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in ("requests", "completed", "elapsed_s", "requests_per_s", "output_tokens_per_s"):
        table.add_row(key, str(summary[key]))
    for name in ("latency_s", "ttft_s"):
        for pct, value in summary[name].items():
            table.add_row(f"{name} {pct}", "-" if value is None else f"{value:.4f}")
    table.add_row("errors", json.dumps(summary["errors"]) if summary["errors"] else "none")
    table.add_row("by kind", json.dumps(summary["by_kind"]))
    console.print(table)


def _mix(text: str) -> dict[str, float]:
    mix: dict[str, float] = {}
    for item in filter(None, text.split(",")):
        name, _, weight = item.partition("=")
        mix[name.strip()] = float(weight) if weight else 1.0
    return mix


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.load", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--target", required=True, help="server root, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", default=None)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rate", type=float, default=None, help="requests/s (open loop)")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--requests", type=int, default=None, help="stop after this many")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--priority", type=int, default=None)
    parser.add_argument(
        "--mix", default="text=1", help="e.g. text=0.8,structured=0.1,multimodal=0.1"
    )
    parser.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = LoadConfig(
        target=args.target,
        model=args.model,
        concurrency=args.concurrency,
        rate=args.rate,
        duration=args.duration,
        max_requests=args.requests,
        prompt_tokens=args.prompt_tokens,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos,
        stream=args.stream,
        priority=args.priority,
        mix=_mix(args.mix),
        endpoint=args.endpoint,
        timeout=args.timeout,
        seed=args.seed,
    )
    summary = asyncio.run(run_load(config)).summary()
    if args.json:
        print(json.dumps(summary))
    else:
        render(summary)
    return 0 if summary["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
