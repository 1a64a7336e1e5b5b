"""vLLM's own stall watchdog: the stack dumps it wrote, gathered into a hang's bundle.

vLLM 0.33+ runs a watchdog thread in EngineCore and in each worker when
``--watchdog-config '{"dump_dir": ..., "timeout": 300, "check_interval": 10}'``
names a ``dump_dir`` (empty, the default, is off): a main thread not fed for
``timeout`` seconds gets every thread's stack appended, numbered, to
``<dump_dir>/VLLM_STACK_DUMP_for_engine_<dp>_<pid>.log`` or
``..._for_worker_<rank>_<pid>.log``. It kills nothing (``vllm/config/watchdog_config.py``,
``vllm/utils/watch_dog.py``). Those dumps are taken from inside the stuck
process, so they show a hang py-spy cannot reach (no ptrace) and one that began
long before sentinel's capture: a bundle keeps them.

Only the dumps of the server's *current* processes are kept (a dump dir
outlives restarts; the pid in the name says whose), newest first, at most
:data:`MAX_FILES`, each cut to its *last* bytes (the newest dump is appended
at the end). The directory is the server's: read through
``/proc/<pid>/root`` of the process whose command line names it, else at the
same path (a shared volume). Everything there is hostile: no symlink is
followed, only regular files are read, the listing and each read are capped.
The texts are redacted with the rest of the bundle.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sentinel.diagnostics import procs
from sentinel.evidence.process_model import flag_values

FLAG = "--watchdog-config"
DUMP_DIR_KEY = "dump_dir"
# vLLM's config flags also take one key at a time: --watchdog-config.dump_dir DIR.
_DOTTED = "--watchdog-config.dump-dir"
_JSON_AT = re.compile(r"--watchdog[-_]config(?:=|\s+)")
_DOTTED_AT = re.compile(r"--watchdog[-_]config\.dump[-_]dir")
DUMP_NAME = re.compile(r"VLLM_STACK_DUMP_for_(engine|worker)_(\d+)_(\d+)\.log")
MAX_FILES = 8
MAX_FILE_BYTES = 256 * 1024
MAX_LISTED = 4096  # directory entries looked at; a dump dir is a handful of files
PROC = Path("/proc")


def dump_dir(cmdline: Sequence[str]) -> str | None:
    """The ``dump_dir`` a vLLM command line turns the watchdog on with (None: off or unsaid).

    The JSON form (``=`` or a space, quoted or not: one argument holding spaces,
    or a whole command in one argument) or the dotted form; the last one wins,
    as argparse has it. An empty ``dump_dir`` is vLLM's "off".
    """
    found: list[tuple[int, str]] = []
    joined = " ".join(cmdline)
    decoder = json.JSONDecoder()
    for match in _JSON_AT.finditer(joined):
        rest = joined[match.end() :].lstrip("'\"")
        try:
            config, _ = decoder.raw_decode(rest)
        except ValueError:
            continue
        if isinstance(config, dict) and isinstance(config.get(DUMP_DIR_KEY), str):
            found.append((match.start(), config[DUMP_DIR_KEY]))
    dotted = [value for _, value in flag_values(cmdline, (_DOTTED,))]
    if dotted:
        found.append((max((m.start() for m in _DOTTED_AT.finditer(joined)), default=0), dotted[-1]))
    if not found:
        return None
    return max(found)[1] or None


@dataclass(frozen=True, slots=True)
class Dump:
    """One dump file of a current process, its tail read."""

    name: str
    process: str  # "engine" (its data-parallel index) or "worker" (its rank)
    index: int
    pid: int
    modified: float
    size: int
    text: str
    truncated_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "process": self.process,
            "index": self.index,
            "pid": self.pid,
            "modified": datetime.fromtimestamp(self.modified, UTC).isoformat(),
            "size": self.size,
            "text": self.text,
            "truncated_bytes": self.truncated_bytes,
        }


def _read_tail(folder: Path, name: str, limit: int) -> tuple[os.stat_result, str, int] | None:
    """A regular file's last ``limit`` bytes, never through a symlink (None: not one)."""
    try:
        fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None
        start = max(info.st_size - limit, 0)
        handle.seek(start)
        data = handle.read(limit)
    text = data.decode("utf-8", "replace")
    if start:  # the cut lands on a line boundary: a dump's frames stay whole
        text = text[text.find("\n") + 1 :] if "\n" in text else text
    return info, text, start


def _listing(folder: Path) -> list[str]:
    names = []
    with os.scandir(folder) as entries:
        for count, entry in enumerate(entries):
            if count >= MAX_LISTED:
                break
            if DUMP_NAME.fullmatch(entry.name):
                names.append(entry.name)
    return names


def gather(
    processes: Iterable[tuple[int, Sequence[str]]],
    limit: int = MAX_FILE_BYTES,
    proc: Path = PROC,
) -> dict[str, Any] | None:
    """The bundle's ``watchdog`` section for the server's processes ``(pid, cmdline)``.

    None when no command line turns the watchdog on (nothing to say); a
    directory that cannot be read is an ``error`` in the section, never a raise.
    """
    processes = list(processes)
    pids = {pid for pid, _ in processes}
    owner, folder_name = next(
        ((pid, d) for pid, cmd in processes if (d := dump_dir(cmd)) is not None), (None, None)
    )
    if folder_name is None:
        return None
    section: dict[str, Any] = {"dump_dir": folder_name, "files": [], "other_processes": 0}
    candidates = [proc / str(owner) / "root" / folder_name.lstrip("/"), Path(folder_name)]
    problems = []
    for folder in candidates:
        try:
            names = _listing(folder)
        except OSError as exc:
            problems.append(f"{folder}: {exc.strerror or type(exc).__name__}")
            continue
        section["read_from"] = str(folder)
        dumps = []
        for name in names:
            match = DUMP_NAME.fullmatch(name)
            if match is None or int(match.group(3)) not in pids:
                section["other_processes"] += 1
                continue
            read = _read_tail(folder, name, min(limit, MAX_FILE_BYTES))
            if read is not None:
                info, text, cut = read
                kind, index, pid = match.group(1), int(match.group(2)), int(match.group(3))
                dumps.append(Dump(name, kind, index, pid, info.st_mtime, info.st_size, text, cut))
        dumps.sort(key=lambda d: -d.modified)
        section["files"] = [d.to_json() for d in dumps[:MAX_FILES]]
        section["left_out"] = max(len(dumps) - MAX_FILES, 0)
        return section
    section["error"] = "; ".join(problems)
    return section


def of_discovered(discovered: Sequence[procs.Discovered]) -> dict[str, Any] | None:
    """:func:`gather` for the processes a bundle's discovery found."""
    return gather((d.pid, d.cmdline) for d in discovered)


def summary_lines(section: Any) -> list[str]:
    """What summary.txt says of the watchdog's dumps (nothing when it is off)."""
    if not isinstance(section, dict) or "dump_dir" not in section:
        return []
    files = section.get("files") or []
    head = f"vllm watchdog  dump_dir {section['dump_dir']}: "
    if section.get("error"):
        return ["", head + f"not readable ({section['error']})"]
    lines = ["", head + f"{len(files)} dump file(s) of the current processes, newest first"]
    for item in files if isinstance(files, list) else []:
        if isinstance(item, dict):
            lines.append(
                f"  {item.get('process')} {item.get('index')} pid {item.get('pid')}: "
                f"{item.get('name')}, {item.get('size')} bytes, written {item.get('modified')}"
            )
    return lines
