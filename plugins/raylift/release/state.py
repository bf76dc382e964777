"""What was serving, kept in the state store: the last Serve config that passed, and run records.

Rollback (``raylift.release.rollback``) restores the pre-deploy snapshot of the run that failed (the last good config
only for a run that left none), while the app still runs what that run wrote. A run that applied a
config leaves ``applied/<run>.json`` (written before the PUT): "applied, not yet proven" until the run's
config is recorded good, which ``raylift.release.rollback.restore_unproven`` acts on whatever failed. Keys:
``_raylift/<cluster>/<app>/last_good.json``, ``_raylift/<cluster>/<app>/pre_deploy/<run>.json``,
``_raylift/<cluster>/<app>/applied/<run>.json``, ``_raylift/<cluster>/<app>/canary/<run>.json`` (a canary
release's plan: what it runs beside the app and what it lent), ``_raylift/<cluster>/<app>/blue_green/<run>.json`` (a blue/green release: the two clusters and how far it
got), ``_raylift/<cluster>/<app>/anchor.json`` (the
last release that passed, and the changes of the releases promoted since), ``_raylift/<cluster>/<app>/hold/<run>.json`` (a
rollback that could not take the cluster's lease back: what it left up and what to run), ``_raylift/runs/<run>/...`` (``<cluster>``: the cluster's
identity, or the target kind without a connection).

``<run>`` is one exact key per run (:func:`run_name`): the DAG and run id, readable, and a digest of both exact ids,
so two run ids never share one (the old spelling turned every ``:``, ``+``, ``~`` into ``_``, and a run id chosen at
trigger time could meet a scheduled one's). Of what was written under the old spelling, the history is still read:
the runs folder is listed as a whole (the report's history), and the last good run's files are copied to its new
key when the last good record is read (:meth:`DeploymentState.last_good`: the redeploy reads its Params there). A
run's own per-app records (pre-deploy snapshot, applied, canary, blue/green, hold) are read under their exact key
only (:meth:`DeploymentState._read_run_record` says why).

The release's own records (``last_good.json``, ``anchor.json``: what the next release is judged against and rolls
back to) are written fenced when the state is opened under the release's lease (:meth:`DeploymentState.fenced`):
checked against the lease and conditional at the store (``raylift.lease.LeaseManager.fenced_write``), so a
holder paused past its lease cannot land an old anchor over the new holder's.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, get_args

from raylift.config import DEPLOY_DAG_ID
from raylift.serve.config import app_by_name, config_hash
from raylift.store import ObjectStore

if TYPE_CHECKING:
    from raylift.lease import Lease, LeaseManager

_RUN_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


# What one run leaves under run_key(run_id), by name: the benchmark's results (and the serving arm's, in a canary
# release), llmperf's summary, the cold start, the gate's decision (release) and the run record.
RunFile = Literal["benchmark", "baseline", "llmperf_summary", "cold_start", "release", "record"]


RUNS_PREFIX = "_raylift/runs"
# a run_name: "<dag>.<run>.<16 hex>", a plain folder name (what the reports app serves)
_RUN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,180}\.[0-9a-f]{16}$")


def legacy_run_name(run_id: str) -> str:
    """How a run's records were named before issue 57: lossy (``:``, ``+``, ``~``... all ``_``), no DAG. Read only."""
    return _RUN_SAFE.sub("_", run_id)


def run_name(run_id: str, dag_id: str = DEPLOY_DAG_ID) -> str:
    """One exact name per (DAG, run id): both readable (lossy, bounded) and a digest of both exact ids, so two
    runs never share one, whatever their ids spell. A plain folder name of at most 187 characters."""
    digest = hashlib.sha256(json.dumps([dag_id, run_id]).encode()).hexdigest()[:16]
    name = f"{_RUN_SAFE.sub('_', dag_id)[:48]}.{_RUN_SAFE.sub('_', run_id)[:120]}.{digest}"
    return name if re.match(r"[A-Za-z0-9_]", name) else f"_{name}"


def _in_task() -> bool:
    try:
        from airflow.sdk import get_current_context

        get_current_context()
        return True
    except Exception:  # noqa: BLE001 - outside a task (the api-server, the CLI, tests) there is no context
        return False


def run_key(run_id: str, dag_id: str | None = None) -> str:
    """Where run ``run_id`` of DAG ``dag_id`` keeps its files: ``_raylift/runs/<run_name>``. ``dag_id`` None: the
    DAG that writes run records (raylift_deploy), as every writer and reader names it today.

    Outside a task (the reports app, a report link, the CLI), a name already in ``run_name``'s form is a folder
    name and names itself; inside a task every run id is digested, so a run id spelled as another run's folder
    name never reaches that folder."""
    if dag_id is None and _RUN_NAME.match(run_id) and not _in_task():
        return f"{RUNS_PREFIX}/{run_id}"
    return f"{RUNS_PREFIX}/{run_name(run_id, dag_id or DEPLOY_DAG_ID)}"


def run_file(run_id: str, name: RunFile) -> str:
    """The store key of one of a run's files (``RunFile``): one spelling for the writer and every reader."""
    return f"{run_key(run_id)}/{name}.json"


def stand_in_anchor(anchor: dict[str, Any] | None, last_good: dict[str, Any] | None) -> dict[str, Any] | None:
    """The anchor, or for state written before anchors existed the last good run standing in for it (no chain
    yet, its benchmark the baseline), never an anchor without a run. The gate judges a direct release against it
    and promote starts the chain from it."""
    if anchor is not None or last_good is None:
        return anchor
    return {"run_id": last_good["run_id"], "links": [], "benchmark": last_good.get("benchmark")}


class DeploymentState:
    def __init__(self, store: ObjectStore, target: str, app: str) -> None:
        self.store, self.target, self.app = store, target, app
        self.prefix = f"_raylift/{_RUN_SAFE.sub('_', target)}/{_RUN_SAFE.sub('_', app)}"
        self._fence: tuple[LeaseManager, Lease] | None = None

    def fenced(self, manager: LeaseManager, lease: Lease) -> DeploymentState:
        """This state, its release records (last good, anchor) written as ``lease``'s holder: LeaseLostError or
        StaleWriteError, and nothing written, once another holder has the lease or wrote the record since."""
        self._fence = (manager, lease)
        return self

    def _write_record(self, key: str, value: dict[str, Any]) -> None:
        if self._fence is None:
            self.store.write_json(key, value)
            return
        import json

        manager, lease = self._fence
        manager.fenced_write(lease, key, json.dumps(value, indent=2, sort_keys=True, default=str).encode())

    def _run_record(self, kind: str, run_id: str) -> str:
        """The key of one of run ``run_id``'s records of this app (``pre_deploy``, ``applied``...)."""
        return f"{self.prefix}/{kind}/{run_name(run_id)}.json"

    def _read_run_record(self, kind: str, run_id: str) -> dict[str, Any] | None:
        """A run's record of this app, under its exact key only. The old spelling is not read back: a record a
        colliding run planted there before the upgrade would be taken for this run's (its "what served before",
        which the rollback restores); a run in flight across an upgrade rolls back to the last good config."""
        return self.store.read_json(self._run_record(kind, run_id))

    def save_pre_deploy(self, run_id: str, config: dict[str, Any]) -> None:
        self.store.write_json(self._run_record("pre_deploy", run_id), config)

    def pre_deploy(self, run_id: str) -> dict[str, Any] | None:
        return self._read_run_record("pre_deploy", run_id)

    def _applied_key(self, run_id: str) -> str:
        return self._run_record("applied", run_id)

    def begin_apply(self, run_id: str, before: dict[str, Any], config: dict[str, Any],
                    surge: int | None = None, timeout_s: float | None = None) -> dict[str, Any] | None:
        """Record, before the PUT, what was serving and what this run applies (and its ``surge_replicas`` and
        ``deploy_timeout_s``, which its rollback honours: the rollback step has no Params of its own, and putting the
        old app back loads a model as slowly as the deploy did). The first snapshot of a run wins: a retried task whose earlier try applied (and
        died) must not take the half-applied config as "what was serving before". Returns the earlier try's
        snapshot, if there was one."""
        earlier = self.pre_deploy(run_id) if self.applied(run_id) is not None else None
        if earlier is None:
            self.save_pre_deploy(run_id, before)
        self.store.write_json(
            self._applied_key(run_id),
            {"config": config, "config_hash": config_hash(config), "at": datetime.now(UTC).isoformat(),
             **({"surge": surge} if surge is not None else {}),
             **({"timeout_s": float(timeout_s)} if timeout_s is not None else {})},
        )
        return earlier

    def applied(self, run_id: str) -> dict[str, Any] | None:
        """``{"config": ..., "config_hash": ..., "at": ...}`` when this run applied a config, else None."""
        return self._read_run_record("applied", run_id)

    def proven(self, run_id: str) -> bool:
        """Whether this run's config passed every gate (it is the last good one)."""
        return (self.last_good() or {}).get("run_id") == run_id

    def last_good(self) -> dict[str, Any] | None:
        """``{"config": ..., "config_hash": ..., "run_id": ..., "benchmark": ..., "recorded_at": ...}``. A last good
        run recorded before issue 57 (no ``run_key`` in it) has its files copied from the old spelling to its key
        the first time, so what reads them by ``run_file`` (the redeploy's Params) finds them."""
        good = self.store.read_json(f"{self.prefix}/last_good.json")
        if good and "run_key" not in good and isinstance(good.get("run_id"), str):
            self._carry_legacy_run_files(good["run_id"])
        return good

    def _carry_legacy_run_files(self, run_id: str) -> None:
        new, old = f"{RUNS_PREFIX}/{run_name(run_id)}", f"{RUNS_PREFIX}/{legacy_run_name(run_id)}"
        if new == old or self.store.exists(f"{new}/record.json") or not self.store.exists(f"{old}/record.json"):
            return
        for name in get_args(RunFile):
            value = self.store.read_json(f"{old}/{name}.json")
            if value is not None:
                self.store.write_json(f"{new}/{name}.json", value)

    def record_good(self, run_id: str, config: dict[str, Any], benchmark: dict[str, Any] | None = None) -> None:
        self._write_record(
            f"{self.prefix}/last_good.json",
            {
                "run_id": run_id,
                "run_key": f"{RUNS_PREFIX}/{run_name(run_id)}",  # where its run files are (absent: recorded before issue 57)
                "config": config,
                "config_hash": config_hash(config),
                # what the app's replicas load: a content-addressed store folder (raylift.staging.stage)
                "model": ((app_by_name(config, self.app) or {}).get("args") or {}).get("model"),
                "benchmark": benchmark,
                "recorded_at": datetime.now(UTC).isoformat(),
            },
        )

    def save_canary(self, run_id: str, plan: dict[str, Any]) -> None:
        """A canary release's plan (``raylift.release.canary.CanaryPlan.as_dict``), written before the canary is applied."""
        self.store.write_json(self._run_record("canary", run_id), plan)

    def canary(self, run_id: str) -> dict[str, Any] | None:
        return self._read_run_record("canary", run_id)

    def save_blue_green(self, run_id: str, record: dict[str, Any]) -> None:
        """A blue/green release's record (``raylift.release.blue_green``: which cluster serves, which is the
        candidate, and how far the release got), written before the candidate cluster is started."""
        self.store.write_json(self._run_record("blue_green", run_id), record)

    def blue_green(self, run_id: str) -> dict[str, Any] | None:
        return self._read_run_record("blue_green", run_id)

    def anchor(self) -> dict[str, Any] | None:
        """``{"run_id", "links", "benchmark", "app", "recorded_at"}``: the last release whose verdict was a pass (never
        an inconclusive one), its benchmark (a direct release's baseline), and the headline changes of the
        releases promoted since it (``raylift.release.next_anchor_links``)."""
        return self.store.read_json(f"{self.prefix}/anchor.json")

    def write_anchor(self, run_id: str, links: list[float], benchmark: dict[str, Any] | None,
                     app: dict[str, Any] | None = None) -> None:
        """``app``: the anchor's own app entry, which a canary's fresh baseline arm runs (``raylift.release.canary``)."""
        self._write_record(
            f"{self.prefix}/anchor.json",
            {"run_id": run_id, "links": list(links), "benchmark": benchmark,
             **({"app": app} if app else {}), "recorded_at": datetime.now(UTC).isoformat()},
        )

    def _hold_key(self, run_id: str) -> str:
        return self._run_record("hold", run_id)

    def save_hold(self, run_id: str, hold: dict[str, Any]) -> None:
        """A rollback that could not write (another run holds the cluster's lease): ``{"run_id", "holder", "app",
        "left_up", "to_run", "message", "at"}``, visible to whoever looks at the cluster's state."""
        self.store.write_json(self._hold_key(run_id), {**hold, "at": datetime.now(UTC).isoformat()})

    def hold(self, run_id: str) -> dict[str, Any] | None:
        return self._read_run_record("hold", run_id)

    def clear_hold(self, run_id: str) -> None:
        if self.store.exists(self._hold_key(run_id)):
            self.store.delete(self._hold_key(run_id))
