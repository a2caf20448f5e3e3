"""The resources of a deployment: `build_resources` is the one place its backends are chosen."""

from __future__ import annotations

import os
from typing import TypedDict

import dagster as dg

from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.billing import BillingResource
from pipelines_dagster.resources.blob_store import BlobStoreResource, LocalBlobStoreResource, S3BlobStoreResource
from pipelines_dagster.resources.crawler import CrawlerResource
from pipelines_dagster.resources.locks import DatabaseLocksResource, LocksResource, RedisLocksResource
from pipelines_dagster.resources.network import NetworkAccess
from pipelines_dagster.resources.notifications import NotificationsResource
from pipelines_dagster.settings import ENV_PREFIX, SECRETS_KEY_ENV, Settings


def _from_env(field: str, value: str) -> str:
    """`dg.EnvVar` when the environment holds exactly this value, else the value itself.

    A URL may carry a password; as an EnvVar it is read when a resource starts instead
    of being shown with the resource's config in the UI. Defaults are not in the
    environment, so they are embedded as they are.
    """
    name = f"{ENV_PREFIX}{field.upper()}"
    return dg.EnvVar(name) if os.environ.get(name) == value else value


class Resources(TypedDict):
    """The resources by the names the assets, checks and sensors take them as."""

    app_db: AppDatabaseResource
    blob_store: BlobStoreResource
    locks: LocksResource
    crawler: CrawlerResource
    billing: BillingResource
    notifications: NotificationsResource


def _secrets_key(settings: Settings) -> dict[str, str]:
    """The secrets key as an EnvVar, always: it is read where the resource starts and never embedded in its
    config, which the UI shows. Without one, the embedded default's key file."""
    if settings.secrets_key is not None:
        return {"secrets_key": dg.EnvVar(SECRETS_KEY_ENV)}
    return {"secrets_key_file": str(settings.secrets_key_file)}


def build_resources(settings: Settings) -> Resources:
    database_url = _from_env("database_url", settings.resolved_database_url)
    app_db = AppDatabaseResource(url=database_url, **_secrets_key(settings))

    if settings.s3_location is not None:
        bucket, prefix = settings.s3_location
        # AWS credentials stay with boto3's own chain (env, profile, instance role).
        blob_store: BlobStoreResource = S3BlobStoreResource(
            bucket=bucket, prefix=prefix, endpoint_url=settings.s3_endpoint_url
        )
    else:
        blob_store = LocalBlobStoreResource(root=str(settings.blob_dir))

    if settings.locks == "database":
        locks: LocksResource = DatabaseLocksResource(database_url=database_url)
    else:
        locks = RedisLocksResource(url=_from_env("locks", settings.locks))

    network = NetworkAccess.of(settings.network_policy)
    return {
        "app_db": app_db,
        "blob_store": blob_store,
        "locks": locks,
        "crawler": CrawlerResource(
            network=network,
            locks=locks if settings.shares_host_budget else None,
            extraction_slots_dir=str(settings.extraction_slots_dir.resolve()),
            extraction_slots=settings.extraction_slots,
        ),
        "billing": BillingResource(
            app_db=app_db,
            billing_enabled=settings.billing_enabled,
            micros_per_crawl=settings.micros_per_crawl,
        ),
        "notifications": NotificationsResource(
            app_db=app_db,
            api_url=settings.api_url,
            dagster_url=settings.dagster_url,
            network=network,
        ),
    }
