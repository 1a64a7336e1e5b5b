"""The degenerate shape of a reply's text: what a server answering garbage says without logprobs.

The correctness check (:mod:`sentinel.canary.correctness`) needs token ids and
log-probabilities; a server or proxy that strips them disables it, and then a
server answering ``!!!!!!!!`` (weights lost on wake-up: all-zero logits, token
0 wins every step) or random bytes with HTTP 200 passes every other canary,
which asks only whether tokens come. This module names the shapes no working
model's greedy reply takes (docs/design.md, "Degenerate output"):

* the token of all-zero logits repeated over the whole visible reply, cut at
  the length limit (``finish_reason`` ``length``): token 0 wins every step, and
  token 0 of the common byte-level BPE vocabularies (GPT-2's, Llama 3's,
  Qwen's) decodes to ``!``. Only that character: the text canary asks for two
  tokens, and a working model may well open a reply with ``**`` or ``..``;
* text no tokenizer decodes: mostly replacement characters (U+FFFD),
  control, private-use or unassigned characters.

It is conservative on purpose: words repeated, whitespace, and short varied
output (a tiny random-weight model's ``"emmag"``, ``"ens checks"``) are not
degenerate. A reply of that shape stays a success (the engine generates);
the text kind notes the shape in the result's detail behind
:data:`DEGENERATE_PREFIX`, and the ``degenerate`` rule
(:mod:`sentinel.verdict.hangs.degenerate`) asks for it in several canaries
in a row before readiness turns red.
"""

from __future__ import annotations

import unicodedata
from typing import Final

DEGENERATE_PREFIX: Final = "degenerate output: "
MIN_RUN = 2  # visible characters of one repeated character (the text canary asks for 2 tokens)
UNREADABLE_SHARE = 0.5  # of the visible characters, replacement or control ones
# Unicode categories no tokenizer's decoded text holds in a working model's
# reply: control, surrogate, private use, unassigned.
_UNREADABLE_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn"})
SHOWN = 12  # characters of the reply quoted in the detail
# What token 0 decodes to in the common byte-level BPE vocabularies.
ZERO_LOGIT_CHARACTERS: Final = frozenset("!")


def degenerate_shape(text: str, finish_reason: str | None) -> str | None:
    """What makes ``text`` degenerate, in words; None for a reply of ordinary shape."""
    visible = "".join(c for c in text if not c.isspace())
    if not visible:
        return None
    unreadable = sum(1 for c in visible if _unreadable(c))
    if unreadable >= MIN_RUN and unreadable >= UNREADABLE_SHARE * len(visible):
        return (
            f"{unreadable} of {len(visible)} characters are replacement or control characters "
            f"({_quoted(text)})"
        )
    if (
        finish_reason == "length"
        and len(visible) >= MIN_RUN
        and len(set(visible)) == 1
        and visible[0] in ZERO_LOGIT_CHARACTERS
    ):
        return f"{visible[0]!r} repeated to the length limit ({_quoted(text)})"
    return None


def _unreadable(char: str) -> bool:
    return char == "\ufffd" or unicodedata.category(char) in _UNREADABLE_CATEGORIES


def _quoted(text: str) -> str:
    shown = ascii(text[:SHOWN])
    return shown + (f" and {len(text) - SHOWN} more characters" if len(text) > SHOWN else "")
