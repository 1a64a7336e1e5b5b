"""The exporter's config file: strict, ranged, checked against the catalog, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.cli import main
from sentinel.config.loader import ConfigError
from sentinel.exporter.config import load_config, prepare_modules, read_catalog

GOOD = """\
listen: "127.0.0.1:9200"
allow:
  hosts: ["vllm-0.inference.svc.cluster.local", "*.inference.svc.cluster.local"]
  cidrs: ["10.0.0.0/8", "127.0.0.0/8"]
targets:
  max: 10
  idle_seconds: 60
modules:
  text:
    kinds: [text]
    timeout: 5
  full:
    kinds: [multimodal, text, structured]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exporter.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_documented_example_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD))
    assert config.listen == "127.0.0.1:9200"
    assert (config.targets.max, config.targets.idle_seconds) == (10, 60.0)
    modules = prepare_modules(config, read_catalog(None))
    assert modules["text"].timeout == 5.0
    assert modules["full"].timeout == 10.0  # the default
    # Kinds run in the registry's order whatever order the file lists them in.
    assert [str(k) for k in modules["full"].kinds] == ["text", "structured", "multimodal"]
    assert modules["full"].metrics is True
    assert modules["full"].api_key is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (GOOD + "extra: 1\n", "extra: unknown key"),
        (GOOD.replace("    timeout: 5\n", "    timeout: 5\n    retries: 2\n"), "unknown key"),
        (GOOD.replace("kinds: [text]", "kinds: [txt]"), "unknown canary kind 'txt'"),
        (GOOD.replace("kinds: [text]", "kinds: []"), "at least one canary kind"),
        (GOOD.replace("timeout: 5", "timeout: 0"), "modules.text.timeout"),
        (GOOD.replace("timeout: 5", "timeout: .inf"), "modules.text.timeout"),
        (GOOD.replace('"10.0.0.0/8"', '"10.0.0.1/8"'), "not a CIDR"),
        (GOOD.replace('"*.inference', '"vllm-*.inference'), "not a host name"),
        (GOOD.replace("max: 10", "max: 0"), "targets.max"),
        (GOOD.replace('"127.0.0.1:9200"', '"nowhere"'), "HOST:PORT"),
        ("modules: {}\n", "at least one module"),
        ("modules:\n  'a b': {}\n", "module name"),
        ("- a list\n", "expected a mapping"),
        ("modules: [unclosed\n", "not valid YAML"),
    ],
)
def test_a_bad_file_names_the_key(tmp_path: Path, text: str, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert words in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_an_unreadable_api_key_file_is_a_config_error(tmp_path: Path) -> None:
    text = GOOD.replace("    timeout: 5\n", f"    api_key_file: {tmp_path / 'no-key'}\n")
    config = load_config(write(tmp_path, text))
    with pytest.raises(ConfigError, match=r"modules\.text\.api_key_file"):
        prepare_modules(config, read_catalog(None))


def test_the_api_key_is_read_once(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("\ufeffsecret-token\n", encoding="utf-8")
    config = load_config(write(tmp_path, GOOD.replace("timeout: 5", f"api_key_file: {key}")))
    assert prepare_modules(config, read_catalog(None))["text"].api_key == "secret-token"


def test_check_config_exits_0_and_a_bad_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, GOOD)
    assert main(["exporter", "--config", str(good), "--check-config"]) == 0
    assert "ok" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD + "bogus: true\nmore: 1\n", encoding="utf-8")
    assert main(["exporter", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "bogus: unknown key" in err
    assert "more: unknown key" in err
