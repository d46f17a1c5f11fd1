""":func:`zkrecipes.request_revoke` and :func:`zkrecipes.break_lock` as coroutines: the same steps
(:mod:`zkrecipes.revoke`), run on the event loop."""

from __future__ import annotations

from typing import List

from kazoo.client import KazooClient

from .. import revoke as _revoke
from ._driver import AioDriver


async def request_revoke(client: KazooClient, path: str) -> List[str]:
    """``await aio.request_revoke(client, path)``: see :func:`zkrecipes.request_revoke`."""
    client, path = _revoke.checked(client, path)
    return await AioDriver(client, None, None, path=path).run(_revoke.revoke_steps(path))


async def break_lock(client: KazooClient, path: str, token: int, *, grace: float = 0.0) -> _revoke.Broken:
    """``await aio.break_lock(client, path, token, grace=0.0)``: see :func:`zkrecipes.break_lock`."""
    client, path = _revoke.checked(client, path)
    token = _revoke.validate_token(token)
    grace = _revoke.validate_grace(grace)
    broken: _revoke.Broken = await AioDriver(client, None, None, path=path).run(_revoke.breaking(path, token, grace))
    return broken
