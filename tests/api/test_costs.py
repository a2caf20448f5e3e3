"""GET .../costs: the ledger's crawl charges of the token's workspace over a time range, by pipeline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import CreditLedgerEntry
from pipelines_dagster.core.catalog.pipelines import create_pipeline
from pipelines_dagster.core.ledger.billing import Billing
from tests.api.conftest import new_tenant


def charged(sessions, workspace_id: int, pipeline_id: int, micros: int, key: str, days_ago: int = 0) -> None:
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    billing.charge(workspace_id, micros, idempotency_key=key, usage={"pipeline_id": pipeline_id, "run_id": key})
    with transaction(sessions) as session:
        session.execute(
            sa.update(CreditLedgerEntry)
            .where(CreditLedgerEntry.idempotency_key == key)
            .values(created_at=datetime.now(UTC) - timedelta(days=days_ago))
        )


def pipeline(sessions, workspace_id: int, name: str) -> int:
    with transaction(sessions) as session:
        return create_pipeline(session, workspace_id=workspace_id, connector_id=None, name=name).id


def test_costs_are_the_ledgers_by_pipeline_over_a_range_and_only_the_workspaces_own(client, sessions, tenant):
    other = new_tenant(sessions, name="other")
    docs, blog = pipeline(sessions, tenant.workspace_id, "docs"), pipeline(sessions, tenant.workspace_id, "blog")
    theirs = pipeline(sessions, other.workspace_id, "theirs")
    for key, (pid, micros, days) in {
        "a": (docs, 3000, 10),
        "b": (docs, 2000, 1),
        "c": (blog, 4000, 1),
    }.items():
        charged(sessions, tenant.workspace_id, pid, micros, f"{tenant.workspace_id}-{key}", days)
    charged(sessions, other.workspace_id, theirs, 9000, f"{other.workspace_id}-x")
    path = f"/workspaces/{tenant.workspace_id}/costs"

    everything = client.get(path, headers=tenant.headers)
    assert everything.status_code == 200, everything.text
    body = everything.json()
    assert (body["micros"], body["charges"], body["since"], body["until"]) == (9000, 3, None, None)
    assert [(p["pipeline_name"], p["micros"], p["charges"]) for p in body["pipelines"]] == [
        ("docs", 5000, 2),
        ("blog", 4000, 1),
    ]
    week = {"since": (datetime.now(UTC) - timedelta(days=7)).isoformat()}
    assert client.get(path, headers=tenant.headers, params=week).json()["micros"] == 6000
    only = client.get(path, headers=tenant.headers, params={**week, "pipeline_id": docs}).json()
    assert (only["micros"], [p["pipeline_id"] for p in only["pipelines"]]) == (2000, [docs])

    assert client.get(path, headers=tenant.headers, params={"pipeline_id": theirs}).status_code == 404
    assert client.get(f"/workspaces/{other.workspace_id}/costs", headers=tenant.headers).status_code == 404
    assert client.get(f"/workspaces/{other.workspace_id}/costs", headers=other.headers).json()["micros"] == 9000
    bad = client.get(path, headers=tenant.headers, params={"since": "1700000000", "until": "yesterday"})
    assert bad.status_code == 422
    assert {error["field"] for error in bad.json()["detail"]} == {"since", "until"}
    backwards = client.get(
        path, headers=tenant.headers, params={"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}
    )
    assert backwards.status_code == 422 and backwards.json()["detail"][0]["field"] == "since"
