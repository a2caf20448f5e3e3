"""The run contract: the tags every pipeline run carries."""

from __future__ import annotations

import pytest

from pipelines_dagster.runs import run_tags


def test_an_unknown_trigger_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown trigger 'cron'; use one of manual, scheduled"):
        run_tags(pipeline_id=1, workspace_id=1, trigger="cron")
