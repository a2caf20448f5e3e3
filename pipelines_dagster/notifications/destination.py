"""Where notifications may go: the crawler's SSRF guard applied to endpoint URLs, when an endpoint
is created and again at every send (a name that resolved to a public address then may not now)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httpx

from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.security.network_policy import NetworkPolicy
from pipelines_dagster.core.security.ssrf import AddressError, AddressGuard, PinnedTransport, Resolver
from pipelines_dagster.core.validation import validate_url


class DestinationGuard:
    """Vouches for notification URLs under the crawler's network policy: private, loopback,
    link-local (cloud metadata) and reserved addresses are refused unless the policy allows them."""

    def __init__(self, policy: NetworkPolicy, *, resolver: Resolver | None = None) -> None:
        self.policy = policy
        self._resolver = resolver

    def check(self, url: str, *, field: str = "url") -> str:
        """`url` when it is an http(s) URL whose host resolves only to allowed addresses; else
        InvalidInputError naming `field`. Blocks on the DNS lookup: call it off an event loop."""
        checked = validate_url(url, field=field)
        host = (urlsplit(checked).hostname or "").strip("[]")
        try:
            asyncio.run(AddressGuard(self.policy, resolver=self._resolver).addresses(host))
        except AddressError as exc:
            raise InvalidInputError(
                field,
                f"{exc}. Notifications go only where the crawler may go: a public address, or a network "
                "PIPELINES_CRAWLER_ALLOWED_NETWORKS names",
            ) from None
        return checked

    def transport(self, *, limits: httpx.Limits | None = None) -> PinnedTransport:
        """A transport whose connections go only to addresses checked when they are made: a new
        guard each time, so every send pass resolves the endpoints' names afresh."""
        return PinnedTransport(AddressGuard(self.policy, resolver=self._resolver), limits=limits)
