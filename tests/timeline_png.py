"""What a test asks of an incident's ``timeline.png``: the picture, its size, its panels."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from sentinel.diagnostics.timeline import DPI, HEIGHT_IN, TIMELINE_FILE, WIDTH_IN

PANELS = 4  # the answers' lanes, the canaries, vLLM's counters, its gauges


def check_timeline(incident: Path) -> str:
    """Open the incident's timeline and check it; return what its index says it shows."""
    said = str(json.loads((incident / "incident.json").read_text())["timeline"])
    assert said.startswith(TIMELINE_FILE), said
    with Image.open(incident / TIMELINE_FILE) as image:
        assert image.format == "PNG"
        assert image.size == (int(WIDTH_IN * DPI), int(HEIGHT_IN * DPI)), image.size
        rgb = image.convert("RGB")
        width, height = rgb.size
        # Four panels, top to bottom: each band drawn on (axes, lines, labels), not blank.
        for band in range(PANELS):
            box = (0, band * height // PANELS, width, (band + 1) * height // PANELS)
            colours = rgb.crop(box).getcolors(maxcolors=1 << 16)
            assert colours is None or len(colours) > 8, f"band {band} nearly blank"
    return said
