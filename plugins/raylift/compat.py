"""Which Airflow raylift runs beside: one place that reads its version and bridges the minors raylift supports.

raylift installs into the Airflow a platform already runs (MWAA, Astro, Cloud Composer, the official image), so it
supports every Airflow 3 minor from :data:`MIN_AIRFLOW` on, with no upper cap, as the Apache providers do. What
differs between those minors is bridged here and nowhere else; an Airflow older than the floor is refused when a
DAG is parsed, naming the version found and what to do.
"""

from __future__ import annotations

from functools import cache
from typing import Any

MIN_AIRFLOW = (3, 1)
MIN_AIRFLOW_TEXT = ".".join(map(str, MIN_AIRFLOW))


class UnsupportedAirflowError(RuntimeError):
    """The Airflow beside raylift is older than the oldest one raylift supports."""


def parse_version(text: str) -> tuple[int, int]:
    """``3.2.1`` / ``3.1.0rc1`` / ``3.3.0.dev0`` -> (major, minor)."""
    parts = text.split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        raise UnsupportedAirflowError(f"cannot read the Airflow version {text!r}") from None


@cache
def airflow_version() -> tuple[int, int]:
    """The installed Airflow's (major, minor), checked against :data:`MIN_AIRFLOW` once per process."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("apache-airflow-core")
    except PackageNotFoundError:
        text = version("apache-airflow")
    found = parse_version(text)
    if found < MIN_AIRFLOW:
        raise UnsupportedAirflowError(
            f"raylift needs Airflow {MIN_AIRFLOW_TEXT} or newer; this environment has Airflow {text}. Upgrade Airflow "
            f"(MWAA, Astro and Cloud Composer all offer {MIN_AIRFLOW_TEXT}+), or pin an older raylift."
        )
    return found


def cron_or_asset_schedule(cron: str, *, assets: Any, timezone: str = "UTC") -> Any:
    """Runs on ``cron`` (a cron trigger: at the time, no data interval) and whenever ``assets`` are updated.

    ``airflow.sdk.AssetOrTimeSchedule`` / ``CronTriggerTimetable`` from Airflow 3.2; on 3.1 the same classes live in
    ``airflow.timetables.assets`` / ``airflow.timetables.trigger`` (the SDK did not re-export them yet)."""
    if airflow_version() >= (3, 2):
        from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable
    else:
        from airflow.timetables.assets import AssetOrTimeSchedule  # type: ignore[assignment]
        from airflow.timetables.trigger import CronTriggerTimetable  # type: ignore[assignment]
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone=timezone), assets=assets)


# What async_wait (airflow.providers.amazon.aws.utils.waiter_with_logging) raises when a waiter's attempts run out:
# its own WaiterMaxAttemptsError in recent amazon providers, a plain AirflowException with this message in older
# ones (9.25.0, MWAA 3.2.1's; 9.34.0, MWAA 3.3.1's).
WAITER_MAX_ATTEMPTS_MESSAGE = "Waiter error: max attempts reached"


def is_waiter_max_attempts(exc: BaseException) -> bool:
    """Whether ``exc`` from the amazon provider's ``async_wait`` means its attempts ran out (not a failure state)."""
    try:
        from airflow.providers.amazon.aws.exceptions import WaiterMaxAttemptsError
    except ImportError:  # amazon provider before WaiterMaxAttemptsError
        return str(exc).strip() == WAITER_MAX_ATTEMPTS_MESSAGE
    return isinstance(exc, WaiterMaxAttemptsError) or str(exc).strip() == WAITER_MAX_ATTEMPTS_MESSAGE
