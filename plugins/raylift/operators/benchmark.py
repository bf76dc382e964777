"""Benchmark the released candidate with a bounded streaming load (beside the serving app in a canary release).

Measurement only: the ``gate`` step (``raylift.operators.gate``) judges the results and ``raylift.release``
decides; no rollback or promotion happens here."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

from raylift.config import DEFAULT_APP_NAME, DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S, DEFAULT_REQUESTS_PER_LEVEL
from raylift.errors import RayliftValueError
from raylift.operators.base import Stopwatch, TargetOperator
from raylift.release.decision import CONFIRM_ABOVE, CONFIRM_FACTOR, PILOT_DECIDES_ABOVE

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

    :param served_name: the model name clients send (the deploy's ``served_name``).
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

    def _cost(self, result: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
        """What the cluster the target runs costs per hour, and per 10⁶ output tokens at each level. Never
        blocks the gates: a target that cannot tell, or a node type without a price, gives the reason."""
        from raylift.measure.cost import DEFAULT_REGION, run_cost

        region = options.get("region") or DEFAULT_REGION
        try:
            region = options.get("region") or self.target_impl.aws_region() or DEFAULT_REGION
            return run_cost(result, self.target_impl.billed_nodes(), region=region, prices=options.get("prices"))
        except Exception as exc:  # noqa: BLE001 - cost is evidence for people, not a gate
            self.log.warning("benchmark cost not computed: %s", exc)
            return {"error": f"{type(exc).__name__}: {exc}", "region": region}

    def execute(self, context: Any) -> dict[str, Any]:
        from raylift.measure.cost import format_cost
        from raylift.measure.llmperf_summary import format_llmperf, llmperf_files
        from raylift.measure.runner import Arm, format_table, run_benchmark, run_side_by_side
        from raylift.measure.sweep import SweepSpec
        from raylift.release.gates import level_breach, merged_slos
        from raylift.release.state import run_file
        from raylift.serve.config import APP_KINDS

        cost_options = _cost_options(self.cost)  # malformed cost or sweep Params fail here, before any request
        sweep = SweepSpec.from_param(_json_param(self.sweep, "sweep"))
        watch = Stopwatch()
        deployed = self.deployed if isinstance(self.deployed, dict) else {}
        endpoint = deployed.get("endpoint") or self.target_impl.endpoint_url()  # the candidate's URL
        canary = deployed.get("release") == "canary"
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
            "max_seconds_per_level": _number(self.max_seconds_per_level, DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S),
            "warmup_requests": int(_number(self.warmup_requests, 0)),
            "allow_remote": self.target != "local", "engine_metrics": True, "slos": slos,  # goodput under them
        }

        def progress(line: str) -> None:
            self.log.info("benchmark: %s (%s)", line, watch)

        baseline: dict[str, Any] | None = None
        if canary:
            scale = int(deployed.get("baseline_scale") or 1)
            self.log.info(
                "canary release: the candidate (%s) and the serving app (%s, %d replica(s): %dx the requests, the "
                "same load per replica) measured in the same rounds with the same prompts",
                endpoint, deployed["baseline_endpoint"], scale, scale)
            side_by_side = {"candidate": Arm(endpoint, str(self.served_name)),
                            "baseline": Arm(deployed["baseline_endpoint"], str(deployed.get("baseline_served_name")
                                                                               or self.served_name), scale)}
            placement = self._placement(deployed)  # before the measurement: Ray does not move running replicas
            arms = run_side_by_side(side_by_side, str(self.served_name), progress=progress, **options)
            result, baseline = arms["candidate"], arms["baseline"]
            more, pilot = _confirmation(result, baseline, slos, options["requests_per_level"])
            if more is not None:
                self.log.info(
                    "the pilot's headline change is %+.1f%% (between %+.0f%% and %+.0f%%): not clear enough to "
                    "decide on, so the same two arms are measured again at %d requests per level, and that "
                    "measurement is the evidence (raylift.release.confirmation_requests)",
                    100 * pilot["headline_change"], 100 * CONFIRM_ABOVE, 100 * PILOT_DECIDES_ABOVE, more)
                options = {**options, "requests_per_level": more,
                           "max_seconds_per_level": options["max_seconds_per_level"] * CONFIRM_FACTOR}
                arms = run_side_by_side(side_by_side, str(self.served_name), progress=progress, **options)
                result, baseline = arms["candidate"], arms["baseline"]
                result["pilot"] = pilot
            result["placement"] = placement
        else:
            result = run_benchmark(
                endpoint, str(self.served_name), sweep=asdict(sweep) if sweep else None,
                slo_breach=level_breach(slos), progress=progress, **options)
        for label, out in (("candidate", result), ("baseline", baseline)):
            if out is None:
                continue
            self.log.info("%s results (%s):\n%s", label, watch, format_table(out))
            for level in out["levels"]:
                self.log.info("%s, concurrency %s, as llmperf reports it:\n%s", label, level["concurrency"],
                              format_llmperf(level["llmperf"]))
        run_id = context["run_id"]
        result["app"], result["target"] = str(self.app_name), str(self.target)
        result["release"] = "canary" if canary else "direct"
        result["cost"] = self._cost(result, cost_options)
        self.log.info("%s", format_cost(result["cost"]))
        store = self.state_for(str(self.app_name)).store
        store.write_json(run_file(run_id, "benchmark"), result)
        if baseline is not None:
            store.write_json(run_file(run_id, "baseline"), baseline)
        # the levels as llmperf writes its summary files, beside raylift's results (docs/benchmark-metrics.md)
        store.write_json(run_file(run_id, "llmperf_summary"), llmperf_files(result))
        try:  # the dashboard's figures (CloudWatch on AWS targets, nothing on local); never blocks the gate
            self.target_impl.publish_benchmark(result, model=str(self.served_name), run_id=run_id)
        except Exception:
            self.log.exception("benchmark metrics not published; the gate still applies")
        return {"overall": result.get("overall", {}), "levels": _without_samples(result.get("levels", [])),
                "release": result["release"], "cost": result["cost"], "sweep": result.get("sweep"),
                "results_uri": store.child_uri(run_file(run_id, "benchmark")),
                **({"baseline_uri": store.child_uri(run_file(run_id, "baseline"))} if baseline else {})}


    def _placement(self, deployed: dict[str, Any]) -> dict[str, Any]:
        """Where Ray placed the canary's two arms (:mod:`raylift.serve.placement`), read from Serve's own status; the
        gate refuses a verdict an unlike placement alone could give. A note instead when it cannot be told
        (no Ray dashboard on this target, arms on accelerators, an arm without a running replica)."""
        from raylift.release.canary import canary_name
        from raylift.serve.config import app_by_name
        from raylift.serve.placement import arms_placement, uses_accelerators

        candidate = str(deployed.get("canary_app") or canary_name(str(self.app_name)))
        baseline = str(deployed.get("baseline_app") or self.app_name)
        try:
            config = self.target_impl.current_serve_config()
            if uses_accelerators(a for a in (app_by_name(config, n) for n in (candidate, baseline)) if a):
                return {"note": "the arms run on accelerators (each replica owns its devices): not compared"}
            dashboard = self.target_impl.serve_dashboard()  # None: a target that reaches Serve otherwise
            if dashboard is None:
                return {"note": "this target has no Ray dashboard to read the replicas' nodes from"}
            status = dashboard.serve_applications().get("applications") or {}
        except Exception as exc:  # noqa: BLE001 - evidence for the gate, never a reason to stop measuring
            self.log.warning("where Ray placed the arms was not read (%s: %s); the gate judges without it",
                             type(exc).__name__, exc)
            return {"note": f"not read: {type(exc).__name__}: {exc}"}
        placed = arms_placement(status, candidate, baseline)
        if placed is None:
            return {"note": f"no running replica of {candidate!r} or {baseline!r} in Serve's status"}
        if placed.favoured is not None:
            self.log.warning("Ray placed the arms unlike: %s; a verdict this favours the %s with is refused "
                             "(raylift.release, rule 6)", placed.describe(), placed.favoured)
        return placed.as_dict()


def _confirmation(candidate: dict[str, Any], baseline: dict[str, Any], slos: dict[str, Any],
                  requests_per_level: int) -> tuple[int | None, dict[str, Any]]:
    """Whether a canary's pilot measurement decides, as ``raylift.release`` rules: the requests per level to
    measure again with (None: it decides), and the pilot's figures for the record. Its headline does not depend
    on the gate's tolerance or confidence (the levels' weights scale together), so the defaults judge it."""
    from raylift.config import DEFAULT_MAX_REGRESSION, DEFAULT_REGRESSION_CONFIDENCE
    from raylift.release.decision import confirmation_requests, headline_change
    from raylift.release.gates import assess

    judgement, _ = assess(candidate, slos, baseline, max_regression=DEFAULT_MAX_REGRESSION,
                          confidence=DEFAULT_REGRESSION_CONFIDENCE)
    judged = judgement.as_dict()
    pilot = {"requests_per_level": requests_per_level, "headline_change": headline_change(judged),
             "verdict": judged.get("verdict")}
    return confirmation_requests(judged, requests_per_level), pilot



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


def same_app_config(good: dict[str, Any] | None, config: dict[str, Any] | None, app_name: str) -> bool:
    """Whether this run serves exactly the app config the last good run served (args, engine args, the
    content-addressed model folder and artifact, replicas): then there is no release to judge or undo."""
    from raylift.serve.config import app_by_name, config_hash

    if not good or not config or not good.get("config"):
        return False
    ours, theirs = app_by_name(config, app_name), app_by_name(good["config"], app_name)
    return ours is not None and theirs is not None and config_hash(ours) == config_hash(theirs)


def _number(value: Any, default: float) -> float:
    return default if value in (None, "") else float(value)


def _flag(value: Any, default: bool) -> bool:
    """A rendered Param: a bool, or its text ("true"/"false") when templates render to strings; anything else
    is refused (``raylift.config.strict_flag``)."""
    from raylift.config import strict_flag

    return strict_flag(value, "a boolean Param", default)


def _without_samples(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Levels for the XCom and the run record: the per-request samples stay in benchmark.json."""
    return [{k: v for k, v in level.items() if k != "samples"} for level in levels]
