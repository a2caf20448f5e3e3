"""What an event-fired run shows of its event's payload: the payload when small, a summary when large."""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.core.catalog.event_types import EventType
from pipelines_dagster.core.triggers.events import emit_event
from pipelines_dagster.core.triggers.payloads import MAX_SHOWN_KEYS, MAX_SHOWN_PAYLOAD_BYTES
from pipelines_dagster.runs import event_tags, run_tags
from tests.assets.conftest import Stack, materialization


def shown_by_an_event_run(stack: Stack, payload: dict) -> object:
    workspace_id, pipeline_id = stack.pipeline(stack.site(1))
    with transaction(stack.sessions) as session:
        event = emit_event(
            session, workspace_id=workspace_id, event_type=EventType.REFRESH_REQUESTED.value, payload=payload
        )
        tags = event_tags(event.id, event.event_type)
    result = dg.materialize(
        [crawl_results],
        partition_key=stack.key(pipeline_id),
        instance=stack.instance,
        resources=stack.resources(),
        tags=run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger="event", **tags),
    )
    return materialization(result, "crawl_results")["trigger_payload"]


def test_a_small_event_payload_is_shown_whole(embedded: Stack):
    assert shown_by_an_event_run(embedded, {"name": "a.pdf"}) == {"name": "a.pdf"}


def test_a_large_event_payload_is_shown_as_its_size_keys_and_digest(embedded: Stack):
    payload = {"name": "a.pdf", "text": "x" * 200_000, **{f"k{n}": n for n in range(150)}}
    encoded = json.dumps(payload, separators=(",", ":")).encode()
    shown = shown_by_an_event_run(embedded, payload)
    assert shown == {
        "summarized": f"the payload is over {MAX_SHOWN_PAYLOAD_BYTES} bytes, so only its summary is kept here",
        "bytes": len(encoded),
        "sha256": hashlib.sha256(encoded).hexdigest(),
        "key_count": 152,
        "top_level_keys": list(payload)[:MAX_SHOWN_KEYS],
    }
    assert len(json.dumps(shown)) < 4096
