"""Benchmark the released candidate with a bounded streaming load (beside the serving app in a canary release).

Measurement only: the ``gate`` step (``raylift.operators.gate``) judges the results and ``raylift.release``
decides; no rollback or promotion happens here. What is measured and kept is :mod:`raylift.release.measured`'s;
this step resolves its Params (:mod:`raylift.measure.params`) and logs the tables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

from raylift.config import DEFAULT_APP_NAME, DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S, DEFAULT_REQUESTS_PER_LEVEL
from raylift.errors import RayliftValueError
from raylift.operators.base import Stopwatch, TargetOperator

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


class BenchmarkReportLink(BaseOperatorLink):
    """The benchmark task's "Benchmark report" button: this run's report page, served by the raylift
    plugin's reports app on the api-server (``[api] base_url`` if set, else a path on the same server)."""

    name = "Benchmark report"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.configuration import conf

        from raylift.measure.report import report_url
        from raylift.release.state import run_key

        base = conf.get("api", "base_url", fallback="") or ""
        return report_url(run_key(ti_key.run_id).rsplit("/", 1)[1], base)


class BenchmarkOperator(TargetOperator):
    """The release's measurement step, and only that: benchmark the candidate (rounds per concurrency level)
    and, in a canary release, the serving app beside it in the same rounds (same prompts, same load per
    replica: ``raylift.measure.runner.run_side_by_side``). Results go to the run's store folder
    (``benchmark.json``: the candidate; ``baseline.json``: the serving app measured with it); the ``gate`` step
    judges them and decides.

    :param served_name: the model name clients send; empty: the one the deploy served (``deployed``).
    :param deployed: the deploy task's XCom (endpoint, app kind, release, baseline); None reads it from ``deploy``.
    :param app_name: the Serve application released.
    :param profile: request-size profile (``smoke``, ``short``, ``llmperf-inf2``) or a dict of its fields.
    :param concurrency: concurrency levels to measure (a list, or its JSON when templated).
    :param requests_per_level: measured requests at each level (per replica of the candidate).
    :param max_seconds_per_level: each level's time bound (llmperf's ``--timeout``); requests cut off by it
        count against the candidate.
    :param warmup_requests: untimed requests sent before the measured ones.
    :param cost: cost options (price table region, instance types); None: the target's defaults.
    :param sweep: a saturation sweep (start, factor, stop rule) instead of ``concurrency``; None/{}: off
        (a direct release only: a canary is compared level by level).
    :param slos: the SLOs (a sweep stops at the first level that breaks one)."""

    operator_extra_links = (BenchmarkReportLink(),)
    template_fields = (
        *TargetOperator.template_fields,
        "served_name", "app_name", "profile", "concurrency", "requests_per_level", "slos", "deployed",
        "max_seconds_per_level", "warmup_requests", "cost", "sweep",
    )

    def __init__(
        self,
        *,
        served_name: str | None = None,
        deployed: Any = None,
        app_name: str = DEFAULT_APP_NAME,
        profile: str | dict[str, Any] = "smoke",
        concurrency: list[int] | tuple[int, ...] | str = (1, 4),
        requests_per_level: int | str = DEFAULT_REQUESTS_PER_LEVEL,
        max_seconds_per_level: float | str = DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S,
        warmup_requests: int | str = 0,
        cost: dict[str, Any] | str | None = None,
        sweep: dict[str, Any] | str | None = None,
        slos: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.served_name, self.app_name, self.deployed = served_name, app_name, deployed
        self.profile, self.concurrency = profile, concurrency
        self.requests_per_level, self.max_seconds_per_level = requests_per_level, max_seconds_per_level
        self.warmup_requests = warmup_requests
        self.cost = cost or {}
        self.sweep = sweep or {}
        self.slos = slos or {}

    def _levels(self) -> list[int]:
        from raylift.config import concurrency_levels

        return concurrency_levels(self.concurrency)

    def execute(self, context: Any) -> dict[str, Any]:
        from raylift.measure.llmperf_summary import format_llmperf
        from raylift.measure.params import cost_options, json_param, number
        from raylift.measure.runner import format_table
        from raylift.measure.sweep import SweepSpec
        from raylift.release.gates import merged_slos
        from raylift.release.measured import keep_results, measure, with_cost
        from raylift.serve.config import APP_KINDS

        costs = cost_options(self.cost)  # malformed cost or sweep Params fail here, before any request
        sweep = SweepSpec.from_param(json_param(self.sweep, "sweep"))
        watch = Stopwatch()
        deployed = self.deployed if isinstance(self.deployed, dict) else {}
        endpoint = deployed.get("endpoint") or self.target_impl.endpoint_url()  # the candidate's URL
        from raylift.release.decision import JUDGED_BESIDE

        release = str(deployed.get("release") or "direct")
        canary = release in JUDGED_BESIDE
        if canary and sweep:
            raise RayliftValueError(
                "sweep: a canary release is judged level by level against the serving app, so it measures the "
                "'concurrency' levels; drop the sweep Param, or set release to 'direct' to sweep")
        kind = APP_KINDS.get(str(deployed.get("kind", "llm")))
        if kind is not None and not kind.openai:  # e.g. the translator: no token stream to measure
            self.log.info("benchmark skipped: the %s app has no OpenAI API; its smoke test passed", kind.name)
            return {"skipped": f"no OpenAI API in the {kind.name} app"}
        slos = merged_slos(self.slos if isinstance(self.slos, dict) else {})
        options: dict[str, Any] = {
            "profile": self.profile, "concurrency": self._levels(),
            "requests_per_level": int(self.requests_per_level),
            "max_seconds_per_level": number(self.max_seconds_per_level, DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S),
            "warmup_requests": int(number(self.warmup_requests, 0)),
            "allow_remote": self.target != "local", "engine_metrics": True, "slos": slos,  # goodput under them
        }

        def progress(line: str) -> None:
            self.log.info("benchmark: %s (%s)", line, watch)

        served = str(self.served_name if self.served_name not in (None, "", "None") else deployed.get("served_name"))
        state = self.state_for(str(self.app_name))
        result, baseline = measure(self.target_impl, deployed, endpoint, served, str(self.app_name),
                                   options, sweep=sweep, slos=slos, progress=progress, state=state,
                                   run_id=context["run_id"])
        for label, out in (("candidate", result), ("baseline", baseline)):
            if out is None:
                continue
            self.log.info("%s results (%s):\n%s", label, watch, format_table(out))
            for level in out["levels"]:
                self.log.info("%s, concurrency %s, as llmperf reports it:\n%s", label, level["concurrency"],
                              format_llmperf(level["llmperf"]))
        run_id = context["run_id"]
        with_cost(self.target_impl, result, app=str(self.app_name), target_name=str(self.target), release=release,
                  cost=costs)
        store = state.store
        return keep_results(self.target_impl, store, run_id, result, baseline, served)
