"""A writer lease kept in the cluster's own store: one holder at a time across hosts, with fencing tokens.

A file lock holds on one host only; two Airflow workers on two hosts would both "hold" it. This lease lives
where every writer of the cluster can see it (its state store: an ``s3://`` prefix, or a directory that may be
shared between hosts such as NFS/EFS) and changes only by compare-and-swap, so exactly one writer wins each
change. A lease expires (``ttl_s``) unless its holder renews it, so a holder that dies frees it; every new
holder gets a bigger fencing token, so a holder that was paused past its expiry can tell (``fence``) that
someone else has taken over before it writes.

The check before a write is not enough on its own: a holder paused between its check and its write would land
a stale write over the new holder's. So a fenced write (``LeaseManager.fenced_write``, or ``prepare_write`` then
``FencedWrite.commit``) is also conditional at the store: it remembers the record's version when it checks the
fence and writes only if that version is still there (S3's ``If-Match``; a compare under an fcntl lock in a
directory), with its token beside the record; a record a newer holder has written refuses older tokens.

Expiry times are wall-clock seconds written by the holder and read by the others: hosts' clocks must agree to
well within the TTL (NTP does that).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_before_delay, wait_random

from raylift.errors import RayliftError
from raylift.store import TMP_MARK, LocalStore, ObjectStore, S3Store, Version, safe_key

log = logging.getLogger(__name__)


class LeaseError(RayliftError):
    """Base for lease failures."""


class LeaseBusyError(LeaseError):
    """Someone else holds the lease (or won the race for it); the message names the holder."""


class LeaseLostError(LeaseError):
    """The lease this caller held has expired or been taken over: it must not write."""


class StaleWriteError(LeaseLostError):
    """The store itself refused a fenced write: a newer lease holder wrote the record since this holder's fence
    check (the message names it). Nothing was written."""


@dataclass(frozen=True)
class Lease:
    """A held lease: ``token`` grows with every new holder; ``expires_at`` is epoch seconds (as last written)."""

    token: int
    holder: str
    expires_at: float


@dataclass(frozen=True)
class _Record:
    """What the store keeps. ``generation`` grows with every write, so no two writes have the same bytes
    (an S3 ETag is a hash of them) and the directory backend names each write's file by it."""

    token: int
    holder: str
    expires_at: float
    generation: int

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> _Record:
        try:
            raw = json.loads(data)
            return cls(int(raw["token"]), str(raw["holder"]), float(raw["expires_at"]), int(raw["generation"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise LeaseError(f"The lease record at {where} is unreadable ({exc}); remove it by hand.") from exc

    def lease(self) -> Lease:
        return Lease(self.token, self.holder, self.expires_at)


def new_holder_id() -> str:
    """Names a holder in messages: host, pid and a random suffix (two holds in one process differ)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class _Slot(ABC):
    """One lease record with compare-and-swap, the one operation that needs the store's help."""

    where: str

    @abstractmethod
    def read(self) -> tuple[_Record | None, str | None]:
        """The record and its version (None, None when there is none yet)."""

    @abstractmethod
    def swap(self, new: _Record, expected: str | None) -> bool:
        """Write ``new`` only if the version is still ``expected``; False if another writer came first."""


class _S3Slot(_Slot):
    """One object, changed by S3 conditional writes: ``If-None-Match: *`` creates it, ``If-Match: <etag>``
    replaces only the version that was read. S3 answers 412 (or 409 for a concurrent conditional write)
    to the loser."""

    LOST = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"})

    def __init__(self, store: S3Store, key: str) -> None:
        self.client: Any = store.hook.get_conn()
        self.bucket = store.bucket
        self.key = f"{store.prefix}/{safe_key(key)}" if store.prefix else safe_key(key)
        self.where = f"s3://{self.bucket}/{self.key}"

    def read(self) -> tuple[_Record | None, str | None]:
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except Exception as exc:
            if _error_code(exc) in {"NoSuchKey", "404"}:
                return None, None
            raise
        return _Record.from_bytes(got["Body"].read(), self.where), str(got["ETag"])

    def swap(self, new: _Record, expected: str | None) -> bool:
        condition = {"IfNoneMatch": "*"} if expected is None else {"IfMatch": expected}
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=new.to_bytes(),
                                   ContentType="application/json", **condition)
        except Exception as exc:
            if _error_code(exc) in self.LOST or _http_status(exc) in {409, 412}:
                return False
            raise
        return True


class _DirSlot(_Slot):
    """A directory with one file per write, ``lease.<generation>``, each created exclusively (a hard link of
    a complete temporary file: atomic like ``O_CREAT|O_EXCL``, also on NFS, and never seen half-written).
    The highest generation is the record; writing generation g+1 succeeds for exactly one writer that read g.
    Old generations are pruned, and a write that recreated a pruned one is caught (a higher one exists)."""

    NAME = re.compile(r"lease\.(\d+)")
    KEEP = 16  # generations kept below the newest (a reader far behind them is caught by the check after)

    def __init__(self, store: LocalStore, key: str) -> None:
        self.dir = store.path(key)
        self.where = str(self.dir)

    def _generations(self) -> list[int]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := self.NAME.fullmatch(n)))

    def _file(self, generation: int) -> Path:
        return self.dir / f"lease.{generation}"

    def read(self) -> tuple[_Record | None, str | None]:
        for generation in reversed(self._generations()):
            try:
                data = self._file(generation).read_bytes()
            except FileNotFoundError:  # pruned between the listing and the read: a newer one exists
                continue
            return _Record.from_bytes(data, str(self._file(generation))), str(generation)
        return None, None

    def swap(self, new: _Record, expected: str | None) -> bool:
        if new.generation != int(expected or 0) + 1:
            raise LeaseError(f"generation {new.generation} does not follow {expected}")  # a bug, not a race
        self.dir.mkdir(parents=True, exist_ok=True)
        dest = self._file(new.generation)
        tmp = self.dir / f".lease{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(new.to_bytes())
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, dest)
            except FileExistsError:
                if os.stat(tmp).st_nlink != 2:  # NFS may answer EEXIST to a retried link that did succeed
                    return False
        finally:
            tmp.unlink(missing_ok=True)
        if self._generations()[-1] != new.generation:  # recreated a pruned generation: it is not the newest
            dest.unlink(missing_ok=True)
            return False
        self._prune(new.generation)
        return True

    def _prune(self, newest: int) -> None:
        for generation in self._generations():
            if generation < newest - self.KEEP:
                self._file(generation).unlink(missing_ok=True)


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    return str((response or {}).get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _http_status(exc: Exception) -> int | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _slot_for(store: ObjectStore, key: str) -> _Slot:
    if isinstance(store, S3Store):
        return _S3Slot(store, key)
    if isinstance(store, LocalStore):
        return _DirSlot(store, key)
    raise LeaseError(f"No lease backend for a {type(store).__name__} ({store.uri}): use a directory or s3://.")


class LeaseManager:
    """The lease kept at ``key`` in ``store``: acquire, renew, release, and the fencing check."""

    def __init__(self, store: ObjectStore, key: str) -> None:
        self._slot = _slot_for(store, key)
        self.store = store
        self.where = self._slot.where

    def current(self) -> Lease | None:
        """The lease as the store has it now, if it has not expired."""
        record, _ = self._slot.read()
        return record.lease() if record is not None and record.expires_at > time.time() else None

    def try_acquire(self, holder: str, ttl_s: float) -> Lease:
        """One attempt: take the lease if it is free or expired (token + 1), or extend it if ``holder`` holds
        it (same token: a re-entrant hold); else LeaseBusyError."""
        record, version = self._slot.read()
        now = time.time()
        live = record is not None and record.expires_at > now
        if record is not None and live and record.holder != holder:
            raise LeaseBusyError(
                f"The lease at {self.where} is held by {record.holder} (token {record.token}) for another "
                f"{record.expires_at - now:.0f}s unless renewed."
            )
        if record is None:
            new = _Record(1, holder, now + ttl_s, 1)
        else:
            token = record.token if live else record.token + 1
            new = _Record(token, holder, now + ttl_s, record.generation + 1)
        if not self._slot.swap(new, version):
            raise LeaseBusyError(f"Another writer changed the lease at {self.where} first.")
        return new.lease()

    def acquire(self, holder: str, ttl_s: float, wait_s: float) -> Lease:
        """Take the lease, polling for up to ``wait_s`` while someone else holds it; LeaseBusyError after."""
        retrying = Retrying(
            retry=retry_if_exception_type(LeaseBusyError),
            stop=stop_before_delay(wait_s),
            wait=wait_random(0.05, 0.3),
            reraise=True,
        )
        return retrying(self.try_acquire, holder, ttl_s)

    def _mine(self, lease: Lease, *, margin_s: float = 0.0) -> tuple[_Record, str | None]:
        record, version = self._slot.read()
        if record is None or record.token != lease.token or record.holder != lease.holder:
            now = f"{record.holder} holds token {record.token}" if record else "there is no lease record"
            raise LeaseLostError(f"The lease at {self.where} (token {lease.token}) was taken over: {now}.")
        if record.expires_at <= time.time() + margin_s:
            raise LeaseLostError(
                f"The lease at {self.where} (token {lease.token}, {lease.holder}) has expired"
                + (f" or will within {margin_s:g}s" if margin_s else "") + "."
            )
        return record, version

    def renew(self, lease: Lease, ttl_s: float) -> Lease:
        """Push the expiry ``ttl_s`` from now; LeaseLostError if the lease is no longer this holder's."""
        for _ in range(3):  # a lost swap while the record is still ours: another thread of the holder renewed
            record, version = self._mine(lease)
            new = replace(record, expires_at=time.time() + ttl_s, generation=record.generation + 1)
            if self._slot.swap(new, version):
                return new.lease()
        raise LeaseLostError(f"Could not renew the lease at {self.where}: it kept changing under this holder.")

    def hand_over(self, lease: Lease, ttl_s: float) -> Lease:
        """The same holder's next task, or the next try of a task, takes the lease under a new token (+1), for
        ``ttl_s`` from now. A holder is a whole release (a DAG run, every task of it): without a token per task try,
        a zombie try (its worker lost, the task still running) and the retry Airflow started in its place would
        share one token, and the zombie's late writes would pass the fence. After this, the earlier try's token is
        stale: its renewals stop and its fenced writes are refused. LeaseLostError if ``lease.holder`` no longer
        holds the lease (taken over, or expired)."""
        for _ in range(3):  # a lost swap while the record is still the holder's: an earlier try renewed it
            record, version = self._slot.read()
            if record is None or record.holder != lease.holder or record.expires_at <= time.time():
                now = f"{record.holder} holds token {record.token}" if record else "there is no lease record"
                raise LeaseLostError(f"The lease at {self.where} is no longer {lease.holder}'s to hand over: {now}.")
            new = replace(record, token=record.token + 1, expires_at=time.time() + ttl_s,
                          generation=record.generation + 1)
            if self._slot.swap(new, version):
                return new.lease()
        raise LeaseLostError(f"Could not hand the lease at {self.where} over: it kept changing under this holder.")

    def release(self, lease: Lease) -> None:
        """Give the lease up now (the record stays, expired, so the next token is still bigger).
        A lease already taken over or expired is left as it is."""
        for _ in range(3):
            try:
                record, version = self._mine(lease)
            except LeaseLostError:
                return
            if self._slot.swap(replace(record, expires_at=0.0, generation=record.generation + 1), version):
                return
        log.warning("could not release the lease at %s (token %s); it expires on its own", self.where, lease.token)

    def is_current(self, lease: Lease, *, margin_s: float = 0.0) -> bool:
        """The fencing check: is ``lease`` still the store's lease, unexpired for ``margin_s`` more?"""
        try:
            self._mine(lease, margin_s=margin_s)
        except LeaseLostError:
            return False
        return True

    def fence(self, lease: Lease, *, margin_s: float = 0.0) -> None:
        """The fencing check a writer runs right before its write: LeaseLostError (naming why) if not current."""
        self._mine(lease, margin_s=margin_s)

    def prepare_write(self, lease: Lease, key: str, *, margin_s: float = 0.0) -> FencedWrite:
        """The first half of a fenced write of ``key`` (in this lease's store): the record's version now, and the
        fencing check. StaleWriteError if a newer holder already wrote it; LeaseLostError if ``lease`` is lost."""
        expected = self.store.version(key)
        if expected.fence > lease.token:
            raise StaleWriteError(_refused(self.store, key, lease, expected))
        self.fence(lease, margin_s=margin_s)
        return FencedWrite(self, key, lease, expected, margin_s)

    def fenced_write(self, lease: Lease, key: str, data: bytes, *, margin_s: float = 0.0) -> None:
        """Write ``data`` at ``key`` as ``lease``'s holder: fence-checked, then conditional at the store."""
        self.prepare_write(lease, key, margin_s=margin_s).commit(data)

    @contextmanager
    def keep(self, lease: Lease, ttl_s: float, *, release: bool = True) -> Iterator[Lease]:
        """Hold an acquired lease for the block: renewed every ``ttl_s / 3`` in a thread, released at the end
        (``release=False``: kept, for a holder whose next step carries on with it, as a release's tasks do).
        A renewal that finds the lease lost stops; the holder's next ``fence`` then fails."""
        stop = threading.Event()

        def renew_until_stopped() -> None:
            while not stop.wait(ttl_s / 3):
                try:
                    self.renew(lease, ttl_s)
                except LeaseLostError as exc:
                    log.warning("%s", exc)
                    return
                except Exception as exc:  # a store hiccup: try again at the next tick, before the expiry
                    log.warning("renewing the lease at %s failed (%s); retrying", self.where, exc)

        renewer = threading.Thread(target=renew_until_stopped, name=f"lease-renew-{lease.token}", daemon=True)
        renewer.start()
        try:
            yield lease
        finally:
            stop.set()
            renewer.join()
            if not release:
                return
            try:
                self.release(lease)
            except Exception as exc:  # the lease expires on its own; do not hide the block's own error
                log.warning("releasing the lease at %s failed (%s); it expires on its own", self.where, exc)

    @contextmanager
    def hold(self, holder: str, *, ttl_s: float, wait_s: float) -> Iterator[Lease]:
        """``acquire`` then ``keep``."""
        with self.keep(self.acquire(holder, ttl_s, wait_s), ttl_s) as lease:
            yield lease


@dataclass(frozen=True)
class FencedWrite:
    """A write whose fence was checked (``LeaseManager.prepare_write``). ``commit`` checks the fence once more and
    lands the write only if the record is still the version seen at the first check: a holder paused after its
    last check is refused by the store itself, once the new holder has written the record."""

    manager: LeaseManager
    key: str
    lease: Lease
    expected: Version
    margin_s: float = 0.0

    def check(self) -> FencedWrite:
        """The fencing check right before the write (LeaseLostError if the lease moved on)."""
        self.manager.fence(self.lease, margin_s=self.margin_s)
        return self

    def write(self, data: bytes) -> None:
        """The conditional write alone: StaleWriteError (nothing written) if the record changed since."""
        store = self.manager.store
        if not store.write_if(self.key, data, expected=self.expected, fence=self.lease.token,
                              holder=self.lease.holder):
            raise StaleWriteError(_refused(store, self.key, self.lease, store.version(self.key)))

    def commit(self, data: bytes) -> None:
        """``check`` then ``write``."""
        self.check().write(data)


def _refused(store: ObjectStore, key: str, lease: Lease, now: Version) -> str:
    by = f"{now.holder or 'a writer with no lease'} (token {now.fence})" if now.tag else "a delete"
    return (
        f"The store refused the write of {store.child_uri(key)} by {lease.holder} (token {lease.token}): it was "
        f"changed since this holder's fencing check, by {by}. The lease has moved on, so nothing was written; "
        "the newer holder's record is kept. Run this step again."
    )


__all__ = ["FencedWrite", "Lease", "LeaseBusyError", "LeaseError", "LeaseLostError", "LeaseManager", "StaleWriteError",
           "new_holder_id"]
