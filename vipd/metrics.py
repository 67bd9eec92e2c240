"""Every Prometheus metric vipd exports, in one namespace.

What it is: the metric definitions (``vipd_`` prefix, base units: seconds, frames, adverts),
defined in ``vipd.metrics_agent`` (the registry, the process, election, VIP, reload, track,
notify and stop families) and ``vipd.metrics_drivers`` (VRRP, health, IPVS, Lease, the HTTP
endpoint) and re-exported here, each with help text that says how to read it, on vipd's own
registry ``REGISTRY`` (served on ``metrics.listen``, by default ``:2112/metrics``, see
``vipd.endpoint.server``, which calls `exposition`), plus a few helpers that keep label sets
consistent (``set_role``, ``set_master``, the backends' start-up series). The README's
metrics table lists them all, and ``tests/unit/test_metrics.py`` checks that every metric
defined here is in that table, has help text and the prefix, and that ``promtool check
metrics`` is clean; ``tests/unit/test_metrics_golden.py`` keeps the scrape's families, HELP
texts, types and labels as they were. The glue to prometheus_client (the registry with its
before-scrape hooks, the gauge with no sample while unknown, the formats) is
``vipd.metrics_registry``.

Adding a metric (each feature adds its own, in its own section of one of those two modules,
then its name in the imports and ``__all__`` here): define it with
``registry=REGISTRY``, name it ``vipd_<thing>_<unit>[_total]``, write help text that says what
a healthy value looks like, give every label a bounded set of values (never an error text, a
timestamp or a free-form reason: ``vrrp.state.reason_label()`` is the pattern), pre-create
the label values that are known up front (so a query sees 0, not "no data"), and add a row
to the README's metrics table.

What it must not do: do any I/O, or be imported by the pure core (prometheus_client takes
locks and starts with threading; the core returns data and the shell counts it). Updating a
metric is cheap (a lock and an add) but still happens *after* the VIP is bound and announced
on the takeover path, never before.
"""

from __future__ import annotations

from collections.abc import Sequence

from vipd.metrics_agent import (
    ACTUATORS,
    BACKENDS,
    BUILD_INFO,
    CLAIM_SOURCES,
    DUPLICATE_CLAIM,
    DUPLICATE_CLAIMS,
    GARP_SENT,
    INVALID_REASONS,
    LOOP_HEARTBEAT_AGE,
    LOOP_LAG,
    NODE_INFO,
    NOTIFY,
    NOTIFY_HOOKS,
    NOTIFY_RESULTS,
    READY,
    RECONCILE_ERRORS,
    REGISTRY,
    RELOAD_RESULTS,
    RELOADS,
    ROLE,
    ROLES,
    STOP_ERRORS,
    STOP_STEPS,
    TAKEOVER_DURATION,
    TAKEOVER_SINCE_ADVERT,
    TRACK_CHECKS,
    TRACK_UP,
    TRANSITIONS,
    VIP_BOUND,
    VIP_CHANGES,
    VIP_REPAIRS,
)
from vipd.metrics_drivers import (
    AUTH_FAILURE_REASONS,
    BGP_ANNOUNCED,
    BGP_SESSION_UP,
    BGP_WITHDRAW_REASONS,
    BGP_WITHDRAWALS,
    HEALTH_BACKEND_HEALTHY,
    HEALTH_CHECK_DURATION,
    HEALTH_CHECKS,
    HTTP_AUTH,
    HTTP_AUTH_RESULTS,
    HTTP_BACKOFF_WHATS,
    HTTP_BACKOFFS,
    HTTP_REFUSE_REASONS,
    HTTP_REFUSED,
    INTERFACE_UP,
    IPVS_CHANGES,
    IPVS_OPS,
    IPVS_REAL_SERVERS,
    IPVS_SERVICE,
    IPVS_STATES,
    LEASE_ERRORS,
    LEASE_HOLDER,
    LEASE_KEEPING,
    LEASE_RENEW_AGE,
    LEASE_REQUESTS,
    MEMBERSHIP_DROPPED,
    MEMBERSHIP_HELD,
    MEMBERSHIP_LISTS,
    MEMBERSHIP_PEERS,
    MEMBERSHIP_READ_FAILURES,
    MEMBERSHIP_SOURCES,
    RATE_LIMIT_KINDS,
    ROUTED_ANNOUNCED,
    ROUTED_WITHDRAW_REASONS,
    ROUTED_WITHDRAWALS,
    VRRP_ADVERTS_RECEIVED,
    VRRP_ADVERTS_SENT,
    VRRP_AUTH_FAILURES,
    VRRP_INVALID,
    VRRP_MASTER,
    VRRP_MASTER_ADVERT_AGE,
    VRRP_MASTER_PRIORITY,
    VRRP_PRIORITY,
    VRRP_RATE_LIMITED,
    VRRP_SEND_ERRORS,
)
from vipd.metrics_registry import OptionalGauge as OptionalGauge  # re-exported: tests read it
from vipd.metrics_registry import Registry as Registry
from vipd.metrics_registry import expose

__all__ = [
    "ACTUATORS",
    "AUTH_FAILURE_REASONS",
    "BACKENDS",
    "BGP_ANNOUNCED",
    "BGP_SESSION_UP",
    "BGP_WITHDRAWALS",
    "BGP_WITHDRAW_REASONS",
    "BUILD_INFO",
    "CLAIM_SOURCES",
    "DUPLICATE_CLAIM",
    "DUPLICATE_CLAIMS",
    "GARP_SENT",
    "HEALTH_BACKEND_HEALTHY",
    "HEALTH_CHECKS",
    "HEALTH_CHECK_DURATION",
    "HTTP_AUTH",
    "HTTP_AUTH_RESULTS",
    "HTTP_BACKOFFS",
    "HTTP_BACKOFF_WHATS",
    "HTTP_REFUSED",
    "HTTP_REFUSE_REASONS",
    "INTERFACE_UP",
    "INVALID_REASONS",
    "IPVS_CHANGES",
    "IPVS_OPS",
    "IPVS_REAL_SERVERS",
    "IPVS_SERVICE",
    "IPVS_STATES",
    "LEASE_ERRORS",
    "LEASE_HOLDER",
    "LEASE_KEEPING",
    "LEASE_RENEW_AGE",
    "LEASE_REQUESTS",
    "LOOP_HEARTBEAT_AGE",
    "LOOP_LAG",
    "MEMBERSHIP_DROPPED",
    "MEMBERSHIP_HELD",
    "MEMBERSHIP_LISTS",
    "MEMBERSHIP_PEERS",
    "MEMBERSHIP_READ_FAILURES",
    "MEMBERSHIP_SOURCES",
    "NODE_INFO",
    "NOTIFY",
    "NOTIFY_HOOKS",
    "NOTIFY_RESULTS",
    "RATE_LIMIT_KINDS",
    "READY",
    "RECONCILE_ERRORS",
    "REGISTRY",
    "RELOADS",
    "RELOAD_RESULTS",
    "ROLE",
    "ROLES",
    "ROUTED_ANNOUNCED",
    "ROUTED_WITHDRAWALS",
    "ROUTED_WITHDRAW_REASONS",
    "STOP_ERRORS",
    "STOP_STEPS",
    "TAKEOVER_DURATION",
    "TAKEOVER_SINCE_ADVERT",
    "TRACK_CHECKS",
    "TRACK_UP",
    "TRANSITIONS",
    "VIP_BOUND",
    "VIP_CHANGES",
    "VIP_REPAIRS",
    "VRRP_ADVERTS_RECEIVED",
    "VRRP_ADVERTS_SENT",
    "VRRP_AUTH_FAILURES",
    "VRRP_INVALID",
    "VRRP_MASTER",
    "VRRP_MASTER_ADVERT_AGE",
    "VRRP_MASTER_PRIORITY",
    "VRRP_PRIORITY",
    "VRRP_RATE_LIMITED",
    "VRRP_SEND_ERRORS",
    "OptionalGauge",
    "Registry",
    "exposition",
    "init_lease",
    "init_routed",
    "init_vrrp",
    "set_lease_holder",
    "set_master",
    "set_role",
]


def exposition(accept: str) -> tuple[bytes, str]:
    """(body, content type) of a scrape of `REGISTRY` for an HTTP Accept header
    (``vipd.metrics_registry.expose``: OpenMetrics 1.0 or the text format by its entries)."""
    return expose(REGISTRY, accept)


# -- helpers ---------------------------------------------------------------------------------


def set_role(backend: str, role: str, vip: str) -> None:
    """One 1 and the rest 0 for ``backend`` and ``vip``: a query never sees two roles at
    once."""
    for r in ROLES:
        ROLE.labels(backend=backend, role=r, vip=vip).set(1 if r == role else 0)


_MASTERS: dict[str, str] = {}  # vip -> the address of its vipd_vrrp_master_info series


def set_master(address: object | None, priority: int | None, vip: str) -> None:
    """Replace ``vip``'s one ``vipd_vrrp_master_info`` series (none when no master is
    known)."""
    old = _MASTERS.pop(vip, None)
    if old is not None:
        VRRP_MASTER.remove(old, vip)
    if address is not None:
        _MASTERS[vip] = str(address)
        VRRP_MASTER.labels(address=str(address), vip=vip).set(1)
    VRRP_MASTER_PRIORITY.set(None if priority is None or address is None else priority, vip=vip)


def _init_series(backend: str, node: str, vips: Sequence[str], interface: str) -> None:
    """The series every backend exports, at their starting values."""
    for vip in vips:
        NODE_INFO.labels(node=node, vip=vip, interface=interface, backend=backend).set(1)
        set_role(backend, "init", vip)
        VIP_BOUND.labels(vip=vip).set(0)
    for op in ("add", "remove"):
        VIP_CHANGES.labels(op=op)
    for actuator in ACTUATORS:
        RECONCILE_ERRORS.labels(actuator=actuator)
    for step in STOP_STEPS:
        STOP_ERRORS.labels(step=step)
    for result in RELOAD_RESULTS:
        RELOADS.labels(result=result)
    for stage in ("bound", "announced"):
        TAKEOVER_DURATION.labels(stage=stage)
    for source in CLAIM_SOURCES:
        DUPLICATE_CLAIMS.labels(source=source)
    READY.set(0)


def init_vrrp(
    *, node: str, vips: Sequence[str], interface: str, priority: int, auth: bool = False
) -> None:
    """Create every series this node will export for the VRRP instance of ``vips``, at its
    starting value, so a query sees a 0 instead of no data before the first event (the
    gauges of an unknown value stay absent until it is known); ``auth``: auth_hmac is on."""
    _init_series("vrrp", node, vips, interface)
    for vip in vips:
        VRRP_PRIORITY.labels(vip=vip).set(priority)
        set_master(None, None, vip)
        DUPLICATE_CLAIM.labels(vip=vip).set(0)
    for reason in INVALID_REASONS:
        VRRP_INVALID.labels(reason=reason)
    for kind in RATE_LIMIT_KINDS:
        VRRP_RATE_LIMITED.labels(kind=kind)
    for reason in AUTH_FAILURE_REASONS if auth else ():
        VRRP_AUTH_FAILURES.labels(reason=reason)


def set_lease_holder(holder: str | None) -> None:
    """Replace the one ``vipd_lease_holder_info`` series."""
    LEASE_HOLDER.clear()
    LEASE_HOLDER.labels(holder=holder or "").set(1)


def init_lease(*, node: str, vips: Sequence[str], interface: str) -> None:
    """The Lease backend's series at their starting values (see `init_vrrp`)."""
    _init_series("lease", node, vips, interface)
    LEASE_KEEPING.set(0)
    LEASE_RENEW_AGE.set(None)
    LEASE_REQUESTS.labels(purpose="renew", result="ok")


def init_routed(
    *, node: str, vips: Sequence[str], interface: str, bgp_peers: Sequence[str] = ()
) -> None:
    """Routing-table and bgp mode's series at their starting values (see `init_vrrp`);
    ``bgp_peers``: bgp mode's routers (the speaker's series only exist in that mode)."""
    for peer in bgp_peers:
        BGP_SESSION_UP.labels(peer=peer).set(0)
    if bgp_peers:
        BGP_ANNOUNCED.set(0)
        for reason in BGP_WITHDRAW_REASONS:
            BGP_WITHDRAWALS.labels(reason=reason)
    for vip in vips:
        NODE_INFO.labels(node=node, vip=vip, interface=interface, backend="routed").set(1)
        set_role("routed", "init", vip)
        VIP_BOUND.labels(vip=vip).set(0)
        ROUTED_ANNOUNCED.labels(vip=vip).set(0)
        for reason in ROUTED_WITHDRAW_REASONS:
            ROUTED_WITHDRAWALS.labels(vip=vip, reason=reason)
    for step in STOP_STEPS:
        STOP_ERRORS.labels(step=step)
    for result in RELOAD_RESULTS:
        RELOADS.labels(result=result)
    READY.set(0)
