"""The billing resource inside a real materialization: a hold, then one charge per key settling it."""

from __future__ import annotations

import dagster as dg
import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.models import TokenUsage, Workspace
from pipelines_dagster.core.ledger.billing import Billing, InsufficientCreditsError
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.billing import BillingResource


def test_an_asset_charges_once_per_idempotency_key(app_engine):
    sessions = session_factory(app_engine)
    with transaction(sessions) as session:
        workspace = Workspace(name="acme", owner_user_id="user-1")
        session.add(workspace)
        session.flush()
        workspace_id = workspace.id
    Billing(sessions, enabled=True, micros_per_crawl=100).grant(workspace_id, 1000)

    @dg.asset
    def crawl(billing: BillingResource) -> dg.MaterializeResult:
        billing.reserve(workspace_id, 5, idempotency_key=f"run:{workspace_id}", run_id="run")
        micros = billing.successes_to_micros(3)
        results = [
            billing.charge(workspace_id, micros, idempotency_key=f"run:{workspace_id}", usage={"successes": 3})
            for _ in range(2)
        ]
        return dg.MaterializeResult(metadata={"charged": [r.newly_charged for r in results]})

    url = app_engine.url.render_as_string(hide_password=False)
    billing = BillingResource(app_db=AppDatabaseResource(url=url), billing_enabled=True, micros_per_crawl=100)
    result = dg.materialize([crawl], resources={"billing": billing})
    assert result.success
    charged = result.asset_materializations_for_node("crawl")[0].metadata["charged"].value
    assert charged == [True, False]
    assert Billing(sessions, enabled=True, micros_per_crawl=100).balance(workspace_id) == 700
    with sessions() as session:
        assert (
            session.scalar(
                sa.select(sa.func.count()).select_from(TokenUsage).where(TokenUsage.workspace_id == workspace_id)
            )
            == 1
        )

    @dg.asset
    def too_big(billing: BillingResource) -> None:
        billing.reserve(workspace_id, 8, idempotency_key=f"other:{workspace_id}", run_id="other")

    with pytest.raises(InsufficientCreditsError, match="out of crawl credit"):
        dg.materialize([too_big], resources={"billing": billing})
