"""The run contract: a run launched from the Dagster UI is given the tags our own launchers set."""

from __future__ import annotations

import pytest

from pipelines_dagster.runs import missing_run_tags, run_tags


def test_a_ui_launch_with_only_its_partition_gets_every_contract_tag_as_a_manual_run():
    assert missing_run_tags({"dagster/partition": "7"}, pipeline_id=7, workspace_id=3) == {
        "pipeline_id": "7",
        "workspace_id": "3",
        "trigger": "manual",
    }


def test_a_backfill_run_is_a_manual_launch_whose_dagster_tags_say_it_is_a_backfill():
    tags = {"dagster/partition": "7", "dagster/backfill": "abc"}
    assert missing_run_tags(tags, pipeline_id=7, workspace_id=3)["trigger"] == "manual"


def test_tags_a_run_has_are_kept():
    # The pipeline_run launchpad sets the job's trigger tag; a re-execution copies its parent's tags.
    assert missing_run_tags({"trigger": "manual"}, pipeline_id=7, workspace_id=3) == {
        "pipeline_id": "7",
        "workspace_id": "3",
    }
    tagged = run_tags(pipeline_id=7, workspace_id=3, trigger="webhook")
    assert missing_run_tags(tagged, pipeline_id=7, workspace_id=3) == {}


def test_an_unknown_trigger_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown trigger 'cron'; use one of manual, scheduled"):
        run_tags(pipeline_id=1, workspace_id=1, trigger="cron")


def test_each_fire_carries_its_run_key_and_tags_without_a_dagster_instance():
    from datetime import UTC, datetime

    from pipelines_dagster.core.triggers.queue import DeliveryFire, EventFire
    from pipelines_dagster.core.triggers.scheduler import ScheduledFire

    at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    schedule = ScheduledFire(trigger_id=4, pipeline_id=7, workspace_id=3, scheduled_for=at)
    assert schedule.run_key == "schedule:4:2026-12-01T09:00:00+00:00"
    assert schedule.tags == {
        "pipeline_id": "7",
        "workspace_id": "3",
        "trigger": "scheduled",
        "scheduled_for": "2026-12-01T09:00:00+00:00",
    }
    delivery = DeliveryFire(delivery_id=11, pipeline_id=7, workspace_id=3)
    assert (delivery.run_key, delivery.tags["trigger"], delivery.tags["webhook_delivery_id"]) == (
        "webhook:11",
        "webhook",
        "11",
    )
    event = EventFire(event_id=5, event_type="folder.changed", trigger_id=9, pipeline_id=7, workspace_id=3)
    assert event.run_key == "event:5:9"
    assert {k: event.tags[k] for k in ("trigger", "event_id", "event_type")} == {
        "trigger": "event",
        "event_id": "5",
        "event_type": "folder.changed",
    }


def test_a_run_is_for_its_tagged_pipeline_its_partition_or_its_batch_members():
    from pipelines_dagster.runs import batch_run_key, batch_tags, origin_of, pipeline_ids_of

    assert pipeline_ids_of(run_tags(pipeline_id=7, workspace_id=3, trigger="manual")) == [7]
    assert pipeline_ids_of({"dagster/partition": "8"}) == [8]
    assert pipeline_ids_of(batch_tags([(3, 1), (17, 2)], trigger="scheduled")) == [3, 17]
    assert pipeline_ids_of({"dagster/partition": "not-a-pipeline"}) == []
    assert origin_of({"webhook_delivery_id": "12"}).delivery_id == 12 and origin_of({}).event_id is None
    assert batch_run_key(["b", "a"]) == batch_run_key(["a", "b"]) != batch_run_key(["a"])
