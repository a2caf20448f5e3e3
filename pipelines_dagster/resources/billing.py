"""Crawl billing as a Dagster resource, over the app database's ledger."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from pipelines_dagster.core.ledger.billing import Billing, ChargeResult, Reservation
from pipelines_dagster.notifications.events import credits_low_hook
from pipelines_dagster.resources.app_db import AppDatabaseResource


class BillingResource(dg.ConfigurableResource["BillingResource"]):
    app_db: AppDatabaseResource
    billing_enabled: bool = False
    micros_per_crawl: int = 1000

    @property
    def billing(self) -> Billing:
        return Billing(
            self.app_db.sessions,
            enabled=self.billing_enabled,
            micros_per_crawl=self.micros_per_crawl,
            on_charged=credits_low_hook,
        )

    def successes_to_micros(self, successes: int) -> int:
        return self.billing.successes_to_micros(successes)

    def reserve(self, workspace_id: int, pages: int, *, idempotency_key: str, run_id: str) -> Reservation:
        return self.billing.reserve(workspace_id, pages, idempotency_key=idempotency_key, run_id=run_id)

    def release_holds(self, run_id: str) -> int:
        return self.billing.release_holds(run_id)

    def charge(self, workspace_id: int, micros: int, *, idempotency_key: str, usage: Mapping[str, Any]) -> ChargeResult:
        return self.billing.charge(workspace_id, micros, idempotency_key=idempotency_key, usage=usage)
