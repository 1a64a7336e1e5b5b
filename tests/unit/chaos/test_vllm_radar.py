"""The release radar on small synthetic vLLM trees: extraction, the diff, the report.

No network and no real wheel: each tree is a few ``(path, source)`` pairs
written in the forms vLLM uses (the route decorators, Starlette's Mount, the
scaling middleware, ``_counter_cls`` metrics with ``labelnames + [...]``,
``set_process_title`` with a name built up, ``add_argument``, config classes).
A wheel is a zip built here, placed in the cache so nothing is downloaded.
"""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from chaos.vllm_radar import compare, report, wheel
from chaos.vllm_radar.__main__ import main, previous
from chaos.vllm_radar.extract import Surfaces, extract

ROUTER = """
from fastapi import APIRouter
router = APIRouter()

@router.get("/health")
async def health(): ...

@router.api_route("/ping", methods=["GET", "POST"])
async def ping(): ...

@router.get("/fault_tolerance/status")
async def status(): ...

def attach(app):
    app.add_api_route("/inference/v1/abort_requests", status, methods=["POST"])
    app.routes.append(Mount("/metrics", make_asgi_app()))
"""

MIDDLEWARE = '''
_EXEMPT = frozenset({"/health"})

class ScalingMiddleware:
    """Pause serving while scaling. This docstring is no body."""

    def __call__(self, scope, receive, send):
        logger.info("Scaling now, this log line is no body either.")
        return JSONResponse(
            content={"error": "The model is currently scaling. Please try again later."},
            status_code=503,
        )
'''

ENGINE = """
def reject(request):
    return RequestError(message="Generation is paused. Please retry after it resumes.",
                        retryable=True)

def not_a_refusal():
    return "Some other long sentence that answers nothing to anyone."
"""

LOGGERS = """
class PrometheusStatLogger:
    _counter_cls = Counter

    def __init__(self):
        labelnames = ["model_name", "engine"]
        self.tokens = self._counter_cls(
            name="vllm:generation_tokens", documentation="Tokens.", labelnames=labelnames
        )
        self.success = self._counter_cls(
            name="vllm:request_success",
            documentation="Requests.",
            labelnames=labelnames + ["finished_reason"],
        )
        self.ttft = Histogram(name="vllm:time_to_first_token_seconds", documentation="x")

class Tiering:
    LATENCY = "vllm:kv_offload_latency_seconds"
"""

TITLES = """
def engine_main(dp_rank, data_parallel):
    if data_parallel:
        process_title = f"EngineCore_DP{dp_rank}"
    else:
        process_title = "EngineCore"
    set_process_title(process_title)

def worker_main(tp_size, tp_rank):
    process_name = "Worker"
    if tp_size > 1:
        process_name += f"_TP{tp_rank}"
    set_process_title(name=process_name)

def api_server(index):
    set_process_title("APIServer", str(index))
"""

ARGS = """
def add_cli_args(parser):
    parser.add_argument("--enable-fault-tolerance", action="store_true")
    parser.add_argument("--port", "-p", default=8000)

class FrontendArgs:
    api_key: str | None = None
"""

CONFIG = """
_DEFAULT_TIMEOUT = 300

@config
class WatchdogConfig:
    timeout: int = Field(default=_DEFAULT_TIMEOUT, gt=0)
    dump_dir: str = ""
    _private: int = 0
"""

BASE = {
    "vllm/entrypoints/serve/api_router.py": ROUTER,
    "vllm/entrypoints/serve/elastic_ep/middleware.py": MIDDLEWARE,
    "vllm/v1/metrics/loggers.py": LOGGERS,
    "vllm/v1/engine/core.py": TITLES,
    "vllm/engine/arg_utils.py": ARGS,
    "vllm/config/watchdog_config.py": CONFIG,
}


def _surfaces(tree: dict[str, str]) -> Surfaces:
    return extract(tree.items())


def _newer() -> dict[str, str]:
    """The next release: a moved route, a new body, exempt paths, a new label, a new flag."""
    tree = dict(BASE)
    tree["vllm/entrypoints/serve/api_router.py"] = ROUTER.replace(
        '"/fault_tolerance/status"', '"/v1/fault_tolerance/status"'
    )
    tree["vllm/entrypoints/serve/elastic_ep/middleware.py"] = MIDDLEWARE.replace(
        '{"/health"}', '{"/health", "/is_scaling_elastic_ep"}'
    ).replace(
        '"error": "The model',
        '"error": "This data-parallel rank has been retired." if r else "The model',
    )
    tree["vllm/v1/engine/core.py"] = TITLES + ENGINE
    tree["vllm/v1/metrics/loggers.py"] = LOGGERS.replace(
        "labelnames=labelnames\n", 'labelnames=labelnames + ["source"]\n'
    )
    tree["vllm/engine/arg_utils.py"] = ARGS + (
        '\ndef more(parser):\n    parser.add_argument("--watchdog-config")\n'
    )
    return tree


def test_routes_middlewares_and_bodies_are_read_as_declared() -> None:
    found = _surfaces(BASE)
    assert found.keys("route") == {
        "GET /health",
        "GET /ping",
        "POST /ping",
        "GET /fault_tolerance/status",
        "POST /inference/v1/abort_requests",
        "ANY /metrics",
    }
    assert found.items["middleware"]["ScalingMiddleware"].detail == "paths /health"
    # Docstrings and log lines are not bodies; a 503 answer's text is.
    assert found.keys("body") == {"The model is currently scaling. Please try again later."}


def test_metrics_titles_flags_and_fields_are_read_with_their_details() -> None:
    found = _surfaces({**BASE, "vllm/v1/engine/core.py": TITLES + ENGINE})
    metrics = {k: i.detail for k, i in found.items["metric"].items()}
    assert metrics == {
        "vllm:generation_tokens": "counter [model_name,engine]",
        "vllm:request_success": "counter [model_name,engine,finished_reason]",
        "vllm:time_to_first_token_seconds": "histogram []",
        "vllm:kv_offload_latency_seconds": "declared indirectly [?]",
    }
    assert found.keys("title") == {
        "EngineCore_DP{}",
        "EngineCore",
        "Worker[_TP{}]",
        "APIServer_{}",
    }
    assert found.keys("flag") == {"--enable-fault-tolerance", "--port", "--api-key"}
    assert found.items["flag"]["--port"].detail == "default 8000"
    assert found.items["field"]["WatchdogConfig.timeout"].detail == "default 300"
    assert found.keys("field") == {"WatchdogConfig.timeout", "WatchdogConfig.dump_dir"}
    # A paused refusal in an engine function that says retryable: a body.
    assert "Generation is paused. Please retry after it resumes." in found.keys("body")
    assert "Some other long sentence that answers nothing to anyone." not in found.keys("body")


def test_a_file_that_does_not_parse_is_counted_not_fatal() -> None:
    found = extract([("vllm/broken.py", "def (:"), *BASE.items()])
    assert found.unparsed == ["vllm/broken.py"]
    assert found.files == len(BASE) + 1
    assert "GET /health" in found.keys("route")


def test_the_diff_names_moves_changes_and_what_touches_sentinel() -> None:
    changes = compare.diff(_surfaces(BASE), _surfaces(_newer()))
    by_key = {(c.kind, c.key): c for c in changes}
    moved = by_key[("route", "GET /v1/fault_tolerance/status")]
    assert moved.status == "moved"
    assert moved.detail == "was GET /fault_tolerance/status"
    assert moved.touches is not None
    retired = by_key[("body", "This data-parallel rank has been retired.")]
    assert retired.status == "new"
    assert retired.touches is not None
    middleware = by_key[("middleware", "ScalingMiddleware")]
    assert middleware.status == "changed"
    assert middleware.detail == "paths /health -> paths /health, /is_scaling_elastic_ep"
    labels = by_key[("metric", "vllm:generation_tokens")]
    assert labels.detail == "counter [model_name,engine] -> counter [model_name,engine,source]"
    assert labels.touches is not None  # sentinel reads vllm:generation_tokens_total
    assert by_key[("flag", "--watchdog-config")].touches is not None
    # Nothing that did not change is listed.
    assert ("route", "GET /health") not in by_key


def test_known_surfaces_a_release_lacks_are_reported_within_their_lines() -> None:
    rows = compare.presence(_surfaces(BASE), "0.34.0")
    absent = {(r.known.kind, r.known.key) for r in rows if not r.present}
    present = {(r.known.kind, r.known.key) for r in rows if r.present}
    assert ("route", "GET /health") in present
    assert ("metric", "vllm:generation_tokens_total") in present  # counter family, exposed name
    assert ("title", "VLLM::Worker") in present
    assert ("route", "GET /v1/fault_tolerance/status") in absent
    assert ("route", "GET /is_paused") in absent
    # 0.32-0.33 only: not expected of 0.34; an old marker is not expected either.
    assert ("route", "GET /fault_tolerance/status") not in present | absent
    assert ("metric", "vllm:gpu_cache_usage_perc") not in present | absent


def test_the_report_leads_with_what_touches_sentinel_and_marks_the_unreviewed() -> None:
    before, after = _surfaces(BASE), _surfaces(_newer())
    text = report.render(
        "9.1.0", "9.0.0", after, compare.diff(before, after), compare.presence(after, "9.1.0")
    )
    touching, rest = text.split("**Known surfaces this release does not declare", 1)
    assert "moved route `GET /v1/fault_tolerance/status`" in touching
    assert "new body `This data-parallel rank has been retired.`" in touching
    assert "UNREVIEWED" in touching  # a synthetic body nobody wrote a note for
    # The real release's note is printed where it applies.
    assert "**handled (issue 39): fault_tolerance polls both paths" in touching
    assert "route `GET /is_paused`" in rest


def test_previous_release_by_number() -> None:
    assert previous("0.34.0") == "0.33.0"
    assert previous("0.34.2") == "0.34.1"
    with pytest.raises(wheel.RadarError):
        previous("1.0.0")
    with pytest.raises(wheel.RadarError):
        previous("latest")


def _wheel(folder: Path, version: str, tree: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in tree.items():
            archive.writestr(name, text)
        archive.writestr("vllm/_C.abi3.so", b"\x7fELF not python")
    return path


def test_the_command_reads_cached_wheels_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _wheel(tmp_path / "wheels", "9.0.0", BASE)
    _wheel(tmp_path / "wheels", "9.1.0", _newer())
    out = tmp_path / "report.md"
    assert main(["9.1.0", "--cache", str(tmp_path), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("### vLLM 9.1.0 against 9.0.0")
    assert "moved route `GET /v1/fault_tolerance/status`" in text
    assert "radar: read" in capsys.readouterr().err  # progress, on stderr
    assert len(list(tmp_path.glob("surfaces-*.json"))) == 2
    # The second run reads the JSON cache, not the wheels, and says the same.
    assert main(["9.1.0", "--base", "9.0.0", "--cache", str(tmp_path)]) == 0
    second = capsys.readouterr()
    assert "radar: read" not in second.err
    assert second.out == text


def test_a_broken_wheel_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "vllm-9.0.0-cp38-abi3-any.whl").write_bytes(b"not a zip")
    _wheel(tmp_path / "wheels", "9.1.0", BASE)
    assert main(["9.1.0", "--cache", str(tmp_path)]) == 2
    assert "is not a readable wheel" in capsys.readouterr().err


def test_a_release_not_cached_is_downloaded_without_installing_and_a_failure_is_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[list[str]] = []

    def refuse(command: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        commands.append(command)
        return subprocess.CompletedProcess(command, 1)

    monkeypatch.setattr(subprocess, "run", refuse)
    with pytest.raises(wheel.RadarError, match=r"could not download vllm==9\.2\.0"):
        wheel.wheel_path("9.2.0", tmp_path)
    [command] = commands
    assert command[command.index("pip") + 1 :][:3] == [
        "download",
        "--no-deps",
        "--only-binary=:all:",
    ]
    assert "vllm==9.2.0" in command
    assert "install" not in command
