"""`/workspaces/{workspace_id}/connectors`: create, list and read a workspace's connectors.

A web connector crawls a list of URLs, or discovers a site (`site`: start URLs, sitemaps and
same-site links within its bounds). Creation is one transaction: input that fails any check,
named by its field, leaves nothing behind.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from pipelines_dagster import services
from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.schemas.connectors import ConnectorCreate, ConnectorList, ConnectorOut
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.core.catalog import connectors
from pipelines_dagster.core.crawl.site.config import site_for
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.validation import MAX_ID

router = APIRouter(prefix="/workspaces/{workspace_id}/connectors", tags=["connectors"])

ConnectorId = Annotated[int, Path(ge=1, le=MAX_ID, description="A connector of the workspace.")]


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(401, 404, 422, 503))
def create_connector(workspace_id: WorkspaceId, body: ConnectorCreate, api: Api) -> ConnectorOut:
    """Create a connector; with `index_every_minutes`, its own periodic indexing pipeline too."""
    site_in = body.site
    # SiteIn's fields are site_for's bounds, by name; an empty list of dropped parameters drops none.
    bounds = site_in.model_dump(exclude_defaults=True) if site_in else {}
    try:
        site = site_for(body.mode, **bounds, max_pages_cap=api.site_max_pages_cap)
    except InvalidInputError as exc:
        # The site's bounds are fields of `site` in the body.
        field = exc.field if exc.field in {"mode", "site"} else f"site.{exc.field}"
        raise InvalidInputError("site.start_urls" if field == "site" and site_in else field, exc.message) from None
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
        )
        session.flush()
        session.refresh(connector)
        return ConnectorOut.of(connector)


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
