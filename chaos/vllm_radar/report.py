"""The radar's report: a short Markdown diff, what touches sentinel first.

Sections, in the order a reviewer needs them: differences that touch a
surface sentinel knows; known surfaces the release does not declare; then
what is new, gone or changed elsewhere (flags and config fields that are not
health-relevant in one line each). Every row carries its disposition from
:mod:`chaos.vllm_radar.notes`, or ``UNREVIEWED`` until someone writes one.
"""

from __future__ import annotations

from chaos.vllm_radar.compare import HEALTH_WORDS, Change, Presence
from chaos.vllm_radar.extract import KINDS, Surfaces
from chaos.vllm_radar.notes import disposition

_LABELS = {
    "route": "route",
    "middleware": "middleware",
    "body": "body",
    "metric": "metric",
    "title": "title",
    "flag": "flag",
    "field": "config field",
}
_TEXT_CAP = 110  # characters of a body quoted in a row


def _quote(key: str) -> str:
    text = key if len(key) <= _TEXT_CAP else key[: _TEXT_CAP - 3] + "..."
    return "`" + text.replace("`", "'") + "`"


def _row(change: Change) -> str:
    detail = f" ({change.detail})" if change.detail else ""
    known = change.touches
    touches = f" - sentinel: {_quote(known.key)}, {known.use}" if known else ""
    note = disposition(change.kind, change.key) or "UNREVIEWED"
    return (
        f"- {change.status} {_LABELS[change.kind]} {_quote(change.key)}{detail}, "
        f"`{change.where.split(', ')[0]}`{touches}. **{note}**"
    )


def _minor(change: Change) -> bool:
    """Flags and fields with no health word and no disposition: listed in one line."""
    if change.kind not in {"flag", "field"} or change.touches is not None:
        return False
    if disposition(change.kind, change.key):
        return False
    return not HEALTH_WORDS.search(change.key)


def render(
    version: str,
    base: str,
    target: Surfaces,
    changes: list[Change],
    rows: list[Presence],
) -> str:
    """The report for ``version`` against ``base``."""
    counts = ", ".join(f"{_LABELS[k]} {len(target.items[k])}" for k in KINDS)
    out = [
        f"### vLLM {version} against {base}",
        "",
        f"Read {target.files} Python files of the wheel ({len(target.unparsed)} unparsed): "
        f"{counts}.",
        "",
    ]
    touching = [c for c in changes if c.touches is not None]
    out.append(f"**Touching a surface sentinel knows ({len(touching)})**")
    out.append("")
    out.extend(_row(c) for c in touching)
    if not touching:
        out.append("- none")
    missing = [r for r in rows if not r.present]
    out += ["", f"**Known surfaces this release does not declare ({len(missing)})**", ""]
    for row in missing:
        note = disposition(row.known.kind, row.known.key) or "UNREVIEWED"
        out.append(
            f"- {_LABELS[row.known.kind]} {_quote(row.known.key)} - sentinel: "
            f"{row.known.use}. **{note}**"
        )
    if not missing:
        out.append("- none")
    rest = [c for c in changes if c.touches is None and not _minor(c)]
    minor = [c for c in changes if _minor(c)]
    out += ["", f"**Elsewhere: new, gone or changed ({len(rest)})**", ""]
    out.extend(_row(c) for c in rest)
    if not rest:
        out.append("- none")
    for kind in ("flag", "field"):
        for status in ("new", "gone", "changed"):
            keys = [c.key for c in minor if c.kind == kind and c.status == status]
            if keys:
                out.append(
                    f"- {status} {_LABELS[kind]}s not health-relevant ({len(keys)}): "
                    + ", ".join(f"`{k}`" for k in keys)
                    + ". **not read: no health meaning**"
                )
    return "\n".join(out) + "\n"
