"""The exporter's allowlist: host patterns on the name, CIDRs on every resolved address."""

from __future__ import annotations

import pytest

from sentinel.exporter.allowlist import Allowlist, parse_address

HOSTS = ("vllm-0.inference.svc.cluster.local", "*.inference.svc.cluster.local")
CIDRS = ("10.0.0.0/8", "127.0.0.0/8", "fd00::/8")


@pytest.fixture
def allow() -> Allowlist:
    return Allowlist(HOSTS, CIDRS)


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("vllm-0.inference.svc.cluster.local", True),
        ("VLLM-0.Inference.svc.cluster.local.", True),  # case and a trailing dot
        ("vllm-1.inference.svc.cluster.local", True),  # the wildcard
        ("a.b.inference.svc.cluster.local", True),  # the wildcard covers deeper names
        ("inference.svc.cluster.local", False),  # the wildcard needs one label
        ("evilinference.svc.cluster.local", False),  # a suffix, not a label boundary
        ("inference.svc.cluster.local.evil.example", False),
        ("other.svc.cluster.local", False),
    ],
)
def test_host_patterns_match_the_name_as_given(allow: Allowlist, name: str, allowed: bool) -> None:
    assert allow.host_allowed(name) is allowed


def test_a_name_matching_a_pattern_is_allowed_whatever_it_resolves_to(allow: Allowlist) -> None:
    assert allow.decide("vllm-1.inference.svc.cluster.local", ["192.168.1.1"]).allowed


@pytest.mark.parametrize(
    ("addresses", "allowed"),
    [
        (["10.1.2.3"], True),
        (["127.0.0.1", "10.9.9.9"], True),
        (["fd12::1"], True),
        (["::ffff:10.1.2.3"], True),  # v4-mapped is judged as the v4 address
        (["fe80::1%eth0"], False),  # a scope does not hide the address
        (["169.254.169.254"], False),  # cloud metadata
        (["::1"], False),  # v6 loopback: 127.0.0.0/8 is v4 only
        (["10.1.2.3", "169.254.169.254"], False),  # rebinding: one bad address refuses all
        (["169.254.169.254", "10.1.2.3"], False),
        ([], False),
        (["not-an-address"], False),
    ],
)
def test_every_resolved_address_must_be_in_a_cidr(
    allow: Allowlist, addresses: list[str], allowed: bool
) -> None:
    assert allow.decide("rebind.attacker.example", addresses).allowed is allowed


def test_a_refusal_names_the_address_and_why(allow: Allowlist) -> None:
    decision = allow.decide("rebind.attacker.example", ["10.0.0.1", "169.254.169.254"])
    assert not decision.allowed
    assert "169.254.169.254" in decision.reason
    assert "rebind.attacker.example" in decision.reason
    assert "10.0.0.1" not in decision.reason


def test_an_address_target_is_judged_by_cidr(allow: Allowlist) -> None:
    assert allow.decide("10.0.0.7", ["10.0.0.7"]).allowed
    refused = allow.decide("192.168.0.7", ["192.168.0.7"])
    assert not refused.allowed
    assert refused.reason == "192.168.0.7 is in no allowed CIDR"


def test_without_cidrs_only_host_patterns_allow() -> None:
    hosts_only = Allowlist(HOSTS, ())
    assert not hosts_only.has_cidrs
    assert not hosts_only.decide("10.0.0.1", ["10.0.0.1"]).allowed
    assert "no allowed host pattern" in hosts_only.decide("x.example", ["10.0.0.1"]).reason


def test_an_empty_allowlist_allows_nothing() -> None:
    nothing = Allowlist()
    assert not nothing.decide("127.0.0.1", ["127.0.0.1"]).allowed
    assert not nothing.decide("localhost", ["127.0.0.1"]).allowed


def test_ipv6_cidrs() -> None:
    v6 = Allowlist((), ("2001:db8::/32",))
    assert v6.decide("2001:db8::5", ["2001:db8::5"]).allowed
    assert not v6.decide("2001:db9::5", ["2001:db9::5"]).allowed
    assert not v6.decide("10.0.0.1", ["10.0.0.1"]).allowed  # a v4 address is never in a v6 net


def test_parse_address_drops_scope_and_unmaps_v4() -> None:
    assert str(parse_address("fe80::1%eth0")) == "fe80::1"
    assert str(parse_address("::ffff:127.0.0.1")) == "127.0.0.1"
