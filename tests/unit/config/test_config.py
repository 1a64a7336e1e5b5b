"""Config: precedence of sources, strictness, and errors that name the key and the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.config.loader import ConfigError, load_settings, read_api_key
from sentinel.config.settings import Settings, split_host_port
from sentinel.verdict import Action, Policy


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sentinel.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_design_table() -> None:
    s = Settings()
    assert (s.target, s.listen, s.grpc_listen) == (
        "http://127.0.0.1:8000",
        "0.0.0.0:8471",
        "0.0.0.0:8472",
    )
    assert (s.scrape_interval, s.idle_window, s.hang_window, s.path_misses) == (2.0, 5.0, 15.0, 2)
    assert (s.ready_out_after, s.ready_back_after, s.brake_max_restarts) == (2, 3, 3)
    assert s.enforce is True
    assert s.policy().hang_window == 15.0


def test_precedence_flags_over_env_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, "hang_window: 20\nidle_window: 7\nenforce: true\n")
    env = {"SENTINEL_HANG_WINDOW": "25", "SENTINEL_ENFORCE": "false"}
    s = load_settings(path, env, {"hang_window": 30.0, "target": None})
    assert s.hang_window == 30.0  # flag
    assert s.enforce is False  # env over file
    assert s.idle_window == 7.0  # file
    assert s.target == "http://127.0.0.1:8000"  # a flag left unset does not override


def test_config_file_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "idle_window: 9\n")
    assert load_settings(None, {"SENTINEL_CONFIG": str(path)}).idle_window == 9.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hang_windw: 3\n", "hang_windw: unknown key"),
        ("hang_window: soon\n", "hang_window: Input should be a valid number"),
        ("target: ftp://x\n", "target: Value error, must be an http:// or https:// URL"),
        ("listen: nowhere\n", "listen: Value error, expected HOST:PORT"),
        ("engine_policy: reboot\n", "engine_policy: Input should be 'restart'"),
        ("canaries: {text: {deadline: -1}}\n", "canaries.text.deadline"),
        ("canaries: {text: {colour: red}}\n", "canaries.text.colour: unknown key"),
        ("hang_window: 3\nscrape_interval: 2\n", "hang_window must exceed two scrape intervals"),
        ("scrape_timeout: 40\n", "scrape_timeout must be shorter than no_evidence_window"),
        ("- a\n- b\n", "expected a mapping of settings"),
        ("a: [\n", "not valid YAML"),
    ],
    ids=[
        "typo",
        "type",
        "url",
        "listen",
        "enum",
        "nested-range",
        "nested-unknown",
        "cross-field",
        "scrape-timeout",
        "not-mapping",
        "bad-yaml",
    ],
)
def test_file_errors_name_file_and_key(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path, {})
    message = str(info.value)
    assert str(path) in message
    assert expected in message


def test_env_error_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="environment variable SENTINEL_IDLE_WINDOW: idle_window"):
        load_settings(None, {"SENTINEL_IDLE_WINDOW": "-3"})


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml", {})


def test_api_key_from_file_then_env(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("sk-from-file\n", encoding="utf-8")
    assert read_api_key(Settings(api_key_file=key), {"SENTINEL_API_KEY": "x"}) == "sk-from-file"
    assert read_api_key(Settings(), {"SENTINEL_API_KEY": "sk-env"}) == "sk-env"
    assert read_api_key(Settings(), {}) is None
    key.write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match="is empty"):
        read_api_key(Settings(api_key_file=key), {})


@pytest.mark.parametrize(
    "content",
    ["sk-abc\n", "\ufeffsk-abc\n", "  sk-abc \r\n\n", "\ufeff\tsk-abc"],
    ids=["newline", "bom", "whitespace", "bom-and-tab"],
)
def test_api_key_file_drops_bom_and_surrounding_whitespace(tmp_path: Path, content: str) -> None:
    key = tmp_path / "key"
    key.write_text(content, encoding="utf-8")
    assert read_api_key(Settings(api_key_file=key), {}) == "sk-abc"
    assert read_api_key(key, {}) == "sk-abc"


def test_api_key_file_of_several_lines_is_refused_naming_the_file(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("sk-first-secret\nsk-second-secret\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        read_api_key(Settings(api_key_file=key), {})
    message = str(caught.value)
    assert str(key) in message
    assert "more than one line" in message
    assert "secret" not in message.replace(str(key), "")


def test_api_key_file_from_the_environment(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("sk-from-env-file\n", encoding="utf-8")
    env = {"SENTINEL_API_KEY_FILE": str(key), "SENTINEL_API_KEY": "sk-env"}
    assert read_api_key(None, env) == "sk-from-env-file"
    with pytest.raises(ConfigError, match="cannot read"):
        read_api_key(tmp_path / "absent", env)


def test_policies_map_onto_the_verdict() -> None:
    s = load_settings(None, {}, {"engine_policy": "alert", "enforce": False})
    policy = s.policy()
    assert policy.engine_policy is Action.ALERT
    assert policy.enforce is False


def test_every_verdict_threshold_is_a_setting_of_its_own_name(tmp_path: Path) -> None:
    file = tmp_path / "sentinel.yaml"
    file.write_text("engine_policy: alert\nhang_window: 20\n", encoding="utf-8")
    s = load_settings(file, {"SENTINEL_STARVED_POLICY": "unready"}, {"dead_grace": 7.0})
    policy = s.policy()
    assert (policy.engine_policy, policy.hang_window) == (Action.ALERT, 20.0)
    assert (policy.starved_policy, policy.dead_grace) == (Action.UNREADY, 7.0)
    assert policy == Policy(
        engine_policy=Action.ALERT, hang_window=20.0, starved_policy=Action.UNREADY, dead_grace=7.0
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0.0.0.0:8471", ("0.0.0.0", 8471)), ("[::1]:0", ("::1", 0)), (":9", ("0.0.0.0", 9))],
)
def test_split_host_port(value: str, expected: tuple[str, int]) -> None:
    assert split_host_port(value) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "hang_window: .inf\n",
            "hang_window: Value error, must be between 1 s and 86400 s, got inf s",
        ),
        ("process_interval: 1e-12\n", "process_interval: Value error, must be between 0.1 s"),
        ("scrape_interval: .nan\n", "scrape_interval: Value error, must be between 0.1 s"),
        ("eval_interval: 0\n", "eval_interval: Value error, must be between 0.05 s and 60 s"),
        ("canaries: {text: {interval: .inf}}\n", "canaries.text.interval: Value error, must be"),
        ("hang_window: 1e400\n", "must be between 1 s and 86400 s"),
        ("broken_window: .inf\n", "broken_window: Value error, must be between 1 s and 86400 s"),
        ("listener_grace: 0\n", "listener_grace: Value error, must be between 1 s"),
        ("health_timeout: 600\n", "health_timeout: Value error, must be between 0.1 s and 60 s"),
        ("metrics_max_bytes: 0\n", "metrics_max_bytes: Value error, must be between 65536 bytes"),
        ("metrics_max_lines: 1e12\n", "metrics_max_lines: Input should be a valid integer"),
        ("metrics_max_series: 99999999\n", "metrics_max_series: Value error, must be between"),
        ("canary_max_bytes: 10\n", "canary_max_bytes: Value error, must be between 4096 bytes"),
        ("diagnostics_max_incidents: 0\n", "between 1 incidents and 10000 incidents"),
    ],
    ids=[
        "inf-window",
        "tiny-interval",
        "nan",
        "zero",
        "override-inf",
        "overflow",
        "broken-inf",
        "listener-zero",
        "health-timeout",
        "metrics-bytes",
        "metrics-lines",
        "metrics-series",
        "canary-bytes",
        "incidents",
    ],
)
def test_durations_are_finite_and_ranged_with_units(
    tmp_path: Path, text: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, text), {})
    assert expected in str(info.value)
    assert str(tmp_path) in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The shipped catalog's deadlines (8 s text, 10 s structured) bound the windows.
        ("hang_window: 9\n", "hang_window must be at least every canary deadline (9 s < 10 s"),
        ("broken_window: 5\n", "broken_window must be at least every canary deadline"),
        (
            "hang_window: 12\ncanaries: {text: {deadline: 14, interval: 10}}\n",
            "(12 s < 14 s, the deadline of canary 'text')",
        ),
    ],
    ids=["hang-below-catalog", "broken-below-catalog", "hang-below-override"],
)
def test_windows_are_never_shorter_than_the_deadlines_they_judge(
    tmp_path: Path, text: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, text), {})
    assert expected in str(info.value)


def test_scaled_windows_fit_scaled_deadlines() -> None:
    canaries = {k: {"deadline": 2.0} for k in ("text", "structured", "multimodal", "correctness")}
    flags = {"hang_window": 4.0, "scrape_interval": 0.5, "broken_window": 4.0, "canaries": canaries}
    assert load_settings(None, {}, flags).broken_window == 4.0


def test_duration_from_environment_is_ranged() -> None:
    with pytest.raises(ConfigError, match=r"SENTINEL_HANG_WINDOW: hang_window: .* s"):
        load_settings(None, {"SENTINEL_HANG_WINDOW": "inf"})


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"hang_window: 20\n\xff\xfe\n", "not UTF-8 text"),
        (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "not valid YAML: nested too deeply"),
        (b"a: {b: [1, 2\n", "not valid YAML"),
        (b"x" * (2 * 1024 * 1024), "not a settings file"),
    ],
    ids=["not-utf8", "deeply-nested", "malformed", "huge"],
)
def test_malformed_files_are_one_line_errors(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "sentinel.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_settings(path, {})
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


def test_bom_in_the_config_file_is_not_part_of_the_first_key(tmp_path: Path) -> None:
    path = tmp_path / "sentinel.yaml"
    path.write_bytes("\ufeffidle_window: 7\n".encode())
    assert load_settings(path, {}).idle_window == 7.0


def test_api_key_from_the_environment_drops_bom_and_whitespace() -> None:
    assert read_api_key(Settings(), {"SENTINEL_API_KEY": "\ufeff sk-env\n"}) == "sk-env"


def test_non_utf8_key_file_is_a_config_error(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"sk-\xff\xfe")
    with pytest.raises(ConfigError, match=f"api_key_file: cannot read {key}: not UTF-8 text"):
        read_api_key(Settings(api_key_file=key), {})


def test_unknown_sentinel_variables_are_refused_by_name() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, {"SENTINEL_HANG_WINDOWS": "20", "SENTINEL_TARGTE": "http://x"})
    message = str(info.value)
    assert "SENTINEL_HANG_WINDOWS, SENTINEL_TARGTE" in message
    assert "\n" not in message


def test_kubernetes_service_links_are_not_unknown_variables() -> None:
    env = {
        "SENTINEL_SERVICE_HOST": "10.0.0.1",
        "SENTINEL_SERVICE_PORT": "8471",
        "SENTINEL_SERVICE_PORT_HTTP": "8471",
        "SENTINEL_PORT": "tcp://10.0.0.1:8471",
        "SENTINEL_PORT_8471_TCP": "tcp://10.0.0.1:8471",
        "SENTINEL_PORT_8471_TCP_ADDR": "10.0.0.1",
        "SENTINEL_METRICS_SERVICE_HOST": "10.0.0.2",
        "SENTINEL_API_KEY": "sk",
        "SENTINEL_CONFIG": "",
    }
    assert load_settings(None, env).target == "http://127.0.0.1:8000"


def test_canaries_from_the_environment() -> None:
    s = load_settings(None, {"SENTINEL_CANARIES": "{text: {interval: 10, policy: alert}}"})
    assert s.canaries["text"].interval == 10.0
    assert s.canaries["text"].policy == Action.ALERT
    with pytest.raises(
        ConfigError, match="environment variable SENTINEL_CANARIES: expected a mapping"
    ):
        load_settings(None, {"SENTINEL_CANARIES": "[1, 2]"})
    with pytest.raises(ConfigError, match=r"SENTINEL_CANARIES: canaries\.txt\.colour: unknown key"):
        load_settings(None, {"SENTINEL_CANARIES": '{"txt": {"colour": "red"}}'})


def test_undecodable_environment_value_is_refused() -> None:
    with pytest.raises(ConfigError, match="SENTINEL_TARGET: not valid UTF-8 text"):
        load_settings(None, {"SENTINEL_TARGET": "http://h\udcff"})


@pytest.mark.parametrize("value", ["off", "", "OFF", "none"])
def test_grpc_listener_can_be_turned_off(value: str) -> None:
    assert load_settings(None, {"SENTINEL_GRPC_LISTEN": value}).grpc_listen is None
    assert load_settings(None, {"SENTINEL_GRPC_LISTEN": "127.0.0.1:0"}).grpc_listen == "127.0.0.1:0"
