"""The CLI over malformed URLs, flags and files: exit 2, one line on stderr, never a traceback.

Every subcommand's URL and file arguments, run in-process through
:func:`sentinel.cli.main` exactly as the console script runs them; each case
fails before any connection is tried. Then the shared flags: one way to name a
running sentinel (``--sentinel URL``) and one output flag (``--output
text|json``), with the old spellings still read and noted on stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sentinel.cli import build_parser, main
from sentinel.cli_flags import DEFAULT_SENTINEL
from sentinel.fingerprint.cli import taken_at

OK = "http://127.0.0.1:1"
BAD_URLS = ("http://[::1", "http://[::1]:x", "http://a:99999", "ftp://a", "http://")

CASES: list[list[str]] = [
    *(["probe", url] for url in (*BAD_URLS, ":::")),
    ["probe", "--timeout", "abc", OK],
    ["probe", "--timeout", "nan", OK],
    ["probe", "--concurrency", "0", OK],
    ["probe", "--api-key-file", "{absent}", OK],
    ["probe", "--api-key-file", "{dir}", OK],
    ["probe", "--catalog", "{bad_yaml}", OK],
    ["probe", "--catalog", "{absent}", OK],
    *(["status", "--sentinel", url] for url in BAD_URLS),
    ["status", "http://[::1"],  # the old positional spelling
    ["status", "--timeout", "-1"],
    ["status", "--output", "xml"],
    ["doctor", "--target", "http://[::1"],
    ["doctor", "--sentinel", "http://[::1", "--target", OK],
    ["doctor", "--config", "{bad_yaml}"],
    ["doctor", "--config", "{binary}"],
    ["diagnose", "--target", "http://a:99999"],
    ["diagnose", "--config", "{dir}"],
    ["diagnose", "--budget", "nan"],
    ["exporter", "--config", "{absent}"],
    ["exporter", "--config", "{bad_yaml}"],
    ["exporter", "--config", "{binary}"],
    ["exporter", "--config", "{unknown}"],
    ["check-config", "{absent}"],
    ["check-config", "{bad_yaml}"],
    ["check-config", "{dir}"],
    ["check-config", "{unknown}"],
    ["fingerprint", "show", "--sentinel", "http://[::1"],
    ["fingerprint", "show", "--url", "http://a:99999"],  # the old spelling
    ["fingerprint", "show", "--timeout", "0"],
    ["fingerprint", "rebaseline", "--token-file", "{absent}"],
    ["maintenance", "show", "--sentinel", "http://[::1"],
    ["maintenance", "set", "--seconds", "x", "--reason", "r"],
    ["maintenance", "show", "--token-file", "{dir}"],
    ["maintenance", "show", "--token-file", "{binary}"],
    ["run", "--config", "{absent}"],
    ["run", "--config", "{bad_yaml}"],
    ["run", "--config", "{binary}"],
    ["run", "--target", "http://[::1"],
    ["run", "--catalog", "{bad_yaml}"],
    ["run", "--api-key-file", "{absent}"],
    ["run", "--api-key-file", "{dir}"],
    ["run", "--listen", "x:y"],
    ["run", "--canaries", "[["],
    ["run", "--enforce", "maybe"],
    ["nope"],
    [],
]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "bad.yaml").write_text("a: [\n")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "unknown.yaml").write_text("nope: 1\n")
    (tmp_path / "dir").mkdir()
    return {
        "bad_yaml": str(tmp_path / "bad.yaml"),
        "binary": str(tmp_path / "binary.yaml"),
        "unknown": str(tmp_path / "unknown.yaml"),
        "dir": str(tmp_path / "dir"),
        "absent": str(tmp_path / "absent" / "file"),
    }


def _main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own exit
        return int(exc.code or 0)


@pytest.mark.parametrize("argv", CASES, ids=lambda a: " ".join(a) or "(nothing)")
def test_a_malformed_input_is_one_line_and_exit_2(
    argv: list[str], files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = _main([arg.format(**files) for arg in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert (code, len(lines)) == (2, 1), err
    assert lines[0].startswith("sentinel"), err


def test_help_is_still_the_whole_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: sentinel run" in out
    assert "see below" not in out  # docs/configuration.md's words, with nothing below here
    assert "keys: interval, deadline" in out


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "url"),
    [
        (["status"], DEFAULT_SENTINEL),
        (["status", "--sentinel", "pod:8471"], "http://pod:8471"),
        (["fingerprint", "show"], DEFAULT_SENTINEL),
        (["maintenance", "show", "--sentinel", "http://pod:8471/"], "http://pod:8471"),
        (["doctor"], None),
        (["doctor", "--sentinel"], DEFAULT_SENTINEL),
        (["doctor", "--sentinel", "pod:9"], "http://pod:9"),
    ],
)
def test_one_way_to_name_a_running_sentinel(
    argv: list[str], url: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _parse(*argv).sentinel == url
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("argv", "attribute", "value", "note"),
    [
        (["status", "pod:8471"], "url", "http://pod:8471", ""),  # noted when it runs
        (["fingerprint", "show", "--url", "pod:1"], "sentinel", "http://pod:1", "--url"),
        (["maintenance", "clear", "--url", "http://p:2"], "sentinel", "http://p:2", "--url"),
        (["maintenance", "show", "--json"], "output", "json", "--json"),
        (["probe", "a:1", "--json"], "output", "json", "--json"),
        (["probe", "a:1", "--output", "table"], "output", "text", "--output table"),
        (["status", "--output", "table"], "output", "text", "--output table"),
    ],
)
def test_the_old_spellings_still_work_with_a_note(
    argv: list[str], attribute: str, value: str, note: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert getattr(_parse(*argv), attribute) == value
    err = capsys.readouterr().err
    assert (f"{note} is deprecated" in err) if note else err == ""


@pytest.mark.parametrize("command", [["status"], ["probe", "a:1"], ["fingerprint", "show"]])
def test_one_output_flag(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _parse(*command).output == "text"
    assert _parse(*command, "--output", "json").output == "json"
    assert capsys.readouterr().err == ""


def test_old_spellings_are_hidden_from_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["status"], ["probe"], ["fingerprint", "show"], ["maintenance", "show"]):
        assert _main([*command, "--help"]) == 0
        out = capsys.readouterr().out
        assert "--json" not in out
        assert "--url" not in out
        assert "{text,json}" in out
    assert _main(["status", "--help"]) == 0
    assert "url" not in capsys.readouterr().out.split("options:")[0]  # the old positional


def test_a_fingerprint_time_is_iso_and_an_age() -> None:
    assert taken_at(1_700_000_000.0, 1_700_000_100.0) == "at 2023-11-14T22:13:20Z (100 s ago)"
    assert taken_at(1_700_000_000, 1_700_007_200.0).endswith("(2.0 h ago)")
    assert taken_at("yesterday", 0.0) == "at 'yesterday'"
    assert taken_at(1e300, 0.0) == "at 1e+300"  # beyond any calendar: shown as given
