"""Secrets at rest: values sealed with Fernet (AES-128-CBC with HMAC-SHA256, from `cryptography`) under the
deployment's keys, newest first, so a key can be rotated without losing what an older one sealed."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from pipelines_dagster.core.errors import UserError

NEW_KEY_COMMAND = "pipelines-dagster secrets new-key"


class SecretsKeyError(UserError):
    """The keys in force cannot be used, or do not open a stored value; the message says what to set. What is
    stored is left as it is, so the right key opens it later."""


def new_key() -> str:
    """A fresh Fernet key (32 random bytes, URL-safe base64)."""
    return Fernet.generate_key().decode("ascii")


def split_keys(value: str) -> list[str]:
    """The keys a variable or key file holds: separated by commas or line breaks, newest first."""
    return [key.strip() for key in value.replace("\n", ",").split(",") if key.strip()]


class Keyring:
    """The keys secrets are sealed under: the first seals, any opens. Read at each use, so a deployment that
    never stores a secret never reads (or makes) its key file, and a process that outlives a rotation of the key
    file seals under the new key from then on.

    `fix` finishes the sentence of a refusal: what to set so that a stored value opens."""

    def __init__(self, keys: Callable[[], Sequence[str]], *, where: str, fix: str) -> None:
        self._keys = keys
        self.where = where
        """Where the keys come from, as a refusal names it (a variable, a key file)."""
        self._fix = fix

    @classmethod
    def of(cls, value: str, *, variable: str) -> Keyring:
        """The keys `variable` holds (comma-separated, newest first), checked now: a malformed one is
        refused before anything is sealed with it."""
        keys = split_keys(value)
        keyring = cls(
            lambda: keys,
            where=variable,
            fix=f"set {variable} to the key it was sealed under (keys are comma-separated, newest first, so the "
            "old one can follow the new one while a rotation is under way), or set the credentials again",
        )
        keyring.check()
        return keyring

    @classmethod
    def in_file(cls, path: Path, *, variable: str) -> Keyring:
        """The keys of a key file, one a line, newest first; made (readable by its owner only) on first use."""
        return cls(
            lambda: split_keys(_read_or_make(path)),
            where=f"the key file {path}",
            fix=f"put back the key file it was sealed under at {path}, or set {variable} to that key, or set "
            "the credentials again",
        )

    def check(self) -> None:
        """Read and parse the keys now: SecretsKeyError when one is not a key."""
        self._fernets()

    def _fernets(self) -> list[Fernet]:
        keys = self._keys()
        if not keys:
            raise SecretsKeyError(f"{self.where} holds no key: make one with `{NEW_KEY_COMMAND}`")
        fernets = []
        for position, key in enumerate(keys, start=1):
            try:
                fernets.append(Fernet(key))
            except ValueError:
                # The key itself is never shown: only where it is.
                raise SecretsKeyError(
                    f"key {position} of {self.where} is not a Fernet key (32 bytes in URL-safe base64): make one "
                    f"with `{NEW_KEY_COMMAND}`"
                ) from None
        return fernets

    @property
    def size(self) -> int:
        """How many keys it holds: the newest, and those a rotation leaves behind."""
        return len(self._fernets())

    def seal(self, plain: bytes) -> str:
        return MultiFernet(self._fernets()).encrypt(plain).decode("ascii")

    def open(self, sealed: str, *, what: str) -> bytes:
        """The value `sealed` holds; SecretsKeyError naming `what` when no key opens it (or it was altered)."""
        try:
            return MultiFernet(self._fernets()).decrypt(sealed)
        except InvalidToken:
            raise self._refused(what) from None

    def reseal(self, sealed: str, *, what: str) -> str:
        """`sealed` sealed again under the newest key, whichever key sealed it."""
        try:
            return MultiFernet(self._fernets()).rotate(sealed).decode("ascii")
        except InvalidToken:
            raise self._refused(what) from None

    def _refused(self, what: str) -> SecretsKeyError:
        return SecretsKeyError(f"{what} cannot be opened with the keys of {self.where}: {self._fix}")


def _read_or_make(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii")
    except FileNotFoundError:
        pass
    write_key_file(path, [new_key()], replace=False)
    return path.read_text(encoding="ascii")


def write_key_file(path: Path, keys: Sequence[str], *, replace: bool = True) -> None:
    """Write `keys` (newest first) to `path` whole, readable by its owner only: written aside, then moved into
    place, so a reader sees the old file or the new one. Without `replace`, a file another process made first
    stays."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, aside = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write("".join(f"{key}\n" for key in keys))
            file.flush()
            os.fsync(file.fileno())
        if replace:
            os.replace(aside, path)
            return
        with contextlib.suppress(FileExistsError):  # another process made it first: theirs is the key
            os.link(aside, path)
    finally:
        if os.path.exists(aside):
            os.unlink(aside)
