"""Webhook deliveries in both signing modes (signature, replay, dedupe, rotation, size) and domain events."""

from __future__ import annotations

import base64
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.models import PipelineTrigger, WebhookBodyDigest, WebhookDelivery
from pipelines_dagster.core.catalog.event_types import EventType
from pipelines_dagster.core.catalog.pipelines import create_pipeline
from pipelines_dagster.core.catalog.triggers import (
    NewWebhook,
    create_event_trigger,
    create_webhook_trigger,
    rotate_signing_secret,
)
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.errors import InvalidInputError, NotFoundError
from pipelines_dagster.core.security.signing import sign as sign_standard
from pipelines_dagster.core.security.tokens import hash_token
from pipelines_dagster.core.storage.retention import cutoff, prune_webhook_deliveries
from pipelines_dagster.core.triggers.events import emit_event
from pipelines_dagster.core.triggers.payloads import trigger_payload
from pipelines_dagster.core.triggers.webhooks import DeliveryRejected, accept_delivery, sign
from tests.support.webhooks import standard_headers

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def pipeline(sessions) -> tuple[int, int]:
    with transaction(sessions) as session:
        workspace = create_workspace(session, name="acme", owner_user_id="u").workspace
        made = create_pipeline(session, workspace_id=workspace.id, connector_id=None, name=f"p-{uuid.uuid4().hex[:6]}")
        return workspace.id, made.id


def make_webhook(sessions, pipeline, signing: str) -> NewWebhook:
    with transaction(sessions) as session:
        return create_webhook_trigger(session, workspace_id=pipeline[0], pipeline_id=pipeline[1], signing=signing)


@pytest.fixture
def webhook(sessions, pipeline) -> str:
    """A github-mode trigger's token, which is also its secret."""
    return make_webhook(sessions, pipeline, "github").token


@pytest.fixture
def standard(sessions, pipeline) -> NewWebhook:
    return make_webhook(sessions, pipeline, "standard")


def deliver(sessions, token: str, body: bytes, *, now: datetime = NOW, **headers: str):
    with transaction(sessions) as session:
        return accept_delivery(session, token=token, body=body, headers=headers, now=now)


def deliveries(sessions, token: str | None = None) -> int:
    """Stored deliveries, of the token's trigger when given (the PostgreSQL database is shared by tests)."""
    query = sa.select(sa.func.count()).select_from(WebhookDelivery)
    if token is not None:
        query = query.join(PipelineTrigger).where(PipelineTrigger.webhook_secret_hash == hash_token(token))
    with sessions() as session:
        return session.scalar(query)


def rejected_status(sessions, token: str, body: bytes, *, now: datetime = NOW, **headers: str) -> int:
    before = deliveries(sessions)
    with pytest.raises(DeliveryRejected) as rejected:
        deliver(sessions, token, body, now=now, **headers)
    assert deliveries(sessions) == before, "a refused delivery must store nothing"
    return rejected.value.status


def test_only_the_token_hash_is_stored(sessions, webhook):
    with sessions() as session:
        hashes = session.scalars(
            sa.select(PipelineTrigger.webhook_secret_hash).where(PipelineTrigger.kind == "webhook")
        ).all()
    assert webhook not in hashes and hash_token(webhook) in hashes


def test_new_webhook_triggers_sign_in_standard_mode_with_a_secret_that_is_not_the_token(sessions, pipeline):
    with transaction(sessions) as session:
        made = create_webhook_trigger(session, workspace_id=pipeline[0], pipeline_id=pipeline[1])
        assert made.trigger.signing == "standard"
    assert made.secret.startswith("whsec_") and made.token not in made.secret
    assert len(base64.b64decode(made.secret.removeprefix("whsec_"))) == 32


def test_our_standard_signature_matches_the_spec(standard):
    body = b'{"a": 1}'
    expected = standard_headers(standard.secret, body, webhook_id="msg_x", at=NOW)["webhook-signature"]
    assert sign_standard(body, standard.secret, message_id="msg_x", timestamp=int(NOW.timestamp())) == expected


def test_a_standard_delivery_is_stored_once_per_webhook_id(sessions, standard):
    body = b'{"ref": "main"}'
    headers = standard_headers(standard.secret, body, at=NOW)
    first = deliver(sessions, standard.token, body, **headers)
    assert not first.duplicate
    with sessions() as session:
        assert trigger_payload(session, delivery_id=first.delivery_id) == {"ref": "main"}
    again = deliver(sessions, standard.token, body, now=NOW + timedelta(seconds=60), **headers)
    assert again.duplicate and again.delivery_id == first.delivery_id and deliveries(sessions, standard.token) == 1
    # The same payload under a new id, signed for it, is a new delivery: senders may repeat payloads.
    assert not deliver(
        sessions, standard.token, body, **standard_headers(standard.secret, body, webhook_id="msg_2", at=NOW)
    ).duplicate


@pytest.mark.parametrize(
    "tamper",
    [
        "new webhook-id",
        "new timestamp",
        "no webhook-id",
        "no timestamp",
        "no signature",
        "signed with the token",
        "v2 signature",
        "not base64",
    ],
)
def test_a_replayed_standard_delivery_with_any_header_changed_or_removed_is_401(sessions, standard, tamper):
    body = b'{"ref": "main"}'
    captured = standard_headers(standard.secret, body, at=NOW)
    deliver(sessions, standard.token, body, **captured)
    headers = dict(captured)
    if tamper == "new webhook-id":
        headers["webhook-id"] = "msg_other"
    elif tamper == "new timestamp":
        headers["webhook-timestamp"] = str(int(NOW.timestamp()) + 1)
    elif tamper.startswith("no "):
        del headers[
            {"no webhook-id": "webhook-id", "no timestamp": "webhook-timestamp", "no signature": "webhook-signature"}[
                tamper
            ]
        ]
    elif tamper == "signed with the token":
        token_key = base64.b64encode(standard.token.encode()).decode()
        headers = standard_headers("whsec_" + token_key, body, webhook_id="msg_new", at=NOW)
    elif tamper == "v2 signature":
        headers["webhook-signature"] = headers["webhook-signature"].replace("v1,", "v2,")
    else:
        headers["webhook-signature"] = "v1,@@@"
    assert rejected_status(sessions, standard.token, body, **headers) == 401


@pytest.mark.parametrize("offset", [-301, 301, -3600])
def test_a_standard_delivery_signed_more_than_five_minutes_off_is_401(sessions, standard, offset):
    body = b"{}"
    headers = standard_headers(standard.secret, body, at=NOW + timedelta(seconds=offset))
    assert rejected_status(sessions, standard.token, body, **headers) == 401
    # Within the window the same kind of delivery is accepted.
    inside = standard_headers(standard.secret, body, webhook_id="msg_ok", at=NOW + timedelta(seconds=offset // 2 % 299))
    assert not deliver(sessions, standard.token, body, **inside).duplicate


def test_several_signatures_in_one_header_verify_if_one_matches(sessions, standard):
    body = b"{}"
    headers = standard_headers(standard.secret, body, at=NOW)
    headers["webhook-signature"] = "v1,AAAA " + headers["webhook-signature"]
    assert not deliver(sessions, standard.token, body, **headers).duplicate


def test_rotation_verifies_old_and_new_inside_the_window_and_only_new_after(sessions, pipeline, standard):
    old = standard.secret
    with transaction(sessions) as session:
        rotated = rotate_signing_secret(
            session,
            workspace_id=pipeline[0],
            pipeline_id=pipeline[1],
            trigger_id=standard.trigger.id,
            overlap_seconds=3600,
            now=NOW,
        )
    new = rotated.secret
    assert new != old and new.startswith("whsec_") and rotated.previous_expires_at == NOW + timedelta(hours=1)
    inside = NOW + timedelta(minutes=59)
    for n, secret in enumerate((old, new)):
        body = f'{{"n": {n}}}'.encode()
        headers = standard_headers(secret, body, webhook_id=f"in-{n}", at=inside)
        assert not deliver(sessions, standard.token, body, now=inside, **headers).duplicate
    after = NOW + timedelta(hours=1, seconds=1)
    body = b'{"late": true}'
    assert (
        rejected_status(
            sessions, standard.token, body, now=after, **standard_headers(old, body, webhook_id="late-old", at=after)
        )
        == 401
    )
    assert not deliver(
        sessions, standard.token, body, now=after, **standard_headers(new, body, webhook_id="late-new", at=after)
    ).duplicate


def test_a_second_rotation_keeps_no_secret_past_its_first_expiry(sessions, pipeline, standard):
    def rotate(overlap: int, at: datetime) -> str:
        with transaction(sessions) as session:
            return rotate_signing_secret(
                session,
                workspace_id=pipeline[0],
                pipeline_id=pipeline[1],
                trigger_id=standard.trigger.id,
                overlap_seconds=overlap,
                now=at,
            ).secret

    second = rotate(600, NOW)
    third = rotate(0, NOW + timedelta(minutes=1))
    later = NOW + timedelta(minutes=2)
    body = b"{}"
    for secret in (standard.secret, second):
        assert (
            rejected_status(sessions, standard.token, body, now=later, **standard_headers(secret, body, at=later))
            == 401
        )
    assert not deliver(sessions, standard.token, body, now=later, **standard_headers(third, body, at=later)).duplicate


def test_rotation_is_refused_for_github_mode_and_bad_overlaps(sessions, pipeline, webhook):
    with sessions() as session:
        webhook_of_pipeline = PipelineTrigger.pipeline_id == pipeline[1], PipelineTrigger.kind == "webhook"
        trigger_id = session.scalar(sa.select(PipelineTrigger.id).where(*webhook_of_pipeline))
    for overlap, field in ((3600, "signing"), (-1, "overlap_seconds"), (8 * 24 * 3600, "overlap_seconds")):
        with pytest.raises(InvalidInputError) as refused, transaction(sessions) as session:
            rotate_signing_secret(
                session,
                workspace_id=pipeline[0],
                pipeline_id=pipeline[1],
                trigger_id=trigger_id,
                overlap_seconds=overlap,
            )
        assert refused.value.field == field
    with sessions() as session:
        assert session.get(PipelineTrigger, trigger_id).signing_secrets is None


def test_an_unknown_signing_mode_is_refused_and_nothing_is_written(sessions, pipeline):
    with pytest.raises(InvalidInputError) as refused, transaction(sessions) as session:
        create_webhook_trigger(session, workspace_id=pipeline[0], pipeline_id=pipeline[1], signing="svix")
    assert refused.value.field == "signing" and "standard, github" in refused.value.message
    with sessions() as session:
        kinds = session.scalars(sa.select(PipelineTrigger.kind).where(PipelineTrigger.pipeline_id == pipeline[1]))
        assert kinds.all() == ["manual"]


def test_a_signed_github_delivery_is_stored_with_its_payload(sessions, webhook):
    body = b'{"ref": "main"}'
    accepted = deliver(sessions, webhook, body, **{"X-Hub-Signature-256": sign(body, webhook), "X-Delivery-Id": "d-1"})
    assert not accepted.duplicate
    with sessions() as session:
        assert trigger_payload(session, delivery_id=accepted.delivery_id) == {"ref": "main"}


@pytest.mark.parametrize("signature", [None, "sha256=" + "0" * 64, "sha1=abc", "garbage"])
def test_a_missing_or_wrong_github_signature_is_401_and_stores_nothing(sessions, webhook, signature):
    headers = {"X-Hub-Signature-256": signature} if signature else {}
    assert rejected_status(sessions, webhook, b"{}", **headers) == 401


def test_an_unknown_token_is_401(sessions, webhook):
    other = "whk_" + "x" * 43
    assert rejected_status(sessions, other, b"{}", **{"X-Hub-Signature-256": sign(b"{}", other)}) == 401


@pytest.mark.parametrize(
    "resend",
    [
        {"X-GitHub-Delivery": "abc-124"},
        {"X-Delivery-Id": "new"},
        {"X-Request-Id": "r-2"},
        {},
        {"X-Webhook-Timestamp": str(int(NOW.timestamp()) + 60)},
    ],
)
def test_a_github_body_already_accepted_is_a_replay_whatever_the_unsigned_headers(sessions, webhook, resend):
    body = b'{"n": 1}'
    signature = {"X-Hub-Signature-256": sign(body, webhook)}
    first = deliver(sessions, webhook, body, **signature, **{"X-GitHub-Delivery": "abc-123"})
    again = deliver(sessions, webhook, body, **signature, **resend)
    assert again.duplicate and again.delivery_id == first.delivery_id and deliveries(sessions, webhook) == 1
    other = b'{"n": 2}'
    assert not deliver(sessions, webhook, other, **{"X-Hub-Signature-256": sign(other, webhook)}).duplicate


def test_a_stale_github_timestamp_is_401(sessions, webhook):
    body = b"{}"
    stale = str(int((NOW - timedelta(seconds=301)).timestamp()))
    fresh = str(int((NOW - timedelta(seconds=30)).timestamp()))
    signature = sign(body, webhook)
    assert (
        rejected_status(sessions, webhook, body, **{"X-Hub-Signature-256": signature, "X-Webhook-Timestamp": stale})
        == 401
    )
    deliver(sessions, webhook, body, **{"X-Hub-Signature-256": signature, "X-Webhook-Timestamp": fresh})


def digests(sessions, trigger_id: int) -> int:
    with sessions() as session:
        query = sa.select(sa.func.count()).select_from(WebhookBodyDigest)
        return session.scalar(query.where(WebhookBodyDigest.trigger_id == trigger_id))


def prune_past_retention(sessions, *, days_later: int = 31) -> None:
    """Retention as the daily maintenance runs it, with the clock `days_later` days past NOW."""
    prune_webhook_deliveries(sessions, older_than=cutoff(NOW + timedelta(days=days_later), 30))


def test_a_github_body_is_a_replay_after_retention_pruned_its_delivery(sessions, webhook):
    body = b'{"ref": "main", "after": "9f2c"}'
    captured = {"X-Hub-Signature-256": sign(body, webhook), "X-GitHub-Delivery": "abc-123"}
    first = deliver(sessions, webhook, body, **captured)
    prune_past_retention(sessions)
    assert deliveries(sessions, webhook) == 0, "retention keeps the body: the test proves nothing"
    later = NOW + timedelta(days=31)
    again = deliver(sessions, webhook, body, now=later, **captured)
    assert again.duplicate and again.delivery_id == first.delivery_id and deliveries(sessions, webhook) == 0
    other = b'{"ref": "main", "after": "a71e"}'
    assert not deliver(sessions, webhook, other, now=later, **{"X-Hub-Signature-256": sign(other, webhook)}).duplicate


def test_standard_mode_keeps_no_digest(sessions, standard):
    body = b'{"ref": "main"}'
    deliver(sessions, standard.token, body, **standard_headers(standard.secret, body, at=NOW))
    assert digests(sessions, standard.trigger.id) == 0


@pytest.mark.parametrize("pruned", [False, True], ids=["fresh", "after-retention"])
def test_identical_github_deliveries_at_once_accept_exactly_one(app_engine, pipeline, pruned):
    sessions = session_factory(app_engine)
    token = make_webhook(sessions, pipeline, "github").token
    body = b'{"ref": "main", "after": "5d0b"}'
    headers = {"X-Hub-Signature-256": sign(body, token)}
    if pruned:
        first = deliver(sessions, token, body, **headers)
        prune_past_retention(sessions)
    barrier = threading.Barrier(8)
    answers = []

    def worker() -> None:
        own = session_factory(app_engine)
        barrier.wait()
        answers.append(deliver(own, token, body, now=NOW + timedelta(days=31 if pruned else 0), **headers))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 8
    assert [answer.duplicate for answer in answers].count(False) == (0 if pruned else 1)
    assert len({answer.delivery_id for answer in answers}) == 1
    if pruned:
        assert answers[0].delivery_id == first.delivery_id
    assert deliveries(sessions, token) == (0 if pruned else 1)


def test_a_deleted_github_trigger_takes_its_digests_with_it(sessions, pipeline, webhook):
    body = b"{}"
    deliver(sessions, webhook, body, **{"X-Hub-Signature-256": sign(body, webhook)})
    with sessions() as session:
        trigger_id = session.scalars(
            sa.select(PipelineTrigger.id).where(PipelineTrigger.webhook_secret_hash == hash_token(webhook))
        ).one()
    assert digests(sessions, trigger_id) == 1
    with transaction(sessions) as session:
        session.execute(sa.delete(PipelineTrigger).where(PipelineTrigger.id == trigger_id))
    assert digests(sessions, trigger_id) == 0


@pytest.mark.parametrize("signing", ["github", "standard"])
def test_a_body_over_one_mib_is_413(sessions, pipeline, signing):
    made = make_webhook(sessions, pipeline, signing)
    body = b"x" * (1024 * 1024 + 1)
    headers = (
        standard_headers(made.secret, body, at=NOW)
        if signing == "standard"
        else {"X-Hub-Signature-256": sign(body, made.secret)}
    )
    assert rejected_status(sessions, made.token, body, **headers) == 413


def test_a_pipeline_has_one_webhook_trigger(sessions, pipeline, webhook):
    with pytest.raises(InvalidInputError, match="already has a webhook trigger"), transaction(sessions) as session:
        create_webhook_trigger(session, workspace_id=pipeline[0], pipeline_id=pipeline[1])


def test_event_triggers_accept_only_documented_types(sessions, pipeline):
    with transaction(sessions) as session:
        trigger = create_event_trigger(
            session, workspace_id=pipeline[0], pipeline_id=pipeline[1], event_type="refresh.requested"
        )
        assert trigger.event_type == EventType.REFRESH_REQUESTED
    with (
        pytest.raises(InvalidInputError, match=r"unknown event type 'page\.updated'; use one of"),
        transaction(sessions) as session,
    ):
        create_event_trigger(session, workspace_id=pipeline[0], pipeline_id=pipeline[1], event_type="page.updated")
    with (
        pytest.raises(InvalidInputError, match=r"already has an event trigger for refresh\.requested"),
        transaction(sessions) as session,
    ):
        create_event_trigger(session, workspace_id=pipeline[0], pipeline_id=pipeline[1], event_type="refresh.requested")


def test_another_workspaces_pipeline_cannot_be_subscribed(sessions, pipeline):
    with transaction(sessions) as session:
        other = create_workspace(session, name="other", owner_user_id="v").workspace.id
    with pytest.raises(NotFoundError), transaction(sessions) as session:
        create_event_trigger(session, workspace_id=other, pipeline_id=pipeline[1], event_type="folder.changed")


def test_emit_event_validates_type_workspace_and_ids(sessions, pipeline):
    with transaction(sessions) as session:
        event = emit_event(session, workspace_id=pipeline[0], event_type="document.uploaded", payload={"name": "a.pdf"})
        assert trigger_payload(session, event_id=event.id) == {"name": "a.pdf"}
    with pytest.raises(InvalidInputError, match="unknown event type"), transaction(sessions) as session:
        emit_event(session, workspace_id=pipeline[0], event_type="nope")
    with pytest.raises(InvalidInputError, match=r"payload\.connector_id"), transaction(sessions) as session:
        emit_event(
            session, workspace_id=pipeline[0], event_type="connector.urls_changed", payload={"connector_id": "7"}
        )
    with pytest.raises(NotFoundError), transaction(sessions) as session:
        emit_event(session, workspace_id=10**9, event_type="refresh.requested")
