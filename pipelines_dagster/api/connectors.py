"""`/workspaces/{workspace_id}/connectors`: create, list, read, change and delete a workspace's connectors.

A web connector crawls a list of URLs, or discovers a site (`site`: start URLs, sitemaps and
same-site links within its bounds); `render` says which of its pages a headless browser renders, `auth` gives the
credentials of a site behind a login, which no route shows again, `user_agent` what its crawls call themselves and
`robots` whether they obey robots.txt. Each write is one transaction: input that fails any check, named by its
field, leaves nothing behind.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status
from sqlalchemy.orm import Session

from pipelines_dagster import services
from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.schemas.connectors import (
    ConnectorCreate,
    ConnectorList,
    ConnectorOut,
    ConnectorReplace,
    ConnectorUpdate,
)
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector
from pipelines_dagster.core.catalog import connectors
from pipelines_dagster.core.catalog.changes import KEEP, Keep
from pipelines_dagster.core.crawl.credentials import Credentials
from pipelines_dagster.core.crawl.site.config import SiteConfig, site_for
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.validation import MAX_ID

router = APIRouter(prefix="/workspaces/{workspace_id}/connectors", tags=["connectors"])

ConnectorId = Annotated[int, Path(ge=1, le=MAX_ID, description="A connector of the workspace.")]


def _site(body: ConnectorReplace, api: Api) -> SiteConfig | None:
    """The site crawl the body asks for, or None for a list crawl; a bad bound is named as a field of `site`."""
    site_in = body.site
    # SiteIn's fields are site_for's bounds, by name; an empty list of dropped parameters drops none.
    bounds = site_in.model_dump(exclude_defaults=True) if site_in else {}
    try:
        return site_for(body.mode, **bounds, max_pages_cap=api.site_max_pages_cap)
    except InvalidInputError as exc:
        field = exc.field if exc.field in {"mode", "site"} else f"site.{exc.field}"
        raise InvalidInputError("site.start_urls" if field == "site" and site_in else field, exc.message) from None


def _credentials(body: ConnectorReplace) -> Credentials | Keep | None:
    """The credentials the body gives: KEEP when it leaves `auth` out, None when it clears them."""
    if "auth" not in body.model_fields_set:
        return KEEP
    return body.auth.credentials() if body.auth is not None else None


def _read(session: Session, connector: Connector) -> ConnectorOut:
    session.flush()
    # Timestamps and server defaults are the database's.
    session.refresh(connector)
    return ConnectorOut.of(connector)


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(401, 404, 422, 503))
def create_connector(workspace_id: WorkspaceId, body: ConnectorCreate, api: Api) -> ConnectorOut:
    """Create a connector; with `index_every_minutes`, its own periodic indexing pipeline too."""
    site = _site(body, api)
    with transaction(api.sessions) as session:
        connector = services.create_connector(
            session,
            api.instance,
            workspace_id=workspace_id,
            connector_type=body.type,
            urls=body.urls,
            name=body.name,
            index_every_minutes=body.index_every_minutes,
            site=site,
            render=body.render,
            credentials=body.auth.credentials() if body.auth is not None else None,
            keyring=api.keyring,
            user_agent=body.user_agent,
            robots=body.robots,
        )
        return _read(session, connector)


@router.get("", responses=responses(401, 404, 422, 503))
def list_connectors(workspace_id: WorkspaceId, api: Api) -> ConnectorList:
    """The workspace's connectors."""
    with api.sessions() as session:
        return ConnectorList(
            connectors=[ConnectorOut.of(c) for c in connectors.list_connectors(session, workspace_id=workspace_id)]
        )


@router.get("/{connector_id}", responses=responses(401, 404, 422, 503))
def get_connector(workspace_id: WorkspaceId, connector_id: ConnectorId, api: Api) -> ConnectorOut:
    """One connector of the workspace."""
    with api.sessions() as session:
        return ConnectorOut.of(connectors.get_connector(session, workspace_id=workspace_id, connector_id=connector_id))


@router.patch("/{connector_id}", responses=responses(401, 404, 422, 503))
def update_connector(
    workspace_id: WorkspaceId, connector_id: ConnectorId, body: ConnectorUpdate, api: Api
) -> ConnectorOut:
    """Change the fields given, leave the rest: `urls` make it a list crawl, `site` a site crawl (the site as a
    whole), `render` null gives back the crawl mode's default, `auth` replaces the credentials as a whole (null
    clears them), `user_agent` and `robots` null give back the crawler's user agent and obeying robots.txt. A
    change that would send the credentials it keeps to a new host is refused. Its pipelines crawl what it says
    from their next run on."""
    if body.mode == "list" and body.urls is None:
        raise InvalidInputError("urls", "a list crawl needs its URLs: give urls with mode list")
    site = _site(body, api) if body.model_fields_set & {"mode", "site"} else None
    given = body.model_fields_set
    changes = connectors.ConnectorChanges(
        name=body.name,
        urls=body.urls,
        site=site,
        render=body.render if "render" in given else KEEP,
        credentials=_credentials(body),
        user_agent=body.user_agent if "user_agent" in given else KEEP,
        robots=body.robots if "robots" in given else KEEP,
    )
    with transaction(api.sessions) as session:
        connector = connectors.update_connector(
            session, workspace_id=workspace_id, connector_id=connector_id, changes=changes, keyring=api.keyring
        )
        return _read(session, connector)


@router.put("/{connector_id}", responses=responses(401, 404, 422, 503))
def replace_connector(
    workspace_id: WorkspaceId, connector_id: ConnectorId, body: ConnectorReplace, api: Api
) -> ConnectorOut:
    """Set the connector to the body as a whole: a field left out takes its default, as on creation. Its type,
    its own periodic indexing and, unless `auth` is given (null clears them), its credentials stay as they were."""
    changes = connectors.ConnectorChanges(
        name=body.name,
        urls=body.urls,
        site=_site(body, api),
        render=body.render,
        credentials=_credentials(body),
        user_agent=body.user_agent,
        robots=body.robots,
    )
    with transaction(api.sessions) as session:
        connector = connectors.update_connector(
            session,
            workspace_id=workspace_id,
            connector_id=connector_id,
            changes=changes,
            replace=True,
            keyring=api.keyring,
        )
        return _read(session, connector)


@router.delete("/{connector_id}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(401, 404, 409, 422, 503))
def delete_connector(workspace_id: WorkspaceId, connector_id: ConnectorId, api: Api) -> Response:
    """Delete a connector with its own periodic indexing (and that pipeline's Dagster partition; run history
    stays in Dagster). Refused with 409 while a pipeline of the workspace crawls it: delete those pipelines or
    give them another connector first. Its documents stay in the KB."""
    with transaction(api.sessions) as session:
        services.delete_connector(session, api.instance, workspace_id=workspace_id, connector_id=connector_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
