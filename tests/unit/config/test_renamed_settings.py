"""One name for the canary catalog: ``catalog``, with ``probes`` still accepted, noted.

The setting, its ``SENTINEL_*`` variable, its file key and the ``--probes``
flag of ``run``, ``probe`` and ``exporter`` keep working under the old name,
each with one note on stderr; giving both names is refused. The kinds'
traits, now declared once in :class:`~sentinel.canary.protocol.KindBase`
where they agree, are pinned here kind by kind.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sentinel.canary.catalog import default_directory, load_catalog
from sentinel.canary.kinds import KINDS
from sentinel.canary.spec import CanaryKind
from sentinel.cli import build_parser, main
from sentinel.config.loader import ConfigError, load_settings, unknown_env
from sentinel.config.settings import RENAMED, Settings


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_the_old_name_is_the_catalog_and_nothing_else() -> None:
    assert RENAMED == {"probes": "catalog"}
    assert "catalog" in Settings.model_fields
    assert "probes" not in Settings.model_fields


@pytest.mark.parametrize(
    "command", [["run"], ["probe", "a:1"], ["exporter", "--config", "exporter.yaml"]]
)
def test_probes_flag_still_names_the_catalog_with_a_note(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _parse(*command, "--catalog", str(tmp_path)).catalog == tmp_path
    assert capsys.readouterr().err == ""
    assert _parse(*command, "--probes", str(tmp_path)).catalog == tmp_path
    assert "--probes is deprecated; use --catalog DIR" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["run"], ["probe"], ["exporter"]])
def test_probes_flag_is_hidden_from_help(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    out = capsys.readouterr().out
    assert "--catalog" in out
    assert "--probes" not in out


def test_old_file_key_variable_and_flag_set_the_catalog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "sentinel.yaml"
    config.write_text(f"probes: {tmp_path}\n", encoding="utf-8")
    assert load_settings(config, env={}).catalog == tmp_path
    assert f"probes (in {config}) is deprecated; use catalog" in capsys.readouterr().err

    assert load_settings(None, env={"SENTINEL_PROBES": str(tmp_path)}).catalog == tmp_path
    assert "SENTINEL_PROBES is deprecated; use SENTINEL_CATALOG" in capsys.readouterr().err
    assert unknown_env({"SENTINEL_PROBES": "x"}) == []

    assert load_settings(None, env={}, flags={"probes": tmp_path}).catalog == tmp_path
    assert "--probes is deprecated; use --catalog" in capsys.readouterr().err


def test_new_names_say_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert load_settings(None, env={"SENTINEL_CATALOG": str(tmp_path)}).catalog == tmp_path
    assert load_settings(None, env={}, flags={"catalog": tmp_path}).catalog == tmp_path
    assert capsys.readouterr().err == ""


def test_old_and_new_name_together_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "sentinel.yaml"
    config.write_text(f"probes: {tmp_path}\ncatalog: {tmp_path}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"{config}: probes and catalog both given"):
        load_settings(config, env={})
    with pytest.raises(ConfigError, match="flags: --probes and --catalog both given"):
        load_settings(None, env={}, flags={"probes": tmp_path, "catalog": tmp_path})


def test_both_variables_set_the_new_one_wins_and_the_old_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Variables come in layers (the manifests set the new name, an old overlay the old one):
    refusing them would hold the pod at its startup probe."""
    old = tmp_path / "old"
    both = {"SENTINEL_PROBES": str(old), "SENTINEL_CATALOG": str(tmp_path)}
    assert load_settings(None, env=both).catalog == tmp_path
    err = capsys.readouterr().err
    assert "SENTINEL_PROBES" in err
    assert str(old) in err
    same = {"SENTINEL_PROBES": str(tmp_path), "SENTINEL_CATALOG": str(tmp_path)}
    assert load_settings(None, env=same).catalog == tmp_path
    assert capsys.readouterr().err == ""


def test_the_shipped_catalog_lives_in_the_canary_package() -> None:
    assert default_directory().joinpath("text.yaml").is_file()
    catalog = load_catalog()
    assert catalog.source == "sentinel/canary/specs"
    assert {spec.source for spec in catalog.specs} == {
        f"sentinel/canary/specs/{name}.yaml"
        for name in ("correctness", "multimodal", "structured", "text")
    }


# (path, paired, idle_gated, unsupported_skipped, traffic_counter) of each shipped kind,
# as each kind module declared them in full before the shared defaults had one home.
TRAITS = {
    "text": (False, False, True, False, None),
    "structured": (True, True, False, True, None),
    "multimodal": (True, True, False, True, "mm_queries"),
    "correctness": (False, True, False, True, None),
}


@pytest.mark.parametrize(("kind", "traits"), TRAITS.items())
def test_each_kind_keeps_its_traits(
    kind: str, traits: tuple[bool, bool, bool, bool, str | None]
) -> None:
    driver = KINDS[CanaryKind(kind)]
    declared = (
        driver.path,
        driver.paired,
        driver.idle_gated,
        driver.unsupported_skipped,
        driver.traffic_counter,
    )
    assert declared == traits
