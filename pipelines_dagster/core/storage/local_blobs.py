"""The local blob store: objects as files under a root directory, the embedded default."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from pipelines_dagster.core.storage.blob import (
    DEFAULT_CHUNK_SIZE,
    SEGMENT,
    BlobInfo,
    BlobNotFoundError,
    BlobStore,
    as_bytes,
    segment_problem,
    validate_key,
    validate_prefix,
)

# The local backend's temp file for a write to "<name>": ".<name>.<mkstemp's random letters>.tmp".
_TEMP_SUFFIX = ".tmp"

_TEMP_NAME = re.compile(rf"\.{SEGMENT.pattern}\.\w+{re.escape(_TEMP_SUFFIX)}")


class LocalBlobStore(BlobStore):
    """Objects as files under a root directory: the embedded default, one machine, no server.

    Files carry no content type, so `content_type` is accepted for the interface and not kept.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).absolute()

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key).split("/"))

    def write_stream(
        self, key: str, chunks: Iterable[bytes | str], *, content_type: str = "application/octet-stream"
    ) -> int:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Same directory as the target, so os.replace is an atomic rename on one filesystem.
        fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TEMP_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as file:
                written = 0
                for chunk in chunks:
                    written += file.write(as_bytes(chunk))
                file.flush()
                # Without fsync a crash after the rename can leave an empty or partial file in place.
                os.fsync(file.fileno())
            os.replace(temp_name, path)
        except BaseException:
            Path(temp_name).unlink(missing_ok=True)
            raise
        return written

    def open_stream(self, key: str, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[bytes]:
        path = self._path(key)
        # Opened here rather than in the generator so a missing key fails at the call.
        try:
            file = path.open("rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise BlobNotFoundError(key) from None
        return self._read(file, chunk_size)

    @staticmethod
    def _read(file: BinaryIO, chunk_size: int) -> Iterator[bytes]:
        with file:
            while chunk := file.read(chunk_size):
                yield chunk

    def delete(self, key: str) -> bool:
        try:
            self._path(key).unlink()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return False
        return True

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        directory_part, _, _ = validate_prefix(prefix).rpartition("/")
        start = self.root.joinpath(*directory_part.split("/")) if directory_part else self.root
        key_base = f"{directory_part}/" if directory_part else ""
        for key, entry in self._walk(start, key_base):
            if not key.startswith(prefix):
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue  # deleted between the directory scan and the stat
            yield BlobInfo(key=key, size=stat.st_size, last_modified=datetime.fromtimestamp(stat.st_mtime, UTC))

    def _walk(self, directory: Path, key_base: str) -> Iterator[tuple[str, os.DirEntry[str]]]:
        try:
            with os.scandir(directory) as scan:
                entries = [entry for entry in scan if segment_problem(entry.name) is None]
        except (FileNotFoundError, NotADirectoryError):
            return
        # A directory sorts as "name/", since every key under it starts so; visiting entries in
        # that order yields keys in the same byte order S3 lists them in.
        named = sorted(
            (entry.name + "/" if entry.is_dir(follow_symlinks=False) else entry.name, entry) for entry in entries
        )
        for name, entry in named:
            if name.endswith("/"):
                yield from self._walk(Path(entry.path), key_base + name)
            elif entry.is_file():
                yield key_base + name, entry

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def url(self, key: str) -> str:
        return self._path(key).as_uri()

    def remove_abandoned_writes(self, *, older_than: datetime) -> int:
        removed = 0
        for directory, subdirectories, files in os.walk(self.root):
            # Only the store's own directories: a hidden one is not ours.
            subdirectories[:] = [name for name in subdirectories if segment_problem(name) is None]
            for name in filter(_TEMP_NAME.fullmatch, files):
                path = Path(directory, name)
                try:
                    # A write changes its file as it goes, so a temp file untouched since `older_than` is dead.
                    if datetime.fromtimestamp(path.stat().st_mtime, UTC) < older_than:
                        path.unlink()
                        removed += 1
                except FileNotFoundError:
                    continue  # its write finished or failed meanwhile
        return removed
