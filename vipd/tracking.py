"""Tracking, the shell: the tracked scripts and files of ``track``, checked on the loop.

What it is
    `TrackChecker` runs one task per track: every ``interval`` a script (in a session of its
    own, stdin closed, killed with its process group after ``timeout``; exit 0 = up; as
    ``scripts.user`` with no capabilities and only ``PATH`` and ``VIPD_TRACK``, the track's
    name, in its environment: `vipd.sandbox`) or a
    read of a file (`vipd.track.file_value`), fed into a rise/fall
    `vipd.health.tracker.Tracker` (a track starts down). Whenever a track goes up or down,
    or an up file's value changes, ``on_change(Adjustment)`` gets the new sum
    (`vipd.track.adjust`) and the agent pushes it to the election.

What it must not do: block the loop (scripts are asynchronous subprocesses, files are small
reads), decide anything about the election, or stop because one check misbehaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable

from vipd import log as vlog
from vipd import metrics
from vipd.config import Scripts, Track
from vipd.health.tracker import Outcome, Tracker
from vipd.sandbox import DEFAULT_SCRIPTS, Drop, environment
from vipd.track import Adjustment, adjust, file_value


class _State:
    def __init__(self, track: Track, now: float) -> None:
        self.track = track
        self.tracker = Tracker(track.rise, track.fall, now)
        self.value = 0
        self.task: asyncio.Task[None] | None = None


class TrackChecker:
    def __init__(
        self,
        tracks: tuple[Track, ...],
        on_change: Callable[[Adjustment], None],
        *,
        log: logging.Logger,
        clock: Callable[[], float] = time.monotonic,
        scripts: Scripts = DEFAULT_SCRIPTS,
    ) -> None:
        self.drop = Drop.for_scripts(scripts)
        self.on_change = on_change
        self.log = log
        self.clock = clock
        self._states = {t.name: _State(t, clock()) for t in tracks}
        self._running = False

    def adjustment(self) -> Adjustment:
        return adjust((s.track, s.tracker.healthy, s.value) for s in self._states.values())

    def snapshot(self) -> list[dict[str, object]]:
        return [
            {
                "name": s.track.name,
                "up": s.tracker.healthy,
                "value": s.value,
                "weight": "fault" if s.track.fault else s.track.weight,
                "error": s.tracker.state.error,
            }
            for s in self._states.values()
        ]

    def start(self) -> None:
        self._running = True
        for s in self._states.values():
            self._spawn(s)

    def stop(self) -> None:
        self._running = False
        for s in self._states.values():
            if s.task is not None:
                s.task.cancel()

    def reconfigure(self, tracks: tuple[Track, ...], scripts: Scripts | None = None) -> None:
        """A reload: a track of the same name keeps its up/down state (so a reload never
        lowers the priority by itself); new tracks start down, removed ones stop."""
        if scripts is not None:
            self.drop = Drop.for_scripts(scripts)
        old = self._states
        self._states = {}
        for t in tracks:
            s = old.pop(t.name, None)
            if s is None:
                s = _State(t, self.clock())
            else:
                s.track = t
                s.tracker.rise, s.tracker.fall = t.rise, t.fall
                if s.task is not None:
                    s.task.cancel()
            self._states[t.name] = s
            if self._running:
                self._spawn(s)
        for s in old.values():
            if s.task is not None:
                s.task.cancel()
        self.on_change(self.adjustment())

    def _spawn(self, s: _State) -> None:
        s.task = asyncio.get_running_loop().create_task(self._loop(s), name=f"track {s.track.name}")

    async def _loop(self, s: _State) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            t = s.track
            try:
                ok, value, error = await (self._script(t) if t.script else self._file(t))
            except Exception as exc:  # a bug counts as a failed check, never a frozen one
                ok, value, error = False, 0, f"internal error: {exc!r}"
            metrics.TRACK_CHECKS.labels(track=t.name, result="up" if ok else "down").inc()
            changed = s.tracker.record(self.clock(), Outcome(ok=ok, error=error))
            moved = s.tracker.healthy and value != s.value
            s.value = value if ok else s.value
            if changed or moved:
                metrics.TRACK_UP.labels(track=t.name).set(1 if s.tracker.healthy else 0)
                vlog.event(
                    self.log,
                    logging.INFO if s.tracker.healthy else logging.WARNING,
                    "track up" if s.tracker.healthy else "track down",
                    track=t.name,
                    value=s.value,
                    weight="fault" if t.fault else t.weight,
                    error=error,
                )
                self.on_change(self.adjustment())
            next_at += t.interval
            late = loop.time() - next_at
            if late > 0:
                next_at += t.interval * (int(late // t.interval) + 1)
            await asyncio.sleep(next_at - loop.time())

    async def _script(self, t: Track) -> tuple[bool, int, str | None]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *t.script,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                env=environment({"VIPD_TRACK": t.name}),
                start_new_session=True,
                preexec_fn=self.drop,
            )
        except OSError as exc:
            return False, 0, f"cannot run {t.script[0]}: {exc.strerror or exc}"
        except subprocess.SubprocessError as exc:  # the privilege drop failed in the child
            return False, 0, f"cannot run {t.script[0]}: {exc}"
        try:
            async with asyncio.timeout(t.timeout):
                code = await proc.wait()
        except (TimeoutError, asyncio.CancelledError) as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return False, 0, f"timeout after {t.timeout:g} s"
        return code == 0, 0, None if code == 0 else f"exit {code}"

    async def _file(self, t: Track) -> tuple[bool, int, str | None]:
        assert t.file is not None
        try:
            with open(t.file, encoding="utf-8", errors="replace") as f:
                text: str | None = f.read(64)
        except OSError as exc:
            text = None
            error: str | None = f"cannot read {t.file}: {exc.strerror or exc}"
        else:
            error = None
        up, value = file_value(text)
        if not up and error is None:
            error = f"{t.file} says {(text or '').strip()[:20]!r}"
        return up, value, error
