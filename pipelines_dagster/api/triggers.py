"""Webhook and event triggers of a pipeline, domain events of a workspace, and signed webhook deliveries."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.schemas.errors import ErrorResponse
from pipelines_dagster.api.schemas.events import EventIn, EventOut
from pipelines_dagster.api.schemas.triggers import (
    DeliveryOut,
    NewWebhookOut,
    RotatedOut,
    RotateIn,
    TriggerIn,
    TriggerList,
    TriggerOut,
)
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import TriggerKind, WebhookSigning
from pipelines_dagster.core.catalog.triggers import (
    create_event_trigger,
    create_manual_trigger,
    create_webhook_trigger,
    get_trigger,
    pipeline_triggers,
    rotate_signing_secret,
    set_trigger_enabled,
)
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.triggers.events import emit_event
from pipelines_dagster.core.triggers.webhooks import MAX_WEBHOOK_BODY_BYTES, DeliveryRejected, accept_delivery
from pipelines_dagster.core.validation import MAX_ID

router = APIRouter(prefix="/workspaces/{workspace_id}", tags=["triggers"])
webhooks = APIRouter(tags=["webhooks"])

PipelineId = Annotated[int, Path(ge=1, le=MAX_ID)]


@router.get("/pipelines/{pipeline_id}/triggers", response_model=TriggerList, responses=responses(401, 404, 422))
def list_triggers(workspace_id: WorkspaceId, pipeline_id: PipelineId, api: Api) -> TriggerList:
    """Every trigger of the pipeline: its schedule, webhooks and event subscriptions, on or off."""
    with api.sessions() as session:
        triggers = pipeline_triggers(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        return TriggerList(triggers=[TriggerOut.of(trigger) for trigger in triggers])


@router.get(
    "/pipelines/{pipeline_id}/triggers/{trigger_id}", response_model=TriggerOut, responses=responses(401, 404, 422)
)
def read_trigger(
    workspace_id: WorkspaceId, pipeline_id: PipelineId, trigger_id: Annotated[int, Path(ge=1, le=MAX_ID)], api: Api
) -> TriggerOut:
    """One trigger of the pipeline, as the list shows it."""
    with api.sessions() as session:
        return TriggerOut.of(
            get_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id)
        )


def _switch(workspace_id: int, pipeline_id: int, trigger_id: int, api: Api, *, enabled: bool) -> TriggerOut:
    with transaction(api.sessions) as session:
        trigger = set_trigger_enabled(
            session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id, enabled=enabled
        )
        return TriggerOut.of(trigger)


@router.post(
    "/pipelines/{pipeline_id}/triggers/{trigger_id}/enable",
    response_model=TriggerOut,
    responses=responses(401, 404, 409, 422),
)
def enable_trigger(
    workspace_id: WorkspaceId, pipeline_id: PipelineId, trigger_id: Annotated[int, Path(ge=1, le=MAX_ID)], api: Api
) -> TriggerOut:
    """Switch a trigger on; a schedule is due next at its next fire time from now. A trigger of a
    disabled pipeline fires into nothing until the pipeline is enabled."""
    return _switch(workspace_id, pipeline_id, trigger_id, api, enabled=True)


@router.post(
    "/pipelines/{pipeline_id}/triggers/{trigger_id}/disable",
    response_model=TriggerOut,
    responses=responses(401, 404, 409, 422),
)
def disable_trigger(
    workspace_id: WorkspaceId, pipeline_id: PipelineId, trigger_id: Annotated[int, Path(ge=1, le=MAX_ID)], api: Api
) -> TriggerOut:
    """Switch a trigger off: it fires no more until it is enabled again."""
    return _switch(workspace_id, pipeline_id, trigger_id, api, enabled=False)


@router.post(
    "/pipelines/{pipeline_id}/triggers",
    status_code=status.HTTP_201_CREATED,
    response_model=NewWebhookOut | TriggerOut,
    responses=responses(401, 404, 422),
)
def create_trigger(
    workspace_id: WorkspaceId, pipeline_id: PipelineId, body: TriggerIn, api: Api
) -> NewWebhookOut | TriggerOut:
    """Add a webhook trigger (its URL and secret are shown once), subscribe the pipeline to an event type,
    or give it the manual trigger it lacks."""
    with transaction(api.sessions) as session:
        if body.kind == TriggerKind.MANUAL.value:
            if body.event_type is not None or body.signing is not None:
                field = "event_type" if body.event_type is not None else "signing"
                raise InvalidInputError(field, "a manual trigger takes no event type or signing mode")
            return TriggerOut.of(create_manual_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id))
        if body.kind == TriggerKind.WEBHOOK.value:
            if body.event_type is not None:
                raise InvalidInputError("event_type", "only an event trigger takes an event type")
            made = create_webhook_trigger(
                session,
                workspace_id=workspace_id,
                pipeline_id=pipeline_id,
                signing=(body.signing or WebhookSigning.STANDARD).value,
            )
            return NewWebhookOut.of_new(made)
        if body.event_type is None:
            raise InvalidInputError("event_type", "an event trigger needs an event type")
        if body.signing is not None:
            raise InvalidInputError("signing", "only a webhook trigger has a signing mode")
        trigger = create_event_trigger(
            session, workspace_id=workspace_id, pipeline_id=pipeline_id, event_type=body.event_type.value
        )
        return TriggerOut.of(trigger)


@router.delete(
    "/pipelines/{pipeline_id}/triggers/{trigger_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(401, 404, 422),
)
def delete_trigger(
    workspace_id: WorkspaceId,
    pipeline_id: PipelineId,
    trigger_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    api: Api,
) -> Response:
    with transaction(api.sessions) as session:
        session.delete(get_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/pipelines/{pipeline_id}/triggers/{trigger_id}/rotate-secret",
    response_model=RotatedOut,
    responses=responses(401, 404, 422),
)
def rotate_trigger_secret(
    workspace_id: WorkspaceId,
    pipeline_id: PipelineId,
    trigger_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    api: Api,
    body: RotateIn | None = None,
) -> RotatedOut:
    """Give a standard-mode webhook trigger a new signing secret (shown once).

    The secrets it had keep verifying for `overlap_seconds` (default a day), so senders can switch
    over without a refused delivery; after that only the new one does.
    """
    with transaction(api.sessions) as session:
        rotated = rotate_signing_secret(
            session,
            workspace_id=workspace_id,
            pipeline_id=pipeline_id,
            trigger_id=trigger_id,
            overlap_seconds=(body or RotateIn()).overlap_seconds,
        )
        return RotatedOut.of_rotated(rotated)


@router.post(
    "/events", status_code=status.HTTP_202_ACCEPTED, response_model=EventOut, responses=responses(401, 404, 422)
)
def post_event(workspace_id: WorkspaceId, body: EventIn, api: Api) -> EventOut:
    """Record a domain event; pipelines subscribed to its type run on the event sensor's next tick."""
    with transaction(api.sessions) as session:
        event = emit_event(session, workspace_id=workspace_id, event_type=body.event_type.value, payload=body.payload)
        return EventOut(event_id=event.id, event_type=event.event_type)


async def _capped_body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_WEBHOOK_BODY_BYTES:
        raise DeliveryRejected(413, f"the body is larger than {MAX_WEBHOOK_BODY_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_WEBHOOK_BODY_BYTES:
            raise DeliveryRejected(413, f"the body is larger than {MAX_WEBHOOK_BODY_BYTES} bytes")
    return bytes(body)


@webhooks.post(
    "/webhooks/{token}",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=DeliveryOut,
    responses={
        200: {"model": DeliveryOut, "description": "A redelivery: accepted, no second run."},
        **{
            code: {"model": ErrorResponse, "description": text}
            for code, text in [
                (400, "A webhook-id longer than 190 characters, or a standard-mode body that is not UTF-8."),
                (401, "Unknown token; missing or wrong signature; a timestamp more than 300 s off."),
                (409, "The webhook trigger is disabled."),
                (413, "The body is larger than 1 MiB."),
            ]
        },
    },
    # The raw body is read here, capped, so the signature covers exactly the bytes sent.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def receive_webhook(
    token: Annotated[str, Path(min_length=1, max_length=200)],
    request: Request,
    api: Api,
) -> JSONResponse:
    """A signed delivery, in the trigger's signing mode.

    `standard` ([Standard Webhooks](https://www.standardwebhooks.com/)): `webhook-id`, `webhook-timestamp`
    (Unix seconds, within 300 s of the server's clock) and `webhook-signature: v1,<base64 HMAC-SHA256 of
    "{webhook-id}.{webhook-timestamp}.{body}" under the whsec_ secret>`. The webhook-id is the dedupe key:
    resending a delivery (a retry) answers 200 and starts no second run.

    `github`: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body under the URL token>`. Only the
    body is signed, so a body this trigger ever accepted is a replay, also after retention pruned its
    delivery: 200 with the first delivery's id, nothing stored, no run, whatever other headers say.
    """
    try:
        body = await _capped_body(request)

        def store() -> DeliveryOut:
            with transaction(api.sessions) as session:
                accepted = accept_delivery(session, token=token, body=body, headers=dict(request.headers))
                return DeliveryOut(delivery_id=accepted.delivery_id, duplicate=accepted.duplicate)

        delivery = await run_in_threadpool(store)
    except DeliveryRejected as rejected:
        return JSONResponse({"detail": str(rejected)}, status_code=rejected.status)
    code = status.HTTP_200_OK if delivery.duplicate else status.HTTP_202_ACCEPTED
    return JSONResponse(delivery.model_dump(), status_code=code)
