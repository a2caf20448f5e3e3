"""A pipeline creation, in a process of its own, that stops before its transaction commits: the test
kills it there, as an API or CLI process dies mid-request.

python -m tests.sensors.killed_create {services|partition-first} APP_DB_URL WORKSPACE_ID NAME, with the
Dagster instance's serialized ref in KILLED_CREATE_INSTANCE_REF; prints "uncommitted" when the pipeline is
flushed and, with partition-first (the order services.py used to have), its partition added.
"""

from __future__ import annotations

import os
import sys
import time

import dagster as dg
from dagster._core.instance.ref import InstanceRef
from dagster._serdes import deserialize_value

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.pipelines import create_pipeline
from pipelines_dagster.partitions import add_pipeline_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource


def main(order: str, url: str, workspace_id: str, name: str) -> None:
    instance = dg.DagsterInstance.from_ref(deserialize_value(os.environ["KILLED_CREATE_INSTANCE_REF"], InstanceRef))
    with transaction(AppDatabaseResource(url=url).sessions) as session:
        # A web connector: only a pipeline that can run has a partition.
        connector = create_connector(
            session, workspace_id=int(workspace_id), connector_type="webcrawler", urls=["https://example.com/"]
        )
        fields = {"workspace_id": int(workspace_id), "connector_id": connector.id, "name": name}
        if order == "services":
            services.create_pipeline(session, instance, **fields)
        else:
            add_pipeline_partitions(instance, [create_pipeline(session, **fields).partition])
        print("uncommitted", flush=True)
        time.sleep(600)
        raise SystemExit("not killed")


if __name__ == "__main__":
    main(*sys.argv[1:5])
