"""The writer lease in production shape: separate processes, each with its own RAYLIFT_HOME (two Airflow workers
on two hosts), contend for one lease kept in one store, a shared directory or an s3:// prefix on a real moto
server. Each child is ``python -c`` running ``worker`` below with a JSON spec."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raylift.lease import (
    Lease,
    LeaseBusyError,
    LeaseError,
    LeaseLostError,
    LeaseManager,
    StaleWriteError,
    _Record,
    new_holder_id,
)
from raylift.store import LocalStore, ObjectStore, open_store

ROOT = Path(__file__).resolve().parents[1]
KEY = "_raylift/test-cluster/lease"
BUCKET = "raylift-lease"
RECORD = "_raylift/test-cluster/serve_write.json"
MARK = "lease-test: "  # a child's messages to the test (Airflow's logging writes to stdout too)


# -- the child processes ---------------------------------------------------------------------------------------
def worker(spec: dict[str, Any]) -> None:
    """One contender in its own process: ``contend``, ``race``, ``hold`` (until killed or its lease is lost) or
    ``serve_lock``."""
    os.environ["RAYLIFT_HOME"] = spec["home"]
    go = Path(spec["go"]) if spec.get("go") else None
    if spec["mode"] == "serve_lock":  # the operators' path: serve_writer on a target whose state store is shared
        from raylift.release.writer import cluster_lock
        from raylift.targets.local import LocalTarget

        target = LocalTarget(model_store=spec["uri"])
        _wait_for(go)
        for _ in range(spec["rounds"]):
            with cluster_lock(target, wait_s=120) as lease:
                start = time.monotonic()
                time.sleep(spec["hold_s"])
                _append(spec["log"], getattr(lease, "token", 0), start, time.monotonic())  # (the flock yielded None)
        return
    manager = LeaseManager(open_store(spec["uri"]), KEY)
    holder = new_holder_id()
    if spec["mode"] == "fenced":  # checks its fence, is paused before its write (the go file), then writes
        lease = manager.acquire(holder, ttl_s=spec["ttl_s"], wait_s=30)
        ticket = manager.prepare_write(lease, RECORD).check()  # the last fencing check before the write
        tell({"token": lease.token, "holder": holder})
        _wait_for(go)
        try:
            ticket.write(b"stale")
        except LeaseLostError as exc:
            tell({"refused": str(exc), "type": type(exc).__name__})
        else:
            tell({"refused": None})
        return
    if spec["mode"] == "hold":
        with manager.hold(holder, ttl_s=spec["ttl_s"], wait_s=30) as lease:
            tell({"token": lease.token, "holder": holder})
            while True:  # a writer paused (SIGSTOP) and resumed sees its lease lost here, and stops
                time.sleep(0.1)
                if not manager.is_current(lease):
                    tell({"current": False})
                    return
    if spec["mode"] == "race":  # all claim a free lease at the same instant, round after round
        store = open_store(spec["uri"])
        managers = [LeaseManager(store, f"{KEY}-{r}") for r in range(spec["rounds"])]
        managers[0].current()  # the store's client is made before the first claim, not in it
        tell("ready")
        _wait_for(go)
        start = float(go.read_text())  # type: ignore[union-attr]
        won = []
        for r, one in enumerate(managers):
            _sleep_until(start + r * 0.25)
            try:
                one.try_acquire(holder, 60)
                won.append(r)
            except LeaseBusyError:
                pass
        tell(won)
        return
    _wait_for(go)
    counter = Path(spec["counter"])
    for hold_s in spec["holds"]:
        with manager.hold(holder, ttl_s=spec["ttl_s"], wait_s=120) as lease:
            start = time.monotonic()
            seen = int(counter.read_text() or 0)  # a read-modify-write that only a lease keeps whole
            time.sleep(hold_s)
            manager.fence(lease)
            counter.write_text(str(seen + 1))
            _append(spec["log"], lease.token, start, time.monotonic())


def _wait_for(go: Path | None) -> None:
    while go is not None and not go.exists():
        time.sleep(0.02)


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time() - 0.005))
    while time.time() < t:  # the last few milliseconds spun, so the claims really start together
        pass


def tell(message: Any) -> None:
    """One message line to the test, in one write: ``print`` writes the text and its newline apart, and the lease's
    renewal thread logged a warning between them (seen as ``{"current": false}2026-...`` on one line)."""
    sys.stdout.write(f"{MARK}{json.dumps(message)}\n")
    sys.stdout.flush()


def _append(log: str, token: int, start: float, end: float) -> None:
    with open(log, "a") as fh:  # one short O_APPEND write per line: lines never interleave
        fh.write(f"{token} {start:.6f} {end:.6f} {os.getpid()}\n")


def spawn(spec: dict[str, Any], tmp_path: Path, name: str) -> subprocess.Popen[str]:
    home = tmp_path / f"home-{name}"
    home.mkdir()
    code = "import json, sys; from tests.test_lease import worker; worker(json.loads(sys.argv[1]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, json.dumps({**spec, "home": str(home)})], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "RAYLIFT_HOME": str(home)},
    )  # fmt: skip


def message(proc: subprocess.Popen[str]) -> Any:
    """The child's next message on stdout (other lines are its logs)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(MARK):
            return json.loads(line.removeprefix(MARK))
    raise AssertionError(f"the child exited without a message: {proc.communicate(timeout=30)[1][-3000:]}")


def finish(procs: list[subprocess.Popen[str]], timeout: float = 240) -> None:
    for proc in procs:
        _, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-3000:]


def sections(log: Path) -> list[tuple[int, float, float, int]]:
    """The critical sections from the shared log, in the order they started."""
    rows = [line.split() for line in log.read_text().splitlines()]
    return sorted(((int(t), float(s), float(e), int(p)) for t, s, e, p in rows), key=lambda r: r[1])


def assert_one_at_a_time(rows: list[tuple[int, float, float, int]]) -> None:
    overlaps = [(a, b) for a, b in zip(rows, rows[1:], strict=False) if b[1] < a[2]]
    assert not overlaps, f"critical sections overlap: {overlaps}"
    tokens = [r[0] for r in rows]
    assert tokens == sorted(set(tokens)), f"fencing tokens do not strictly increase in section order: {tokens}"


# -- the stores -------------------------------------------------------------------------------------------------
@pytest.fixture(params=["dir", "s3"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """One store every contender sees: a directory (shared between hosts over NFS/EFS in production) or an s3://
    prefix on the moto server (the ``aws`` fixture's environment reaches the children)."""
    if request.param == "dir":
        yield str(tmp_path / "shared-state")
        return
    import boto3

    request.getfixturevalue("aws")
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    yield f"s3://{BUCKET}/state"


def manager_for(uri: str) -> LeaseManager:
    return LeaseManager(open_store(uri), KEY)


# -- the tests ----------------------------------------------------------------------------------------------------
def test_processes_with_their_own_homes_take_turns_and_tokens_grow(store_uri: str, tmp_path: Path) -> None:
    """Three processes, four sections each (one held past the TTL: the renewal keeps it), a read-modify-write
    of a shared counter inside: no two sections overlap, no increment is lost, tokens grow section by section."""
    log, counter, go = tmp_path / "sections.log", tmp_path / "counter", tmp_path / "go"
    counter.write_text("0")
    spec = {"mode": "contend", "uri": store_uri, "log": str(log), "counter": str(counter), "go": str(go),
            "ttl_s": 8.0}  # fmt: skip
    # TTLs of seconds, not fractions: on the loaded 2-core box (make test's two parts) a renewal due every TTL/3
    # was late by more than a 3 s TTL, and the holder lost its lease (seen: LeaseLostError, make test here)
    procs = [spawn({**spec, "holds": [10.0 if i == 0 else 0.05] + [0.05] * 3}, tmp_path, str(i)) for i in range(3)]
    time.sleep(1)
    go.touch()
    finish(procs)
    rows = sections(log)
    assert len(rows) == 12 and counter.read_text() == "12"
    assert_one_at_a_time(rows)
    assert len({r[3] for r in rows}) == 3


def test_exactly_one_of_simultaneous_claims_wins(store_uri: str, tmp_path: Path) -> None:
    """Four processes claim a free lease at the same instant, twenty times: each time exactly one wins (the
    store's compare-and-swap: S3's conditional put, the directory's exclusive create)."""
    go = tmp_path / "go"
    procs = [spawn({"mode": "race", "uri": store_uri, "go": str(go), "rounds": 20}, tmp_path, str(i)) for i in range(4)]
    assert [message(p) for p in procs] == ["ready"] * 4
    (tmp_path / "go.tmp").write_text(str(time.time() + 0.5))
    (tmp_path / "go.tmp").rename(go)  # whole, at once: a child polling for the file never reads it half-written
    won = [message(p) for p in procs]
    finish(procs)
    winners = [sum(r in w for w in won) for r in range(20)]
    assert winners == [1] * 20, f"winners per round: {winners}"


def test_a_killed_holder_loses_the_lease_when_it_expires(store_uri: str, tmp_path: Path) -> None:
    ttl = 6.0  # 2 s was less than a late renewal on the loaded box: the live holder lost it (make test here)
    holder = spawn({"mode": "hold", "uri": store_uri, "ttl_s": ttl}, tmp_path, "holder")
    try:
        held = message(holder)
        manager = manager_for(store_uri)
        time.sleep(ttl * 1.5)  # past its first expiry: its renewals keep it
        with pytest.raises(LeaseBusyError, match=held["holder"]):
            manager.acquire(new_holder_id(), ttl_s=30, wait_s=0.5)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=30)
    killed = time.monotonic()
    mine = manager.acquire(new_holder_id(), ttl_s=30, wait_s=30)
    waited = time.monotonic() - killed
    assert mine.token == held["token"] + 1
    assert ttl / 3 < waited < ttl + 5  # not before its last renewal ran out, soon after
    manager.release(mine)


def test_a_paused_holder_finds_its_lease_taken_over_and_cannot_take_it_back(store_uri: str, tmp_path: Path) -> None:
    """SIGSTOP a holder past its expiry (a long GC pause, a frozen VM), take the lease over, resume it: its
    fencing check fails, its renewal fails, and its release leaves the new holder's lease alone."""
    ttl = 2.0
    paused = spawn({"mode": "hold", "uri": store_uri, "ttl_s": ttl}, tmp_path, "paused")
    try:
        held = message(paused)
        paused.send_signal(signal.SIGSTOP)
        manager = manager_for(store_uri)
        mine = manager.acquire(new_holder_id(), ttl_s=60, wait_s=30)
        assert mine.token == held["token"] + 1
        stale = Lease(held["token"], held["holder"], 0.0)
        assert not manager.is_current(stale)
        with pytest.raises(LeaseLostError, match=f"taken over: {mine.holder} holds token {mine.token}"):
            manager.fence(stale)
        paused.send_signal(signal.SIGCONT)
        assert message(paused) == {"current": False}
        _, err = paused.communicate(timeout=30)
        assert paused.returncode == 0, err[-3000:]
    finally:
        if paused.poll() is None:
            paused.send_signal(signal.SIGCONT)
            paused.kill()
    assert manager.is_current(mine, margin_s=30)  # its renewal and release did not touch the new lease
    manager.release(mine)
    assert manager.current() is None


def test_serve_writer_lock_holds_across_raylift_homes(store_uri: str, tmp_path: Path) -> None:
    """The issue's bug: two workers (different RAYLIFT_HOME) both held ``cluster_lock`` for one cluster, since the
    lock was a file under each one's home. Now the lease is in the target's state store (here its model store)."""
    log, go = tmp_path / "sections.log", tmp_path / "go"
    spec = {"mode": "serve_lock", "uri": store_uri, "log": str(log), "go": str(go), "rounds": 2, "hold_s": 1.0}
    procs = [spawn(spec, tmp_path, str(i)) for i in range(2)]
    time.sleep(1)
    go.touch()
    finish(procs)
    rows = sections(log)
    assert len(rows) == 4
    assert_one_at_a_time(rows)


def test_a_writer_paused_after_its_fence_check_is_refused_by_the_store(store_uri: str, tmp_path: Path) -> None:
    """Issue 45: holder A checks its fence, then pauses before its write; its lease expires, B takes it over and
    writes the record; A's write, resumed, is refused by the store itself (S3 If-Match; the directory's compare
    under its lock), and B's record is what stays."""
    go = tmp_path / "go"
    paused = spawn({"mode": "fenced", "uri": store_uri, "ttl_s": 1.0, "go": str(go)}, tmp_path, "a")
    try:
        held = message(paused)
        manager = manager_for(store_uri)
        mine = manager.acquire(new_holder_id(), ttl_s=60, wait_s=30)  # after A's lease expired
        assert mine.token == held["token"] + 1
        manager.fenced_write(mine, RECORD, b"new holder's")
        go.touch()
        got = message(paused)
        assert got["type"] == "StaleWriteError", got
        assert f"changed since this holder's fencing check, by {mine.holder} (token {mine.token})" in got["refused"]
        finish([paused], timeout=60)
    finally:
        if paused.poll() is None:
            paused.kill()
    assert open_store(store_uri).read_bytes(RECORD) == b"new holder's"
    with pytest.raises(LeaseLostError, match="refused the write"):  # an old token against a newer record
        manager.fenced_write(Lease(held["token"], held["holder"], time.time() + 60), RECORD, b"stale")


def test_the_serve_writer_commits_its_fenced_record_before_the_put(tmp_path: Path) -> None:
    """The Serve PUT (Ray has no conditional PUT) is preceded by the fenced, store-conditional record: a stale
    holder's ticket is refused and nothing is sent."""
    from raylift.release.writer import (
        ServeConfigConflictError,
        _prepare,
        _put,
        cluster_lease,
        write_record_key,
    )
    from raylift.targets.local import LocalTarget

    target = LocalTarget(model_store=str(tmp_path / "store"))
    sent: list[dict[str, Any]] = []
    target.apply_serve_config = sent.append  # type: ignore[method-assign]
    manager = cluster_lease(target)
    a = manager.acquire("a", ttl_s=0.5, wait_s=5)
    ticket = manager.prepare_write(a, write_record_key(target)).check()  # A checked its fence, then paused
    b = manager.acquire("b", ttl_s=60, wait_s=30)
    _put(target, _prepare(target, manager, b), {"applications": []})
    with pytest.raises(StaleWriteError, match="refused the write"):
        ticket.write(b"stale")
    with pytest.raises(ServeConfigConflictError, match="no longer holds"):  # through the writer: its own re-check
        _put(target, ticket, {"applications": [{"name": "stale"}]})
    assert sent == [{"applications": []}]
    assert json.loads(target.state_store().read_bytes(write_record_key(target)))["holder"] == "b"


# -- one process: the record's rules --------------------------------------------------------------------------------
def test_release_then_acquire_gives_the_next_token_and_a_holder_may_reenter(tmp_path: Path) -> None:
    manager = LeaseManager(LocalStore(tmp_path), KEY)
    first = manager.acquire("a", ttl_s=30, wait_s=0)
    again = manager.acquire("a", ttl_s=30, wait_s=0)  # the same holder: the same token, a later expiry
    assert (again.token, again.holder) == (first.token, "a") and again.expires_at >= first.expires_at
    with pytest.raises(LeaseBusyError, match="held by a"):
        manager.acquire("b", ttl_s=30, wait_s=0)
    manager.release(first)
    assert manager.current() is None
    second = manager.acquire("b", ttl_s=30, wait_s=0)
    assert second.token == first.token + 1
    with pytest.raises(LeaseLostError):
        manager.renew(first, 30)
    manager.release(first)  # a stale release leaves the new holder alone
    assert manager.current() == second


def test_the_directory_keeps_the_newest_generations_only(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    manager = LeaseManager(store, KEY)
    lease = manager.acquire("a", ttl_s=30, wait_s=0)
    for _ in range(40):
        lease = manager.renew(lease, 30)
    names = sorted(int(p.name.split(".")[1]) for p in store.path(KEY).iterdir())
    assert names == list(range(41 - 16, 42)) and manager.is_current(lease)
    assert not [p for p in store.path(KEY).iterdir() if not p.name.startswith("lease.")]  # no temporaries left
    # a writer far behind (it read generation 4) recreates pruned generation 5: the newer ones exist, so it lost
    stale = _Record(lease.token + 1, "b", time.time() + 30, generation=5)
    assert not manager._slot.swap(stale, "4")
    assert not store.path(f"{KEY}/lease.5").exists() and manager.current() == lease


def test_an_unreadable_record_and_an_unknown_store_are_named(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.write_bytes(f"{KEY}/lease.1", b"not json")
    with pytest.raises(LeaseError, match="unreadable"):
        LeaseManager(store, KEY).current()

    class Memory(ObjectStore):  # a store with no compare-and-swap the lease could use
        uri = "memory://"
        exists = read_bytes = write_bytes = upload_file = list = None  # type: ignore[assignment]

    with pytest.raises(LeaseError, match=r"No lease backend for a Memory \(memory://\)"):
        LeaseManager(Memory(), KEY)


def test_the_release_records_are_written_fenced_under_the_lease(store_uri: str) -> None:
    """Issue 45: the anchor and last good records, written under a release's lease (DeploymentState.fenced), are
    refused once the lease moved on: a holder whose lease expired and was taken over lands no old anchor over the
    new holder's, and an old token cannot overwrite a newer holder's record."""
    from raylift.release.state import DeploymentState

    store = open_store(store_uri)
    manager = LeaseManager(store, KEY)
    old = manager.acquire(new_holder_id(), ttl_s=1, wait_s=5)
    stale = DeploymentState(store, "test-cluster", "llm").fenced(manager, old)
    stale.write_anchor("run-a", [], None)  # while it holds: written
    assert stale.anchor()["run_id"] == "run-a"
    time.sleep(1.5)
    new = manager.acquire(new_holder_id(), ttl_s=60, wait_s=30)
    fresh = DeploymentState(open_store(store_uri), "test-cluster", "llm").fenced(LeaseManager(open_store(store_uri), KEY),
                                                                               new)
    fresh.write_anchor("run-b", [0.01], None)
    fresh.record_good("run-b", {"applications": [{"name": "llm", "args": {"model": "/b"}}]})
    with pytest.raises(LeaseLostError):
        stale.write_anchor("run-a", [], None)
    with pytest.raises(LeaseLostError):
        stale.record_good("run-a", {"applications": []})
    assert fresh.anchor()["run_id"] == "run-b" and fresh.last_good()["run_id"] == "run-b"
    with pytest.raises(LeaseLostError, match="refused the write"):  # an old token against the newer record
        DeploymentState(store, "test-cluster", "llm").fenced(
            manager, Lease(old.token, old.holder, time.time() + 60)).write_anchor("run-a", [], None)
    assert fresh.anchor()["run_id"] == "run-b"
