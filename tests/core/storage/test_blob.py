"""The blob store's behaviour, run against both backends: a local directory and a real S3 server."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest

from pipelines_dagster.core.storage.blob import (
    JSONL_CONTENT_TYPE,
    BlobNotFoundError,
    BlobStore,
    InvalidBlobKeyError,
    MiB,
    run_result_key,
    validate_key,
)
from pipelines_dagster.core.storage.local_blobs import LocalBlobStore
from pipelines_dagster.core.storage.s3_blobs import S3BlobStore

PART_SIZE = 5 * MiB
S3_PREFIX = "kb"


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    if request.param == "local":
        return LocalBlobStore(tmp_path / "blobs")
    return S3BlobStore(
        request.getfixturevalue("s3_bucket"),
        S3_PREFIX,
        endpoint_url=request.getfixturevalue("s3_endpoint_url"),
        part_size=PART_SIZE,
    )


def random_chunks(total: int, *, seed: int = 7, chunk_size: int = MiB) -> Iterator[bytes]:
    rng = random.Random(seed)
    while total > 0:
        size = min(chunk_size, total)
        total -= size
        yield rng.randbytes(size)


def read_all(store: BlobStore, key: str) -> bytes:
    return b"".join(store.open_stream(key))


def test_round_trip_of_bytes_and_str_chunks(store: BlobStore) -> None:
    assert store.write_stream("a/greeting.txt", ["héllo ", b"world"]) == len("héllo world".encode())
    assert read_all(store, "a/greeting.txt") == "héllo world".encode()

    assert store.write_stream("a/greeting.txt", [b"replaced"]) == 8
    assert read_all(store, "a/greeting.txt") == b"replaced"


def test_empty_object(store: BlobStore) -> None:
    assert store.write_stream("empty", []) == 0
    assert read_all(store, "empty") == b""
    assert [info.size for info in store.list()] == [0]


def test_multi_part_object_round_trips_in_bounded_chunks(store: BlobStore) -> None:
    size = 12 * MiB + 123
    expected = hashlib.sha256(b"".join(random_chunks(size))).hexdigest()

    assert store.write_stream("big.bin", random_chunks(size)) == size

    digest, largest = hashlib.sha256(), 0
    for chunk in store.open_stream("big.bin", chunk_size=256 * 1024):
        digest.update(chunk)
        largest = max(largest, len(chunk))
    assert digest.hexdigest() == expected
    assert largest <= 256 * 1024
    assert [(info.key, info.size) for info in store.list()] == [("big.bin", size)]


def test_large_s3_object_is_uploaded_in_parts(s3_bucket: str, s3_endpoint_url: str) -> None:
    store = S3BlobStore(s3_bucket, S3_PREFIX, endpoint_url=s3_endpoint_url, part_size=PART_SIZE)
    # One huge chunk still has to be cut into parts of part_size.
    store.write_stream("big.bin", [b"x" * (12 * MiB)])
    store.write_stream("small.bin", [b"x" * (PART_SIZE - 1)])

    big = store.client.head_object(Bucket=s3_bucket, Key=f"{S3_PREFIX}/big.bin")
    small = store.client.head_object(Bucket=s3_bucket, Key=f"{S3_PREFIX}/small.bin")
    # S3 gives a multipart object the ETag "<md5 of part md5s>-<part count>".
    assert big["ETag"].strip('"').endswith("-3")
    assert "-" not in small["ETag"]


def test_jsonl_round_trip(store: BlobStore) -> None:
    records = [
        {"url": "https://example.com/", "status": "success", "content": "Grüße\nzweite Zeile"},
        {"url": "https://example.com/b", "status": "failed", "error": None, "metadata": {"tries": [1, 2]}},
    ]
    written = store.write_jsonl("run/result.jsonl", records)

    assert list(store.read_jsonl("run/result.jsonl")) == records
    raw = read_all(store, "run/result.jsonl")
    assert written == len(raw)
    assert raw.count(b"\n") == len(records)


def test_jsonl_lines_split_across_read_chunks(store: BlobStore) -> None:
    # ~3 MiB of records, so line boundaries fall inside the 1 MiB read chunks.
    records = [{"i": i, "text": "x" * (i % 500)} for i in range(12_000)]
    store.write_jsonl("many.jsonl", iter(records))

    assert list(store.read_jsonl("many.jsonl")) == records


def test_jsonl_content_type_on_s3(s3_bucket: str, s3_endpoint_url: str) -> None:
    store = S3BlobStore(s3_bucket, endpoint_url=s3_endpoint_url)
    store.write_jsonl("r.jsonl", [{"a": 1}])

    head = store.client.head_object(Bucket=s3_bucket, Key="r.jsonl")
    assert head["ContentType"] == JSONL_CONTENT_TYPE


def test_list_by_prefix_with_sizes_sorted_by_key(store: BlobStore) -> None:
    contents = {"a/b": b"1", "a-c": b"22", "a_d": b"333", "a/x/y": b"4444", "ab/1": b"55555", "b/1": b""}
    for key, data in contents.items():
        store.write_stream(key, [data])
    started = datetime.now(UTC)

    listed = list(store.list())
    # Byte order, as S3 lists: '-' < '/' < '_'.
    assert [info.key for info in listed] == ["a-c", "a/b", "a/x/y", "a_d", "ab/1", "b/1"]
    assert {info.key: info.size for info in listed} == {key: len(data) for key, data in contents.items()}
    for info in listed:
        assert info.last_modified.utcoffset() == timedelta(0)
        assert abs(info.last_modified - started) < timedelta(minutes=1)

    assert [info.key for info in store.list("a/")] == ["a/b", "a/x/y"]
    assert [info.key for info in store.list("a")] == ["a-c", "a/b", "a/x/y", "a_d", "ab/1"]
    assert [info.key for info in store.list("a/x")] == ["a/x/y"]
    assert list(store.list("nothing/here/")) == []


def test_exists_and_delete(store: BlobStore) -> None:
    store.write_stream("p/q.txt", [b"data"])

    assert store.exists("p/q.txt")
    assert not store.exists("p/other.txt")
    assert not store.exists("p")

    assert store.delete("p/q.txt") is True
    assert not store.exists("p/q.txt")
    assert store.delete("p/q.txt") is False
    assert list(store.list()) == []


def test_missing_key(store: BlobStore) -> None:
    with pytest.raises(BlobNotFoundError, match=r"no/such\.jsonl") as caught:
        store.open_stream("no/such.jsonl")
    assert isinstance(caught.value, KeyError)
    assert caught.value.key == "no/such.jsonl"

    with pytest.raises(BlobNotFoundError):
        store.read_jsonl("no/such.jsonl")


INVALID_KEYS = {
    "": "is empty",
    "/etc/passwd": "absolute",
    "a/../b": "'..' segment",
    "./a": "'.' segment",
    "a\\b": "backslash",
    "a\x00b": "NUL",
    "a//b": "empty segment",
    "a/": "empty segment",
    ".hidden": "starts with a letter",
    "a b": "only letters",
}


@pytest.mark.parametrize("key", INVALID_KEYS)
def test_invalid_keys_rejected_with_a_fix(key: str) -> None:
    with pytest.raises(InvalidBlobKeyError, match=INVALID_KEYS[key]):
        validate_key(key)


@pytest.mark.parametrize("key", ["../escape", "/abs", "a//b", ""])
def test_invalid_keys_rejected_by_every_operation(store: BlobStore, key: str) -> None:
    for operation in (
        lambda: store.write_stream(key, [b"x"]),
        lambda: store.write_jsonl(key, [{}]),
        lambda: store.open_stream(key),
        lambda: store.exists(key),
        lambda: store.delete(key),
        lambda: store.url(key),
    ):
        with pytest.raises(InvalidBlobKeyError):
            operation()
    with pytest.raises(InvalidBlobKeyError):
        list(store.list("../"))


def test_failed_write_keeps_the_previous_object(store: BlobStore, tmp_path: Path) -> None:
    store.write_stream("run/result.jsonl", [b"old"])

    def failing() -> Iterator[bytes]:
        # More than one part, so the S3 backend has a multipart upload open when it fails.
        yield from random_chunks(PART_SIZE + MiB)
        raise RuntimeError("crawl died")

    with pytest.raises(RuntimeError, match="crawl died"):
        store.write_stream("run/result.jsonl", failing())
    with pytest.raises(RuntimeError, match="crawl died"):
        store.write_stream("run/never.jsonl", failing())

    assert read_all(store, "run/result.jsonl") == b"old"
    assert not store.exists("run/never.jsonl")
    assert [(info.key, info.size) for info in store.list()] == [("run/result.jsonl", 3)]
    if isinstance(store, S3BlobStore):
        assert "Uploads" not in store.client.list_multipart_uploads(Bucket=store.bucket)
    else:
        assert sorted(p.name for p in (tmp_path / "blobs").rglob("*")) == ["result.jsonl", "run"]


def test_only_the_local_stores_own_temp_files_count_as_abandoned_writes(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    store = LocalBlobStore(root)
    store.write_stream("run/result.jsonl", [b"kept"])
    others = [root / "run" / ".notes", root / ".hidden" / ".result.jsonl.abc_1234.tmp", root / "run" / "x.tmp"]
    for path in [root / "run" / ".result.jsonl.abc_1234.tmp", *others]:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x")

    assert store.remove_abandoned_writes(older_than=datetime.now(UTC) + timedelta(seconds=1)) == 1
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == sorted(
        ["run/result.jsonl", *(p.relative_to(root).as_posix() for p in others)]
    )


def test_readers_see_the_previous_object_while_a_write_is_in_progress(store: BlobStore) -> None:
    store.write_stream("k", [b"old"])
    seen: list[tuple[bytes, list[int]]] = []

    def chunks() -> Iterator[bytes]:
        yield from random_chunks(PART_SIZE + MiB)
        seen.append((read_all(store, "k"), [info.size for info in store.list()]))
        yield b"tail"

    store.write_stream("k", chunks())

    assert seen == [(b"old", [3])]
    assert next(store.list()).size == PART_SIZE + MiB + 4


def test_run_result_key() -> None:
    key = run_result_key(workspace_id=3, pipeline_id="17", run_id="2f1c-ab")

    assert key == "pipeline_runs/3/17/2f1c-ab/result.jsonl"
    assert validate_key(key) == key
    with pytest.raises(InvalidBlobKeyError, match="run_id 'a/b'"):
        run_result_key(workspace_id=3, pipeline_id=17, run_id="a/b")


def test_urls(tmp_path: Path) -> None:
    assert LocalBlobStore(tmp_path).url("a/b.jsonl") == (tmp_path / "a" / "b.jsonl").as_uri()
    client = boto3.client("s3", region_name="us-east-1")
    assert S3BlobStore("bkt", "/x/y/", client=client).url("a/b.jsonl") == "s3://bkt/x/y/a/b.jsonl"
    assert S3BlobStore("bkt", client=client).url("a/b.jsonl") == "s3://bkt/a/b.jsonl"


def test_s3_part_size_below_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="minimum"):
        S3BlobStore("bkt", client=object(), part_size=MiB)


def test_s3_store_prefix_keeps_stores_apart(s3_bucket: str, s3_endpoint_url: str) -> None:
    first = S3BlobStore(s3_bucket, "one", endpoint_url=s3_endpoint_url)
    second = S3BlobStore(s3_bucket, "one-more", endpoint_url=s3_endpoint_url)
    first.write_stream("k", [b"1"])
    second.write_stream("k", [b"2"])

    assert [info.key for info in first.list()] == ["k"]
    assert read_all(first, "k") == b"1"
    assert read_all(second, "k") == b"2"
