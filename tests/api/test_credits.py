"""GET .../credits: the token's workspace's balance, what crawls under way hold, and what is left."""

from __future__ import annotations

from pipelines_dagster.core.ledger.billing import Billing
from tests.api.conftest import new_tenant, settings_for


def test_credits_show_balance_held_and_available_of_the_workspace_only(
    app_engine, sessions, instance, client_for, nowhere, tmp_path
):
    client = client_for(settings_for(app_engine, tmp_path / "data", billing_enabled=True), instance, nowhere)
    tenant, other = new_tenant(sessions), new_tenant(sessions, name="globex")
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    billing.grant(tenant.workspace_id, 10_000)
    billing.reserve(tenant.workspace_id, 4, idempotency_key=f"run-1:{tenant.workspace_id}", run_id="run-1")
    path = f"/workspaces/{tenant.workspace_id}/credits"

    shown = client.get(path, headers=tenant.headers)
    assert shown.status_code == 200, shown.text
    assert shown.json() == {
        "billing_enabled": True,
        "balance_micros": 10_000,
        "held_micros": 4000,
        "available_micros": 6000,
    }
    billing.charge(tenant.workspace_id, 1000, idempotency_key=f"run-1:{tenant.workspace_id}", usage={})
    settled = client.get(path, headers=tenant.headers).json()
    assert (settled["balance_micros"], settled["held_micros"], settled["available_micros"]) == (9000, 0, 9000)

    assert client.get(path, headers=other.headers).status_code == 404
    assert client.get(f"/workspaces/{other.workspace_id}/credits", headers=other.headers).json()["balance_micros"] == 0


def test_credits_say_when_billing_is_off(client, tenant):
    body = client.get(f"/workspaces/{tenant.workspace_id}/credits", headers=tenant.headers).json()
    assert body == {"billing_enabled": False, "balance_micros": 0, "held_micros": 0, "available_micros": 0}
