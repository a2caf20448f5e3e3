"""The run contract: what a pipeline run says about itself, in one place.

Tag names, the triggers that start runs, the tags each kind of run carries, the run key of each
trigger kind, the pipeline(s) a run is for, the run statuses that make a pipeline busy, and the
names of the jobs, ops, assets and failure metadata a run writes. Every launcher and step writes
runs through these and every reader (history, sensors, the crawl step) reads them back through
them, so the read side never imports the write side. Plain Python: the domain core builds its
fires with it, and the CLI reads it without loading Dagster.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

CODE_LOCATION = "pipelines_dagster"
"""The code location's name in every deployment (workspace.yaml, pyproject's [tool.dagster] and [tool.dg])."""
REPOSITORY = "__repository__"
"""Its one repository, as Dagster names a Definitions object's."""
PIPELINE_RUN_JOB = "pipeline_run"
"""The job a pipeline's run is (jobs.py), by name: launches name it without loading the definitions."""
PIPELINE_BATCH_JOB = "pipeline_batch"
"""The job that runs many pipelines' scheduled fires in one run (batch.py)."""
PIPELINE_BATCH_OP = "run_pipelines"
"""The batch job's one op: its run config lists the batch's pipelines under this name."""

# The assets of a pipeline's partition (one-part asset keys), in the order its steps run.
CRAWL_RESULTS_ASSET = "crawl_results"
KB_DOCUMENTS_ASSET = "kb_documents"
PAGE_CHANGES_ASSET = "page_changes"
PIPELINE_ASSETS = (CRAWL_RESULTS_ASSET, KB_DOCUMENTS_ASSET, PAGE_CHANGES_ASSET)

# A step that fails inside another step (a batch run's member, a step that follows a crawl) is
# logged as an observation of its asset with this metadata: the failed asset, and the error.
FAILED_STEP_METADATA = "failed_step"
ERROR_METADATA = "error"


def partition_of(keys: Mapping[int, str], pipeline_id: int) -> str:
    """The pipeline's partition key in `keys` (read from the catalog); its bare id when `keys` lacks it: a pipeline
    made before keys carried names, or one deleted since (whose run its own step refuses)."""
    return keys.get(pipeline_id) or str(pipeline_id)


class PartitionKeyError(ValueError):
    """A partition key that is not a pipeline's."""


# A pipeline's partition key (app_db.models.Pipeline.partition): its id, then (for pipelines made since keys
# carry names) its name as a slug, `17-northwind-docs`.
_PARTITION_KEY = re.compile(r"([0-9]+)(?:-[a-z0-9-]*)?")


def _is_id(value: str) -> bool:
    # str.isdigit alone takes "²", which int() refuses.
    return value.isascii() and value.isdigit()


def pipeline_id_of_partition(key: str) -> int:
    """The pipeline whose partition `key` is: the id it starts with."""
    match = _PARTITION_KEY.fullmatch(key)
    if match is None:
        raise PartitionKeyError(
            f"partition {key!r} is not a pipeline's: a pipeline's partition key is its id and name "
            "(`17-northwind-docs`, or the bare id of an older pipeline); add partitions by creating pipelines, "
            "not by hand"
        )
    return int(match.group(1))


class Trigger(enum.StrEnum):
    """What started a run; the value of its `trigger` tag."""

    MANUAL = "manual"
    """The Dagster UI (asset page, asset graph, launchpad, backfill, re-execution), the CLI or the API."""
    SCHEDULED = "scheduled"
    WEBHOOK = "webhook"
    EVENT = "event"
    CONNECTOR = "connector"


def checked_trigger(trigger: str) -> Trigger:
    try:
        return Trigger(trigger)
    except ValueError:
        known = ", ".join(member.value for member in Trigger)
        raise ValueError(f"unknown trigger {trigger!r}; use one of {known}") from None


# A launch from the Dagster UI carries no trigger of its own; its Dagster tags say which kind it was.
UI_TRIGGER = Trigger.MANUAL

# Tags every pipeline run carries; the run queue limits on PIPELINE_TAG (and on PARTITION_TAG for UI launches).
PIPELINE_TAG = "pipeline_id"
WORKSPACE_TAG = "workspace_id"
TRIGGER_TAG = "trigger"
CONTRACT_TAGS = (PIPELINE_TAG, WORKSPACE_TAG, TRIGGER_TAG)
# The pipeline's name as it was when the run started, for the people reading the run list: never read back
# (a rename does not follow it; history reads the pipeline's name from the catalog).
PIPELINE_NAME_TAG = "pipeline_name"
# Dagster refuses longer tag values; a pipeline's name is at most 200 characters, so this is a guard.
MAX_TAG_VALUE = 255
# Dagster's own: the partition (the pipeline's partition key) of a partitioned run, and the backfill a run belongs to.
PARTITION_TAG = "dagster/partition"
BACKFILL_TAG = "dagster/backfill"
# What fired a run, beside its trigger.
WEBHOOK_DELIVERY_TAG = "webhook_delivery_id"
EVENT_ID_TAG = "event_id"
EVENT_TYPE_TAG = "event_type"
SCHEDULED_FOR_TAG = "scheduled_for"
# A batch run's summary of the pipelines it covers, shown on its run row.
PIPELINES_SUMMARY_TAG = "pipelines"

# A batch run carries a tag for each pipeline and workspace it covers, so the run history of either
# finds it by tag, as it finds a single run by its pipeline_id and workspace_id. They live under the
# prefix Dagster's UI hides (an index, not something to read on every run row); Dagster allows one
# namespace in a tag key, so the rest is dotted.
MEMBER = "member"
_MEMBER_PIPELINE_PREFIX = ".dagster/pipelines_dagster.pipeline."
_MEMBER_WORKSPACE_PREFIX = ".dagster/pipelines_dagster.workspace."
PIPELINES_SHOWN = 5

# Which run goes first. Dagster's run queue takes runs of a higher dagster/priority first (no tag: 0), and the
# Celery profile's launcher sends each run to its broker at the matching Celery priority: a run someone started
# and waits for goes ahead of one that fired by itself, and scheduled fires (hundreds due at the top of an hour)
# go last. A launch from the Dagster UI carries no tag, so it is a manual run's 0.
PRIORITY_TAG = "dagster/priority"
TRIGGER_PRIORITY = {
    Trigger.MANUAL: 0,
    Trigger.WEBHOOK: -1,
    Trigger.EVENT: -1,
    Trigger.CONNECTOR: -1,
    Trigger.SCHEDULED: -2,
}
# dagster-celery's tags (dagster_celery.tags): the Celery queue a run is sent to (none: the launcher's default
# queue) and its priority there.
CELERY_QUEUE_TAG = "dagster-celery/queue"
CELERY_PRIORITY_TAG = "dagster-celery/run_priority"
# Celery priorities run 0-9. RabbitMQ takes the highest first; Redis, the lowest. A priority level three apart
# from the next, as Redis keeps its queue in four steps (0, 3, 6, 9) and rounds a priority to one of them.
CELERY_TOP_PRIORITY = 9
CELERY_PRIORITY_STEP = 3

# Queued or running (Dagster run status names): a pipeline in one of these gets no second run from a trigger.
BUSY_STATUSES = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")


def run_tags(
    *, pipeline_id: int, workspace_id: int, trigger: str, pipeline_name: str | None = None, **extras: str
) -> dict[str, str]:
    """The tags of a run of one pipeline; `extras` are what fired it (see the *_tags functions)."""
    return {
        PIPELINE_TAG: str(pipeline_id),
        WORKSPACE_TAG: str(workspace_id),
        **trigger_tags(trigger),
        **({} if pipeline_name is None else name_tags(pipeline_name)),
        **extras,
    }


def trigger_tags(trigger: str) -> dict[str, str]:
    """What fired a run, and the place in the run queue that gives it."""
    checked = checked_trigger(trigger)
    return {TRIGGER_TAG: checked.value, PRIORITY_TAG: str(TRIGGER_PRIORITY[checked])}


def celery_routing(tags: Mapping[str, str], *, queue: str | None, lowest_first: bool) -> dict[str, str]:
    """The Celery tags a run lacks: the queue its pipelines' setting names (`queue`; None: the launcher's default)
    and its Celery priority, from its place in Dagster's queue (dagster/priority, or none for a UI launch: 0).
    `lowest_first`: the broker takes the lowest priority first (Redis), not the highest (RabbitMQ). A tag the run
    has is kept, so a run can be sent elsewhere by hand."""
    routing: dict[str, str] = {}
    if queue is not None and CELERY_QUEUE_TAG not in tags:
        routing[CELERY_QUEUE_TAG] = queue
    if CELERY_PRIORITY_TAG not in tags:
        try:
            place = int(tags.get(PRIORITY_TAG, "0"))
        except ValueError:
            place = 0
        urgency = min(CELERY_TOP_PRIORITY, max(0, CELERY_TOP_PRIORITY + CELERY_PRIORITY_STEP * place))
        routing[CELERY_PRIORITY_TAG] = str(CELERY_TOP_PRIORITY - urgency if lowest_first else urgency)
    return routing


def name_tags(pipeline_name: str) -> dict[str, str]:
    return {PIPELINE_NAME_TAG: pipeline_name[:MAX_TAG_VALUE]}


def named_pipelines(pipeline_ids: Iterable[int], names: Mapping[int, str]) -> str:
    """Pipelines as a run's tags and logs show them: "7 (Northwind docs), 8 (FAQ)", the first few, "and N more"."""
    ids = list(pipeline_ids)
    shown = ", ".join(
        f"{pipeline_id} ({names[pipeline_id]})" if pipeline_id in names else str(pipeline_id)
        for pipeline_id in ids[:PIPELINES_SHOWN]
    )
    more = len(ids) - PIPELINES_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def webhook_tags(delivery_id: int) -> dict[str, str]:
    return {WEBHOOK_DELIVERY_TAG: str(delivery_id)}


def event_tags(event_id: int, event_type: str) -> dict[str, str]:
    return {EVENT_ID_TAG: str(event_id), EVENT_TYPE_TAG: event_type}


def schedule_tags(scheduled_for: datetime) -> dict[str, str]:
    return {SCHEDULED_FOR_TAG: scheduled_for.isoformat()}


def missing_run_tags(
    tags: Mapping[str, str], *, pipeline_id: int, workspace_id: int, pipeline_name: str
) -> dict[str, str]:
    """The contract's tags (and the name) a run of the pipeline lacks: all of them for a launch from the
    Dagster UI, which carries only its partition; none for our own launchers. A tag the run has is kept."""
    contract = run_tags(
        pipeline_id=pipeline_id, workspace_id=workspace_id, trigger=UI_TRIGGER, pipeline_name=pipeline_name
    )
    return {key: value for key, value in contract.items() if key not in tags}


def member_pipeline_tag(pipeline_id: int) -> str:
    return f"{_MEMBER_PIPELINE_PREFIX}{pipeline_id}"


def member_workspace_tag(workspace_id: int) -> str:
    return f"{_MEMBER_WORKSPACE_PREFIX}{workspace_id}"


def batch_tags(members: Iterable[tuple[int, int]], *, trigger: str) -> dict[str, str]:
    """The tags of a batch run over (pipeline id, workspace id) pairs."""
    members = list(members)
    tags = {
        **trigger_tags(trigger),
        PIPELINES_SUMMARY_TAG: named_pipelines((pipeline_id for pipeline_id, _ in members), {}),
    }
    for pipeline_id, workspace_id in members:
        tags[member_pipeline_tag(pipeline_id)] = MEMBER
        tags[member_workspace_tag(workspace_id)] = MEMBER
    return tags


def with_names(tags: Mapping[str, str], names: Mapping[int, str]) -> dict[str, str]:
    """A run's tags with its pipelines' names (`names` by id): the name tag of a single pipeline's run, the
    summary of a batch run."""
    members = batch_pipeline_ids(tags)
    if members:
        return {**tags, PIPELINES_SUMMARY_TAG: named_pipelines(members, names)[:MAX_TAG_VALUE]}
    pipeline_id = pipeline_id_of(tags)
    name = names.get(pipeline_id) if pipeline_id is not None else None
    return {**tags, **name_tags(name)} if name is not None else dict(tags)


def batch_pipeline_ids(tags: Mapping[str, str]) -> list[int]:
    """The pipelines a batch run covers, from its tags."""
    return sorted(
        int(key.removeprefix(_MEMBER_PIPELINE_PREFIX))
        for key, value in tags.items()
        if key.startswith(_MEMBER_PIPELINE_PREFIX) and value == MEMBER and _is_id(key[len(_MEMBER_PIPELINE_PREFIX) :])
    )


def pipeline_id_of(tags: Mapping[str, str]) -> int | None:
    """The pipeline a single-pipeline run is for: its pipeline_id tag, or the partition of a UI launch or backfill."""
    value = tags.get(PIPELINE_TAG)
    if value:
        return int(value) if _is_id(value) else None
    try:
        return pipeline_id_of_partition(tags.get(PARTITION_TAG, ""))
    except PartitionKeyError:
        return None


def pipeline_ids_of(tags: Mapping[str, str]) -> list[int]:
    """Every pipeline a run is for: the members of a batch run, else the one of a single run."""
    members = batch_pipeline_ids(tags)
    if members:
        return members
    pipeline_id = pipeline_id_of(tags)
    return [] if pipeline_id is None else [pipeline_id]


@dataclass(frozen=True)
class Origin:
    """What fired a run, as ids: a webhook delivery, a domain event, or neither."""

    delivery_id: int | None = None
    event_id: int | None = None


def origin_of(tags: Mapping[str, str]) -> Origin:
    delivery, event = tags.get(WEBHOOK_DELIVERY_TAG, ""), tags.get(EVENT_ID_TAG, "")
    return Origin(
        delivery_id=int(delivery) if _is_id(delivery) else None, event_id=int(event) if _is_id(event) else None
    )


# Run keys: Dagster starts one run per key and sensor, so a fire requested twice runs once.
def schedule_run_key(trigger_id: int, scheduled_for: datetime) -> str:
    return f"schedule:{trigger_id}:{scheduled_for.isoformat()}"


def batch_run_key(member_run_keys: Iterable[str]) -> str:
    """One key for a batch of fires: the same fires always make the same key."""
    digest = hashlib.sha256("\n".join(sorted(member_run_keys)).encode()).hexdigest()[:24]
    return f"schedule-batch:{digest}"


def webhook_run_key(delivery_id: int) -> str:
    return f"webhook:{delivery_id}"


def event_run_key(event_id: int, trigger_id: int) -> str:
    return f"event:{event_id}:{trigger_id}"
