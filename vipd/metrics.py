"""Every Prometheus metric vipd exports, defined in this one module.

What it is: the metric definitions (``vipd_`` prefix, base units: seconds, frames, adverts),
each with help text that says how to read it, on vipd's own registry ``REGISTRY`` (served on
``metrics.listen``, by default ``:2112/metrics``, see ``vipd.endpoint.server``, which calls
`exposition`), plus a few helpers that keep label sets consistent (``set_role``,
``set_master``, the backends' start-up series). The README's metrics table lists them all, and
``tests/unit/test_metrics.py`` checks that every metric defined here is in that table, has
help text and the prefix, and that ``promtool check metrics`` is clean;
``tests/unit/test_metrics_golden.py`` keeps the scrape's families, HELP texts, types and
labels as they were. The glue to prometheus_client (the registry with its before-scrape hooks,
the gauge with no sample while unknown, the formats) is ``vipd.metrics_registry``.

Adding a metric (each feature adds its own, in its own section below): define it here with
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

import sys
from collections.abc import Sequence

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.process_collector import ProcessCollector

from vipd import __version__
from vipd.metrics_registry import OptionalGauge as OptionalGauge  # re-exported: tests read it
from vipd.metrics_registry import Registry as Registry
from vipd.metrics_registry import expose


def exposition(accept: str) -> tuple[bytes, str]:
    """(body, content type) of a scrape of `REGISTRY` for an HTTP Accept header
    (``vipd.metrics_registry.expose``: OpenMetrics 1.0 or the text format by its entries)."""
    return expose(REGISTRY, accept)


REGISTRY = Registry()


# process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds,
# process_start_time_seconds, …: the standard process metrics, without the vipd_ prefix.
ProcessCollector(registry=REGISTRY)

# Election backends and the roles every backend reports. "init" means not taking part in the
# election at all: starting, its interface down, or stopping.
BACKENDS = ("vrrp", "lease", "routed")
ROLES = ("leader", "follower", "init")
# The stable reason labels (vrrp.state.REASON_LABELS plus the shell's own).
INVALID_REASONS = (
    *("truncated", "length", "version", "type", "checksum", "ttl", "auth", "interval"),
    *("address-list", "vrid", "source", "family", "owner"),
)
ACTUATORS = ("address", "ipvs")

# Actuation happens in well under a millisecond (README: p99 ~1.3 ms on a busy 2-core
# machine); the buckets resolve that and still catch a pathological 0.1–1 s.
_TAKEOVER_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0)
# Last advert → takeover is Master_Down_Interval (3 × advert interval + skew): 0.03 s at the
# shortest VRRPv3 interval, ~3.4 s at the 1 s default, up to ~123 s at 40.95 s.
_SINCE_ADVERT_BUCKETS = (
    *(0.025, 0.05, 0.1, 0.25, 0.35, 0.5, 1.0, 2.5, 3.0, 3.5, 4.0, 5.0),
    *(10.0, 30.0, 60.0, 130.0),
)
_LOOP_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


# -- process -----------------------------------------------------------------------------

BUILD_INFO = Gauge(
    "vipd_build_info",
    "Always 1; the labels say which vipd and Python run here. Join on instance to label "
    "other series with the version during a rolling upgrade.",
    ["version", "python"],
    registry=REGISTRY,
)
# sys.version's first word is what platform.python_version() returns, without importing
# platform (4 ms of a start).
BUILD_INFO.labels(version=__version__, python=sys.version.split()[0]).set(1)

NODE_INFO = Gauge(
    "vipd_node_info",
    "Always 1; what this vipd serves: its node name, the VIP, the interface and the election "
    "backend. Join on instance to show node names instead of scrape addresses.",
    ["node", "vip", "interface", "backend"],
    registry=REGISTRY,
)
READY = Gauge(
    "vipd_ready",
    "1 when this node takes part in the election (config loaded, sockets open, interface up, "
    "adverts going out), the same answer as /readyz; 0 while starting, stopping, or when its "
    "interface is down or its advert socket fails.",
    registry=REGISTRY,
)

LOOP_HEARTBEAT_AGE = Gauge(
    "vipd_event_loop_heartbeat_age_seconds",
    "Seconds since the event loop last ran its heartbeat (at least every 1 s), read when "
    "scraped. Up to 0.5 is healthy; above 2 (HEALTHZ_MAX_AGE) /healthz answers 503: "
    "the loop that sends adverts is blocked.",
    registry=REGISTRY,
)
LOOP_LAG = Histogram(
    "vipd_event_loop_lag_seconds",
    "How late the event loop ran the timer that gave each heartbeat (the heartbeat's own, "
    "or a VRRP timer that beat for it), against when it asked to run. A few milliseconds "
    "is normal; lag near the advert interval delays adverts and takeovers.",
    buckets=_LOOP_LAG_BUCKETS,
    registry=REGISTRY,
)

# -- election (every backend) --------------------------------------------------------------

ROLE = Gauge(
    "vipd_role",
    "1 for the role this node has now for each VIP in each election backend, 0 for the "
    'others. sum by (vip) (vipd_role{role="leader"}) over a cluster must be exactly 1.',
    ["backend", "role", "vip"],
    registry=REGISTRY,
)
TRANSITIONS = Counter(
    "vipd_role_transitions_total",
    "Role changes by new role and reason label (vrrp: start, master-down, preempted, "
    "shutdown, interface-down). A few per failover is normal; a steady rise is flapping.",
    ["backend", "role", "reason"],
    registry=REGISTRY,
)

# -- VIP and announcements -------------------------------------------------------------------

VIP_BOUND = Gauge(
    "vipd_vip_bound",
    "1 while the VIP is bound on this node's interface (as vipd last observed or set it), "
    "else 0. sum by (vip) over the cluster: 1 is right, 0 means nobody answers, 2+ is a "
    "split brain.",
    ["vip"],
    registry=REGISTRY,
)
VIP_CHANGES = Counter(
    "vipd_vip_changes_total",
    "VIP additions (op=add) and removals (op=remove) done by this node. Rises by one per "
    "takeover or step-down.",
    ["op"],
    registry=REGISTRY,
)
VIP_REPAIRS = Counter(
    "vipd_vip_repairs_total",
    "Times the periodic resync found the VIP not as vipd left it (deleted by hand on the "
    "leader, or present on a follower) and repaired it. Should stay 0; a rise means "
    "something else manages this address.",
    registry=REGISTRY,
)
CLAIM_SOURCES = ("vrrp", "arp")
DUPLICATE_CLAIMS = Counter(
    "vipd_vip_duplicate_claims_total",
    "Claims on the VIP while this node holds it and keeps it, by source: vrrp, adverts from "
    "another node (priority > 0) that did not make it step down; arp, (IPv4) ARP frames for "
    "the VIP from another MAC (RFC 5227). One when a split brain heals; a steady rise is a "
    "split brain, a second cluster on the same VRID, or (arp alone) a foreign host using the "
    "address.",
    ["source"],
    registry=REGISTRY,
)
DUPLICATE_CLAIM = Gauge(
    "vipd_vip_duplicate_claim",
    "1 while this node holds the VIP and another node claimed it within the last 3 advert "
    "intervals, else 0. Any 1 lasting longer than a scrape is a split brain.",
    ["vip"],
    registry=REGISTRY,
)
GARP_SENT = Counter(
    "vipd_garp_frames_sent_total",
    "Gratuitous ARP (IPv4) or unsolicited neighbour advertisement (IPv6) frames sent for the "
    "VIP: garp.repeat per burst, a burst per takeover and another after garp.delay.",
    registry=REGISTRY,
)
TAKEOVER_DURATION = Histogram(
    "vipd_takeover_duration_seconds",
    "Time from the election's decision to lead to the VIP bound (stage=bound) and to the "
    "first gratuitous ARP / NA on the wire (stage=announced). Sub-millisecond is normal.",
    ["stage"],
    buckets=_TAKEOVER_BUCKETS,
    registry=REGISTRY,
)
TAKEOVER_SINCE_ADVERT = Histogram(
    "vipd_takeover_since_last_advert_seconds",
    "At a takeover, the time since the last advert this node had received from the master it "
    "followed: Master_Down_Interval (3 x interval + skew) when the master died, about the "
    "skew time after a priority-0 (graceful) resignation. Not observed when this node "
    "followed no master (at start, or preempting a lower-priority leader).",
    buckets=_SINCE_ADVERT_BUCKETS,
    registry=REGISTRY,
)

RECONCILE_ERRORS = Counter(
    "vipd_reconcile_errors_total",
    "Failed attempts to converge the host (the kernel refused a change), by actuator. "
    "Retried within 0.5 s; a steady rise means the host cannot be converged.",
    ["actuator"],
    registry=REGISTRY,
)

RELOAD_RESULTS = ("applied", "unchanged", "invalid", "refused")
RELOADS = Counter(
    "vipd_reloads_total",
    "Reloads (SIGHUP), by result: applied (the live keys changed), unchanged (the same "
    "config), invalid (the file did not validate: the running config stays, the log says "
    "why) or refused (a key that needs a restart changed: nothing applied, the log names it).",
    ["result"],
    registry=REGISTRY,
)

TRACK_UP = Gauge(
    "vipd_track_up",
    "1 while a tracked check (track: a script or a file) is up, 0 while it is down (it "
    "starts down). A down check lowers the VRRP priority by its weight, or with weight "
    '"fault" takes the node out of the election.',
    ["track"],
    registry=REGISTRY,
)
TRACK_CHECKS = Counter(
    "vipd_track_checks_total",
    "Runs of each tracked check, by result (up: exit 0 or a good file; down: anything else).",
    ["track", "result"],
    registry=REGISTRY,
)

NOTIFY_HOOKS = ("leader", "backup", "fault", "stop", "all")
NOTIFY_RESULTS = ("ok", "failed", "timeout", "error")
NOTIFY = Counter(
    "vipd_notify_total",
    "Notify hooks run, by hook and result: ok (exit 0), failed (another exit code), timeout "
    "(killed after notify.timeout) or error (could not start). Hooks never hold up the "
    "election; a rising failed/timeout/error count means a hook needs fixing (its log line "
    "says why).",
    ["hook", "result"],
    registry=REGISTRY,
)

STOP_STEPS = ("resign", "vip", "ipvs", "election", "host")
STOP_ERRORS = Counter(
    "vipd_stop_errors_total",
    "Steps of the ordered stop (or crash cleanup) that failed, by step; each was logged and "
    "the stop went on releasing. Non-zero after a stop: look for a leftover VIP, IPVS service "
    "or virtual MAC link on the host.",
    ["step"],
    registry=REGISTRY,
)

# -- VRRP ------------------------------------------------------------------------------------

VRRP_ADVERTS_SENT = Counter(
    "vipd_vrrp_adverts_sent_total",
    "VRRP adverts sent (one per destination). Rises by 1/advert_interval per destination on "
    "the leader, 0 on followers.",
    registry=REGISTRY,
)
VRRP_SEND_ERRORS = Counter(
    "vipd_vrrp_advert_send_errors_total",
    "VRRP adverts the kernel refused to send (link down, a firewall, no route). Any rise on "
    "the leader means its peers may stop hearing it.",
    registry=REGISTRY,
)
VRRP_ADVERTS_RECEIVED = Counter(
    "vipd_vrrp_adverts_received_total",
    "Valid VRRP adverts received for our VRID. On followers it rises by 1/advert_interval; "
    "on the leader it stays flat unless another node also claims to lead.",
    registry=REGISTRY,
)
VRRP_INVALID = Counter(
    "vipd_vrrp_adverts_invalid_total",
    "VRRP packets dropped, by reason. vrid: another VRID on the segment (routine). version, "
    "auth, interval, address-list: a misconfigured peer this node cannot hear (dual master). "
    "checksum, length, truncated, ttl, type, source, family: corruption or spoofing. "
    "owner: a priority-255 advert, which no vipd node sends (forged, or a real address owner).",
    ["reason"],
    registry=REGISTRY,
)

VRRP_PRIORITY = Gauge(
    "vipd_vrrp_priority",
    "This node's VRRP priority (1-254; 0 while resigning) in the virtual router of the VIP "
    "(one per address family).",
    ["vip"],
    registry=REGISTRY,
)
VRRP_MASTER = Gauge(
    "vipd_vrrp_master_info",
    "Always 1, one series per VIP: the address of the node this node believes is the VRRP "
    "master of the VIP's virtual router (its own source address when it leads). "
    "count by (vip) (count by (vip, address) (vipd_vrrp_master_info)) above 1 means the "
    "nodes disagree.",
    ["address", "vip"],
    registry=REGISTRY,
)
VRRP_MASTER_PRIORITY = OptionalGauge(
    "vipd_vrrp_master_priority",
    "The priority of the master as seen by this node (its own when it leads); no sample "
    "while no master is known (starting, or the master just went away).",
    registry=REGISTRY,
    labelnames=("vip",),
)
VRRP_MASTER_ADVERT_AGE = OptionalGauge(
    "vipd_vrrp_master_advert_age_seconds",
    "On a follower, seconds since the last advert from the master, read when scraped: below "
    "the advert interval is healthy, near 3 x the interval the follower is about to take "
    "over. 0 on the leader; no sample while no advert from the master has been heard.",
    registry=REGISTRY,
    labelnames=("vip",),
)
INTERFACE_UP = Gauge(
    "vipd_interface_up",
    "1 while the VIP's interface is up with carrier, else 0 (the node is then out of the "
    "election, RFC 9568 Shutdown event).",
    ["interface"],
    registry=REGISTRY,
)

# -- health ----------------------------------------------------------------------------------

# Check durations: a healthy API server answers /readyz in milliseconds; the top buckets
# reach the largest health.timeout (just under health.interval, up to 300 s).
_HEALTH_CHECK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

HEALTH_BACKEND_HEALTHY = Gauge(
    "vipd_health_backend_healthy",
    "1 while the API server at this address is healthy by vipd's checks (rise consecutive "
    "HTTP 200s), else 0; local=true is this node's own (it gates leadership), the others "
    "are the IPVS backends. Every target starts at 0.",
    ["target", "local"],
    registry=REGISTRY,
)
HEALTH_CHECKS = Counter(
    "vipd_health_checks_total",
    "Health checks done, by target and result (ok: HTTP 200; fail: anything else, the "
    "reason is in the log and in vipd status). Rises by 1/health.interval per target.",
    ["target", "result"],
    registry=REGISTRY,
)
HEALTH_CHECK_DURATION = Histogram(
    "vipd_health_check_duration_seconds",
    "How long one health check took (connect, TLS handshake, status line), by target. "
    "Milliseconds are normal; near health.timeout the API server is struggling.",
    ["target"],
    buckets=_HEALTH_CHECK_BUCKETS,
    registry=REGISTRY,
)

# -- IPVS --------------------------------------------------------------------------------------

IPVS_STATES = ("healthy", "unhealthy")
IPVS_OPS = (
    *("add_service", "edit_service", "remove_service"),
    *("add_server", "edit_server", "remove_server"),
)
IPVS_REAL_SERVERS = Gauge(
    "vipd_ipvs_real_servers",
    "Real servers in vipd's IPVS service (VIP:port/TCP) after the last reconcile, by the "
    "backend's health. On the leader, healthy = the healthy backends; unhealthy > 0 means a "
    "pool rule kept or added one that is not healthy (bootstrap, or the last remaining one: "
    "every backend is failing). 0 on followers.",
    ["state"],
    registry=REGISTRY,
)
IPVS_SERVICE = Gauge(
    "vipd_ipvs_service_present",
    "1 while vipd's IPVS service exists on this node: 1 on the leader, 0 on followers.",
    registry=REGISTRY,
)
IPVS_CHANGES = Counter(
    "vipd_ipvs_changes_total",
    "Changes vipd made to its IPVS service, by operation. add_server/remove_server follow "
    "backend health transitions; changes with no health transition mean someone edited the "
    "table by hand (vipd repaired it).",
    ["op"],
    registry=REGISTRY,
)

# -- Lease ------------------------------------------------------------------------------------

LEASE_REQUESTS = Counter(
    "vipd_lease_requests_total",
    "Lease API calls by purpose (read, create, acquire, renew, release) and result (ok, or "
    "the error kind as in vipd_lease_errors_total).",
    ["purpose", "result"],
    registry=REGISTRY,
)
LEASE_ERRORS = Counter(
    "vipd_lease_errors_total",
    "Failed Lease API calls by kind: conflict (409, normal when two nodes race), not-found, "
    "unreachable (timeout, refused, TLS: this node's path to the API server), http-5xx / "
    "http-429 (the API server's store cannot serve), http-4xx (refused: credentials, RBAC). "
    "A leader's renewals failing for renew_deadline make it step down.",
    ["kind"],
    registry=REGISTRY,
)
LEASE_HOLDER = Gauge(
    "vipd_lease_holder_info",
    '1 for the Lease holder as this node last read it (holder="" when released); one '
    "series. Every node of a cluster should show the same holder.",
    ["holder"],
    registry=REGISTRY,
)
LEASE_KEEPING = Gauge(
    "vipd_lease_keeping_vip_unrenewed",
    "1 while this node keeps the VIP past its renew deadline because the API server says its "
    "store is unavailable (the unreachable-store rule), else 0. Page on it: the Lease is not "
    "being renewed.",
    registry=REGISTRY,
)
LEASE_RENEW_AGE = OptionalGauge(
    "vipd_lease_last_renewal_age_seconds",
    "Seconds since this node's last successful renewal was sent, while it leads; no sample "
    "while it follows. Above renew_deadline means it is keeping the VIP through a store "
    "outage.",
    registry=REGISTRY,
)


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


def init_vrrp(*, node: str, vips: Sequence[str], interface: str, priority: int) -> None:
    """Create every series this node will export for the VRRP instance of ``vips``, at its
    starting value, so a query sees a 0 instead of no data before the first event (the
    gauges of an unknown value stay absent until it is known)."""
    _init_series("vrrp", node, vips, interface)
    for vip in vips:
        VRRP_PRIORITY.labels(vip=vip).set(priority)
        set_master(None, None, vip)
        DUPLICATE_CLAIM.labels(vip=vip).set(0)
    for reason in INVALID_REASONS:
        VRRP_INVALID.labels(reason=reason)


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


# -- HTTP endpoint (vipd.endpoint.serving, vipd.endpoint.auth) -------------------------------

HTTP_REFUSE_REASONS = (
    "busy",
    "evicted",
    "head-timeout",
    "head-too-large",
    "bad-request",
    "body",
    "tls",
)
HTTP_REFUSED = Counter(
    "vipd_http_refused_total",
    "Endpoint connections refused or closed early, by reason: busy (503, every worker "
    "answering), evicted (closed at the connection limit to make room), head-timeout (the "
    "request head did not arrive whole in time), head-too-large (431), bad-request, body (a "
    "request with a body: 413/400), tls (handshake failed). Steady growth: a client probing "
    "or flooding the endpoint.",
    ["reason"],
    registry=REGISTRY,
)
HTTP_BACKOFF_WHATS = ("accept", "thread")
HTTP_BACKOFFS = Counter(
    "vipd_http_backoffs_total",
    "Times the endpoint paused and retried: accept (out of descriptors or memory), thread (a "
    "worker thread could not be started, as under a pids limit). Should stay 0.",
    ["what"],
    registry=REGISTRY,
)
HTTP_AUTH_RESULTS = ("allowed", "unauthenticated", "forbidden", "error")
HTTP_AUTH = Counter(
    "vipd_http_auth_total",
    "Bearer-token checks of /metrics and /status (metrics.auth: token) by result, cached "
    "verdicts included: allowed, unauthenticated (401), forbidden (403), error (the API server "
    "could not be asked: 503). 0 unless metrics.auth is token.",
    ["result"],
    registry=REGISTRY,
)
for _reason in HTTP_REFUSE_REASONS:
    HTTP_REFUSED.labels(reason=_reason)
for _what in HTTP_BACKOFF_WHATS:
    HTTP_BACKOFFS.labels(what=_what)
for _result in HTTP_AUTH_RESULTS:
    HTTP_AUTH.labels(result=_result)


# -- routing-table mode (vipd.routed.backend) -------------------------------------------------

ROUTED_ANNOUNCED = Gauge(
    "vipd_routed_announced",
    "1 while this node announces the VIP in routing-table mode (its announcement route is "
    "in the exported table), 0 otherwise. sum by (vip) over a cluster is the router's "
    "number of ECMP paths; 0 for every node means no path.",
    ["vip"],
    registry=REGISTRY,
)

ROUTED_WITHDRAWALS = Counter(
    "vipd_routed_withdrawals_total",
    "Announcements withdrawn in routing-table mode, by reason: unhealthy (the local API "
    "server failed while a peer serves), stop (vipd stopping).",
    ["vip", "reason"],
    registry=REGISTRY,
)

ROUTED_WITHDRAW_REASONS = ("unhealthy", "stop")


def init_routed(*, node: str, vips: Sequence[str], interface: str) -> None:
    """Routing-table mode's series at their starting values (see `init_vrrp`)."""
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
