"""Blob storage for raw crawl results, in a local directory or an S3 bucket.

Objects stream in and out in chunks, and a write replaces the whole object or changes nothing.
boto3 is imported by the S3 backend alone, when it is used: every run process loads this module
with the code location, and boto3 costs about 0.1 s to import.
"""

from __future__ import annotations

import os
import re
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

if TYPE_CHECKING:
    from botocore.exceptions import ClientError

MiB = 1024 * 1024
DEFAULT_CHUNK_SIZE = MiB
DEFAULT_PART_SIZE = 8 * MiB
# S3 rejects a multipart upload whose parts (all but the last) are smaller than this.
S3_MIN_PART_SIZE = 5 * MiB
JSONL_CONTENT_TYPE = "application/x-ndjson"

# A segment never starts with '.', so the local backend's temp files (".name.xxxx.tmp") and
# hidden files can never be mistaken for objects, and '.'/'..' cannot walk out of the root.
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_EXAMPLE_KEY = "pipeline_runs/1/2/<run id>/result.jsonl"
# The local backend's temp file for a write to "<name>": ".<name>.<mkstemp's random letters>.tmp".
_TEMP_SUFFIX = ".tmp"
_TEMP_NAME = re.compile(rf"\.{_SEGMENT.pattern}\.\w+{re.escape(_TEMP_SUFFIX)}")


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
    if not _SEGMENT.fullmatch(segment):
        return (
            f"has the segment {segment!r}; a segment starts with a letter, digit or '_' "
            "and holds only letters, digits, '.', '_' and '-'"
        )
    return None


def _key_problem(key: str) -> str | None:
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
    if (problem := _key_problem(key)) is not None:
        raise InvalidBlobKeyError(f"Blob key {key!r} {problem}.")
    return key


def _validate_prefix(prefix: str) -> str:
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


def _as_bytes(chunk: bytes | str) -> bytes:
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
                    written += file.write(_as_bytes(chunk))
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
        directory_part, _, _ = _validate_prefix(prefix).rpartition("/")
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


def _is_missing(error: ClientError) -> bool:
    # get_object reports NoSuchKey; head_object has no body, so only the status code survives.
    return error.response.get("Error", {}).get("Code") in {"NoSuchKey", "404", "NotFound"}


class S3BlobStore(BlobStore):
    """Objects in an S3 bucket (AWS or any S3-compatible endpoint), under an optional key prefix."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        client: Any = None,
        part_size: int = DEFAULT_PART_SIZE,
    ) -> None:
        if part_size < S3_MIN_PART_SIZE:
            raise ValueError(
                f"part_size {part_size} is below S3's minimum multipart part size; use at least {S3_MIN_PART_SIZE}."
            )
        prefix = prefix.strip("/")
        self.bucket = bucket
        self.prefix = f"{validate_key(prefix)}/" if prefix else ""
        self.part_size = part_size
        if client is None:
            import boto3

            client = boto3.client("s3", endpoint_url=endpoint_url)
        self.client = client

    def _object_key(self, key: str) -> str:
        return self.prefix + validate_key(key)

    def write_stream(
        self, key: str, chunks: Iterable[bytes | str], *, content_type: str = "application/octet-stream"
    ) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        object_key = self._object_key(key)
        target = {"Bucket": self.bucket, "Key": object_key}
        buffer = bytearray()
        parts: list[dict[str, Any]] = []
        upload_id: str | None = None
        written = 0

        def upload_buffer() -> None:
            nonlocal upload_id
            if upload_id is None:
                upload_id = self.client.create_multipart_upload(**target, ContentType=content_type)["UploadId"]
            number = len(parts) + 1
            # The buffer goes as is, not copied: it is only cleared after upload_part has returned.
            response = self.client.upload_part(**target, UploadId=upload_id, PartNumber=number, Body=buffer)
            parts.append({"PartNumber": number, "ETag": response["ETag"]})
            buffer.clear()

        try:
            for chunk in chunks:
                data = memoryview(_as_bytes(chunk))
                written += len(data)
                # Fill the buffer to exactly one part at a time, however large the chunks are.
                while data:
                    room = self.part_size - len(buffer)
                    buffer += data[:room]
                    data = data[room:]
                    if len(buffer) == self.part_size:
                        upload_buffer()
            if upload_id is None:
                self.client.put_object(**target, Body=bytes(buffer), ContentType=content_type)
            else:
                if buffer:
                    upload_buffer()
                self.client.complete_multipart_upload(**target, UploadId=upload_id, MultipartUpload={"Parts": parts})
        except BaseException as exc:
            if upload_id is not None:
                # S3 keeps (and bills) the uploaded parts of an unfinished upload until it is aborted.
                try:
                    self.client.abort_multipart_upload(**target, UploadId=upload_id)
                except (BotoCoreError, ClientError) as abort_error:
                    exc.add_note(
                        f"Aborting multipart upload {upload_id} of {self.url(key)} also failed ({abort_error}); "
                        "a lifecycle rule for incomplete multipart uploads on the bucket removes it later."
                    )
            raise
        return written

    def open_stream(self, key: str, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[bytes]:
        from botocore.exceptions import ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._object_key(key))
        except ClientError as error:
            if _is_missing(error):
                raise BlobNotFoundError(key) from None
            raise
        return self._read(response["Body"], chunk_size)

    @staticmethod
    def _read(body: Any, chunk_size: int) -> Iterator[bytes]:
        with closing(body):
            yield from body.iter_chunks(chunk_size)

    def delete(self, key: str) -> bool:
        # delete_object succeeds whether or not the key exists, so ask first to answer False.
        if not self.exists(key):
            return False
        self.client.delete_object(Bucket=self.bucket, Key=self._object_key(key))
        return True

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + _validate_prefix(prefix)):
            for item in page.get("Contents", []):
                key = item["Key"][len(self.prefix) :]
                # Objects put by other tools (e.g. console "folder" markers) are not blobs of ours.
                if _key_problem(key) is None:
                    yield BlobInfo(key=key, size=item["Size"], last_modified=item["LastModified"].astimezone(UTC))

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._object_key(key))
        except ClientError as error:
            if _is_missing(error):
                return False
            raise
        return True

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._object_key(key)}"

    def remove_abandoned_writes(self, *, older_than: datetime) -> int:
        removed = 0
        paginator = self.client.get_paginator("list_multipart_uploads")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
            for upload in page.get("Uploads", []):
                if upload["Initiated"] < older_than and _key_problem(upload["Key"][len(self.prefix) :]) is None:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    removed += 1
        return removed
