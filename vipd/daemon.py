"""``vipd run``'s process around the agent: the fault signals, the endpoint's thread, the
event loop and the signal handlers.

What it is: `run` blocks the synchronous fault signals (``vipd.host.faultsig``) before any
thread starts, starts the HTTP endpoint's thread (already bound by the caller: the port is the
per-node lock), runs the agent (``vipd.agent``) on uvloop when it is installed, else on
asyncio's loop, with the handlers of ``vipd.signals``, and closes the endpoint but keeps its
lock until the process ends.

What it must not do: read the config or check the host (``vipd.startup`` did), or decide
anything the agent decides.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from vipd.agent import Agent, make_elections
from vipd.config import Config
from vipd.host.faultsig import block_fault_signals
from vipd.livereload import Loader
from vipd.preflight import Preflight
from vipd.signals import install_signal_handlers, watch_fault_signals

if TYPE_CHECKING:
    from vipd.endpoint.server import Endpoint

__all__ = ["run", "serve"]


async def serve(
    cfg: Config, pre: Preflight, endpoint: Endpoint | None = None, loader: Loader | None = None
) -> int:
    stop = asyncio.Event()
    agent = Agent(cfg, pre, make_elections(cfg, pre), endpoint, loader=loader)
    install_signal_handlers(agent, stop)
    watch_fault_signals(agent, stop)
    return await agent.run(stop)


def run(
    cfg: Config, pre: Preflight, endpoint: Endpoint | None = None, loader: Loader | None = None
) -> int:
    """Run the agent on uvloop when it is installed, else on asyncio's default loop.

    ``endpoint`` is the HTTP endpoint, already bound by the caller (the port is the per-node
    lock, taken before joining the election); it serves while the agent runs. ``loader``
    reads the config again for a reload (None: the config came from stdin)."""
    block_fault_signals()
    if endpoint is not None:
        endpoint.start()
    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(serve(cfg, pre, endpoint, loader))
        return uvloop.run(serve(cfg, pre, endpoint, loader))
    finally:
        if endpoint is not None:
            # The per-node lock outlives this call: the process may still join a thread
            # with an API call in flight, and the successor must not start before it ends.
            endpoint.close(keep_lock=True)
