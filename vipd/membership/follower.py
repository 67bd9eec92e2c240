"""The agent's membership task: reads the sources the ``*_from`` keys name every
``membership.interval``, merges them with the static lists (``vipd.membership.policy``) and
hands the result to the running parts, live, like a reload's.

What it is: `MembershipFollower.poll` does one round (each source through
``vipd.membership.reader`` on a worker thread, then the pure merge and the admission
verdict) and calls ``apply`` with the config with the merged lists in, the merged lists and
the verdict, every round (the parts compare and change only what differs, so a relink
that reopened the VRRP socket with the static peers gets the followed ones back at the next
round). `apply_to` is that ``apply`` for the agent's parts. It logs a changed list, a
failed read (the last good set kept, sparsely), each malformed object count, the API
server a source was read through when it changes, and a changed verdict; and counts them
(``vipd_membership_*``).

What it must not do: move the VIP (a new set changes who is heard and where adverts go;
the election decides as always), block the loop (reads run on a worker thread), or stop
on a failed read or a bug in one round (logged, and the next round runs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from vipd import log as vlog
from vipd import metrics
from vipd.config import Config
from vipd.election import Election, IPAddress
from vipd.membership import policy
from vipd.membership.reader import TIMEOUT, Reader

# (the config with the merged lists, the merged lists by key, the admission verdict or None)
Apply = Callable[[Config, dict[str, tuple[IPAddress, ...]], policy.Verdict | None], None]


def _order(a: IPAddress) -> tuple[int, IPAddress]:
    return (a.version, a)


class MembershipFollower:
    def __init__(
        self,
        cfg: Config,
        own: frozenset[IPAddress],
        apply: Apply,
        log: logging.Logger,
        *,
        reader: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg = cfg
        self.own = own
        self.apply = apply
        self.log = log
        self.clock = clock
        self.lists = policy.followed_lists(cfg)
        self.sources = policy.sources_of(self.lists)
        self.reader = reader if reader is not None else Reader(cfg.membership, log)
        self.known = policy.Known()
        self.attempted = False
        self.current: dict[str, tuple[IPAddress, ...]] = {}
        self.where: dict[str, str] = {}
        self.failures = 0
        self.verdict: policy.Verdict | None = None
        unicast = next((f for f in self.lists if f.key == policy.UNICAST_PEERS), None)
        self.admission = (
            None
            if unicast is None
            else policy.Admission(own, unicast.static, cfg.membership.interval + TIMEOUT)
        )
        for f in self.lists:
            metrics.MEMBERSHIP_READ_FAILURES.labels(list=f.key)
            metrics.MEMBERSHIP_PEERS.labels(list=f.key).set(len(f.static))
        for s in self.sources:
            metrics.MEMBERSHIP_DROPPED.labels(source=s)

    def effective(self, cfg: Config) -> Config:
        """``cfg`` (a reload's new config too) with what is known merged in."""
        return policy.effective(cfg, policy.merged(cfg, self.known, self.own))

    def reconfigure(self, cfg: Config) -> None:
        """A reload: new static lists (the ``*_from`` keys and ``membership`` need a restart)."""
        self.cfg = cfg
        self.lists = policy.followed_lists(cfg)

    def snapshot(self) -> dict[str, Any]:
        """``/status``'s ``membership``: each following list with its sources, static part
        and the members in force; the API server each source was last read through; the
        failed rounds in a row; the unicast admission verdict (None without one)."""
        return {
            "lists": [
                {
                    "list": f.key,
                    "from": list(f.sources),
                    "static": [str(a) for a in f.static],
                    "members": [str(a) for a in self.current.get(f.key, f.static)],
                }
                for f in self.lists
            ],
            "read": self.attempted,
            "read_through": dict(self.where),
            "failed_rounds": self.failures,
            "held": None if self.verdict is None else self.verdict.held,
            "held_why": None if self.verdict is None else self.verdict.why,
        }

    async def run(self) -> None:
        while True:
            try:
                await self.poll()
            except Exception:
                self.log.exception("membership round failed; the next one runs")
            await asyncio.sleep(self.cfg.membership.interval)

    async def poll(self) -> None:
        loop = asyncio.get_running_loop()
        failed: set[str] = set()
        errors: list[str] = []
        for source in self.sources:
            try:
                server, data = await loop.run_in_executor(None, self.reader.read, source)
            except Exception as exc:
                failed.add(source)
                errors.append(f"{source}: {exc}")
                continue
            found = policy.found_in(source, data)
            if found.dropped:
                metrics.MEMBERSHIP_DROPPED.labels(source=source).inc(found.dropped)
                vlog.event(
                    self.log,
                    logging.WARNING,
                    "membership: malformed objects dropped",
                    source=source,
                    dropped=found.dropped,
                    server=server,
                )
            if not found.addresses:
                failed.add(source)
                errors.append(f"{source}: the API server listed no addresses")
            if server != self.where.get(source):
                self.where[source] = server
                local = server == self.cfg.membership.api_servers[0]
                vlog.event(
                    self.log,
                    logging.INFO if local else logging.WARNING,
                    "membership read" if local else "membership read through another API server",
                    source=source,
                    server=server,
                )
            last = self.known.sets.get(source)
            self.known = self.known.update(source, found)
            if self.known.sets.get(source) != last:
                vlog.event(
                    self.log,
                    logging.INFO,
                    "membership source changed",
                    source=source,
                    addresses=",".join(map(str, sorted(found.addresses, key=_order))),
                )
        self.attempted = True
        self._count_failures(failed, errors)
        lists = policy.merged(self.cfg, self.known, self.own)
        for key, peers in lists.items():
            old = self.current.get(key)
            if peers != old:
                metrics.MEMBERSHIP_PEERS.labels(list=key).set(len(peers))
                before = old or ()
                vlog.event(
                    self.log,
                    logging.INFO,
                    "membership changed",
                    list=key,
                    added=",".join(str(a) for a in peers if a not in before) or "-",
                    removed=",".join(str(a) for a in before if a not in peers) or "-",
                    members=",".join(map(str, peers)),
                )
        self.current = lists
        verdict = None
        if self.admission is not None:
            unicast = next(f for f in self.lists if f.key == policy.UNICAST_PEERS)
            known = self.known.union(unicast.sources)
            verdict = self.admission.verdict(self.clock(), self.attempted, known)
            metrics.MEMBERSHIP_HELD.set(1 if verdict.held else 0)
            if verdict != self.verdict:
                vlog.event(
                    self.log,
                    logging.INFO,
                    "membership admission",
                    held=verdict.held,
                    why=verdict.why,
                )
        self.verdict = verdict
        self.apply(policy.effective(self.cfg, lists), lists, verdict)

    def _count_failures(self, failed: set[str], errors: list[str]) -> None:
        if not failed:
            self.failures = 0
            return
        self.failures += 1
        for f in self.lists:
            if failed & set(f.sources):
                metrics.MEMBERSHIP_READ_FAILURES.labels(list=f.key).inc()
        if vlog.sparse(self.failures, 100):
            vlog.event(
                self.log,
                logging.WARNING,
                "membership read failed: keeping the last good set",
                errors="; ".join(errors),
                failures=self.failures,
                known=",".join(sorted(self.known.sets)) or "none",
            )


def apply_to(
    eff: Config,
    lists: Mapping[str, tuple[IPAddress, ...]],
    verdict: policy.Verdict | None,
    *,
    elections: Iterable[Election],
    health: Any,
    ipvs: Any,
    health_peers: Callable[[], Iterable[IPAddress]],
) -> None:
    """The merged lists into the agent's parts: the VRRP driver's peers and hold
    (``set_membership``), the elections' and IPVS's config (health peers, backends), the
    health checker's targets. Nothing here binds, removes or announces a VIP."""
    for e in elections:
        set_membership = getattr(e, "set_membership", None)
        if set_membership is not None and (policy.UNICAST_PEERS in lists or verdict):
            held = verdict.held if verdict is not None else False
            why = verdict.why if verdict is not None else ""
            set_membership(lists.get(policy.UNICAST_PEERS, ()), held, why)
        followed = policy.HEALTH_PEERS in lists or policy.IPVS_BACKENDS in lists
        if followed and getattr(e, "cfg", None) != eff:
            e.reconfigure(eff)
    if ipvs is not None and policy.IPVS_BACKENDS in lists and ipvs.cfg != eff:
        ipvs.reconfigure(eff)
    if (
        health is not None
        and eff.health is not None
        and (policy.HEALTH_PEERS in lists or policy.IPVS_BACKENDS in lists)
    ):
        targets = {*health_peers()}
        if ipvs is not None:
            targets |= set(ipvs.spec.backends)
        health.set_targets(a for a in targets if a != eff.health.local)
