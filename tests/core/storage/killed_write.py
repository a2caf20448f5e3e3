"""A blob write, in a process of its own, that stops after its first part: the test SIGKILLs it there,
as a run killed mid-crawl dies.

python -m tests.core.storage.killed_write KEY local ROOT | KEY s3 ENDPOINT BUCKET PREFIX; prints "writing" once the
temp file (local) or the multipart upload holding that part (S3) exists.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

from pipelines_dagster.core.storage.blob import BlobStore
from pipelines_dagster.core.storage.local_blobs import LocalBlobStore
from pipelines_dagster.core.storage.s3_blobs import S3_MIN_PART_SIZE, S3BlobStore


def first_part_then_hang() -> Iterator[bytes]:
    # A whole part: the S3 store uploads it before it asks for more.
    yield b"x" * S3_MIN_PART_SIZE
    print("writing", flush=True)
    time.sleep(600)
    raise SystemExit("not killed")


def store_of(backend: str, *where: str) -> BlobStore:
    if backend == "local":
        return LocalBlobStore(*where)
    endpoint, bucket, prefix = where
    return S3BlobStore(bucket, prefix, endpoint_url=endpoint, part_size=S3_MIN_PART_SIZE)


def main(key: str, *store: str) -> None:
    store_of(*store).write_stream(key, first_part_then_hang())


if __name__ == "__main__":
    main(*sys.argv[1:])
