"""`pipelines-dagster secrets`: the keys connector credentials are sealed under; a new one, and a rotation that
seals every stored credential again under the newest key."""

from __future__ import annotations

import click

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.cli.common import Group, open_sessions, plural, user_errors
from pipelines_dagster.core.catalog.connector_credentials import reseal_credentials
from pipelines_dagster.core.errors import UserError
from pipelines_dagster.core.security.keyring import NEW_KEY_COMMAND, Keyring, new_key, split_keys, write_key_file
from pipelines_dagster.settings import SECRETS_KEY_ENV, Settings, load_settings


@click.group(cls=Group)
def secrets() -> None:
    """The keys connector credentials are sealed under (PIPELINES_SECRETS_KEY, or the data dir's key file)."""


@secrets.command("new-key")
def secrets_new_key() -> None:
    """Print a new key, for PIPELINES_SECRETS_KEY."""
    click.echo(new_key())


@secrets.command("rotate")
@user_errors
def secrets_rotate() -> None:
    """Seal every connector's credentials again under the newest key, all or nothing.

    With PIPELINES_SECRETS_KEY: give it the new key first and the old ones after it, comma-separated, in every
    process (each opens with any of them and seals with the first), run this, then drop the old keys. With the
    embedded default's key file: a new key is made, and the file holds only it once every credential is sealed
    under it."""
    settings = load_settings()
    if settings.secrets_key is not None:
        count = _rotate_to(settings, settings.keyring())
        click.echo(
            f"the credentials of {plural(count, 'connector')} sealed again under the first key of {SECRETS_KEY_ENV}; "
            f"once every process has it, drop the old keys from {SECRETS_KEY_ENV}"
        )
        return
    path = settings.secrets_key_file
    old = split_keys(path.read_text(encoding="ascii")) if path.is_file() else []
    new = new_key()
    # Both while the credentials are sealed again: a process reading the file meanwhile opens either.
    write_key_file(path, [new, *old])
    try:
        count = _rotate_to(settings, Keyring.in_file(path, variable=SECRETS_KEY_ENV))
    except BaseException:
        write_key_file(path, old)
        raise
    write_key_file(path, [new])
    click.echo(f"the credentials of {plural(count, 'connector')} sealed again under a new key; {path} holds only it")


def _rotate_to(settings: Settings, keyring: Keyring) -> int:
    if settings.secrets_key is not None and keyring.size < 2:
        raise UserError(
            f"{SECRETS_KEY_ENV} holds one key, so there is nothing to rotate from: put a new key first and the old "
            f"one after it, comma-separated (`{NEW_KEY_COMMAND}` makes one), give every process that pair, then run "
            "this again"
        )
    with transaction(open_sessions(settings)) as session:
        return reseal_credentials(session, keyring)
