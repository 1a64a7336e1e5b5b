"""Long texts are redacted piece by piece, with exactly the result of one pass."""

from __future__ import annotations

import random

import pytest

from sentinel.telemetry.redact.shapes import CHUNK_CHARS, _pieces, _redact_piece, redact_text

SECRET = "s3cr3tV4lu3xyzzy"
# Lines that hold a secret in every shape redact_text knows, several of them split
# over two lines by a separator's whitespace, mixed with harmless metric lines.
SECRET_LINES = [
    f"password = {SECRET}",
    f"password =\n  {SECRET}",
    f"api_key:\n{SECRET}",
    f"Authorization:\n Bearer {SECRET}",
    f"Bearer\n{SECRET}abcdef",
    f"https://user:{SECRET}@host/path",
    f"--api-key {SECRET}",
    f'"token": "{SECRET}"',
    f"TOKEN\n= {SECRET}",
    f"-----BEGIN PRIVATE KEY-----\n{SECRET}\n" + "A" * 70 + "\n-----END PRIVATE KEY-----",
]
HARMLESS = 'vllm:num_requests_running{engine="0",model_name="m"} 0.0'


def _document(seed: int, lines: int) -> str:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        roll = rng.random()
        if roll < 0.02:
            out.append(rng.choice(SECRET_LINES))
        elif roll < 0.04:
            out.append(" " * rng.randint(0, 200))  # blank runs around a separator
        else:
            out.append(HARMLESS)
    return "\n".join(out)


@pytest.mark.parametrize("seed", range(12))
def test_pieces_give_the_one_pass_result(seed: int) -> None:
    text = _document(seed, 6_000)
    assert len(text) > 4 * CHUNK_CHARS
    whole = _redact_piece(text)
    assert redact_text(text) == whole
    assert SECRET not in whole


def test_pieces_cover_the_text_and_stay_near_the_size() -> None:
    text = _document(99, 20_000)
    pieces = _pieces(text, CHUNK_CHARS)
    assert "".join(pieces) == text
    assert len(pieces) > 10
    assert all(p.endswith("\n") for p in pieces[:-1])
    assert max(len(p) for p in pieces) < 2 * CHUNK_CHARS


@pytest.mark.parametrize(
    "split",
    [
        f"password =\n{SECRET}",
        f"Authorization:\n Bearer {SECRET}",
        f"TOKEN\n= {SECRET}",
        f"api_key:\n\n   \n{SECRET}",
    ],
)
def test_no_cut_inside_a_separator(split: str) -> None:
    # The first line end past CHUNK_CHARS is inside the separator's whitespace.
    first_line, _, _rest = split.partition("\n")
    text = "x" * (CHUNK_CHARS - len(first_line)) + "\n" + split + "\n" + "y\n" * 10
    redacted = redact_text(text)
    assert SECRET not in redacted
    assert redacted == _redact_piece(text)
