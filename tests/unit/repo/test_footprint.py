"""What a start loads: the libraries only an incident needs stay out of a fresh daemon.

Every pod pays for what ``sentinel run`` imports (the Kubernetes client alone is
about 30 MB of resident memory), so these run a fresh interpreter and look at
``sys.modules`` after the imports and constructors a start goes through.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import textwrap
from pathlib import Path

from sentinel.target import tls_context
from sentinel.telemetry.events import in_cluster_credentials

INCIDENT_ONLY = ("kubernetes", "pynvml", "matplotlib")


def _fresh(script: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def _service_account(root: Path) -> Path:
    account = root / "serviceaccount"
    account.mkdir()
    for name, text in (("token", "t"), ("ca.crt", "c"), ("namespace", "ns")):
        (account / name).write_text(text)
    return account


def test_a_daemon_start_imports_no_incident_only_library(tmp_path: Path) -> None:
    account = _service_account(tmp_path)
    loaded = _fresh(
        f"""
        import json, sys
        from pathlib import Path
        import sentinel.cli, sentinel.daemon
        from sentinel.telemetry.events import EventReporter
        env = {{"POD_NAME": "vllm-0", "KUBERNETES_SERVICE_HOST": "10.0.0.1",
               "KUBERNETES_SERVICE_PORT": "443"}}
        reporter = EventReporter.from_environment(env, account=Path({str(account)!r}))
        print(json.dumps({{"enabled": reporter.enabled,
                          "loaded": [m for m in {INCIDENT_ONLY!r} if m in sys.modules]}}))
        """
    )
    assert loaded == {"enabled": True, "loaded": []}


def test_importing_sentinel_changes_no_global_state() -> None:
    state = _fresh(
        """
        import json, sys
        import sentinel.cli, sentinel.daemon, sentinel.transport, sentinel.telemetry.logging
        import structlog
        print(json.dumps({"structlog_configured": structlog.is_configured(),
                          "blocked": sorted(n for n, m in sys.modules.items() if m is None)}))
        """
    )
    assert state == {"structlog_configured": False, "blocked": []}


def test_the_command_boots_before_it_imports_http_or_logging_libraries() -> None:
    """``sentinel.cli`` imports neither, so ``main()``'s boot hides their optional extras."""
    state = _fresh(
        """
        import importlib.util, json, sys
        import sentinel.cli
        before = [m for m in ("httpx", "structlog") if m in sys.modules]
        from sentinel.boot import boot
        boot()
        import structlog
        print(json.dumps({
            "before": before,
            "extras": [m for m in ("rich", "click", "pygments") if m in sys.modules],
            "structlog_configured": structlog.is_configured(),
            "sniffio_settled": "sniffio" in sys.modules
            or importlib.util.find_spec("sniffio") is not None,
        }))
        """
    )
    assert state == {
        "before": [],
        "extras": [],
        "structlog_configured": True,
        "sniffio_settled": True,
    }


def test_in_cluster_credentials_say_what_is_missing(tmp_path: Path) -> None:
    account = _service_account(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster_credentials(env, account) is None
    assert in_cluster_credentials({}, account) == "KUBERNETES_SERVICE_HOST is not set"
    (account / "ca.crt").unlink()
    assert "ca.crt" in (in_cluster_credentials(env, account) or "")


def test_a_plain_http_target_loads_no_certificates_and_trusts_no_one() -> None:
    plain = tls_context("http://127.0.0.1:8000")
    assert plain.cert_store_stats()["x509_ca"] == 0
    assert plain.verify_mode is ssl.CERT_REQUIRED  # a redirect to https fails closed
    assert plain.check_hostname
    secure = tls_context("https://vllm.example:8443")
    assert secure.cert_store_stats()["x509_ca"] > 0
    assert secure.verify_mode is ssl.CERT_REQUIRED
