"""The sender against a real receiver: signatures a Standard Webhooks receiver verifies, retries on the
schedule, redrive, secret rotation, the destination guard at send, redirects, timeouts, disabling an
endpoint that fails for days, and a sender killed mid-batch."""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker
from standardwebhooks.webhooks import WebhookVerificationError

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import NotificationDelivery, NotificationEndpoint
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.security.network_policy import NetworkPolicy
from pipelines_dagster.notifications.destination import DestinationGuard
from pipelines_dagster.notifications.endpoints import (
    EndpointDisabledError,
    create_endpoint,
    delivery_attempts,
    queue_test,
    redrive,
    rotate_endpoint_secret,
    set_endpoint_enabled,
)
from pipelines_dagster.notifications.events import queue_run_ended
from pipelines_dagster.notifications.payloads import CrawlCounts, DocumentCounts, RunEventData
from pipelines_dagster.notifications.sender import LEASE, MAX_ATTEMPTS, RETRY_DELAYS, Sender
from tests.notifications.conftest import HOOK, Clock, endpoint, posts, sender, signed_by, verified
from tests.support.web import Reply, StaticResolver


def run_succeeded(workspace_id: int, run_id: str, *, pipeline_id: int = 1) -> RunEventData:
    return RunEventData(
        workspace_id=workspace_id,
        pipeline_id=pipeline_id,
        pipeline_name="Docs",
        run_id=run_id,
        status="succeeded",
        trigger="manual",
        started_at=None,
        finished_at=None,
        duration_seconds=None,
        crawls=CrawlCounts(attempted=2, succeeded=2, empty=0, failed=0),
        documents=DocumentCounts(created=2, updated=0, unchanged=0),
        charged_micros=2000,
        new_charge_micros=2000,
        error=None,
        will_retry=False,
        run_url=None,
    )


def queue_runs(sessions: sessionmaker[Session], workspace_id: int, count: int, clock: Clock) -> list[int]:
    with transaction(sessions) as session:
        return [
            delivery_id
            for number in range(count)
            for delivery_id in queue_run_ended(session, run_succeeded(workspace_id, f"run-{number}"), now=clock.now)
        ]


def delivery(sessions: sessionmaker[Session], delivery_id: int) -> NotificationDelivery:
    with sessions() as session:
        found = session.get(NotificationDelivery, delivery_id)
        assert found is not None
        return found


def test_a_delivery_is_signed_as_standard_webhooks_and_logged(sessions, workspace, receiver, clock):
    created = endpoint(sessions, workspace, receiver.url(HOOK))
    [delivery_id] = queue_runs(sessions, workspace, 1, clock)

    report = sender(sessions, clock).send_due()

    assert (report.sent, report.succeeded) == (1, 1)
    [request] = posts(receiver)
    message = verified(request, created.secret)
    assert message["type"] == "run.succeeded"
    assert message["data"]["run_id"] == "run-0" and message["data"]["charged_micros"] == 2000
    assert request.headers["content-type"] == "application/json"
    sent = delivery(sessions, delivery_id)
    assert (sent.status, sent.attempts, sent.last_status_code) == ("succeeded", 1, 204)
    assert request.headers["webhook-id"] == sent.message_id
    with sessions() as session:
        [attempt] = delivery_attempts(session, delivery_id)
    assert (attempt.status_code, attempt.succeeded, attempt.error) == (204, True, None)
    # Nothing is sent twice: the next pass finds nothing due.
    assert sender(sessions, clock).send_due().sent == 0


def test_another_secret_does_not_verify(sessions, workspace, receiver, clock):
    endpoint(sessions, workspace, receiver.url(HOOK))
    other = endpoint(sessions, workspace, receiver.url("/other"), events=["run.canceled"])
    queue_runs(sessions, workspace, 1, clock)
    sender(sessions, clock).send_due()
    [request] = posts(receiver)
    with pytest.raises(WebhookVerificationError):
        verified(request, other.secret)


def test_a_receiver_down_for_three_attempts_then_up_gets_the_delivery_with_every_attempt_logged(
    sessions, workspace, receiver, clock
):
    created = endpoint(sessions, workspace, receiver.url(HOOK))
    down = Reply(status=503, body="maintenance", content_type="text/plain")
    receiver.route(HOOK, down, down, down, Reply(status=200, body="ok", content_type="text/plain"))
    [delivery_id] = queue_runs(sessions, workspace, 1, clock)
    send = sender(sessions, clock)

    for delay in RETRY_DELAYS[:3]:
        assert send.send_due().retrying == 1
        # Not due again until its delay has passed.
        clock.advance(delay - timedelta(seconds=1))
        assert send.send_due().sent == 0
        clock.advance(timedelta(seconds=1))
    assert send.send_due().succeeded == 1

    requests = posts(receiver)
    assert len(requests) == 4
    assert len({request.headers["webhook-id"] for request in requests}) == 1
    assert len({request.body for request in requests}) == 1
    verified(requests[0], created.secret)
    assert all(signed_by(request, created.secret) for request in requests)
    with sessions() as session:
        attempts = delivery_attempts(session, delivery_id)
    assert [(a.status_code, a.succeeded) for a in attempts] == [(503, False)] * 3 + [(200, True)]
    assert attempts[0].error == "HTTP 503"
    assert delivery(sessions, delivery_id).status == "succeeded"


def test_out_of_attempts_it_fails_and_a_redrive_resends_it_under_the_same_webhook_id(
    sessions, workspace, receiver, clock
):
    created = endpoint(sessions, workspace, receiver.url(HOOK))
    receiver.route(HOOK, *[Reply(status=500, content_type=None)] * MAX_ATTEMPTS, Reply(status=204, content_type=None))
    [delivery_id] = queue_runs(sessions, workspace, 1, clock)
    send = sender(sessions, clock)
    for delay in (*RETRY_DELAYS, None):
        send.send_due()
        if delay is not None:
            clock.advance(delay)
    failed = delivery(sessions, delivery_id)
    assert (failed.status, failed.attempts, failed.next_attempt_at) == ("failed", MAX_ATTEMPTS, None)
    # About a day of trying, then it stops.
    assert sum(RETRY_DELAYS, timedelta()) > timedelta(hours=24)
    clock.advance(timedelta(days=2))
    assert send.send_due().sent == 0

    with transaction(sessions) as session:
        assert redrive(session, workspace_id=workspace, endpoint_id=created.endpoint.id, now=clock.now) == 1
    assert send.send_due().succeeded == 1
    requests = posts(receiver)
    assert len(requests) == MAX_ATTEMPTS + 1
    assert {request.headers["webhook-id"] for request in requests} == {failed.message_id}
    assert delivery(sessions, delivery_id).status == "succeeded"


def test_after_a_rotation_old_and_new_secret_verify_until_the_overlap_ends(sessions, workspace, receiver, clock):
    created = endpoint(sessions, workspace, receiver.url(HOOK))
    with transaction(sessions) as session:
        rotated = rotate_endpoint_secret(
            session, workspace_id=workspace, endpoint_id=created.endpoint.id, overlap_seconds=3600, now=clock.now
        )
    queue_runs(sessions, workspace, 1, clock)
    sender(sessions, clock).send_due()
    [inside] = posts(receiver)
    assert verified(inside, created.secret) == verified(inside, rotated.secret)
    assert len(inside.headers["webhook-signature"].split()) == 2

    clock.advance(timedelta(hours=1, seconds=1))
    with transaction(sessions) as session:
        queue_run_ended(session, run_succeeded(workspace, "after-the-overlap"), now=clock.now)
    # The receiver checks the timestamp against its own clock: this one is an hour ahead of it.
    sender(sessions, clock).send_due()
    after = posts(receiver)[-1]
    assert len(after.headers["webhook-signature"].split()) == 1
    assert signed_by(after, rotated.secret) and not signed_by(after, created.secret)


def test_only_a_2xx_answer_counts_and_a_redirect_is_not_followed(sessions, workspace, receiver, clock):
    endpoint(sessions, workspace, receiver.url(HOOK))
    receiver.route(HOOK, Reply(status=302, headers={"Location": "/elsewhere"}, content_type=None))
    receiver.route("/elsewhere", Reply(status=204, content_type=None))
    [delivery_id] = queue_runs(sessions, workspace, 1, clock)
    assert sender(sessions, clock).send_due().retrying == 1
    assert receiver.hits("/elsewhere") == 0
    last_error = delivery(sessions, delivery_id).last_error or ""
    assert last_error.startswith("HTTP 302 redirect to '/elsewhere' not followed")


def test_an_answer_later_than_the_timeout_is_a_failure(sessions, workspace, receiver, clock):
    endpoint(sessions, workspace, receiver.url(HOOK))
    receiver.route(HOOK, Reply(status=204, content_type=None, delay=2.0))
    [delivery_id] = queue_runs(sessions, workspace, 1, clock)
    assert sender(sessions, clock, timeout=0.3).send_due().retrying == 1
    assert delivery(sessions, delivery_id).last_error == "no answer within 0.3 s"


def test_a_private_address_is_refused_at_creation_and_after_a_dns_change_at_send(sessions, workspace, receiver, clock):
    host = "hooks.example.com"
    dns = StaticResolver({host: ["10.1.2.3"]})
    guard = DestinationGuard(NetworkPolicy(), resolver=dns)
    url = receiver.url(HOOK, host=host)
    with pytest.raises(InvalidInputError) as refused, transaction(sessions) as session:
        create_endpoint(session, guard, workspace_id=workspace, url=url, event_types=["run.succeeded"])
    assert refused.value.field == "url" and "private network" in refused.value.message
    for private in ("http://127.0.0.1/hook", "http://169.254.169.254/latest/meta-data/", "http://[::1]/"):
        with pytest.raises(InvalidInputError, match="blocked address"), transaction(sessions) as session:
            create_endpoint(session, guard, workspace_id=workspace, url=private, event_types=["run.succeeded"])
    with sessions() as session:
        assert session.scalar(sa.select(sa.func.count()).where(NotificationEndpoint.workspace_id == workspace)) == 0

    dns.answers[host] = ["93.184.216.34"]  # public when it is created ...
    with transaction(sessions) as session:
        create_endpoint(session, guard, workspace_id=workspace, url=url, event_types=["run.succeeded"])
    dns.answers[host] = ["127.0.0.1"]  # ... and loopback, where the receiver is, when it is sent to
    [delivery_id] = queue_runs(sessions, workspace, 1, clock)
    assert Sender(sessions, guard, clock=clock).send_due().retrying == 1
    assert receiver.requests == []
    error = delivery(sessions, delivery_id).last_error or ""
    assert error.startswith(f"destination refused: blocked address 127.0.0.1 for host '{host}': loopback")


def test_an_endpoint_failing_for_five_days_is_disabled_with_the_reason(sessions, workspace, receiver, clock):
    created = endpoint(sessions, workspace, receiver.url(HOOK))
    receiver.route(HOOK, Reply(status=500, content_type=None))
    send = sender(sessions, clock)
    ours = NotificationDelivery.workspace_id == workspace
    queue_runs(sessions, workspace, 1, clock)
    send.send_due()
    with sessions() as session:
        assert session.get(NotificationEndpoint, created.endpoint.id).failing_since == clock.now

    # A success in between ends the streak.
    receiver.route(HOOK, Reply(status=204, content_type=None))
    clock.advance(RETRY_DELAYS[0])
    send.send_due()
    with sessions() as session:
        assert session.get(NotificationEndpoint, created.endpoint.id).failing_since is None

    receiver.route(HOOK, Reply(status=500, content_type=None))
    started = clock.now
    with transaction(sessions) as session:
        queue_run_ended(session, run_succeeded(workspace, "day-0"), now=clock.now)
    send.send_due()
    clock.advance(timedelta(days=5))
    with transaction(sessions) as session:
        [waiting] = queue_run_ended(session, run_succeeded(workspace, "day-5"), now=clock.now)
    report = send.send_due()
    assert report.disabled_endpoints == [created.endpoint.id]
    with sessions() as session:
        disabled = session.get(NotificationEndpoint, created.endpoint.id)
        assert disabled.enabled is False
        assert disabled.disabled_reason == f"every delivery failed since {started:%Y-%m-%d %H:%M} UTC (last: HTTP 500)"
        statuses = set(session.scalars(sa.select(NotificationDelivery.status).where(ours)))
    assert statuses == {"succeeded", "failed"}
    assert delivery(sessions, waiting).last_error == f"endpoint disabled: {disabled.disabled_reason}"
    # A disabled endpoint is queued nothing.
    with transaction(sessions) as session:
        assert queue_run_ended(session, run_succeeded(workspace, "day-6"), now=clock.now) == []


KILLABLE_SENDER = """
import sys
from pipelines_dagster.app_db.engine import create_engine, session_factory
from pipelines_dagster.core.security.network_policy import NetworkPolicy
from pipelines_dagster.notifications.destination import DestinationGuard
from pipelines_dagster.notifications.sender import Sender

guard = DestinationGuard(NetworkPolicy(allowed_networks=("127.0.0.1/32",)))
Sender(session_factory(create_engine(sys.argv[1])), guard, concurrency=4, per_endpoint=4).send_due()
"""


def test_a_sender_killed_mid_batch_loses_nothing_and_resends_only_what_it_had_not_recorded(
    sessions, app_engine, workspace, receiver, clock
):
    endpoint(sessions, workspace, receiver.url(HOOK))
    receiver.route(HOOK, Reply(status=204, content_type=None, delay=0.1))
    queued = queue_runs(sessions, workspace, 200, clock)
    ours = NotificationDelivery.workspace_id == workspace
    url = app_engine.url.render_as_string(hide_password=False)
    process = subprocess.Popen([sys.executable, "-c", KILLABLE_SENDER, url])
    try:
        deadline = time.monotonic() + 60
        # Killed once it has recorded a batch of results and is in the middle of the next.
        while time.monotonic() < deadline and process.poll() is None:
            with sessions() as session:
                done = session.scalar(
                    sa.select(sa.func.count()).where(ours, NotificationDelivery.status == "succeeded")
                )
            if done and len(posts(receiver)) > done + 4:
                break
            time.sleep(0.05)
        assert process.poll() is None, "the sender finished before it could be killed mid-batch"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        process.kill()
    with sessions() as session:
        recorded = set(
            session.scalars(
                sa.select(NotificationDelivery.message_id).where(ours, NotificationDelivery.status == "succeeded")
            )
        )
    assert 0 < len(recorded) < len(queued)

    # Its claims hold until their lease runs out; then another sender takes them over.
    assert sender(sessions, clock).send_due().sent == 0
    # (This test's clock started before the killed sender took its leases on the real one.)
    clock.advance(LEASE + timedelta(minutes=1))
    sender(sessions, clock).send_due()

    received = collections.Counter(request.headers["webhook-id"] for request in posts(receiver))
    with sessions() as session:
        everyone = dict(
            session.execute(sa.select(NotificationDelivery.message_id, NotificationDelivery.status).where(ours)).all()
        )
    assert set(everyone.values()) == {"succeeded"} and set(received) == set(everyone)
    # Twice only what the killed sender had sent but not recorded, and then under the same webhook-id.
    assert {message_id for message_id, times in received.items() if times > 1} <= set(everyone) - recorded
    assert all(received[message_id] == 1 for message_id in recorded)


def test_a_test_message_is_sent_once_even_to_a_disabled_endpoint_and_says_nothing_of_its_health(
    sessions, workspace, receiver, clock
):
    created = endpoint(sessions, workspace, receiver.url(HOOK))
    receiver.route(HOOK, Reply(status=500, content_type=None))
    with transaction(sessions) as session:
        set_endpoint_enabled(session, workspace_id=workspace, endpoint_id=created.endpoint.id, enabled=False)
        delivery_id = queue_test(session, workspace_id=workspace, endpoint_id=created.endpoint.id)
    send = sender(sessions, clock)
    # The sensor's passes leave it to send_now.
    assert send.send_due().sent == 0
    [result] = send.send_now([delivery_id])
    assert (result.succeeded, result.status_code) == (False, 500)
    tested = delivery(sessions, delivery_id)
    assert (tested.status, tested.attempts) == ("failed", 1)
    clock.advance(timedelta(days=2))
    assert send.send_due().sent == 0 and len(posts(receiver)) == 1
    with sessions() as session:
        assert session.get(NotificationEndpoint, created.endpoint.id).failing_since is None
    # Nor is it redriven with the endpoint's failed deliveries: a test is sent by the test that made it.
    with transaction(sessions) as session:
        set_endpoint_enabled(session, workspace_id=workspace, endpoint_id=created.endpoint.id, enabled=True)
        assert redrive(session, workspace_id=workspace, endpoint_id=created.endpoint.id) == 0
    with transaction(sessions) as session, pytest.raises(EndpointDisabledError, match="enable it first"):
        set_endpoint_enabled(session, workspace_id=workspace, endpoint_id=created.endpoint.id, enabled=False)
        redrive(session, workspace_id=workspace, endpoint_id=created.endpoint.id)
