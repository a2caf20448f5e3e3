"""The `blob_store` resource inside a Dagster run, for both backends."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from pipelines_dagster.core.storage.blob import run_result_key
from pipelines_dagster.core.storage.local_blobs import LocalBlobStore
from pipelines_dagster.core.storage.s3_blobs import S3BlobStore
from pipelines_dagster.resources.blob_store import BlobStoreResource, LocalBlobStoreResource, S3BlobStoreResource

RECORDS = [{"url": "https://example.com/", "status": "success"}, {"url": "https://example.com/x", "status": "empty"}]


@pytest.fixture(params=["local", "s3"])
def resource(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStoreResource:
    if request.param == "local":
        return LocalBlobStoreResource(root=str(tmp_path / "blobs"))
    return S3BlobStoreResource(
        bucket=request.getfixturevalue("s3_bucket"),
        prefix="kb",
        endpoint_url=request.getfixturevalue("s3_endpoint_url"),
    )


# `context` stays unannotated: Dagster compares its annotation by identity, and under
# `from __future__ import annotations` it would be the string "dg.AssetExecutionContext".
@dg.asset
def crawl_blob(context, blob_store: BlobStoreResource) -> dg.MaterializeResult:
    key = run_result_key(workspace_id=1, pipeline_id=2, run_id=context.run.run_id)
    written = blob_store.write_jsonl(key, RECORDS)
    assert list(blob_store.read_jsonl(key)) == RECORDS
    return dg.MaterializeResult(
        metadata={"blob": dg.MetadataValue.url(blob_store.url(key)), "bytes": written, "key": key}
    )


def test_asset_writes_and_reads_a_blob_through_the_resource(resource: BlobStoreResource) -> None:
    result = dg.materialize([crawl_blob], resources={"blob_store": resource})

    assert result.success
    metadata = result.asset_materializations_for_node("crawl_blob")[0].metadata
    key = metadata["key"].value
    assert key == f"pipeline_runs/1/2/{result.run_id}/result.jsonl"
    # Outside the run, the same config reaches the same stored object.
    assert list(resource.read_jsonl(key)) == RECORDS
    assert [info.key for info in resource.list("pipeline_runs/1/")] == [key]
    assert metadata["blob"].value == resource.url(key)
    assert metadata["bytes"].value == next(resource.list()).size


def test_resources_build_their_backend(tmp_path: Path, s3_bucket: str, s3_endpoint_url: str) -> None:
    local = LocalBlobStoreResource(root=str(tmp_path))
    s3 = S3BlobStoreResource(bucket=s3_bucket, prefix="kb", endpoint_url=s3_endpoint_url)

    with dg.build_resources({"local": local, "s3": s3}) as built:
        assert isinstance(built.local.store(), LocalBlobStore)
        assert built.local.store().root == tmp_path
        assert isinstance(built.s3.store(), S3BlobStore)
        assert built.s3.url("a.jsonl") == f"s3://{s3_bucket}/kb/a.jsonl"

    # Used directly (tests, the API), the store is built once on first use.
    assert local.store() is local.store()
