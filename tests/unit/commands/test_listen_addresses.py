"""A bind that fails after the check passed is named in the check's own words, or not at all."""

from __future__ import annotations

import errno
from pathlib import Path

from sentinel.commands.listeners import ListenAddresses
from sentinel.config.settings import Settings

SETTINGS = Settings(listen="127.0.0.1:8471", grpc_listen="127.0.0.1:8472")


def test_an_http_port_taken_in_the_race_names_the_flag() -> None:
    listeners = ListenAddresses(SETTINGS, {"listen": "127.0.0.1:8471"}, None, env={})
    exc = OSError(errno.EADDRINUSE, "Address already in use")
    assert listeners.bind_failure(exc) == (
        "sentinel: --listen: address 127.0.0.1:8471 already in use"
    )


def test_a_grpc_bind_failure_names_where_the_address_came_from() -> None:
    config = Path("/etc/sentinel.yaml")
    listeners = ListenAddresses(SETTINGS, {}, config, env={})
    exc = RuntimeError("Failed to bind to address 127.0.0.1:8472")
    assert listeners.bind_failure(exc) == (
        "sentinel: /etc/sentinel.yaml: grpc_listen: address 127.0.0.1:8472 cannot be bound"
    )


def test_another_failure_is_not_a_bind_failure() -> None:
    listeners = ListenAddresses(SETTINGS, {}, None, env={"SENTINEL_LISTEN": "127.0.0.1:8471"})
    assert listeners.bind_failure(OSError(errno.EACCES, "Permission denied")) is None
    assert listeners.bind_failure(RuntimeError("engine died")) is None


def test_any_free_port_and_no_grpc_listener_need_no_check() -> None:
    settings = Settings(listen="127.0.0.1:0", grpc_listen=None)
    assert ListenAddresses(settings, {}, None, env={}).check() is None
