"""Where a deployment may connect, as resource config: the crawler's SSRF guard policy, which notifications
share (they go where the crawler may go). One value, made from the settings once, given to both resources."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from pipelines_dagster.core.security.network_policy import NetworkPolicy


class NetworkAccess(dg.Config):
    allow_private_networks: bool = Field(
        default=False,
        description="Reach private, loopback and link-local addresses (off: the SSRF guard refuses them).",
    )
    allowed_networks: list[str] = Field(
        default_factory=list, description="Networks allowed despite the guard, e.g. 127.0.0.1/32."
    )

    @classmethod
    def of(cls, policy: NetworkPolicy) -> NetworkAccess:
        return cls(allow_private_networks=policy.allow_private_networks, allowed_networks=list(policy.allowed_networks))

    def policy(self) -> NetworkPolicy:
        return NetworkPolicy(
            allow_private_networks=self.allow_private_networks, allowed_networks=tuple(self.allowed_networks)
        )
