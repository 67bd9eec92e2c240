"""Notify hooks, the shell: runs the commands `vipd.notify` plans, one at a time, in order,
each under ``notify.timeout``, off the takeover path.

What it is
    `HookRunner.on_transition` is called by the agent after the controller has acted on a
    transition, i.e. after the VIP was bound and its first gratuitous ARP sent (or removed);
    it only queues. One task takes the queue in order and runs each command with
    ``asyncio.create_subprocess_exec`` in a session of its own (so a hook's children are
    killed with it), stdin closed, stdout and stderr captured for the log, as
    ``scripts.user`` with no capabilities and only ``PATH`` and its ``VIPD_*`` variables in
    its environment (`vipd.sandbox`). A hook that
    outlives the timeout has its process group killed; one that fails, times out or cannot
    start is logged and counted (``vipd_notify_total{hook,result}``) and the next one runs.
    Nothing waits for a hook but the next hook: a hook that hangs delays later hooks by at
    most the timeout, never the election, which never waits on this queue.

    `close` runs at the end of the ordered stop (the VIP already released): it queues the
    ``stop`` hooks and waits for the queue to drain, bounded by the timeout of each command
    still queued.

What it must not do: run a command through a shell, inherit vipd's descriptors, block the
event loop, or raise into the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time

from vipd import log as vlog
from vipd import metrics
from vipd.config import Notify, Scripts
from vipd.election import Transition
from vipd.notify import Hooks, Run
from vipd.sandbox import DEFAULT_SCRIPTS, Drop, environment

OUTPUT_LIMIT = 400  # characters of a failing hook's output in its log line


class HookRunner:
    def __init__(
        self,
        cfg: Notify,
        *,
        node: str,
        vip: str,
        log: logging.Logger,
        scripts: Scripts = DEFAULT_SCRIPTS,
    ) -> None:
        self.hooks = Hooks(cfg, node=node, vip=vip)
        self.drop = Drop.for_scripts(scripts)
        self.log = log
        self._queue: asyncio.Queue[Run] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.results: dict[str, int] = {}

    @property
    def cfg(self) -> Notify:
        return self.hooks.cfg

    def reconfigure(self, cfg: Notify, scripts: Scripts | None = None) -> None:
        """A reload: the next state change runs the new commands, with the new timeout (and
        as the new ``scripts.user``)."""
        self.hooks.cfg = cfg
        if scripts is not None:
            self.drop = Drop.for_scripts(scripts)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._worker(), name="notify")

    def on_transition(self, t: Transition) -> None:
        for run in self.hooks.on_transition(t):
            self._queue.put_nowait(run)

    async def close(self) -> None:
        """The stop hooks, then wait for the queue (bounded), then end the worker."""
        for run in self.hooks.on_stop():
            self._queue.put_nowait(run)
        if self._task is None:
            return
        bound = (self._queue.qsize() + 1) * self.cfg.timeout + 1.0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bound):
                await self._queue.join()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _worker(self) -> None:
        while True:
            run = await self._queue.get()
            try:
                result = await self._run(run)
            except Exception as exc:  # a bug here must not end the hooks, nor vipd
                result = "error"
                vlog.event(self.log, logging.ERROR, "notify hook failed", hook=run.hook, error=exc)
            finally:
                self._queue.task_done()
            self.results[result] = self.results.get(result, 0) + 1
            metrics.NOTIFY.labels(hook=run.hook, result=result).inc()

    async def _run(self, run: Run) -> str:
        timeout = self.cfg.timeout
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *run.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=environment(run.env),
                start_new_session=True,
                close_fds=True,
                preexec_fn=self.drop,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            vlog.event(
                self.log,
                logging.ERROR,
                "notify hook could not start",
                hook=run.hook,
                state=run.state,
                command=run.argv[0],
                error=exc,
            )
            return "error"
        try:
            async with asyncio.timeout(timeout):
                out, _ = await proc.communicate()
        except asyncio.CancelledError:
            # close() gave up waiting: the hook must not outlive vipd's stop.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            vlog.event(
                self.log,
                logging.ERROR,
                "notify hook timed out: killed",
                hook=run.hook,
                state=run.state,
                command=run.argv[0],
                timeout_s=timeout,
            )
            return "timeout"
        took_ms = round((time.monotonic() - started) * 1e3, 1)
        if proc.returncode != 0:
            vlog.event(
                self.log,
                logging.ERROR,
                "notify hook failed",
                hook=run.hook,
                state=run.state,
                command=run.argv[0],
                exit=proc.returncode,
                took_ms=took_ms,
                output=out.decode(errors="replace").strip()[-OUTPUT_LIMIT:],
            )
            return "failed"
        vlog.event(
            self.log,
            logging.INFO,
            "notify hook ran",
            hook=run.hook,
            state=run.state,
            command=run.argv[0],
            took_ms=took_ms,
        )
        return "ok"
