"""Notification load, measured as a user waits for it: through the real daemon (`dagster dev` with
deploy/dagster.yaml over our code location, the embedded default), whose notification_sender sensor
posts what is due from the code server every 5 s.

A workspace has 10 endpoints subscribed to run.succeeded, one per path of a receiver
(bench/_receiver.py, uvicorn in its own process on 127.0.0.1, answering 204 and counting webhook-ids).
A load queues N run.succeeded events in one transaction, as the run-status sensors would after N
runs: N x 10 deliveries. It is timed from the commit to the moment every delivery is `succeeded` in
the app database and the receiver has every webhook-id. A small load (100 events) runs first, then
the issue's (1,000), after a warm-up of one event that pays the sender's first-send costs; the code
server's RSS is sampled all along.

Target (notifications issue): 1,000 events to 10 endpoints delivered within 120 s with the sender's
memory flat: what the large load's sending adds to the code server's peak RSS (over its RSS at the
commit) at most FLAT_RATIO times what the small load's adds, or FLAT_SLACK_MIB more, whichever is
larger. Exits 1 on a miss, or when a
delivery did not succeed, was not received, or was received twice.

`--smoke` starts the same `dagster dev` and receiver with loads of 1 and 3 events: it prints the same
figures and exits 1 only when a delivery did not succeed, was not received, or was received twice,
whatever the time and the memory.
"""

from __future__ import annotations

import argparse
import itertools
import sqlite3
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from _corpus import (
    OUR_LOCATION,
    OUR_LOCATION_YAML,
    DagsterDev,
    EmbeddedHome,
    MiB,
    OtherLoad,
    TreeSampler,
    dagster_dev_parts,
    free_port,
    wait_for,
)
from _receiver import Receiver
from run_overhead import CpuMeter

ENDPOINTS = 10
TARGET_SECONDS = 120.0
# Flat memory: what a pass holds is bounded by its batch (500 claimed deliveries and their results),
# so 9,000 more deliveries must not raise the peak. Keeping just each extra delivery's body (585
# bytes) would add 5 MiB, its claimed row and result as well (about 2 KiB) 18 MiB. Below 5 MiB is
# what runs of the same sender differ by: glibc gives each thread that allocates its own malloc arena
# and keeps what it freed, and the daemon's ticks land on whichever gRPC worker thread is free.
FLAT_RATIO = 1.2
FLAT_SLACK_MIB = 5.0
SENDER = "notification_sender"
# How long a load may take before the bench stops waiting and reports what it has.
GIVE_UP_SECONDS = 600.0
SMOKE_SMALL, SMOKE_EVENTS = 1, 3


def run_succeeded(workspace_id: int, run_id: str, *, finished: datetime) -> Any:
    """The payload of a one-page pipeline's run.succeeded, as the run-status sensor would build it."""
    from pipelines_dagster.notifications.payloads import CrawlCounts, DocumentCounts, RunEventData

    started = finished - timedelta(seconds=1.4)
    return RunEventData(
        workspace_id=workspace_id,
        pipeline_id=1,
        pipeline_name="Product docs",
        run_id=run_id,
        status="succeeded",
        trigger="schedule",
        started_at=started,
        finished_at=finished,
        duration_seconds=1.4,
        crawls=CrawlCounts(attempted=1, succeeded=1, empty=0, failed=0),
        documents=DocumentCounts(created=0, updated=1, unchanged=0),
        charged_micros=1000,
        new_charge_micros=1000,
        error=None,
        will_retry=False,
        run_url=f"http://127.0.0.1:3000/runs/{run_id}",
    )


def seed_endpoints(home: EmbeddedHome, receiver: Receiver) -> int:
    """A workspace with an endpoint on each of the receiver's paths, subscribed to run.succeeded."""
    from pipelines_dagster.app_db.engine import transaction
    from pipelines_dagster.core.catalog.workspaces import create_workspace
    from pipelines_dagster.core.security.network_policy import NetworkPolicy
    from pipelines_dagster.notifications.destination import DestinationGuard
    from pipelines_dagster.notifications.endpoints import create_endpoint

    guard = DestinationGuard(NetworkPolicy(allowed_networks=(home.env["PIPELINES_CRAWLER_ALLOWED_NETWORKS"],)))
    with transaction(home.sessions) as session:
        workspace_id = create_workspace(session, name="notify load", owner_user_id="bench-notify").workspace.id
        for number in range(receiver.paths):
            create_endpoint(
                session,
                guard,
                workspace_id=workspace_id,
                url=receiver.hook_url(number),
                event_types=["run.succeeded"],
                description=f"receiver path {number}",
            )
    return workspace_id


class Deliveries:
    """The app database's deliveries, read on a connection of the bench's own: read-only in WAL mode,
    so polling never takes the write lock the sender needs (the app's engine begins every
    transaction, reads too, with BEGIN IMMEDIATE)."""

    def __init__(self, database_url: str) -> None:
        import sqlalchemy as sa

        path = sa.make_url(database_url).database
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)

    def close(self) -> None:
        self._db.close()

    def statuses(self, ids: range) -> dict[str, int]:
        rows = self._db.execute(
            "SELECT status, count(*) FROM notification_deliveries WHERE id BETWEEN ? AND ? GROUP BY status",
            (ids.start, ids.stop - 1),
        )
        return dict(rows.fetchall())

    def attempts(self, ids: range) -> int:
        row = self._db.execute(
            "SELECT count(*) FROM notification_attempts WHERE delivery_id BETWEEN ? AND ?", (ids.start, ids.stop - 1)
        ).fetchone()
        return int(row[0])

    def failed_attempts(self, ids: range) -> dict[str, int]:
        """The attempts that failed, by error."""
        rows = self._db.execute(
            "SELECT error, count(*) FROM notification_attempts WHERE delivery_id BETWEEN ? AND ? AND NOT succeeded "
            "GROUP BY error",
            (ids.start, ids.stop - 1),
        )
        return dict(rows.fetchall())

    def message_ids(self, ids: range) -> set[str]:
        rows = self._db.execute(
            "SELECT message_id FROM notification_deliveries WHERE id BETWEEN ? AND ?", (ids.start, ids.stop - 1)
        )
        return {message_id for (message_id,) in rows}


def queue_events(
    home: EmbeddedHome, workspace_id: int, events: int, *, label: str
) -> tuple[range, float, float, float]:
    """Queue `events` run.succeeded events in one transaction: (the delivery ids, seconds the
    queueing took, CPU seconds it took, the epoch time of its commit)."""
    from pipelines_dagster.app_db.engine import transaction
    from pipelines_dagster.notifications.events import queue_run_ended

    finished = datetime.now(UTC)
    started, cpu = time.perf_counter(), time.process_time()
    with transaction(home.sessions) as session:
        ids = [
            delivery_id
            for number in range(events)
            for delivery_id in queue_run_ended(
                session, run_succeeded(workspace_id, f"{label}-{number:05d}", finished=finished)
            )
        ]
    committed = time.time()
    # Ids are handed out in order, never reused (AUTOINCREMENT), and the sender writes no others.
    assert ids == list(range(ids[0], ids[-1] + 1)), "the deliveries of one load should have consecutive ids"
    return range(ids[0], ids[-1] + 1), time.perf_counter() - started, time.process_time() - cpu, committed


def sender_ticks(dev: DagsterDev, began: float, committed: float) -> list[Any]:
    """The sender's ticks that sent something of a load queued from `began` and committed at
    `committed`, or failed, oldest first, once the last of them has ended."""

    def ended() -> list[Any] | None:
        # A tick ends within the daemon's 60 s sensor timeout, so one that ended after the commit
        # began after `began` - 60 s (one may have waited out the queueing on its write lock).
        ticks = [tick for tick in dev.ticks(SENDER, after=began - 60) if (tick.end_timestamp or 1e12) >= committed]
        if any(tick.end_timestamp is None for tick in ticks):
            return None
        busy = [tick for tick in ticks if tick.error or (tick.skip_reason or "").startswith("sent")]
        return sorted(busy, key=lambda tick: tick.timestamp)

    return wait_for("the sender's last tick to end", ended, timeout=90, every=0.5)


@dataclass(frozen=True, kw_only=True)
class Load:
    """What one load did, from the queueing to the last delivery."""

    events: int
    deliveries: int
    queue_seconds: float
    queue_cpu: float
    seconds: float
    """From the commit to every delivery succeeded and received (or to giving up)."""
    done: bool
    statuses: dict[str, int]
    attempts: int
    failed_attempts: dict[str, int]
    stats: dict[str, Any]
    """The receiver's."""
    missing: int
    committed: float
    ticks: list[Any]
    rss_before: int
    """The code server's, before the queueing."""
    rss_committed: int
    rss_peak: int
    """From the commit to the last delivery."""
    cpu: dict[str, float]
    others: float

    @property
    def growth(self) -> float:
        """MiB the sending added to the code server's peak RSS."""
        return (self.rss_peak - self.rss_committed) / MiB

    def describe(self, baseline: int) -> str:
        count, stats, ticks = self.deliveries, self.stats, self.ticks
        by_status = ", ".join(f"{number} {status}" for status, number in sorted(self.statuses.items()))
        ended = "all succeeded" if self.done else f"NOT all succeeded ({by_status})"
        failed = "; ".join(f"{n} x {error}" for error, n in sorted(self.failed_attempts.items(), key=lambda kv: -kv[1]))
        span = (stats["last_at"] - stats["first_at"]) if stats["first_at"] else 0.0
        first = f"{stats['first_at'] - self.committed:.1f} s" if stats["first_at"] else "-"
        began = f"{ticks[0].timestamp - self.committed:+.1f} s" if ticks else "-"
        durations = ", ".join(
            f"{tick.end_timestamp - tick.timestamp:.1f} s" + " FAILED" * bool(tick.error) for tick in ticks
        )
        gaps = ", ".join(f"{b.timestamp - a.end_timestamp:.1f} s" for a, b in itertools.pairwise(ticks)) or "-"
        errors = "".join(
            f"\n       a sender tick failed: {tick.error.message.strip().splitlines()[0][:300]}"
            for tick in ticks
            if tick.error
        )
        cpu = ", ".join(f"{name} {seconds / count * 1000:.2f}" for name, seconds in sorted(self.cpu.items()))
        return (
            f"{self.events:,} events -> {count:,} deliveries to {ENDPOINTS} endpoints: {ended} {self.seconds:.1f} s "
            f"after the commit ({count / self.seconds:.0f} deliveries/s); queued in {self.queue_seconds:.1f} s "
            f"({self.queue_cpu:.1f} CPU-s), one transaction\n"
            f"       first delivery {first} after the commit (the sender's first tick began {began} from it), then "
            f"{stats['posts']:,} posts in {span:.1f} s ({stats['posts'] / max(span, 1e-9):.0f}/s); {self.attempts:,} "
            f"attempts logged, {sum(self.failed_attempts.values())} failed{': ' + failed if failed else ''}\n"
            f"       receiver: {stats['unique']:,} webhook-ids, {stats['duplicates']} duplicates, {stats['unsigned']} "
            f"unsigned, {stats['strays']} strays, per path {min(stats['per_path'])}-{max(stats['per_path'])}; "
            f"{self.missing} queued ids not received\n"
            f"       sender ticks that sent: {len(ticks)} ({durations}), gaps between them: {gaps}{errors}\n"
            f"       code server RSS: {self.rss_before / MiB:.1f} MiB before the queueing, "
            f"{self.rss_committed / MiB:.1f} at the commit, peak {self.rss_peak / MiB:.1f} while sending: "
            f"+{self.growth:.1f} MiB "
            f"(+{(self.rss_peak - baseline) / MiB:.1f} over the warm baseline)\n"
            f"       CPU ms per delivery: {cpu}; the rest of the machine {self.others:.0%} busy"
        )


def measure(
    dev: DagsterDev, home: EmbeddedHome, receiver: Receiver, deliveries: Deliveries, workspace_id: int, events: int
) -> Load:
    """Queue a load, wait until every delivery succeeded and arrived, and say how it went."""
    import psutil

    assert dev.process is not None
    receiver.reset()
    server = dev.code_server(OUR_LOCATION)
    receiver_process = psutil.Process(receiver.pid)
    receiver_cpu = sum(receiver_process.cpu_times()[:2])
    rss_before = server.memory_info().rss
    ours = (receiver.pid, *(process.pid for _part, process, _command in dagster_dev_parts(dev.process.pid)))
    began = time.time()
    with CpuMeter(dev.process.pid) as cpu, OtherLoad(also=ours) as load:
        ids, queue_seconds, queue_cpu, committed = queue_events(
            home, workspace_id, events, label=f"load-{events}-{time.time_ns()}"
        )
        # Sampled from the commit: while the queueing's transaction held the write lock, the other
        # sensors' ticks waited on it, piled up in the code server, and grew it by themselves.
        with TreeSampler(server.pid, interval=0.05) as sampler:
            rss_committed = sampler.peak_main
            done_at = None
            while time.time() - committed < GIVE_UP_SECONDS:
                if deliveries.statuses(ids).get("succeeded", 0) == len(ids) and receiver.stats()["unique"] >= len(ids):
                    done_at = time.time()
                    break
                time.sleep(0.1)
    parts = {name: seconds for name, seconds in cpu.parts.items() if seconds >= 0.05}
    parts["receiver"] = sum(receiver_process.cpu_times()[:2]) - receiver_cpu
    return Load(
        events=events,
        deliveries=len(ids),
        queue_seconds=queue_seconds,
        queue_cpu=queue_cpu,
        seconds=(done_at or time.time()) - committed,
        done=done_at is not None,
        statuses=deliveries.statuses(ids),
        attempts=deliveries.attempts(ids),
        failed_attempts=deliveries.failed_attempts(ids),
        stats=receiver.stats(),
        missing=len(deliveries.message_ids(ids) - receiver.ids()),
        committed=committed,
        ticks=sender_ticks(dev, began, committed),
        rss_before=rss_before,
        rss_committed=rss_committed,
        rss_peak=sampler.peak_main,
        cpu=parts,
        others=load.share,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1000, help="run.succeeded events of the load judged")
    parser.add_argument("--small", type=int, default=100, help="events of the smaller load run first")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a tiny run (loads of {SMOKE_SMALL} and {SMOKE_EVENTS} events) that proves the bench works: exit 1 "
        "only when a delivery fails, goes missing or arrives twice, whatever the time and the memory",
    )
    args = parser.parse_args()
    if args.smoke:
        args.small, args.events = SMOKE_SMALL, SMOKE_EVENTS

    with ExitStack() as stack:
        receiver = stack.enter_context(Receiver(paths=ENDPOINTS))
        home = stack.enter_context(EmbeddedHome(PIPELINES_DAGSTER_URL=f"http://127.0.0.1:{free_port()}"))
        dev = DagsterDev(
            home, workspace_yaml="load_from:\n" + OUR_LOCATION_YAML, locations=(OUR_LOCATION,), sensors=(SENDER,)
        )
        stack.callback(dev.stop)
        dev.start()
        workspace_id = seed_endpoints(home, receiver)
        deliveries = Deliveries(home.settings.resolved_database_url)
        stack.callback(deliveries.close)
        print(
            f"dagster dev over {OUR_LOCATION}, DAGSTER_HOME {dev.home} (deploy/dagster.yaml), SQLite app database; "
            f"{ENDPOINTS} endpoints on a receiver (uvicorn, its own process) at 127.0.0.1:{receiver.port}"
        )
        warm_up = measure(dev, home, receiver, deliveries, workspace_id, 1)
        if not warm_up.done:
            raise SystemExit(f"the warm-up's {warm_up.deliveries} deliveries did not all succeed")
        baseline = dev.code_server(OUR_LOCATION).memory_info().rss
        print(f"warm-up, 1 event: {warm_up.seconds:.1f} s; code server's warm baseline {baseline / MiB:.1f} MiB")
        small = measure(dev, home, receiver, deliveries, workspace_id, args.small)
        print("small: " + small.describe(baseline))
        large = measure(dev, home, receiver, deliveries, workspace_id, args.events)
        print("large: " + large.describe(baseline))

    allowed = max(FLAT_RATIO * small.growth, small.growth + FLAT_SLACK_MIB)
    failures = []
    if (not large.done or large.seconds > TARGET_SECONDS) and not args.smoke:
        failures.append(f"{large.deliveries:,} deliveries took {large.seconds:.1f} s, over {TARGET_SECONDS:g} s")
    if large.growth > allowed and not args.smoke:
        failures.append(f"memory is not flat: +{large.growth:.1f} MiB, over {allowed:.1f} MiB")
    for name, result in (("small", small), ("large", large)):
        if not result.done:
            failures.append(f"{name}: not every delivery succeeded ({result.statuses})")
        if result.missing or result.stats["duplicates"]:
            failures.append(
                f"{name}: {result.missing} deliveries not received, {result.stats['duplicates']} received twice"
            )
    print(
        f"memory: the sending's peak RSS growth in the code server, {small.deliveries:,} deliveries "
        f"+{small.growth:.1f} MiB, {large.deliveries:,} +{large.growth:.1f} MiB (flat: at most {allowed:.1f} MiB, "
        f"the larger of {FLAT_RATIO:g}x and +{FLAT_SLACK_MIB:g} MiB)"
    )
    print(
        f"target: {large.deliveries:,} deliveries within {TARGET_SECONDS:g} s: {large.seconds:.1f} s "
        f"({large.deliveries / large.seconds:.0f} deliveries/s)"
        + ("; targets not judged (smoke)" if args.smoke else "")
    )
    print("FAIL: " + "; ".join(failures) if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
