"""The provider's ``AwsBaseWaiterTrigger`` with raylift's event vocabulary: ``success`` / ``failed`` / ``timeout``.

The wait itself is the provider's: the hook's (custom) waiter on an aiobotocore client, polled by
``waiter_with_logging.async_wait``, which retries throttled polls and counts the attempts. What this
adds is the last reply the waiter judged, so the one event can say what the caller needs (the build's
logs link, the lagging services) without another call to AWS.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.utils.waiter_with_logging import async_wait
from airflow.providers.common.compat.sdk import AirflowException
from airflow.triggers.base import TriggerEvent

from raylift.compat import is_waiter_max_attempts

if TYPE_CHECKING:  # the mixin's attributes are AwsBaseWaiterTrigger's
    from airflow.providers.amazon.aws.triggers.base import AwsBaseWaiterTrigger as _Trigger
else:
    _Trigger = object


def attempts_for(timeout_s: float, delay_s: float) -> int:
    """Waiter attempts that cover ``timeout_s`` at one poll every ``delay_s`` (at least one)."""
    return max(1, math.ceil(timeout_s / delay_s))


class LastReplyWaiter:
    """An async boto waiter that keeps the last reply it judged.

    ``async_wait`` calls ``wait(..., WaiterConfig={"MaxAttempts": 1})`` once per attempt: aiobotocore
    returns the reply on success, and a ``WaiterError`` carries it otherwise.
    """

    def __init__(self, waiter: Any) -> None:
        self.waiter = waiter
        self.last_reply: dict[str, Any] = {}

    async def wait(self, **kwargs: Any) -> dict[str, Any] | None:
        from botocore.exceptions import WaiterError

        try:
            reply = await self.waiter.wait(**kwargs)
        except WaiterError as exc:
            self.last_reply = exc.last_response or {}
            raise
        self.last_reply = reply or {}
        return reply


class WaiterEvents(_Trigger):
    """Mixin before ``AwsBaseWaiterTrigger``: waits like the provider's ``run()``, then builds the event
    from the last reply. A mixin, not a subclass, so the provider's import-time check that each trigger
    names its ``aws_hook_class`` still applies to the concrete triggers.

    Subclasses set ``aws_hook_class`` and the waiter declarations (through ``AwsBaseWaiterTrigger``), and
    say what each ending means in :meth:`success_event` and :meth:`unsuccessful_message`.
    """

    @property
    def timeout_s(self) -> float:
        """How long the wait may take (delay x attempts): callers add a margin for the defer timeout."""
        return float(self.waiter_delay) * self.attempts

    def success_event(self, reply: dict[str, Any], region: str | None) -> dict[str, Any]:
        raise NotImplementedError

    def unsuccessful_message(self, reply: dict[str, Any], region: str | None, *, timed_out: bool) -> str:
        raise NotImplementedError

    def failed_details(self, reply: dict[str, Any], region: str | None) -> dict[str, Any]:
        """Extra fields for a ``failed`` event (none by default)."""
        return {}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self.hook()
        async with await hook.get_async_conn() as client:
            waiter = LastReplyWaiter(
                hook.get_waiter(
                    self.waiter_name, deferrable=True, client=client, config_overrides=self.waiter_config_overrides
                )
            )
            region = client.meta.region_name
            try:
                await async_wait(
                    waiter,
                    self.waiter_delay,
                    self.attempts,
                    self.waiter_args,
                    self.failure_message,
                    self.status_message,
                    self.status_queries,
                )
            except AirflowException as exc:  # failure acceptor, error reply not a throttle, attempts run out
                reply = waiter.last_reply
                if not reply:  # not one reply (no credentials): the provider's message says why
                    yield TriggerEvent({"status": "failed", self.return_key: self.return_value, "message": str(exc)})
                elif is_waiter_max_attempts(exc):
                    message = self.unsuccessful_message(reply, region, timed_out=True)
                    yield TriggerEvent({"status": "timeout", self.return_key: self.return_value, "message": message})
                else:
                    yield TriggerEvent(
                        {
                            "status": "failed",
                            self.return_key: self.return_value,
                            **self.failed_details(reply, region),
                            "message": self.unsuccessful_message(reply, region, timed_out=False),
                        }
                    )
            else:
                yield TriggerEvent(self.success_event(waiter.last_reply, region))
