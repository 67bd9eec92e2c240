"""The agent's ``/status`` document and ``/readyz`` verdict, built from its parts.

What it is: `document` assembles what ``vipd.endpoint.status`` documents (and ``vipd status``
renders): the node, the VIPs with their instance's role and whether each is bound, the
interface, the first instance's election at the top (as with one VIP), every instance's part
when there are several, the health-check targets, the tracked checks and the counters.
`readiness` is ``/readyz``: whether this node takes part in the election right now, and if
not, why.

What it must not do: change anything, or read a clock (the caller passes ``now``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vipd import __version__
from vipd.config import Config
from vipd.election import Election, IPAddress
from vipd.health.checker import HealthChecker
from vipd.instance import Instance
from vipd.preflight import Preflight
from vipd.tracking import TrackChecker

__all__ = ["backends", "document", "readiness"]


def readiness(stopping: bool, elections: Sequence[Election]) -> tuple[bool, str]:
    """/readyz: does this node take part in the election right now, and if not, why."""
    if stopping:
        return False, "stopping: leaving the election"
    for e in elections:
        ready, reason = e.readiness()
        if not ready:
            return ready, reason
    return True, "ready"


def document(
    now: float,
    *,
    cfg: Config,
    pre: Preflight,
    instances: Sequence[Instance],
    link_up: bool,
    health: HealthChecker | None,
    health_peers: Sequence[IPAddress],
    tracks: TrackChecker | None,
    garp_sent: int,
    membership: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The /status document (``vipd.endpoint.status`` documents its shape): the first
    instance's election at the top, as with one VIP; ``vips`` lists every VIP with its
    instance's role, and with several instances ``instances`` has each one's part."""
    parts = [inst.election.status(now) for inst in instances]
    counters = dict(parts[0].pop("counters", {}))
    counters["garp_sent"] = garp_sent
    vips: list[dict[str, Any]] = []
    for inst, part in zip(instances, parts, strict=True):
        bound = dict(inst.controller.bound_by_vip()) if inst.controller is not None else {}
        for vip in inst.vips:
            vips.append(
                {
                    "vip": str(vip),
                    "bound": bool(bound.get(vip, False)),
                    "role": part.get("role"),
                    "vrid": part["vrrp"]["vrid"] if "vrrp" in part else None,
                }
            )
    first = instances[0]
    doc: dict[str, Any] = {
        "node": cfg.node,
        "version": __version__,
        "vip": str(cfg.vip),
        "vips": vips,
        "interface": pre.link.name,
        "source": str(pre.source),
        "backend": first.election.backend,
        "vip_bound": bool(first.controller is not None and first.controller.bound),
        "interface_up": link_up,
        **parts[0],
        "backends": backends(health, health_peers),
        "tracks": tracks.snapshot() if tracks is not None else [],
        "counters": counters,
    }
    if membership is not None:
        doc["membership"] = membership
    if len(instances) > 1:
        doc["instances"] = [
            {"vips": [str(v) for v in inst.vips], **part}
            for inst, part in zip(instances, parts, strict=True)
        ]
    return doc


def backends(
    health: HealthChecker | None, health_peers: Sequence[IPAddress]
) -> list[dict[str, Any]]:
    """Every health-check target (the local API server first, then the peers the backend
    asked for and the IPVS backends) with its health and last check."""
    if health is None:
        return []
    local = health.local
    peers = set(health_peers)
    out: list[dict[str, Any]] = []
    snap = health.snapshot()
    for addr in sorted(snap, key=lambda a: (a != local, a.version, int(a))):
        h = snap[addr]
        detail = h.error or (f"HTTP {h.status}" if h.status is not None else "not checked yet")
        out.append(
            {
                "name": "local" if addr == local else "peer" if addr in peers else "backend",
                "address": str(addr),
                "url": health.url(addr),
                "healthy": h.healthy,
                "detail": detail,
                "checks": h.checks,
                "last_check_ms": None if h.duration is None else round(h.duration * 1e3, 3),
            }
        )
    return out
