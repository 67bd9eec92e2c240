"""vipd's metric registry and the families every backend shares: the process, the election's
role and transitions, the VIP and its announcements, reloads, tracking, notify hooks, the
ordered stop.

What it is: definitions, re-exported by `vipd.metrics` (whose docstring says how to add a
metric); the drivers' families (VRRP, health, IPVS, Lease, the endpoint) are
`vipd.metrics_drivers`'s, registered after these (the scrape keeps its order).

What it must not do: do any I/O, or be imported by the pure core.
"""

from __future__ import annotations

import sys

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.process_collector import ProcessCollector

from vipd import __version__
from vipd.metrics_registry import Registry

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
    *("address-list", "vrid", "source", "family", "owner", "not-allowed"),
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
