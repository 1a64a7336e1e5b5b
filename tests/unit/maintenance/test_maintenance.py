"""The maintenance window, its token file, its settings, metrics and manifests (no sockets)."""

from __future__ import annotations

import hmac
import math
import os
import threading
from pathlib import Path

import pytest
import structlog
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from sentinel.config.loader import ConfigError, load_settings
from sentinel.maintenance.window import (
    MAX_TOKEN_FILE_BYTES,
    MIN_TOKEN_CHARS,
    REASON_MAX_CHARS,
    MaintenanceInfo,
    MaintenanceRefused,
    MaintenanceRequest,
    MaintenanceWindow,
    TokenError,
    TokenFile,
    bearer_token,
    maintenance_json,
    parse_token,
    read_token,
    sanitize_reason,
)
from sentinel.telemetry.metrics import SentinelMetrics
from tests.unit.inject.test_manifests import (
    build_with_components,
    container,
    find,
    needs_kubectl,
    pod_spec,
    sentinel_settings,
    validate,
)

TOKEN = "0123456789abcdef0123456789abcdef"


# ------------------------------------------------------------------------ the window


def test_a_window_holds_until_it_runs_out() -> None:
    window = MaintenanceWindow(3600.0)
    assert window.active(100.0) is None
    info = window.set(60.0, "weight sync", now=100.0)
    assert info == MaintenanceInfo(until=160.0, reason="weight sync", since=100.0)
    assert info.seconds == 60.0
    assert info.remaining(130.0) == 30.0
    assert window.active(100.0) == info
    assert window.active(159.999) == info
    assert window.active(160.0) is None  # `until` itself is outside the window
    assert window.active(130.0) is None  # dropped once seen expired: never comes back


def test_expiry_is_logged_and_reported_once() -> None:
    expired: list[MaintenanceInfo] = []
    window = MaintenanceWindow(3600.0, on_expired=expired.append)
    info = window.set(10.0, "pause", now=0.0)
    with structlog.testing.capture_logs() as logs:
        for now in (10.0, 11.0, 50.0):
            assert window.active(now) is None
    assert expired == [info]
    assert [(e["event"], e["reason"]) for e in logs] == [("maintenance_expired", "pause")]


def test_a_new_window_replaces_the_old_one() -> None:
    window = MaintenanceWindow(3600.0)
    window.set(600.0, "long", now=0.0)
    second = window.set(5.0, "short", now=10.0)
    assert window.active(11.0) == second
    assert window.active(16.0) is None  # the first window's end no longer applies


def test_clear_ends_the_window_and_says_whether_one_was_in_force() -> None:
    window = MaintenanceWindow(3600.0)
    assert window.clear(0.0) is None
    info = window.set(60.0, "x", now=0.0)
    assert window.clear(30.0) == info
    assert window.active(30.0) is None
    assert window.clear(30.0) is None
    window.set(60.0, "y", now=0.0)
    assert window.clear(61.0) is None  # it had run out already
    assert window.active(61.0) is None
    window.set(60.0, "z", now=0.0)
    assert window.clear() is not None  # without a time: whatever was held


@pytest.mark.parametrize("seconds", [3600.0001, 7200.0, 1e12])
def test_a_window_beyond_the_maximum_is_refused_not_clipped(seconds: float) -> None:
    window = MaintenanceWindow(3600.0)
    held = window.set(100.0, "held", now=0.0)
    with pytest.raises(MaintenanceRefused, match=r"at most 3600 \(maintenance_max\)"):
        window.set(seconds, "too long", now=1.0)
    assert window.active(1.0) == held  # the refused request changed nothing


def test_the_maximum_itself_is_allowed() -> None:
    window = MaintenanceWindow(3600.0)
    assert window.set(3600.0, "x", now=0.0).until == 3600.0


@pytest.mark.parametrize("seconds", [0.0, -1.0, math.nan, math.inf, -math.inf, True])
def test_a_window_must_have_a_positive_finite_length(seconds: float) -> None:
    window = MaintenanceWindow(3600.0)
    with pytest.raises(MaintenanceRefused, match="positive finite"):
        window.set(seconds, "x", now=0.0)
    assert window.active(0.0) is None


@pytest.mark.parametrize("bound", [0.0, -1.0, math.nan, math.inf])
def test_the_maximum_must_be_positive_and_finite(bound: float) -> None:
    with pytest.raises(ValueError, match="max_seconds"):
        MaintenanceWindow(bound)


def test_the_window_is_safe_to_share_across_threads() -> None:
    window = MaintenanceWindow(3600.0)
    errors: list[BaseException] = []

    def hammer(offset: float) -> None:
        try:
            for i in range(2000):
                window.set(1.0 + i % 5, f"t{offset}", now=offset)
                info = window.active(offset)
                assert info is None or info.until > info.since
                window.clear(offset)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(float(n),)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


# ------------------------------------------------------------------------ the reason


def test_the_reason_is_one_line_of_visible_text() -> None:
    assert sanitize_reason("  weight\tsync\r\n step 3  ") == "weight sync step 3"
    assert sanitize_reason("a\x1b[31mred\x00\x7f") == "a [31mred"
    assert sanitize_reason("ok\u202eevil\u200b\u2028x") == "ok evil x"
    assert sanitize_reason("Gewichtsübertragung ✓") == "Gewichtsübertragung ✓"


def test_a_long_reason_is_cut_with_an_ellipsis() -> None:
    cut = sanitize_reason("word " * 100)
    assert len(cut) <= REASON_MAX_CHARS
    assert cut.endswith("\u2026")
    assert sanitize_reason("x" * REASON_MAX_CHARS) == "x" * REASON_MAX_CHARS


def test_a_reason_of_control_characters_alone_is_refused() -> None:
    with pytest.raises(MaintenanceRefused, match="visible text"):
        MaintenanceWindow(3600.0).set(5.0, "\n\x1b\t", now=0.0)


def test_the_window_holds_the_cleaned_reason() -> None:
    info = MaintenanceWindow(3600.0).set(5.0, "two\nlines", now=0.0)
    assert info.reason == "two lines"


# ----------------------------------------------------------------------- the request


@pytest.mark.parametrize(
    "body",
    [
        '{"seconds": 0, "reason": "x"}',
        '{"seconds": -1, "reason": "x"}',
        '{"seconds": NaN, "reason": "x"}',
        '{"seconds": Infinity, "reason": "x"}',
        '{"seconds": "60", "reason": "x"}',
        '{"seconds": true, "reason": "x"}',
        '{"seconds": null, "reason": "x"}',
        '{"seconds": 60, "reason": "x", "until": 5}',
        '{"seconds": 60}',
        '{"reason": "x"}',
        '{"seconds": 60, "reason": ""}',
        '{"seconds": 60, "reason": 5}',
        '{"seconds": 60, "reason": "' + "x" * (REASON_MAX_CHARS + 1) + '"}',
    ],
)
def test_the_request_model_refuses(body: str) -> None:
    with pytest.raises(ValidationError):
        MaintenanceRequest.model_validate_json(body)


def test_the_request_model_accepts_integers_and_fractions() -> None:
    assert MaintenanceRequest.model_validate_json('{"seconds": 60, "reason": "x"}').seconds == 60
    assert MaintenanceRequest.model_validate_json('{"seconds": 0.5, "reason": "x"}').seconds == 0.5


def test_status_shows_ages_not_timestamps() -> None:
    info = MaintenanceInfo(until=1600.0, reason="sync", since=1000.0)
    assert maintenance_json(info, 1100.0) == {
        "reason": "sync",
        "seconds": 600.0,
        "remaining": 500.0,
        "for": 100.0,
    }
    assert maintenance_json(None, 1100.0) is None


# ------------------------------------------------------------------------- the token


def test_a_token_file_is_read_as_secret_mounts_and_editors_write_it() -> None:
    assert parse_token(f"\ufeff{TOKEN}\n".encode(), "f") == TOKEN
    assert parse_token(f"  {TOKEN}\r\n".encode(), "f") == TOKEN


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"", "empty"),
        (b"\n  \n", "empty"),
        (f"{TOKEN}\n{TOKEN}\n".encode(), "more than one line"),
        (b"short-token", f"shorter than {MIN_TOKEN_CHARS}"),
        (f"{TOKEN} with spaces".encode(), "printable ASCII"),
        ("tökentökentökentöken".encode(), "printable ASCII"),
        (b"\xff" * 20, "not UTF-8"),
        (b"x" * (MAX_TOKEN_FILE_BYTES + 1), "not a token file"),
    ],
)
def test_a_token_file_without_a_usable_token_is_refused_naming_the_file(
    raw: bytes, problem: str
) -> None:
    with pytest.raises(TokenError, match=problem) as refused:
        parse_token(raw, "/secrets/token")
    assert str(refused.value).startswith("/secrets/token: ")
    assert TOKEN not in str(refused.value)


def test_read_token_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TokenError, match="cannot read"):
        read_token(tmp_path / "absent")
    (tmp_path / "token").write_text(TOKEN + "\n", encoding="utf-8")
    assert read_token(tmp_path / "token") == TOKEN


def test_the_token_is_checked_against_the_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n", encoding="utf-8")
    token = TokenFile(path)
    assert token.check(TOKEN)
    assert not token.check(TOKEN[:-1])
    assert not token.check(TOKEN + "0")
    assert not token.check(TOKEN.upper())
    assert not token.check("")
    assert not token.check(None)
    assert not token.check("\udcff" * 40)  # undecodable header bytes do not crash


def test_the_comparison_is_constant_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN, encoding="utf-8")
    token = TokenFile(path)
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)  # what sentinel.maintenance.window calls
    assert token.check(TOKEN)
    assert not token.check("x" * 40)
    assert len(compared) == 2
    # Fixed-length digests: the comparison's time does not depend on the token's length.
    assert {len(a) for a, _ in compared} == {len(b) for _, b in compared} == {32}


def _mount(directory: Path, token: str, generation: int) -> Path:
    """Write ``token`` as the kubelet's atomic writer does: a new directory, a swapped link."""
    data = directory / f"..{generation}"
    data.mkdir()
    (data / "token").write_text(token, encoding="utf-8")
    link = directory / "..data"
    staging = directory / "..data_tmp"
    staging.symlink_to(data.name)
    os.replace(staging, link)
    visible = directory / "token"
    if not visible.is_symlink():
        visible.symlink_to("..data/token")
    return visible


def test_a_rotated_secret_is_picked_up_at_the_next_check(tmp_path: Path) -> None:
    first, second = TOKEN, "fedcba9876543210fedcba9876543210"
    path = _mount(tmp_path, first, 1)
    token = TokenFile(path)
    with structlog.testing.capture_logs() as logs:
        assert token.check(first)
        _mount(tmp_path, second, 2)
        assert not token.check(first)
        assert token.check(second)
    assert [(e["event"], e["rotated"]) for e in logs] == [
        ("maintenance_token_loaded", False),
        ("maintenance_token_loaded", True),
    ]
    assert first not in repr(logs)
    assert second not in repr(logs)


def test_an_unchanged_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN, encoding="utf-8")
    token = TokenFile(path)
    for _ in range(50):
        assert token.check(TOKEN)
    assert token.loads == 1
    path.write_text(TOKEN + "\n", encoding="utf-8")  # same token, a new write
    assert token.check(TOKEN)
    assert token.loads == 2


def test_a_missing_or_bad_file_closes_the_hook_until_fixed(tmp_path: Path) -> None:
    path = tmp_path / "token"
    token = TokenFile(path)
    with structlog.testing.capture_logs() as logs:
        assert not token.refresh()
        assert not token.check(TOKEN)  # the same problem: logged once
        assert token.problem is not None
        assert "cannot read" in token.problem
        path.write_text("short", encoding="utf-8")
        assert not token.check("short")
        path.write_text(TOKEN, encoding="utf-8")
        assert token.check(TOKEN)
        assert token.problem is None
        path.unlink()
        assert not token.check(TOKEN)  # a deleted token file admits nobody
    events = [e["event"] for e in logs]
    assert events == [
        "maintenance_token_unusable",
        "maintenance_token_unusable",
        "maintenance_token_loaded",
        "maintenance_token_unusable",
    ]


@pytest.mark.parametrize(
    ("headers", "token"),
    [
        ([f"Bearer {TOKEN}"], TOKEN),
        ([f"bearer   {TOKEN}  "], TOKEN),
        ([f"BEARER {TOKEN}"], TOKEN),
        ([], None),
        (["Bearer"], None),
        ([f"Basic {TOKEN}"], None),
        ([TOKEN], None),
        ([f"Bearer {TOKEN}", f"Bearer {TOKEN}"], None),
    ],
)
def test_the_bearer_header(headers: list[str], token: str | None) -> None:
    assert bearer_token(headers) == token


# ---------------------------------------------------------------- settings, metrics


def test_settings_default_to_a_closed_hook_and_an_hour() -> None:
    settings = load_settings(env={})
    assert settings.maintenance_token_file is None
    assert settings.maintenance_max == 3600.0


def test_settings_come_from_the_environment(tmp_path: Path) -> None:
    env = {
        "SENTINEL_MAINTENANCE_TOKEN_FILE": str(tmp_path / "token"),
        "SENTINEL_MAINTENANCE_MAX": "600",
    }
    settings = load_settings(env=env)
    assert settings.maintenance_token_file == tmp_path / "token"
    assert settings.maintenance_max == 600.0


@pytest.mark.parametrize("value", ["0", "0.5", "86401", "inf", "nan"])
def test_the_maximum_setting_is_ranged(value: str) -> None:
    with pytest.raises(ConfigError, match="SENTINEL_MAINTENANCE_MAX: maintenance_max"):
        load_settings(env={"SENTINEL_MAINTENANCE_MAX": value})


def test_changes_are_counted_by_action() -> None:
    registry = CollectorRegistry()
    metrics = SentinelMetrics(registry)
    for action in ("set", "cleared", "expired"):
        assert (
            registry.get_sample_value("sentinel_maintenance_changes_total", {"action": action})
            == 0.0
        )
    metrics.maintenance_changed("set")
    metrics.maintenance_changed("set")
    assert registry.get_sample_value("sentinel_maintenance_changes_total", {"action": "set"}) == 2
    with pytest.raises(ValueError, match="unknown maintenance action"):
        metrics.maintenance_changed("extended")


# ------------------------------------------------------------------------ manifests


@needs_kubectl
def test_the_maintenance_component_wires_token_and_network(tmp_path: Path) -> None:
    objs = build_with_components(tmp_path, ["maintenance"])
    for obj in objs:
        validate(obj)
    deployment = find(objs, "Deployment")
    settings = sentinel_settings(deployment)
    token_file = settings.maintenance_token_file
    assert token_file is not None
    sidecar = container(deployment, "sentinel")
    mounts = {m["mountPath"]: m for m in sidecar["volumeMounts"]}
    mount = mounts[str(token_file.parent)]
    assert mount["readOnly"] is True
    assert "subPath" not in mount  # a subPath mount never sees a Secret rotation
    volume = next(v for v in pod_spec(deployment)["volumes"] if v["name"] == mount["name"])
    items = {i["key"]: i["path"] for i in volume["secret"]["items"]}
    assert token_file.name in items.values()
    # The inference server never sees the token.
    vllm_mounts = {m["name"] for m in container(deployment, "vllm").get("volumeMounts", [])}
    assert mount["name"] not in vllm_mounts

    policy = find(objs, "NetworkPolicy")
    http_port = int(settings.listen.rpartition(":")[2])
    label = {"sentinel.io/maintenance-client": "true"}
    peers = [
        peer
        for rule in policy["spec"]["ingress"]
        if http_port in {p["port"] for p in rule["ports"]}
        for peer in rule["from"]
    ]
    clients = [p for p in peers if p["podSelector"]["matchLabels"] == label]
    assert clients == [
        {"namespaceSelector": {"matchLabels": label}, "podSelector": {"matchLabels": label}}
    ]
    # Everyone else who reaches sentinel's port is who the base lets in (Prometheus).
    base_policy = find(build_with_components(tmp_path, []), "NetworkPolicy")
    assert (
        policy["spec"]["ingress"][: len(base_policy["spec"]["ingress"])]
        == base_policy["spec"]["ingress"]
    )
