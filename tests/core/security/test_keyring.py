"""The keyring that seals secrets at rest: a round trip, a wrong or malformed key refused with what to set (and the
key never shown), rotation under several keys, and the embedded default's key file made once, owner-only."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from pipelines_dagster.core.security.keyring import Keyring, SecretsKeyError, new_key, split_keys

PLAIN = b'{"bearer": "tok-5e3a"}'


def test_a_sealed_value_opens_to_what_was_sealed_and_does_not_hold_it_in_clear() -> None:
    keyring = Keyring.of(new_key(), variable="PIPELINES_SECRETS_KEY")
    sealed = keyring.seal(PLAIN)
    assert b"tok-5e3a" not in sealed.encode() and sealed != keyring.seal(PLAIN)  # a fresh IV each time
    assert keyring.open(sealed, what="the credentials of connector 7") == PLAIN


def test_a_wrong_key_is_refused_saying_what_to_set_and_what_is_stored_still_opens_with_the_right_one() -> None:
    right = new_key()
    sealed = Keyring.of(right, variable="PIPELINES_SECRETS_KEY").seal(PLAIN)
    with pytest.raises(SecretsKeyError) as refused:
        Keyring.of(new_key(), variable="PIPELINES_SECRETS_KEY").open(sealed, what="the credentials of connector 7")
    message = str(refused.value)
    assert message.startswith("the credentials of connector 7 cannot be opened with the keys of PIPELINES_SECRETS_KEY")
    assert "set PIPELINES_SECRETS_KEY to the key it was sealed under" in message
    assert Keyring.of(right, variable="PIPELINES_SECRETS_KEY").open(sealed, what="x") == PLAIN


def test_an_altered_value_is_refused() -> None:
    keyring = Keyring.of(new_key(), variable="PIPELINES_SECRETS_KEY")
    sealed = keyring.seal(PLAIN)
    altered = sealed[:-8] + ("A" if sealed[-8] != "A" else "B") + sealed[-7:]
    with pytest.raises(SecretsKeyError):
        keyring.open(altered, what="x")


@pytest.mark.parametrize("value", ["not-a-key", "", f"{'A' * 43}=,also-bad"])
def test_a_malformed_key_is_refused_without_showing_it(value: str) -> None:
    with pytest.raises(SecretsKeyError) as refused:
        Keyring.of(value, variable="PIPELINES_SECRETS_KEY")
    message = str(refused.value)
    assert "PIPELINES_SECRETS_KEY" in message and "pipelines-dagster secrets new-key" in message
    assert not [part for part in split_keys(value) if part in message]


def test_rotation_seals_again_under_the_newest_key_so_the_old_one_can_go() -> None:
    old, new = new_key(), new_key()
    sealed = Keyring.of(old, variable="K").seal(PLAIN)
    both = Keyring.of(f"{new}, {old}", variable="K")
    assert both.size == 2 and both.open(sealed, what="x") == PLAIN  # while rotating: either opens
    resealed = both.reseal(sealed, what="x")
    assert Keyring.of(new, variable="K").open(resealed, what="x") == PLAIN
    with pytest.raises(SecretsKeyError):
        Keyring.of(old, variable="K").open(resealed, what="x")
    # Sealing with both seals under the first.
    assert Keyring.of(new, variable="K").open(both.seal(PLAIN), what="x") == PLAIN


def test_reseal_refuses_a_value_none_of_the_keys_opens() -> None:
    sealed = Keyring.of(new_key(), variable="K").seal(PLAIN)
    with pytest.raises(SecretsKeyError, match="connector 3"):
        Keyring.of(f"{new_key()},{new_key()}", variable="K").reseal(sealed, what="the credentials of connector 3")


def test_the_key_file_is_made_on_first_use_readable_by_its_owner_only_and_then_kept(tmp_path: Path) -> None:
    path = tmp_path / "data" / "secrets.key"
    keyring = Keyring.in_file(path, variable="PIPELINES_SECRETS_KEY")
    assert not path.exists()  # not before it is used
    sealed = keyring.seal(PLAIN)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(split_keys(path.read_text())) == 1
    # Another process's keyring over the same file opens it: the key was made once.
    assert Keyring.in_file(path, variable="PIPELINES_SECRETS_KEY").open(sealed, what="x") == PLAIN
    assert [entry.name for entry in path.parent.iterdir()] == ["secrets.key"]


def test_keyrings_making_the_key_file_at_once_agree_on_one_key(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    sealed: list[str] = []
    barrier = threading.Barrier(8)

    def seal() -> None:
        barrier.wait()
        sealed.append(Keyring.in_file(path, variable="K").seal(PLAIN))

    threads = [threading.Thread(target=seal) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    keyring = Keyring.in_file(path, variable="K")
    assert [keyring.open(value, what="x") for value in sealed] == [PLAIN] * 8


def test_a_wrong_key_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    sealed = Keyring.of(new_key(), variable="K").seal(PLAIN)
    with pytest.raises(SecretsKeyError) as refused:
        Keyring.in_file(path, variable="PIPELINES_SECRETS_KEY").open(sealed, what="the credentials of connector 1")
    assert f"the key file {path}" in str(refused.value) and "PIPELINES_SECRETS_KEY" in str(refused.value)
