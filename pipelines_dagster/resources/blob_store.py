"""The `blob_store` resource: where raw crawl results are kept, a local directory or an S3 bucket."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from pipelines_dagster.core.storage.blob import DEFAULT_CHUNK_SIZE, BlobInfo, BlobStore
from pipelines_dagster.core.storage.local_blobs import LocalBlobStore
from pipelines_dagster.core.storage.s3_blobs import S3BlobStore


class BlobStoreResource(dg.ConfigurableResource["BlobStoreResource"], ABC):
    _store: BlobStore | None = PrivateAttr(default=None)

    @abstractmethod
    def _build(self) -> BlobStore:
        """Create the backend's plain `BlobStore` from this resource's config."""

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._store = self._build()

    def store(self) -> BlobStore:
        """The plain store; built on first use when the resource is used outside a run."""
        if self._store is None:
            self._store = self._build()
        return self._store

    def write_stream(
        self, key: str, chunks: Iterable[bytes | str], *, content_type: str = "application/octet-stream"
    ) -> int:
        return self.store().write_stream(key, chunks, content_type=content_type)

    def write_jsonl(self, key: str, records: Iterable[object]) -> int:
        return self.store().write_jsonl(key, records)

    def open_stream(self, key: str, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[bytes]:
        return self.store().open_stream(key, chunk_size=chunk_size)

    def read_jsonl(self, key: str) -> Iterator[dict[str, Any]]:
        return self.store().read_jsonl(key)

    def delete(self, key: str) -> bool:
        return self.store().delete(key)

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        return self.store().list(prefix)

    def exists(self, key: str) -> bool:
        return self.store().exists(key)

    def url(self, key: str) -> str:
        return self.store().url(key)


class LocalBlobStoreResource(BlobStoreResource):
    """A directory on this machine: the embedded default."""

    root: str

    def _build(self) -> BlobStore:
        return LocalBlobStore(Path(self.root))


class S3BlobStoreResource(BlobStoreResource):
    """An S3 bucket, on AWS or any S3-compatible endpoint; credentials come from boto3's usual chain."""

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None

    def _build(self) -> BlobStore:
        return S3BlobStore(self.bucket, self.prefix, endpoint_url=self.endpoint_url)
