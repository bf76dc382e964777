"""Async AWS calls for triggers: aiobotocore through ``hook.get_async_conn()`` when it is installed,
else the hook's boto3 client in a worker thread. Either way the triggerer's event loop never blocks.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any


def has_aiobotocore() -> bool:
    return importlib.util.find_spec("aiobotocore") is not None


async def call(hook: Any, operation: str, **kwargs: Any) -> dict[str, Any]:
    """``client.<operation>(**kwargs)`` without blocking the loop; fresh credentials come from ``hook``."""
    if has_aiobotocore():
        async with await hook.get_async_conn() as client:
            return await getattr(client, operation)(**kwargs)
    client = await asyncio.to_thread(lambda: hook.conn)
    return await asyncio.to_thread(getattr(client, operation), **kwargs)
