"""The run contract: the tags our launchers set (and a UI launch is given), a partition key both ways, and the names
the read side finds runs by, which it reads without loading Dagster or the steps."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from pipelines_dagster.runs import missing_run_tags, run_tags


def test_a_ui_launch_with_only_its_partition_gets_every_contract_tag_as_a_manual_run():
    assert missing_run_tags({"dagster/partition": "7"}, pipeline_id=7, workspace_id=3, pipeline_name="Docs") == {
        "pipeline_id": "7",
        "workspace_id": "3",
        "trigger": "manual",
        "dagster/priority": "0",
        "pipeline_name": "Docs",
    }


def test_a_backfill_run_is_a_manual_launch_whose_dagster_tags_say_it_is_a_backfill():
    tags = {"dagster/partition": "7", "dagster/backfill": "abc"}
    assert missing_run_tags(tags, pipeline_id=7, workspace_id=3, pipeline_name="Docs")["trigger"] == "manual"


def test_tags_a_run_has_are_kept():
    # The pipeline_run launchpad sets the job's trigger tag; a re-execution copies its parent's tags.
    assert missing_run_tags({"trigger": "manual"}, pipeline_id=7, workspace_id=3, pipeline_name="Docs") == {
        "pipeline_id": "7",
        "workspace_id": "3",
        "dagster/priority": "0",
        "pipeline_name": "Docs",
    }
    tagged = run_tags(pipeline_id=7, workspace_id=3, trigger="webhook", pipeline_name="Docs")
    assert missing_run_tags(tagged, pipeline_id=7, workspace_id=3, pipeline_name="Docs") == {}


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
        "dagster/priority": "-2",
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


def test_manual_runs_go_ahead_of_fired_ones_and_scheduled_fires_go_last_in_dagsters_queue():
    from pipelines_dagster.runs import batch_tags

    def place(trigger: str) -> int:
        return int(run_tags(pipeline_id=1, workspace_id=1, trigger=trigger)["dagster/priority"])

    assert place("manual") > place("webhook") == place("event") == place("connector") > place("scheduled")
    # A UI launch carries no priority: Dagster's 0, a manual run's.
    assert place("manual") == 0
    assert batch_tags([(1, 1), (2, 1)], trigger="scheduled")["dagster/priority"] == str(place("scheduled"))


@pytest.mark.parametrize(("lowest_first", "order"), [(False, "descending"), (True, "ascending")])
def test_the_celery_priority_follows_the_run_queues_in_the_brokers_order(lowest_first: bool, order: str):
    from pipelines_dagster.runs import celery_routing

    triggers = ["manual", "event", "scheduled"]
    priorities = [
        int(
            celery_routing(
                run_tags(pipeline_id=1, workspace_id=1, trigger=trigger), queue=None, lowest_first=lowest_first
            )["dagster-celery/run_priority"]
        )
        for trigger in triggers
    ]
    assert priorities == sorted(priorities, reverse=order == "descending") and len(set(priorities)) == 3
    assert all(0 <= priority <= 9 for priority in priorities)
    # Three apart: Redis rounds a priority to one of 0, 3, 6, 9, so each trigger's stays apart there.
    assert {abs(a - b) for a, b in itertools.pairwise(priorities)} == {3}
    # A UI launch (no tags at all) goes as a manual run.
    ui = celery_routing({"dagster/partition": "7-docs"}, queue=None, lowest_first=lowest_first)
    assert ui == {"dagster-celery/run_priority": str(priorities[0])}


def test_a_run_goes_to_its_pipelines_queue_unless_its_tags_name_one():
    from pipelines_dagster.runs import celery_routing

    tags = run_tags(pipeline_id=1, workspace_id=1, trigger="manual")
    assert celery_routing(tags, queue="site-crawls", lowest_first=False)["dagster-celery/queue"] == "site-crawls"
    assert "dagster-celery/queue" not in celery_routing(tags, queue=None, lowest_first=False)
    by_hand = {**tags, "dagster-celery/queue": "urgent", "dagster-celery/run_priority": "1"}
    assert celery_routing(by_hand, queue="site-crawls", lowest_first=False) == {}


def test_a_run_is_for_its_tagged_pipeline_its_partition_or_its_batch_members():
    from pipelines_dagster.runs import batch_run_key, batch_tags, origin_of, pipeline_ids_of

    assert pipeline_ids_of(run_tags(pipeline_id=7, workspace_id=3, trigger="manual")) == [7]
    assert pipeline_ids_of({"dagster/partition": "8"}) == [8]
    assert pipeline_ids_of({"dagster/partition": "8-northwind-docs"}) == [8]
    assert pipeline_ids_of(batch_tags([(3, 1), (17, 2)], trigger="scheduled")) == [3, 17]
    assert pipeline_ids_of({"dagster/partition": "not-a-pipeline"}) == []
    # Digits int() does not read (a partition added by hand in the UI) are no pipeline either, not a crash.
    assert pipeline_ids_of({"dagster/partition": "²"}) == []
    assert origin_of({"webhook_delivery_id": "12"}).delivery_id == 12 and origin_of({}).event_id is None
    assert batch_run_key(["b", "a"]) == batch_run_key(["a", "b"]) != batch_run_key(["a"])


def test_a_partition_key_is_the_id_and_the_name_as_a_slug():
    from pipelines_dagster.app_db.models import SLUG_LENGTH, partition_key

    assert partition_key(17, "Northwind docs") == "17-northwind-docs"
    assert partition_key(8, "Northwind docs (port 8800)") == "8-northwind-docs-port-8800"
    # Accents fold to ASCII; what is left of no letter or digit leaves the bare id.
    assert partition_key(3, "Café  Größe — naïve") == "3-cafe-groe-naive"
    assert partition_key(5, "*** ???") == "5"
    long = partition_key(9, "word " * 60)
    assert long.startswith("9-word-") and len(long) <= len("9-") + SLUG_LENGTH and not long.endswith("-")


def test_a_partition_key_turns_back_into_its_pipeline_and_a_foreign_key_is_named():
    from pipelines_dagster.app_db.models import partition_key
    from pipelines_dagster.runs import PartitionKeyError, pipeline_id_of_partition

    assert pipeline_id_of_partition(partition_key(42, "Support FAQ")) == 42
    # A pipeline made before keys carried names keeps its bare id.
    assert pipeline_id_of_partition("42") == 42
    for foreign in ("not-a-pipeline", "", "-3", "4.0", "²", "7-Docs", "7 docs", "7-docs/x"):
        with pytest.raises(PartitionKeyError, match="is not a pipeline"):
            pipeline_id_of_partition(foreign)


def test_the_contract_names_what_the_definitions_define():
    """The read side finds runs, ops and assets by these names alone: each is what the code location defines."""
    from pipelines_dagster.definitions import defs
    from pipelines_dagster.runs import PIPELINE_ASSETS, PIPELINE_BATCH_JOB, PIPELINE_BATCH_OP, PIPELINE_RUN_JOB

    batch = defs.resolve_job_def(PIPELINE_BATCH_JOB)
    assert batch.graph.node_names() == [PIPELINE_BATCH_OP]
    pipeline_run = defs.resolve_job_def(PIPELINE_RUN_JOB)
    assert {key.to_user_string() for key in pipeline_run.asset_layer.executable_asset_keys} == set(PIPELINE_ASSETS)


def loaded_by(module: str) -> list[str]:
    """The modules a fresh interpreter has loaded once it imported `module`."""
    script = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    return json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, check=True).stdout)


WRITE_SIDE = (
    "pipelines_dagster.assets",
    "pipelines_dagster.batch",
    "pipelines_dagster.jobs",
    "pipelines_dagster.sensors",
)


def test_the_contract_loads_no_dagster_for_the_cli_and_the_domain_core():
    loaded = loaded_by("pipelines_dagster.runs")
    assert not [name for name in loaded if name.partition(".")[0] == "dagster" or name.startswith(WRITE_SIDE)]


def test_the_read_side_reads_runs_through_the_contract_not_the_steps_modules():
    writers = [name for name in loaded_by("pipelines_dagster.history") if name.startswith(WRITE_SIDE)]
    assert not writers, f"importing history loaded {writers}"
