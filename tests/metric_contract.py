"""docs/design.md's metric contract, written once for every test that checks it.

Dashboards and alerts rely on these names and types, so the tests keep their
own copy instead of reading sentinel's: dropping a metric from the code must
fail a test.
"""

from __future__ import annotations

CONTRACT_METRICS = {
    "sentinel_canary_total": "counter",
    "sentinel_canary_duration_seconds": "histogram",
    "sentinel_canary_ttft_seconds": "histogram",
    "sentinel_verdict": "gauge",
    "sentinel_hang_detections_total": "counter",
    "sentinel_priority_effective": "gauge",
    "sentinel_progress_age_seconds": "gauge",
    "sentinel_canaries_skipped_total": "counter",
    "sentinel_diagnostics_duration_seconds": "histogram",
    "sentinel_diagnostics_failures_total": "counter",
    "sentinel_enforce": "gauge",
    "sentinel_server_restarts_total": "counter",
    "sentinel_restart_brake_engaged": "gauge",
    "sentinel_restart_ineffective": "gauge",
    "sentinel_loop_errors_total": "counter",
    "sentinel_scrape_failures_total": "counter",
    "sentinel_server_phase": "gauge",
    "sentinel_process_evidence": "gauge",
    "sentinel_restart_budget_held": "gauge",
    "sentinel_restart_budget_slot_held": "gauge",
    "sentinel_restart_budget_mode": "gauge",
}
CONTRACT = frozenset(CONTRACT_METRICS)
