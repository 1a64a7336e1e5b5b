"""The older-wheel fix-ups of the engine environment, on a small library built here.

``weaken_versions`` edits an ELF file in place; a real C++ library built with the
system's g++ (it needs ``GLIBCXX_3.4.21`` for ``std::string``, which every
``libstdc++`` since GCC 5 provides) shows that exactly the named requirement
turns weak, nothing else in the file moves, and the library still loads.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from chaos.vllm_engine.legacy import (
    LegacyFixError,
    install_ios_init,
    needs_newer_libstdcxx,
    weaken_versions,
)

SOURCE = """#include <string>
extern "C" int sentinel_len(const char* s) {
    std::string text(s);
    text += "!";
    return static_cast<int>(text.size());
}
"""
NEEDED = "GLIBCXX_3.4.21"

needs_toolchain = pytest.mark.skipif(
    shutil.which("g++") is None or shutil.which("readelf") is None,
    reason="g++ and readelf are needed to build and read the test library",
)


@pytest.fixture
def library(tmp_path: Path) -> Path:
    source = tmp_path / "sentinel_len.cc"
    source.write_text(SOURCE)
    out = tmp_path / "libsentinel_len.so"
    subprocess.run(
        ["g++", "-O2", "-shared", "-fPIC", "-o", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    return out


def _flags(path: Path) -> dict[str, str]:
    """Version need -> its flags, as binutils reads them."""
    text = subprocess.run(
        ["readelf", "-V", str(path)], check=True, capture_output=True, text=True
    ).stdout
    flags = {}
    for line in text.splitlines():
        if "Name:" in line and "Flags:" in line:
            name = line.split("Name:")[1].split()[0]
            flags[name] = line.split("Flags:")[1].split()[0]
    return flags


@needs_toolchain
def test_only_the_named_version_turns_weak_and_the_library_still_loads(library: Path) -> None:
    before = library.read_bytes()
    flags = _flags(library)
    assert flags[NEEDED] == "none", flags

    assert weaken_versions(library, frozenset({NEEDED})) == [NEEDED]

    after = library.read_bytes()
    assert len(after) == len(before)
    differing = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert len(differing) == 1, differing  # one flags byte of one entry
    changed = _flags(library)
    assert changed[NEEDED] == "WEAK", changed
    assert {k: v for k, v in changed.items() if k != NEEDED} == {
        k: v for k, v in flags.items() if k != NEEDED
    }
    assert ctypes.CDLL(str(library)).sentinel_len(b"ab") == 3


@needs_toolchain
def test_weakening_is_idempotent_and_ignores_versions_not_needed(library: Path) -> None:
    assert weaken_versions(library, frozenset({"GLIBCXX_3.4.32"})) == []
    assert weaken_versions(library, frozenset({NEEDED})) == [NEEDED]
    once = library.read_bytes()
    assert weaken_versions(library, frozenset({NEEDED})) == []
    assert library.read_bytes() == once


@needs_toolchain
def test_needs_newer_libstdcxx_reads_the_version_strings(library: Path) -> None:
    assert needs_newer_libstdcxx(library, frozenset({NEEDED}))
    assert not needs_newer_libstdcxx(library)  # GCC 12 here: no GLIBCXX_3.4.32


def test_a_file_that_is_not_elf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "not.so"
    path.write_bytes(b"#!/bin/sh\n" + b"\0" * 64)
    with pytest.raises(LegacyFixError, match="not a 64-bit little-endian ELF"):
        weaken_versions(path)


@needs_toolchain
def test_ios_init_library_defines_the_gcc13_symbol(tmp_path: Path) -> None:
    library = install_ios_init(tmp_path)
    loaded = ctypes.CDLL(str(library))
    assert loaded["_ZSt21ios_base_library_initv"] is not None
    pth = (tmp_path / "sentinel_ios_init.pth").read_text()
    assert str(library) in pth
    assert "RTLD_GLOBAL" in pth
