"""Blob storage for raw crawl results: the interface, keys, and the errors every backend raises.

Objects stream in and out in chunks, and a write replaces the whole object or changes nothing. The
backends are a local directory (`local_blobs`) and an S3 bucket (`s3_blobs`)."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

MiB = 1024 * 1024
DEFAULT_CHUNK_SIZE = MiB
JSONL_CONTENT_TYPE = "application/x-ndjson"

# A segment never starts with '.', so the local backend's temp files (".name.xxxx.tmp") and
# hidden files can never be mistaken for objects, and '.'/'..' cannot walk out of the root.
SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")

_EXAMPLE_KEY = "pipeline_runs/1/2/<run id>/result.jsonl"


class InvalidBlobKeyError(ValueError):
    """A key that is not a relative '/'-separated path of safe segments."""


class BlobNotFoundError(KeyError):
    """No object is stored under the key."""

    def __init__(self, key: str) -> None:
        super().__init__(f"No blob is stored under {key!r}; check the key, or write it first.")
        self.key = key

    def __str__(self) -> str:
        # KeyError's own __str__ shows the repr of its argument, quotes and all.
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class BlobInfo:
    key: str
    size: int
    last_modified: datetime


def segment_problem(segment: str) -> str | None:
    """What makes `segment` unusable as one segment of a blob key, in words; None when it is fine."""
    if segment == "":
        return "has an empty segment; remove the doubled or trailing '/'"
    if segment in {".", ".."}:
        return f"has a {segment!r} segment; give the path without it"
    if not SEGMENT.fullmatch(segment):
        return (
            f"has the segment {segment!r}; a segment starts with a letter, digit or '_' "
            "and holds only letters, digits, '.', '_' and '-'"
        )
    return None


def key_problem(key: str) -> str | None:
    if key == "":
        return f"is empty; give a relative path such as {_EXAMPLE_KEY!r}"
    if "\x00" in key:
        return "contains a NUL character; remove it"
    if "\\" in key:
        return "contains a backslash; separate segments with '/'"
    if key.startswith("/"):
        return "is absolute; drop the leading '/', keys are relative to the store's root"
    return next(filter(None, map(segment_problem, key.split("/"))), None)


def validate_key(key: str) -> str:
    """Return `key` unchanged if it is a valid blob key, else raise `InvalidBlobKeyError`."""
    if (problem := key_problem(key)) is not None:
        raise InvalidBlobKeyError(f"Blob key {key!r} {problem}.")
    return key


def validate_prefix(prefix: str) -> str:
    # A listing prefix may end mid-segment or with '/', but is otherwise held to the key rules.
    if prefix:
        validate_key(prefix.removesuffix("/"))
    return prefix


def run_result_key(*, workspace_id: int | str, pipeline_id: int | str, run_id: str) -> str:
    """Where a pipeline run's raw crawl result is stored."""
    for name, value in (("workspace_id", workspace_id), ("pipeline_id", pipeline_id), ("run_id", run_id)):
        if (problem := segment_problem(str(value))) is not None:
            raise InvalidBlobKeyError(f"{name} {value!r} cannot be used in a blob key: it {problem}.")
    return f"pipeline_runs/{workspace_id}/{pipeline_id}/{run_id}/result.jsonl"


def as_bytes(chunk: bytes | str) -> bytes:
    return chunk.encode("utf-8") if isinstance(chunk, str) else chunk


def _jsonl_records(chunks: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    pending = b""
    for chunk in chunks:
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if line.strip():
                yield orjson.loads(line)
    if pending.strip():
        yield orjson.loads(pending)


class BlobStore(ABC):
    """Named byte objects, written and read as streams."""

    @abstractmethod
    def write_stream(
        self, key: str, chunks: Iterable[bytes | str], *, content_type: str = "application/octet-stream"
    ) -> int:
        """Store the concatenated chunks under `key`, replacing any object there; return the byte count.

        Readers see the previous object until the write completes; if `chunks` raises, the
        previous object is left as it was.
        """

    @abstractmethod
    def open_stream(self, key: str, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[bytes]:
        """The object's bytes in chunks of at most `chunk_size`; `BlobNotFoundError` when absent."""

    @abstractmethod
    def delete(self, key: str) -> bool:
        """Remove the object; False when there was none."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        """Objects whose key starts with `prefix`, sorted by key."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def url(self, key: str) -> str:
        """Where the object lives, for display (file:// or s3://)."""

    @abstractmethod
    def remove_abandoned_writes(self, *, older_than: datetime) -> int:
        """Remove what writes begun before `older_than` left unfinished; return how many.

        A write that fails cleans up after itself; one whose process is killed cannot, and leaves its
        temp file (local) or multipart upload (S3, billed for its parts). Give a time before the start
        of any write that may still be running.
        """

    def write_jsonl(self, key: str, records: Iterable[object]) -> int:
        """Store one JSON object per line (UTF-8, compact): mappings or dataclasses; return the byte count."""
        # orjson: a crawl's lines are mostly page text, which it encodes several times faster than json.
        lines = (orjson.dumps(record) + b"\n" for record in records)
        return self.write_stream(key, lines, content_type=JSONL_CONTENT_TYPE)

    def read_jsonl(self, key: str) -> Iterator[dict[str, Any]]:
        """The records of a JSON Lines object, read a chunk at a time; `BlobNotFoundError` when absent."""
        return _jsonl_records(self.open_stream(key))
