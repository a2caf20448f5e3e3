"""The `crawler` resource inside a real materialization: given the `locks` resource, every request it sends holds
one of the host's slots in the budget shared by all runs (Redis or the lease table)."""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from pipelines_dagster.core.crawl.extract.slots import ExtractionSlots
from pipelines_dagster.core.crawl.host_budget import slot_lock_name
from pipelines_dagster.resources.crawler import CrawlerResource
from pipelines_dagster.resources.deployment import build_resources
from pipelines_dagster.resources.locks import DatabaseLocksResource, LocksResource, RedisLocksResource
from pipelines_dagster.resources.network import NetworkAccess
from pipelines_dagster.settings import SettingsError, default_extraction_slots_dir, load_settings
from tests.support.web import Reply, Request, WebServer, page


@pytest.fixture(params=["database", "redis"])
def locks(request: pytest.FixtureRequest) -> LocksResource:
    if request.param == "redis":
        return RedisLocksResource(url=request.getfixturevalue("redis_url"), key_prefix=f"test:{uuid.uuid4().hex}:")
    engine: sa.Engine = request.getfixturevalue("sqlite_engine")
    return DatabaseLocksResource(database_url=engine.url.render_as_string(hide_password=False))


def slot_owners_seen_by_the_server(crawler: CrawlerResource, locks: LocksResource) -> list[str | None]:
    """Materialize an asset crawling one page; while serving it, the server notes who holds the host's one slot."""
    seen: list[str | None] = []
    with WebServer() as web:
        slot = slot_lock_name(f"127.0.0.1:{web.port}", 0)

        def serve(_request: Request) -> Reply:
            seen.append(locks.owner_of(slot))
            return page("Shared", "One budget per host, whichever run crawls it.")

        web.handle("/page", serve)

        @dg.asset
        def crawled(crawler: CrawlerResource) -> dg.MaterializeResult:
            [outcome] = crawler.crawler.crawl_all([web.url("/page")])
            return dg.MaterializeResult(metadata={"status": outcome.status})

        result = dg.materialize([crawled], resources={"crawler": crawler, "locks": locks})
    assert result.success
    [materialization] = result.asset_materializations_for_node("crawled")
    assert materialization.metadata["status"].value == "success"
    assert locks.owner_of(slot) is None  # released after the request
    return seen


def crawler_resource(**fields: object) -> CrawlerResource:
    return CrawlerResource(
        network=NetworkAccess(allowed_networks=["127.0.0.1/32"]), per_host_concurrency=1, obey_robots=False, **fields
    )


def test_with_locks_each_request_holds_the_hosts_shared_slot(locks: LocksResource) -> None:
    [owner] = slot_owners_seen_by_the_server(crawler_resource(locks=locks), locks)
    assert owner is not None


def test_without_locks_no_shared_slot_is_taken(locks: LocksResource) -> None:
    assert slot_owners_seen_by_the_server(crawler_resource(), locks) == [None]


def test_the_deployment_shares_host_budgets_through_redis_locks_and_on_request(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, redis_url: str
) -> None:
    for name in ("PIPELINES_LOCKS", "PIPELINES_DATABASE_URL", "PIPELINES_CRAWLER_SHARED_HOST_BUDGET"):
        monkeypatch.delenv(name, raising=False)
    with_redis = build_resources(load_settings(data_dir=tmp_path, locks=redis_url))
    assert with_redis["crawler"].locks is with_redis["locks"]
    embedded = build_resources(load_settings(data_dir=tmp_path))
    assert embedded["crawler"].locks is None
    chosen = build_resources(load_settings(data_dir=tmp_path, crawler_shared_host_budget=True))
    assert chosen["crawler"].locks is chosen["locks"]


def test_sqlite_lease_commits_skip_the_fsync(sqlite_engine: sa.Engine) -> None:
    """Every crawled request takes and frees a lease; on SQLite they commit without an fsync each."""
    resource = DatabaseLocksResource(database_url=sqlite_engine.url.render_as_string(hide_password=False))
    assert resource.locks.acquire("test:lease", "one", ttl_seconds=5)
    assert resource._engine is not None
    with resource._engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL, not FULL (2)
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    assert resource.locks.owner_of("test:lease") == "one"


def test_the_deployments_extraction_workers_take_the_machines_slots_in_the_directory_the_environment_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.setenv("PIPELINES_EXTRACTION_SLOTS_DIR", "")
    monkeypatch.setenv("PIPELINES_EXTRACTION_SLOTS", "")
    unset = load_settings(data_dir=tmp_path)
    assert (unset.extraction_slots_dir, unset.extraction_slots) == (default_extraction_slots_dir(), None)
    monkeypatch.setenv("PIPELINES_EXTRACTION_SLOTS", "0")
    with pytest.raises(SettingsError, match=r"PIPELINES_EXTRACTION_SLOTS: .*greater than or equal to 1 \(got '0'\)"):
        load_settings(data_dir=tmp_path)
    assert default_extraction_slots_dir().parent == Path(tempfile.gettempdir())
    directory = tmp_path / "this-machine"
    monkeypatch.setenv("PIPELINES_EXTRACTION_SLOTS_DIR", str(directory))
    monkeypatch.setenv("PIPELINES_EXTRACTION_SLOTS", "1")
    crawler = build_resources(load_settings(data_dir=tmp_path))["crawler"]
    assert (crawler.extraction_slots_dir, crawler.extraction_slots) == (str(directory), 1)
    with WebServer() as web:
        web.route("/page", page("Slots", "Every run on the machine shares its cores."))
        with crawler.model_copy(update={"network": NetworkAccess(allowed_networks=["127.0.0.1/32"])}).crawler as built:
            [outcome] = built.crawl_all([web.url("/page")])
            assert outcome.status == "success"
            # Its one worker holds the only slot while the crawler keeps it.
            assert ExtractionSlots(directory, 1).try_take() is None
    fd = ExtractionSlots(directory, 1).try_take()
    assert fd is not None
    os.close(fd)
