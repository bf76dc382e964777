"""Benchmark the endpoint with a bounded streaming load, gate on SLOs/regression, record or roll back."""

from __future__ import annotations

from typing import Any

from raylift.config import DEFAULT_APP_NAME
from raylift.errors import GateError
from raylift.operators.base import Stopwatch, TargetOperator


class BenchmarkOperator(TargetOperator):
    template_fields = (
        *TargetOperator.template_fields,
        "served_name", "app_name", "profile", "concurrency", "requests_per_level", "slos", "deployed",
    )

    def __init__(
        self,
        *,
        served_name: str,
        deployed: Any = None,
        app_name: str = DEFAULT_APP_NAME,
        profile: str | dict[str, Any] = "smoke",
        concurrency: list[int] | str = (1, 4),
        requests_per_level: int | str = 16,
        max_seconds_per_level: float = 120.0,
        slos: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.served_name, self.app_name, self.deployed = served_name, app_name, deployed
        self.profile, self.concurrency = profile, concurrency
        self.requests_per_level, self.max_seconds_per_level = requests_per_level, max_seconds_per_level
        self.slos = slos or {}

    def _levels(self) -> list[int]:
        raw = self.concurrency
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        return [int(c) for c in items]

    def execute(self, context: Any) -> dict[str, Any]:
        from raylift.bench.gates import evaluate
        from raylift.bench.runner import format_table, run_benchmark
        from raylift.deploy_state import run_key
        from raylift.rollback import restore_app

        watch = Stopwatch()
        endpoint = self.target_impl.endpoint_url()
        result = run_benchmark(
            endpoint,
            str(self.served_name),
            profile=self.profile,
            concurrency=self._levels(),
            requests_per_level=int(self.requests_per_level),
            max_seconds_per_level=self.max_seconds_per_level,
            allow_remote=self.target != "local",
            progress=lambda line: self.log.info("benchmark: %s (%s)", line, watch),
        )
        self.log.info("benchmark results (%s):\n%s", watch, format_table(result))

        state = self.state_for(str(self.app_name))
        run_id = context["run_id"]
        state.store.write_json(f"{run_key(run_id)}/benchmark.json", result)
        good = state.last_good()
        slos = {k: v for k, v in (self.slos or {}).items() if v is not None}
        violations = evaluate(result, slos, (good or {}).get("benchmark"))
        if violations:
            action = restore_app(self.target_impl, state, run_id, str(self.app_name))
            details = "; ".join(str(v) for v in violations)
            raise GateError(f"Release gate failed: {details}. Rolled back: {action}.")
        config = context["ti"].xcom_pull(task_ids="deploy", key="serve_config")
        if config:
            state.record_good(run_id, config, benchmark=result)
        return {"overall": result.get("overall", {}), "levels": result.get("levels", []),
                "results_uri": state.store.child_uri(f"{run_key(run_id)}/benchmark.json")}
