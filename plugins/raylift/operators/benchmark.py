"""Benchmark the endpoint with a bounded streaming load, gate on SLOs/regression, record or roll back."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

from raylift.config import DEFAULT_APP_NAME, DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S, DEFAULT_REQUESTS_PER_LEVEL
from raylift.errors import GateError, RayliftValueError
from raylift.operators.base import Stopwatch, TargetOperator

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


# What the regression gate compares with: the last good run's samples, or nothing (re-baseline, e.g.
# after the machine or cluster changed under an unchanged app, when old samples no longer describe it).
REGRESSION_BASELINES = ("last_good", "none")


class BenchmarkReportLink(BaseOperatorLink):
    """The benchmark task's "Benchmark report" button: this run's report page, served by the raylift
    plugin's reports app on the api-server (``[api] base_url`` if set, else a path on the same server)."""

    name = "Benchmark report"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.configuration import conf

        from raylift.bench.report import report_url
        from raylift.deploy_state import run_key

        base = conf.get("api", "base_url", fallback="") or ""
        return report_url(run_key(ti_key.run_id).rsplit("/", 1)[1], base)


class BenchmarkOperator(TargetOperator):
    """The deploy's evidence step: benchmark the app's endpoint (rounds per concurrency level), judge it
    against the SLOs and the last good run, confirm a regression with a second benchmark, then record the
    run as last good or roll the app back. Results, report and judgement go to the run's store folder.

    :param served_name: the model name clients send (the deploy's ``served_name``).
    :param deployed: the deploy task's XCom (endpoint, app kind); None reads it from the ``deploy`` task.
    :param app_name: the Serve application benchmarked, rolled back or recorded as last good.
    :param profile: request-size profile (``smoke``, ``short``, ``llmperf-inf2``) or a dict of its fields.
    :param concurrency: concurrency levels to measure (a list, or its JSON when templated).
    :param requests_per_level: measured requests at each level.
    :param max_seconds_per_level: each level's time bound (llmperf's ``--timeout``).
    :param warmup_requests: untimed requests sent before the measured ones.
    :param cost: cost options (price table region, instance types); None: the target's defaults.
    :param sweep: a saturation sweep (start, factor, stop rule) instead of ``concurrency``; None/{}: off.
    :param slos: release gates (e.g. TTFT p90, error rate); None: not checked.
    :param max_regression: the largest drop in tokens/s, or rise in a latency, allowed against the last
        good run (a fraction; None: ``DEFAULT_MAX_REGRESSION``).
    :param regression_confidence: confidence of each metric's interval for that change.
    :param regression_strict: also fail (and roll back) on an inconclusive judgement.
    :param regression_baseline: ``last_good`` (compare with the last good run) or ``none``.
    :param confirm_pause_s: pause before the confirming benchmark of a suspected regression
        (None: ``REGRESSION_CONFIRM_PAUSE_S``)."""

    operator_extra_links = (BenchmarkReportLink(),)
    template_fields = (
        *TargetOperator.template_fields,
        "served_name", "app_name", "profile", "concurrency", "requests_per_level", "slos", "deployed",
        "max_seconds_per_level", "warmup_requests", "cost", "sweep",
        "max_regression", "regression_confidence", "regression_strict", "regression_baseline",
    )

    def __init__(
        self,
        *,
        served_name: str,
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
        max_regression: float | str | None = None,
        regression_confidence: float | str | None = None,
        regression_strict: bool | str | None = None,
        regression_baseline: str | None = None,
        confirm_pause_s: float | None = None,
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
        self.max_regression = max_regression
        self.regression_confidence, self.regression_strict = regression_confidence, regression_strict
        self.regression_baseline = regression_baseline
        self.confirm_pause_s = confirm_pause_s  # None: config.REGRESSION_CONFIRM_PAUSE_S

    def _levels(self) -> list[int]:
        raw = self.concurrency
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        return [int(c) for c in items]

    def _cost(self, result: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
        """What the cluster the target runs costs per hour, and per 10⁶ output tokens at each level. Never
        blocks the gates: a target that cannot tell, or a node type without a price, gives the reason."""
        from raylift.bench.cost import DEFAULT_REGION, run_cost

        region = options.get("region") or DEFAULT_REGION
        try:
            region = options.get("region") or _target_region(self.target_impl) or DEFAULT_REGION
            return run_cost(result, self.target_impl.billed_nodes(), region=region, prices=options.get("prices"))
        except Exception as exc:  # noqa: BLE001 - cost is evidence for people, not a gate
            self.log.warning("benchmark cost not computed: %s", exc)
            return {"error": f"{type(exc).__name__}: {exc}", "region": region}

    def execute(self, context: Any) -> dict[str, Any]:
        from raylift.bench.cost import format_cost
        from raylift.bench.gates import assess, level_breach, merged_slos
        from raylift.bench.judgement import INCONCLUSIVE, REGRESSED, format_judgement
        from raylift.bench.llmperf_summary import format_llmperf, llmperf_files
        from raylift.bench.report import cost_peers, run_history, stored_results, write_run_report
        from raylift.bench.runner import format_table, run_benchmark
        from raylift.bench.sweep import SweepSpec
        from raylift.config import (
            DEFAULT_MAX_REGRESSION,
            DEFAULT_REGRESSION_CONFIDENCE,
            DEFAULT_REGRESSION_STRICT,
            REGRESSION_CONFIRM_PAUSE_S,
        )
        from raylift.deploy_state import run_key
        from raylift.rollback import roll_back_after_failure
        from raylift.serve_config import APP_KINDS

        cost_options = _cost_options(self.cost)  # malformed cost or sweep Params fail here, before any request
        sweep = SweepSpec.from_param(_json_param(self.sweep, "sweep"))
        baseline_choice = self.regression_baseline or "last_good"
        if baseline_choice not in REGRESSION_BASELINES:
            raise RayliftValueError(
                f"regression_baseline {baseline_choice!r} is not one of {list(REGRESSION_BASELINES)}: "
                "'last_good' judges this run against the last good run, 'none' starts a new baseline"
            )
        watch = Stopwatch()
        deployed = self.deployed if isinstance(self.deployed, dict) else {}
        endpoint = deployed.get("endpoint") or self.target_impl.endpoint_url()  # the app's URL (route_prefix)
        kind = APP_KINDS.get(str(deployed.get("kind", "llm")))
        if kind is not None and not kind.openai:  # e.g. the translator: no token stream to measure
            self.log.info("benchmark skipped: the %s app has no OpenAI API; its smoke test passed", kind.name)
            config = context["ti"].xcom_pull(task_ids="deploy", key="serve_config")
            if config:
                self.state_for(str(self.app_name)).record_good(context["run_id"], config, benchmark=None)
            return {"skipped": f"no OpenAI API in the {kind.name} app"}
        def benchmark(label: str) -> dict[str, Any]:
            """One benchmark of the endpoint at this run's Params, its table and llmperf's figures logged."""
            out = run_benchmark(
                endpoint, str(self.served_name), profile=self.profile, concurrency=self._levels(),
                requests_per_level=int(self.requests_per_level),
                max_seconds_per_level=_number(self.max_seconds_per_level, DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S),
                warmup_requests=int(_number(self.warmup_requests, 0)),
                sweep=asdict(sweep) if sweep else None,
                slo_breach=level_breach(merged_slos(self.slos if isinstance(self.slos, dict) else {})),
                allow_remote=self.target != "local",
                progress=lambda line: self.log.info("%s: %s (%s)", label, line, watch))
            self.log.info("%s results (%s):\n%s", label, watch, format_table(out))
            for level in out["levels"]:
                self.log.info("%s, concurrency %s, as llmperf reports it:\n%s", label, level["concurrency"],
                              format_llmperf(level["llmperf"]))
            return out

        result = benchmark("benchmark")

        state = self.state_for(str(self.app_name))
        run_id = context["run_id"]
        good = state.last_good() if baseline_choice == "last_good" else None
        if baseline_choice == "none":
            self.log.warning("regression_baseline 'none': not compared with the last good run; if every SLO "
                             "passes, this run is the next run's baseline")

        def gates(benchmark: dict[str, Any]) -> tuple[Any, list[Any]]:
            """SLOs and the regression judgement against the last good run, at this run's Params."""
            return assess(
                benchmark, merged_slos(self.slos if isinstance(self.slos, dict) else {}),
                (good or {}).get("benchmark"),
                max_regression=_number(self.max_regression, DEFAULT_MAX_REGRESSION),
                confidence=_number(self.regression_confidence, DEFAULT_REGRESSION_CONFIDENCE),
                strict=_flag(self.regression_strict, DEFAULT_REGRESSION_STRICT),
            )

        judgement, violations = gates(result)
        config = context["ti"].xcom_pull(task_ids="deploy", key="serve_config")
        only_regression = judgement.verdict == REGRESSED and all(v.kind == "regression" for v in violations)
        unchanged = only_regression and same_app_config(good, config, str(self.app_name))
        if unchanged and good is not None:
            # Nothing was released: this run serves the very app config the baseline run served (a scheduled or
            # REST redeploy of the same model, args and artifact). The difference is the machine's (seen here:
            # the same replicas 1.4-2.6x slower for minutes), not a version's, and a rollback would restore
            # this same config. The run passes; the baseline stays the last good run's samples.
            self.log.warning(
                "judged slower than the last good run (%s), but this run serves the same config as that run "
                "(app %r unchanged): the difference is the machine's, not a release's, and rolling back would "
                "restore this very config. Not rolled back; the last good run stays the baseline.",
                good["run_id"], self.app_name)
            violations = []
        elif only_regression:
            # A regression is confirmed before it rolls back (as Argo Rollouts' failureLimit / Flagger's
            # threshold require more than one failed analysis): after a pause, a second benchmark is
            # judged on its own, and it decides (it is also the app's state now). A slow spell of the
            # machine hits a benchmark sent right after the first one too (see REGRESSION_CONFIRM_PAUSE_S);
            # a real slowdown holds in both.
            pause = _number(self.confirm_pause_s, REGRESSION_CONFIRM_PAUSE_S)
            self.log.warning("%s\nregression seen: confirming with a second benchmark in %.0f s before rolling back",
                             format_judgement(judgement.as_dict()), pause)
            time.sleep(pause)
            second = benchmark("confirmation benchmark")
            first, first_judgement = result, judgement
            judgement, violations = gates(second)
            result = confirmation_result(first, first_judgement.as_dict(), second, pause)
            self.log.warning("regression %s: the second benchmark, %.0f s later, judged it %s",
                             "confirmed" if judgement.verdict == REGRESSED else "not confirmed", pause,
                             judgement.verdict)
        result["judgement"] = judgement.as_dict()
        result["app"], result["target"] = str(self.app_name), str(self.target)
        result["cost"] = self._cost(result, cost_options)
        self.log.info("%s", format_cost(result["cost"]))
        if unchanged and good is not None:
            result["judgement"]["not_attributed"] = (
                f"same app config as the baseline run {good['run_id']}: not a release's regression, not rolled back")
        self.log.info("%s", format_judgement(result["judgement"]))
        if judgement.verdict == INCONCLUSIVE and not violations:
            self.log.warning("regression gate inconclusive (not failing: regression_strict is off); about %s "
                             "requests per level would make it conclusive", judgement.needed_requests)
        state.store.write_json(f"{run_key(run_id)}/benchmark.json", result)
        # the levels as llmperf writes its summary files, beside raylift's results (docs/benchmark-metrics.md)
        state.store.write_json(f"{run_key(run_id)}/llmperf_summary.json", llmperf_files(result))
        try:  # the dashboard's figures (CloudWatch on AWS targets, nothing on local); never blocks the gates
            self.target_impl.publish_benchmark(result, model=str(self.served_name), run_id=run_id)
        except Exception:
            self.log.exception("benchmark metrics not published; the gates still apply")
        try:  # the report is for people; a plotting failure must not stop the gates below
            runs_prefix = run_key(run_id).rsplit("/", 1)[0]
            stored = stored_results(state.store, runs_prefix)
            history = run_history(stored, result)
            peers = cost_peers(stored, result, state.last_good())
            files = write_run_report(state.store, run_key(run_id), result, history=history, peers=peers)
            self.log.info("benchmark report: %s", state.store.child_uri(files["html"]))
        except Exception:
            self.log.exception("benchmark report not written; the gates still apply")
        if violations:
            outcome = roll_back_after_failure(self.target_impl, state, run_id, str(self.app_name))
            details = "; ".join(v.message for v in violations)
            raise GateError(f"Release gate failed: {details}. {outcome}.")
        # last_good (the next run's baseline and the rollback target) only after every gate passed, and not
        # from a slow spell of an unchanged config (its samples would lower the bar for the next release)
        if config and not unchanged:
            state.record_good(run_id, config, benchmark=result)
        return {"overall": result.get("overall", {}), "levels": _without_samples(result.get("levels", [])),
                "judgement": result["judgement"], "cost": result["cost"], "sweep": result.get("sweep"),
                "results_uri": state.store.child_uri(f"{run_key(run_id)}/benchmark.json")}


def _target_region(target: Any) -> str | None:
    """The AWS region a target runs in (EKS: ``region()``; ECS: its connection's region), None on local."""
    if callable(getattr(target, "region", None)):
        return str(target.region())
    return getattr(getattr(target, "aws", None), "region_name", None)


def _json_param(raw: Any, name: str) -> dict[str, Any]:
    """An object Param: a dict, or its JSON text when templates render to strings."""
    import json

    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            raise RayliftValueError(f"{name} {raw!r} is not a JSON object: {exc}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RayliftValueError(f"{name} must be an object, got {raw!r}")
    return raw


def _cost_options(raw: Any) -> dict[str, Any]:
    """The cost Param, checked."""
    raw = _json_param(raw, "cost")
    if not isinstance(raw, dict) or set(raw) - {"region", "prices"}:
        raise RayliftValueError(f"cost {raw!r}: give an object with 'region' and/or 'prices' "
                                "(instance type -> USD per hour), e.g. {\"prices\": {\"local\": 0.5}}")
    return raw


def confirmation_result(
    first: dict[str, Any], first_judgement: dict[str, Any], second: dict[str, Any], pause_s: float
) -> dict[str, Any]:
    """The confirmation's results (it decided, its samples are the next run's baseline if it passes), with
    the first benchmark's summaries and judgement kept under ``confirmation`` (its samples are dropped)."""
    return {**second, "confirmation": {"first_levels": _without_samples(first["levels"]),
                                       "first_overall": first.get("overall", {}),
                                       "first_judgement": first_judgement, "pause_s": pause_s}}


def same_app_config(good: dict[str, Any] | None, config: dict[str, Any] | None, app_name: str) -> bool:
    """Whether this run serves exactly the app config the last good run served (args, engine args, the
    content-addressed model folder and artifact, replicas): then there is no release to judge or undo."""
    from raylift.serve_config import app_by_name, config_hash

    if not good or not config or not good.get("config"):
        return False
    ours, theirs = app_by_name(config, app_name), app_by_name(good["config"], app_name)
    return ours is not None and theirs is not None and config_hash(ours) == config_hash(theirs)


def _number(value: Any, default: float) -> float:
    return default if value in (None, "") else float(value)


def _flag(value: Any, default: bool) -> bool:
    """A rendered Param: a bool, or its text ("true"/"false") when templates render to strings."""
    if value in (None, ""):
        return default
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _without_samples(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Levels for the XCom and the run record: the per-request samples stay in benchmark.json."""
    return [{k: v for k, v in level.items() if k != "samples"} for level in levels]
