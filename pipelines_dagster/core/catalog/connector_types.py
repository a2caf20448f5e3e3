"""Which connector types may feed pipelines: the registry the pipeline rules are checked against.

A type is `available`, or `migrating` while a deploy moves it to a new implementation. Pipelines
over a migrating type are refused at creation and, because a pipeline outlives the deploy that
created it, again at run time: such a run fails cleanly, before any lock, crawl or charge.
"""

from __future__ import annotations

import enum

from pipelines_dagster.app_db.models import ConnectorType


class Availability(enum.StrEnum):
    AVAILABLE = "available"
    MIGRATING = "migrating"


PIPELINE_AVAILABILITY: dict[str, Availability] = {
    ConnectorType.WEBCRAWLER.value: Availability.AVAILABLE,
    ConnectorType.GOOGLE_DRIVE.value: Availability.AVAILABLE,
    ConnectorType.ONEDRIVE.value: Availability.AVAILABLE,
    ConnectorType.DROPBOX.value: Availability.AVAILABLE,
}


def availability(connector_type: str) -> Availability | None:
    """The type's availability for pipelines; None for a type this deploy does not know."""
    return PIPELINE_AVAILABILITY.get(connector_type)


def is_pipeline_eligible(connector_type: str) -> bool:
    return availability(connector_type) is Availability.AVAILABLE


def ineligible_reason(connector_type: str) -> str:
    state = availability(connector_type)
    what = "is unknown to this deploy" if state is None else f"is {state.value}"
    return f"connector type {connector_type} {what} and is not eligible for pipelines"
