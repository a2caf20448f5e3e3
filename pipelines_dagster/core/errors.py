"""The user-error vocabulary: why a request a user can fix was refused. Every edge (the HTTP API, the
CLI, the chat tools) translates these once, by base class; a message is a sentence that says what to do."""

from __future__ import annotations


class UserError(Exception):
    """A request refused for a reason its user can act on; the message says how."""


class InvalidInputError(UserError, ValueError):
    """Bad input; `field` names what to fix (a CLI option or an API field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFoundError(UserError, LookupError):
    """A referenced row or object does not exist (or is not in the caller's workspace)."""


class ConflictError(UserError):
    """What the request names exists but cannot do this now (disabled, busy, managed by the system)."""
