"""The S3 blob store: objects in a bucket of AWS or any S3-compatible server, written by multipart upload.

boto3 is imported when a store is made, not with this module: every run process loads the blob
store's module with the code location, and boto3 costs about 0.1 s to import."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import closing
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pipelines_dagster.core.storage.blob import (
    DEFAULT_CHUNK_SIZE,
    BlobInfo,
    BlobNotFoundError,
    BlobStore,
    MiB,
    as_bytes,
    key_problem,
    validate_key,
    validate_prefix,
)

if TYPE_CHECKING:
    from botocore.exceptions import ClientError


DEFAULT_PART_SIZE = 8 * MiB

# S3 rejects a multipart upload whose parts (all but the last) are smaller than this.
S3_MIN_PART_SIZE = 5 * MiB


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
                data = memoryview(as_bytes(chunk))
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
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + validate_prefix(prefix)):
            for item in page.get("Contents", []):
                key = item["Key"][len(self.prefix) :]
                # Objects put by other tools (e.g. console "folder" markers) are not blobs of ours.
                if key_problem(key) is None:
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
                if upload["Initiated"] < older_than and key_problem(upload["Key"][len(self.prefix) :]) is None:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    removed += 1
        return removed
