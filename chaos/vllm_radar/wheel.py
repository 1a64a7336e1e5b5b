"""A vLLM release's wheel, downloaded (never installed) and cached, and its Python sources.

``pip download --no-deps --only-binary=:all: vllm==X`` into
``.cache/vllm-radar/wheels``; a wheel already there is reused. The surfaces
read from a wheel are cached beside it as JSON, keyed by the wheel's name and
the extractor's own source, so a second run (or a base release read before)
costs nothing and a changed extractor re-reads.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

from chaos.vllm_radar import extract
from chaos.vllm_radar.extract import Item, Surfaces

CACHE = Path(".cache/vllm-radar")
MAX_SOURCE_BYTES = 4 * 1024 * 1024  # one .py member; vLLM's largest is well under 1 MB


class RadarError(Exception):
    """A release the radar cannot read: the message says what to do."""


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def wheel_path(version: str, cache: Path = CACHE) -> Path:
    """The release's wheel, downloaded first when the cache does not hold it."""
    folder = cache / "wheels"
    found = sorted(folder.glob(f"vllm-{version}-*.whl"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    _say(f"radar: downloading vllm=={version} (a wheel of about 300 MB) into {folder}")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        f"vllm=={version}",
        "-d",
        str(folder),
    ]
    done = subprocess.run(command, stdout=sys.stderr, stderr=sys.stderr, check=False)
    found = sorted(folder.glob(f"vllm-{version}-*.whl"))
    if done.returncode != 0 or not found:
        raise RadarError(
            f"could not download vllm=={version} (pip exited {done.returncode}); check the "
            "version exists and the package index is reachable, or put the wheel in "
            f"{folder} yourself"
        )
    return found[0]


def sources(wheel: Path) -> Iterator[tuple[str, str]]:
    """``(path, text)`` of every ``vllm/**.py`` member, read without extracting the wheel."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise RadarError(f"{wheel} is not a readable wheel ({exc}); delete it and rerun") from exc
    with archive:
        members = [
            m
            for m in archive.infolist()
            if m.filename.startswith("vllm/") and m.filename.endswith(".py")
        ]
        for count, member in enumerate(members, 1):
            if count % 500 == 0 or count == len(members):
                _say(f"radar: read {count}/{len(members)} files of {wheel.name}")
            if member.file_size > MAX_SOURCE_BYTES:
                continue
            with archive.open(member) as raw:
                text = raw.read(MAX_SOURCE_BYTES).decode("utf-8", errors="replace")
            yield member.filename, text


def _fingerprint(wheel: Path) -> str:
    digest = hashlib.sha256(Path(extract.__file__).read_bytes())
    digest.update(wheel.name.encode())
    digest.update(str(wheel.stat().st_size).encode())
    return digest.hexdigest()[:16]


def surfaces(version: str, cache: Path = CACHE) -> Surfaces:
    """The surfaces of one release, from the cache when its wheel was read before."""
    wheel = wheel_path(version, cache)
    cached = cache / f"surfaces-{version}-{_fingerprint(wheel)}.json"
    if cached.is_file():
        return load(json.loads(cached.read_text()))
    _say(f"radar: reading {wheel.name} with ast (a minute on a busy machine)")
    found = extract.extract(sources(wheel))
    cached.write_text(json.dumps(dump(found)))
    return found


def dump(found: Surfaces) -> dict[str, object]:
    """JSON-able form of :class:`Surfaces`."""
    return {
        "files": found.files,
        "unparsed": found.unparsed,
        "items": [[i.kind, i.key, i.detail, i.where] for i in extract.iter_items(found)],
    }


def load(data: dict[str, object]) -> Surfaces:
    """:class:`Surfaces` from :func:`dump`'s form."""
    found = Surfaces()
    files, unparsed, items = data["files"], data["unparsed"], data["items"]
    found.files = files if isinstance(files, int) else 0
    found.unparsed = [str(u) for u in unparsed] if isinstance(unparsed, list) else []
    for row in items if isinstance(items, list) else []:
        kind, key, detail, where = (str(v) for v in row)
        found.items[kind][key] = Item(kind, key, detail, where)
    return found
