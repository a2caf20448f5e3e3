"""Stream a large object through S3BlobStore to a moto S3 server and back, and check the client's memory.

The server runs as its own process, so only the client's resident memory is measured.

`--smoke` streams a 12 MiB object in 5 MiB parts (a multipart upload all the same): it prints the
same figures and fails only when the bytes do not come back intact, not on the memory limit.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import psutil

from pipelines_dagster.core.storage.blob import MiB
from pipelines_dagster.core.storage.s3_blobs import S3BlobStore

LIMIT_MB = 64
SMOKE_SIZE_MB, SMOKE_PART_SIZE_MB = 12, 5
SEED = 20240601
KEY = "bench/blob.bin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_moto(port: int) -> subprocess.Popen[bytes]:
    command = [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"moto_server exited with code {server.returncode} before answering")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).close()
            return server
        except urllib.error.HTTPError:
            return server  # any HTTP answer means it is serving
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("moto_server did not answer within 30 s")


def generated(size: int, on_chunk: Callable[[bytes], object]) -> Iterator[bytes]:
    """Seeded pseudo-random bytes in 1 MiB chunks, each handed to `on_chunk` as it is produced."""
    rng = random.Random(SEED)
    remaining = size
    while remaining:
        chunk = rng.randbytes(min(MiB, remaining))
        on_chunk(chunk)
        remaining -= len(chunk)
        yield chunk


def ru_maxrss_bytes() -> int:
    # Linux reports kilobytes, macOS bytes.
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


class RssSampler:
    """Samples this process's RSS every ~10 ms; ru_maxrss catches a peak that falls between samples."""

    def __init__(self) -> None:
        self._process = psutil.Process(os.getpid())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._maxrss_before = ru_maxrss_bytes()
        self.before = self.peak = self._process.memory_info().rss
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sampled_peak = self.peak
        self.maxrss = ru_maxrss_bytes()
        # ru_maxrss is the lifetime high; it speaks about this phase only if it rose during it.
        if self.maxrss > self._maxrss_before:
            self.peak = max(self.peak, self.maxrss)

    @property
    def growth(self) -> int:
        return self.peak - self.before


def mib(value: int) -> str:
    return f"{value / MiB:.1f} MiB"


def report(phase: str, size: int, seconds: float, sampler: RssSampler, *, smoke: bool) -> bool:
    """Print a phase's figures; whether its memory stayed within the limit (always, in a smoke run)."""
    passed = sampler.growth <= LIMIT_MB * MiB
    verdict = "not judged (smoke)" if smoke else "PASS" if passed else "FAIL"
    print(f"{phase}: {size} bytes in {seconds:.2f} s = {size / MiB / seconds:.1f} MiB/s")
    print(
        f"{phase}: RSS before {mib(sampler.before)}, peak {mib(sampler.peak)} "
        f"(sampled {mib(sampler.sampled_peak)}, ru_maxrss {mib(sampler.maxrss)}), "
        f"peak growth {mib(sampler.growth)} (limit {LIMIT_MB} MiB): {verdict}"
    )
    return passed or smoke


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=200, help="object size in MiB")
    parser.add_argument("--part-size-mb", type=int, default=8, help="multipart part size in MiB (at least 5)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a tiny run ({SMOKE_SIZE_MB} MiB in {SMOKE_PART_SIZE_MB} MiB parts) that proves the bench works: "
        "exit 1 only when the bytes do not come back intact, whatever the memory",
    )
    args = parser.parse_args()
    if args.smoke:
        args.size_mb, args.part_size_mb = SMOKE_SIZE_MB, SMOKE_PART_SIZE_MB
    size = args.size_mb * MiB

    # moto accepts any credentials, but boto3 refuses to sign a request without some.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    port = free_port()
    server = start_moto(port)
    try:
        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}")
        client.create_bucket(Bucket="bench")
        store = S3BlobStore("bench", client=client, part_size=args.part_size_mb * MiB)

        written_digest = hashlib.sha256()
        with RssSampler() as sampler:
            started = time.perf_counter()
            written = store.write_stream(KEY, generated(size, written_digest.update))
            write_seconds = time.perf_counter() - started
        write_ok = report("write", written, write_seconds, sampler, smoke=args.smoke) and written == size
        parts = client.head_object(Bucket="bench", Key=KEY)["ETag"].strip('"').partition("-")[2]
        print(f"write: stored as a multipart object of {parts} parts" if parts else "write: stored by one put")

        read_digest = hashlib.sha256()
        read = 0
        with RssSampler() as sampler:
            started = time.perf_counter()
            for chunk in store.open_stream(KEY):
                read_digest.update(chunk)
                read += len(chunk)
            read_seconds = time.perf_counter() - started
        read_ok = report("read", read, read_seconds, sampler, smoke=args.smoke) and read == size
        hash_ok = read_digest.hexdigest() == written_digest.hexdigest()
        print(f"sha256 written {written_digest.hexdigest()}")
        print(f"sha256 read    {read_digest.hexdigest()}: {'MATCH' if hash_ok else 'MISMATCH'}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    passed = write_ok and read_ok and hash_ok
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
