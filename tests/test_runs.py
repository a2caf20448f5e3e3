"""The run contract: a run launched from the Dagster UI is given the tags our own launchers set."""

from __future__ import annotations

import pytest

from pipelines_dagster.runs import missing_run_tags, run_tags


def test_a_ui_launch_with_only_its_partition_gets_every_contract_tag_as_a_manual_run():
    assert missing_run_tags({"dagster/partition": "7"}, pipeline_id=7, workspace_id=3) == {
        "pipeline_id": "7", "workspace_id": "3", "trigger": "manual"}


def test_a_backfill_run_is_a_manual_launch_whose_dagster_tags_say_it_is_a_backfill():
    tags = {"dagster/partition": "7", "dagster/backfill": "abc"}
    assert missing_run_tags(tags, pipeline_id=7, workspace_id=3)["trigger"] == "manual"


def test_tags_a_run_has_are_kept():
    # The pipeline_run launchpad sets the job's trigger tag; a re-execution copies its parent's tags.
    assert missing_run_tags({"trigger": "manual"}, pipeline_id=7, workspace_id=3) == {
        "pipeline_id": "7", "workspace_id": "3"}
    tagged = run_tags(pipeline_id=7, workspace_id=3, trigger="webhook")
    assert missing_run_tags(tagged, pipeline_id=7, workspace_id=3) == {}


def test_an_unknown_trigger_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown trigger 'cron'; use one of manual, scheduled"):
        run_tags(pipeline_id=1, workspace_id=1, trigger="cron")
