"""Keyset pages of the listing routes (page changes, documents, notification deliveries): newest first, each
page's `next_cursor` the id it ended at, passed back as `cursor` for the page after it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import Query

Cursor = Annotated[str | None, Query(pattern=r"^[0-9]{1,18}$", description="`next_cursor` of the previous page.")]

Rows = TypeVar("Rows")


def keyset_page(fetch: Callable[[int | None], tuple[Rows, int | None]], cursor: str | None) -> tuple[Rows, str | None]:
    """The page `cursor` names and the cursor of the next one (None on the last page).

    `fetch(before_id)` answers the rows with ids below `before_id` (from the newest when None), a page of them,
    and the id the next page starts below, or None when no row is left: the listers of the domain fetch one
    row past the page to know.
    """
    rows, next_id = fetch(int(cursor) if cursor else None)
    return rows, None if next_id is None else str(next_id)
