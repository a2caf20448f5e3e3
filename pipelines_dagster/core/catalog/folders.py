"""KB folders a pipeline's documents go to."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import Folder
from pipelines_dagster.core.validation import validate_name


def get_or_create_folder(session: Session, *, workspace_id: int, name: str) -> Folder:
    folder_name = validate_name(name, field="folder", max_length=255)
    folder = session.scalar(
        sa.select(Folder).where(
            Folder.workspace_id == workspace_id, Folder.parent_id.is_(None), Folder.name == folder_name
        )
    )
    if folder is None:
        folder = Folder(workspace_id=workspace_id, name=folder_name)
        session.add(folder)
        session.flush()
    return folder
