"""SIGHUP on a running agent: the config read again, and its live keys handed to the parts.

What it is: `read` reads and validates the new config and decides, with ``vipd.reload``'s
plan, whether it may be applied (every changed key live) and the result label of
``vipd_reloads_total`` when it may not; `apply` hands the live keys (``vipd.reload.LIVE``)
to the running parts that own them: the log level, each controller's GARP policy, the health
checker and its targets, IPVS, the notify hooks, the tracked checks and every election.

What it must not do: apply half a reload (a key that needs a restart refuses it all), or
bind, remove or announce a VIP.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from vipd import log as vlog
from vipd import reload as vreload
from vipd.config import Config, ConfigError
from vipd.controller import Controller, GarpPolicy
from vipd.election import IPAddress
from vipd.health.checker import HealthChecker
from vipd.instance import Instance
from vipd.tracking import TrackChecker

if TYPE_CHECKING:
    from vipd.ipvs.runtime import IpvsRuntime

__all__ = ["Loader", "apply", "read"]

# A reload's source of the new config: reads and validates it, raises ConfigError.
Loader = Callable[[], Config]


def read(
    running: Config, loader: Loader | None, log: logging.Logger
) -> tuple[str, Config | None, vreload.Plan | None]:
    """(result label, the new config to apply or None, its plan). Logs why a reload is not
    applied; never raises for a config that does not validate."""
    if loader is None:
        vlog.event(
            log,
            logging.WARNING,
            "reload refused: the config was read from stdin; restart vipd to change it",
        )
        return "refused", None, None
    try:
        new = loader()
    except ConfigError as exc:
        vlog.event(log, logging.ERROR, "reload failed: keeping the running config", error=str(exc))
        return "invalid", None, None
    p = vreload.plan(running, new)
    if p.refused:
        vlog.event(
            log,
            logging.ERROR,
            "reload refused: keeping the running config (these keys need a restart)",
            keys=",".join(p.refused),
        )
        return "refused", None, p
    if not p.changed:
        vlog.event(log, logging.INFO, "reload: nothing changed")
        return "unchanged", None, p
    return "applied", new, p


def apply(
    new: Config,
    *,
    controllers: Iterable[Controller],
    instances: Sequence[Instance],
    health: HealthChecker | None,
    health_peers: Callable[[], Iterable[IPAddress]],
    ipvs: IpvsRuntime | None,
    tracks: TrackChecker | None,
) -> None:
    """The live keys of ``new`` into the running parts."""
    logging.getLogger(vlog.LOGGER_NAME).setLevel(new.log.level.upper())
    for controller in controllers:
        controller.garp = GarpPolicy.from_config(new.garp)
    if health is not None and new.health is not None:
        health.reconfigure(new.health)
    if ipvs is not None:
        ipvs.reconfigure(new)
    for inst in instances:
        inst.hooks.reconfigure(new.notify, new.scripts)
    if tracks is not None:
        tracks.reconfigure(new.track, new.scripts)
    for inst in instances:
        inst.election.reconfigure(new)
    if health is not None and new.health is not None:
        targets = {*health_peers()}  # the elections' own, as reconfigured above
        if ipvs is not None:
            targets |= set(ipvs.spec.backends)
        health.set_targets(a for a in targets if a != new.health.local)
