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
# Deprecated by RFC 3879 but still routed by some stacks as if private; Python counts it global.
_SITE_LOCAL = ip_network("fec0::/10")


def _tunnelled_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 form delivers to: IPv4-mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::/96),
    6to4 (2002:AABB:CCDD::/48 → relay to AA.BB.CC.DD) and Teredo (2001::/32 → its client's address)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


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
            embedded = _tunnelled_ipv4(address)
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
        if address in _SITE_LOCAL:
            return "site-local (fec0::/10)"
        if address.is_reserved:
            return "reserved"
        if not address.is_global:
            return "not publicly routable"
        return None
