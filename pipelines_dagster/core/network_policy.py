"""Which IP addresses the crawler may connect to: the SSRF guard's policy, as plain data.

`ssrf` enforces it where sockets are opened; this half has no HTTP client in it, so the crawler
resource can be configured without loading one (every run process loads the code location).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

_RFC1918 = tuple(ip_network(net) for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
_CGNAT = ip_network("100.64.0.0/10")
_UNIQUE_LOCAL = ip_network("fc00::/7")
# NAT64 gateways forward 64:ff9b::a.b.c.d to the IPv4 address a.b.c.d.
_NAT64 = ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class NetworkPolicy:
    """Which addresses may be crawled: public ones, plus `allowed_networks`, plus every private
    range when `allow_private_networks` is set (multicast and unspecified addresses never)."""

    allow_private_networks: bool = False
    allowed_networks: tuple[str, ...] = ()
    _networks: tuple[IPNetwork, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            networks = tuple(ip_network(network) for network in self.allowed_networks)
        except ValueError as exc:
            raise ValueError(f"allowed_networks: {exc}; write networks like '127.0.0.1/32' or '10.20.0.0/16'") from None
        object.__setattr__(self, "allowed_networks", tuple(self.allowed_networks))
        object.__setattr__(self, "_networks", networks)

    def refusal(self, address: IPAddress) -> str | None:
        """Why connecting to `address` is refused, or None when it is allowed."""
        if any(address in network for network in self._networks):
            return None
        if isinstance(address, IPv6Address):
            embedded = address.ipv4_mapped
            if embedded is None and address in _NAT64:
                embedded = IPv4Address(int(address) & 0xFFFFFFFF)
            if embedded is not None:
                reason = self.refusal(embedded)
                return None if reason is None else f"the IPv6 form of {embedded}, {reason}"
        if address.is_unspecified:
            return "unspecified address"
        if address.is_multicast:
            return "multicast"
        if self.allow_private_networks:
            return None
        if address.is_loopback:
            return "loopback"
        if address.is_link_local:
            return "link-local, where cloud metadata services live"
        if any(address in network for network in _RFC1918):
            return "private network (RFC 1918)"
        if address in _CGNAT:
            return "carrier-grade NAT (RFC 6598)"
        if address in _UNIQUE_LOCAL:
            return "unique local (fc00::/7)"
        if address.is_reserved:
            return "reserved"
        if not address.is_global:
            return "not publicly routable"
        return None
