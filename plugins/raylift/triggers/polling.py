"""PollingTrigger: one wait loop for raylift's "poll an API until a condition holds" triggers (Serve, RayService).

Why one base: the Serve and RayService waits had each grown their own loop, their own idea of which errors to
retry (the Serve one swallowed every exception until its deadline, so a bug or a bad token read as a slow
deploy) and their own event words. Here, once:

* one event vocabulary: ``{"status": "success" | "failed" | "timeout", "message": ..., "seen_at": ...}`` plus
  whatever the subclass adds (``apps`` ...); ``seen_at`` is when the wait saw it (the run record's
  trigger→RUNNING);
* one error policy: a passing failure (connection refused or reset, a timeout, HTTP 5xx, 429) is retried at
  the poll interval, and the timeout event names the last one; a refused credential (HTTP 401/403) or any
  other error fails at once (a wrong token does not fix itself, and a failed event still lets the operator
  roll back, which an exception in the triggerer would not);
* one loop in two forms: ``run()`` for the triggerer (async) and ``wait()`` for an operator that does not
  defer (blocking, in its own process). Both go through the same ``_Wait``, so the deadline, the retry rule
  and the events cannot drift apart; only the read itself comes in two forms (``poll`` / ``apoll``).

A subclass supplies ``subject``, ``poll``, ``apoll``, ``evaluate`` (pure: observation → event or None) and
``progress`` (what the last observation says, for the log and the timeout event), plus ``serialize``.
The plain loop stays smaller here than tenacity: "not ready yet" is the normal answer, not an error, and the
timeout event needs the last observation as well as the last error.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

from airflow.triggers.base import BaseTrigger, TriggerEvent

from raylift.errors import CredentialsError, RayliftError

AUTH_STATUSES = frozenset({401, 403})
Verdict = Literal["auth", "transient", "fatal"]


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an error carries: httpx's ``response.status_code``, or ``status`` (the Kubernetes
    clients' ApiException, aiohttp's ClientResponseError, raylift's RayAuthError / KubernetesApiError)."""
    for value in (getattr(getattr(exc, "response", None), "status_code", None), getattr(exc, "status", None)):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _connection_errors() -> tuple[type[BaseException], ...]:
    """Transport-level errors of the HTTP clients the waits use. Looked up in ``sys.modules``: an error of a
    library that was never imported cannot have been raised, and importing it here would slow the triggerer."""
    kinds: list[type[BaseException]] = [OSError, TimeoutError, asyncio.TimeoutError]
    for module, name in (("httpx", "TransportError"), ("aiohttp", "ClientConnectionError"),
                         ("urllib3.exceptions", "HTTPError")):  # fmt: skip
        kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type):
            kinds.append(kind)
    return tuple(kinds)


def classify(exc: BaseException) -> Verdict:
    """``auth`` (401/403, or credentials that cannot be had: fail now), ``transient`` (connection, timeout,
    5xx, 429: retry) or ``fatal`` (anything else, a 404 or a bug included: fail now, naming it)."""
    status = http_status(exc)
    if status in AUTH_STATUSES:
        return "auth"
    if status is not None and (status >= 500 or status == 429):
        return "transient"
    if status is None and isinstance(exc, CredentialsError):  # e.g. a token file that cannot be read
        return "auth"
    if status is None and isinstance(exc, _connection_errors()):
        return "transient"
    return "fatal"


def describe_error(exc: BaseException) -> str:
    """One line for a log or an event. An HTTP error is its status and reason only: a client's own text can
    carry headers (and so a token); raylift's errors are written to be shown."""
    if isinstance(exc, RayliftError):
        return str(exc)
    status = http_status(exc)
    if status is None:
        return f"{type(exc).__name__}: {exc}"
    reason = getattr(exc, "reason", None) or getattr(getattr(exc, "response", None), "reason_phrase", None) or ""
    return f"HTTP {status} {reason}".strip()


_NOTHING: Any = object()  # no successful poll yet


class _Wait:
    """The state of one wait (deadline, last observation, last error) and its one rule for each poll's outcome.
    Shared by ``PollingTrigger.run`` and ``PollingTrigger.wait``."""

    def __init__(self, trigger: PollingTrigger) -> None:
        self.trigger = trigger
        self.deadline = time.monotonic() + trigger.timeout_s
        self.observed: Any = _NOTHING
        self.error = ""

    def outcome(self, observed: Any = _NOTHING, error: BaseException | None = None) -> dict[str, Any] | None:
        """The event to emit after one poll (its observation, or the error it raised), or None to poll again."""
        t = self.trigger
        if error is not None:
            verdict = classify(error)
            text = describe_error(error)
            if verdict == "auth":
                return self._failed("auth", f"{t.subject}: access refused ({text})")
            if verdict == "fatal":
                return self._failed("error", f"{t.subject}: {text}")
            self.error = text
            t.log.warning("Polling %s failed (%s); retrying", t.subject, text)
        else:
            self.observed, self.error = observed, ""
            try:
                event = t.evaluate(observed)
            except Exception as exc:  # an answer it cannot read: say so now rather than crash the triggerer
                return self._failed("error", f"{t.subject}: cannot read the answer ({describe_error(exc)})")
            if event is not None:
                return self._event(event)
        if time.monotonic() >= self.deadline:
            return self._event(self._timeout())
        if not self.error:
            t.log.info("%s not ready yet (%s); next poll in %ss", t.subject, self._progress()[0], t.poll_interval_s)
        return None

    def pause(self) -> float:
        """Seconds to sleep before the next poll: the interval, or less to poll once more at the deadline."""
        return max(0.0, min(self.trigger.poll_interval_s, self.deadline - time.monotonic()))

    def _progress(self) -> tuple[str, dict[str, Any]]:
        if self.observed is _NOTHING:
            return "no answer yet", {}
        return self.trigger.progress(self.observed)

    def _timeout(self) -> dict[str, Any]:
        text, extra = self._progress()
        last_error = f"; last error: {self.error}" if self.error else ""
        message = f"{self.trigger.subject} not ready after {self.trigger.timeout_s:g}s ({text}){last_error}"
        return {**extra, "status": "timeout", "message": message}

    def _failed(self, reason: str, message: str) -> dict[str, Any]:
        """A ``failed`` event that is not the condition's own verdict: ``reason`` ``auth`` or ``error``."""
        return self._event({"status": "failed", "reason": reason, "message": message})

    def _event(self, event: dict[str, Any]) -> dict[str, Any]:
        event = dict(event)
        if "message" not in event:
            event["message"] = f"{self.trigger.subject} ready" if event.get("status") == "success" else str(event)
        event.setdefault("seen_at", time.time())
        return event


class PollingTrigger(BaseTrigger):
    """Poll until ``evaluate`` returns an event, an error is definitive, or ``timeout_s`` passes (see the module
    docstring for the policy and the events).

    :param timeout_s: seconds from the first poll until the ``timeout`` event.
    :param poll_interval_s: seconds between polls (also between retries of a passing failure).
    """

    def __init__(self, *, timeout_s: float, poll_interval_s: float) -> None:
        super().__init__()
        self.timeout_s = float(timeout_s)
        self.poll_interval_s = float(poll_interval_s)

    # -- what a subclass supplies ---------------------------------------------------------------
    @property
    def subject(self) -> str:
        """What is waited on, for messages: ``RayService ns/name``."""
        raise NotImplementedError

    def poll(self) -> Any:
        """Read the state once, blocking (``wait()``)."""
        raise NotImplementedError

    async def apoll(self) -> Any:
        """Read the state once without blocking the loop (``run()``)."""
        raise NotImplementedError

    def evaluate(self, observed: Any) -> dict[str, Any] | None:
        """The event for one observation (``success``, or ``failed`` on a definitive failure state), or None
        to keep waiting. Pure, so tests can feed it payloads."""
        raise NotImplementedError

    def progress(self, observed: Any) -> tuple[str, dict[str, Any]]:
        """What an observation says (``"llm=DEPLOYING"``), and keys for the timeout event (``{"apps": ...}``)."""
        return str(observed), {}

    # -- the two forms of the one loop ---------------------------------------------------------
    async def run(self) -> AsyncIterator[TriggerEvent]:
        """For the triggerer: one event, then the generator ends."""
        yield TriggerEvent(await self._arun())

    async def _arun(self) -> dict[str, Any]:
        wait = _Wait(self)
        while True:
            event = wait.outcome(*await _atry(self.apoll))
            if event is not None:
                return event
            await asyncio.sleep(wait.pause())

    def wait(self) -> dict[str, Any]:
        """For an operator that does not defer: the same wait, blocking in this process; returns the event."""
        wait = _Wait(self)
        while True:
            event = wait.outcome(*_try(self.poll))
            if event is not None:
                return event
            time.sleep(wait.pause())


def _try(poll: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return poll(), None
    except Exception as exc:  # classified by _Wait.outcome: retried, or a failed event
        return _NOTHING, exc


async def _atry(apoll: Callable[[], Awaitable[Any]]) -> tuple[Any, BaseException | None]:
    try:
        return await apoll(), None
    except Exception as exc:  # classified by _Wait.outcome: retried, or a failed event
        return _NOTHING, exc
