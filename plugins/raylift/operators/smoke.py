"""Smoke-test the deployed candidate (checks picked by its kind) where it answers: the canary's route in a canary
release, the app's own in a direct one. A failure fails the task; the DAG's rollback step undoes the release."""

from __future__ import annotations

from typing import Any

from raylift.config import DEFAULT_APP_NAME
from raylift.errors import SmokeTestError
from raylift.operators.base import TargetOperator


class SmokeTestOperator(TargetOperator):
    """Run the smoke checks of the deployed app's kind (``raylift.serve.smoke.run_smoke``) where the deploy says
    it answers; any failure fails the task (the rollback step, ``one_failed``, undoes the release).

    :param served_name: the model name the requests name; empty: the one the deploy served (``deployed``).
    :param deployed: the deploy task's XCom (endpoint, app kind, served name).
    :param app_name: the Serve application released."""

    template_fields = (*TargetOperator.template_fields, "served_name", "app_name", "deployed")

    def __init__(self, *, served_name: str | None = None, deployed: Any = None, app_name: str = DEFAULT_APP_NAME,
                 **kw: Any):
        super().__init__(**kw)
        self.served_name, self.app_name, self.deployed = served_name, app_name, deployed

    def execute(self, context: Any) -> dict[str, Any]:
        from raylift.serve.smoke import run_smoke

        deployed = self.deployed if isinstance(self.deployed, dict) else {}
        # The deploy step says where the candidate answers (endpoint + route_prefix) and what it is.
        endpoint = deployed.get("endpoint") or self.target_impl.endpoint_url()
        try:
            served = self.served_name if self.served_name not in (None, "", "None") else deployed.get("served_name")
            report = run_smoke(endpoint, str(served), kind=deployed.get("kind", "llm"))
        except SmokeTestError:
            raise
        except Exception as exc:  # a non-JSON answer, a reset connection...: whatever it was, the app failed
            raise SmokeTestError(f"Smoke test failed: {type(exc).__name__}: {exc}") from exc
        self.log.info("smoke test passed: %s", report)
        return report
