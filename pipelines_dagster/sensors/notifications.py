"""Notifications from Dagster: run-status sensors queue run.succeeded / failed / canceled for each
pipeline of a run that ended, and the sender sensor posts what is due (notifications/sender.py)."""

import dagster as dg

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.history import PipelineRunView, RunHistory
from pipelines_dagster.notifications.events import queue_run_ended
from pipelines_dagster.notifications.payloads import RUN_EVENTS, CrawlCounts, DocumentCounts, RunEventData
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.notifications import NotificationsResource
from pipelines_dagster.sensors.run_status import tick_spent

# Dagster's tag on a failed run it is about to retry (its process died).
WILL_RETRY_TAG = "dagster/will_retry"
# A sender tick stops taking new batches after this long, inside the daemon's 60 s sensor timeout.
SEND_SECONDS = 40.0


def run_event(view: PipelineRunView, *, will_retry: bool) -> RunEventData:
    """A run history entry as the payload of its run.* notification."""
    started, finished = view.started_at, view.finished_at
    return RunEventData(
        workspace_id=view.workspace_id,
        pipeline_id=view.pipeline_id,
        pipeline_name=view.pipeline_name,
        run_id=view.run_id,
        status=view.status,  # type: ignore[arg-type]  # only ended runs come here (RUN_EVENTS)
        trigger=view.trigger,
        started_at=started,
        finished_at=finished,
        duration_seconds=round((finished - started).total_seconds(), 3) if started and finished else None,
        crawls=CrawlCounts(
            attempted=view.crawls_attempted,
            succeeded=view.crawls_succeeded,
            empty=view.crawls_empty,
            failed=view.crawls_failed,
        ),
        documents=DocumentCounts(
            created=view.documents_created, updated=view.documents_updated, unchanged=view.documents_unchanged
        ),
        charged_micros=view.charged_micros,
        new_charge_micros=view.new_charge_micros,
        error=view.error,
        will_retry=will_retry and view.status == "failed",
        run_url=view.dagster_url,
    )


def queue_run_ends(
    run: dg.DagsterRun, instance: dg.DagsterInstance, *, app_db: AppDatabaseResource, dagster_url: str | None
) -> int:
    """Queue the run.* notifications of each pipeline of an ended run; how many deliveries."""
    history = RunHistory(instance, app_db.sessions, ui_base_url=dagster_url)
    will_retry = run.tags.get(WILL_RETRY_TAG) == "true"
    queued = 0
    for view in history.run_views(run.run_id):
        if view.status not in RUN_EVENTS:
            continue
        with transaction(app_db.sessions) as session:
            queued += len(queue_run_ended(session, run_event(view, will_retry=will_retry)))
    return queued


def _run_end_sensor(status: dg.DagsterRunStatus) -> dg.SensorDefinition:
    ended = status.value.lower()

    @dg.run_status_sensor(
        name=f"notify_{ended}_runs",
        run_status=status,
        # No monitored_jobs: every job of this code location (pipeline_run, pipeline_batch, asset jobs).
        minimum_interval_seconds=5,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Queues the run notifications of pipeline runs that ended {ended}, for the endpoints subscribed.",
    )
    def notify(
        context: dg.RunStatusSensorContext, app_db: AppDatabaseResource, notifications: NotificationsResource
    ) -> dg.SkipReason | None:
        run_id = context.dagster_run.run_id
        queued = queue_run_ends(
            context.dagster_run, context.instance, app_db=app_db, dagster_url=notifications.dagster_url
        )
        if queued:
            context.log.info(f"queued {queued} notifications of run {run_id}")
        return tick_spent(app_db, run_id)

    return notify


run_end_sensors = [
    _run_end_sensor(dg.DagsterRunStatus.SUCCESS),
    _run_end_sensor(dg.DagsterRunStatus.FAILURE),
    _run_end_sensor(dg.DagsterRunStatus.CANCELED),
]


@dg.sensor(
    name="notification_sender",
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Posts the notification deliveries that are due, signed, retrying failures on a schedule of a day.",
)
def notification_sender(context: dg.SensorEvaluationContext, notifications: NotificationsResource) -> dg.SkipReason:
    report = notifications.sender().send_due(max_seconds=SEND_SECONDS)
    if report.disabled_endpoints:
        context.log.warning(f"disabled notification endpoints {report.disabled_endpoints}: failing for days")
    # A sensor that starts no run says what its tick did in the UI's tick history.
    return dg.SkipReason(str(report) if report.sent else "no notification due")
