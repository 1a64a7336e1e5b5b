"""Which targets the exporter may connect to: a pure decision on a name and its addresses.

The exporter must not be an open proxy: anyone who can reach ``/probe`` names
the target. A target is allowed when its name, as given, matches a host
pattern (the operator vouches for that name whatever it resolves to), or when
*every* address it resolves to lies in an allowed CIDR; one address outside
is a refusal, so a name that resolves to both an allowed and a forbidden
address (a DNS rebinding trick) is refused outright. The caller connects
to the exact address checked here, never resolving the name again.

No I/O: resolution is :mod:`sentinel.exporter.target`'s; this module only
decides, so it is tested with tables.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Decision:
    """Allowed or not, and the words for the refusal (a 403 body)."""

    allowed: bool
    reason: str = ""


def normal_name(name: str) -> str:
    """A host name as patterns are matched: lower case, no trailing dot."""
    return name.strip().lower().rstrip(".")


def parse_address(text: str) -> IPAddress:
    """An address as resolution gives it (an IPv6 scope is dropped; v4-mapped becomes v4)."""
    address = ipaddress.ip_address(text.partition("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class Allowlist:
    """Host patterns (``name`` or ``*.suffix``) and CIDRs, from the ``allow`` section."""

    def __init__(self, hosts: Sequence[str] = (), cidrs: Sequence[str] = ()) -> None:
        self._exact = frozenset(normal_name(h) for h in hosts if not h.startswith("*."))
        self._suffixes = tuple(normal_name(h)[1:] for h in hosts if h.startswith("*."))
        self._networks: tuple[IPNetwork, ...] = tuple(ipaddress.ip_network(c) for c in cidrs)

    @property
    def has_cidrs(self) -> bool:
        return bool(self._networks)

    def host_allowed(self, name: str) -> bool:
        """Whether the name as given matches a host pattern (``*.`` needs one label or more)."""
        host = normal_name(name)
        if host in self._exact:
            return True
        return any(host.endswith(suffix) and len(host) > len(suffix) for suffix in self._suffixes)

    def address_allowed(self, address: IPAddress) -> bool:
        return any(
            address.version == network.version and address in network for network in self._networks
        )

    def decide(self, name: str, addresses: Sequence[str]) -> Decision:
        """Allow ``name`` resolved to ``addresses``, or say which address is refused and why.

        A name matching a host pattern is allowed whatever it resolves to.
        Otherwise every address must lie in an allowed CIDR; an empty list
        of addresses is refused too (nothing was shown to be allowed).
        """
        if self.host_allowed(name):
            return Decision(True)
        if not self._networks:
            return Decision(False, f"{name} matches no allowed host pattern")
        if not addresses:
            return Decision(False, f"{name} resolved to no address")
        for text in addresses:
            try:
                address = parse_address(text)
            except ValueError:
                return Decision(False, f"{name} resolved to {text!r}, not an IP address")
            if not self.address_allowed(address):
                if text == name:  # an address as the target
                    return Decision(False, f"{address} is in no allowed CIDR")
                return Decision(
                    False,
                    f"{name} resolved to {address}, which is in no allowed CIDR, "
                    "and the name matches no allowed host pattern",
                )
        return Decision(True)
