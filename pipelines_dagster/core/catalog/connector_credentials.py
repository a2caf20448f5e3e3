"""A connector's credentials at rest: sealed under the deployment's keyring in a column of their own, beside the
names a reader may see (which kinds are set, which headers and cookies); opened only for a run, and sealed again
under a new key by a rotation."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import Connector
from pipelines_dagster.core.crawl.credentials import Credentials
from pipelines_dagster.core.security.keyring import Keyring, SecretsKeyError

SEALED = "sealed"
SHOWN = "shown"


def set_credentials(connector: Connector, credentials: Credentials | None, keyring: Keyring) -> None:
    """Seal `credentials` into the connector's column under the newest key; None clears them."""
    if credentials is None:
        connector.credentials = None
        return
    connector.credentials = {SEALED: keyring.seal(credentials.to_json()), SHOWN: credentials.shown()}


def shown_credentials(connector: Connector) -> dict[str, Any] | None:
    """Which credentials the connector has, by kind and name, never a value; None when it has none."""
    stored = connector.credentials
    return dict(stored[SHOWN]) if stored else None


def open_credentials(connector: Connector, keyring: Keyring) -> Credentials | None:
    """The connector's credentials, opened; SecretsKeyError saying what to set when no key opens them."""
    stored = connector.credentials
    if not stored:
        return None
    return Credentials.from_json(keyring.open(stored[SEALED], what=_what(connector)))


def reseal_credentials(session: Session, keyring: Keyring) -> int:
    """Seal every connector's credentials again under the keyring's newest key: how many were. All or nothing:
    SecretsKeyError, naming every connector none of the keys opens, before anything is written. The rows are
    locked until the transaction ends, so a write meanwhile is not overwritten with what was read before it."""
    connectors = session.scalars(
        sa.select(Connector).where(Connector.credentials.is_not(None)).order_by(Connector.id).with_for_update()
    ).all()
    resealed: dict[int, str] = {}
    unopened: list[str] = []
    for connector in connectors:
        assert connector.credentials is not None
        try:
            resealed[connector.id] = keyring.reseal(connector.credentials[SEALED], what=_what(connector))
        except SecretsKeyError:
            unopened.append(f"{connector.id} (workspace {connector.workspace_id})")
    if unopened:
        raise SecretsKeyError(
            f"the credentials of connector{'s' if len(unopened) > 1 else ''} {', '.join(unopened)} cannot be opened "
            f"with any key of {keyring.where}, so nothing was sealed again: give it the key they were sealed under "
            "too (after the new one), or set those credentials again"
        )
    for connector in connectors:
        assert connector.credentials is not None
        connector.credentials = {**connector.credentials, SEALED: resealed[connector.id]}
    session.flush()
    return len(connectors)


def _what(connector: Connector) -> str:
    return f"the credentials of connector {connector.id}"
