"""What an update was not given: the value of a changes field left out, so the row keeps what it has."""

from __future__ import annotations

from enum import Enum


class Keep(Enum):
    """The value of a `PipelineChanges` or `ConnectorChanges` field that was not given: the row keeps its own.
    Apart from None, which clears a field that may be empty (back to its default)."""

    KEEP = "keep"


KEEP = Keep.KEEP
