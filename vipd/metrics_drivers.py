"""The drivers' metric families: VRRP, the health checks, IPVS, the Lease, the HTTP endpoint.

What it is: definitions on `vipd.metrics_agent.REGISTRY`, re-exported by `vipd.metrics`
(whose docstring says how to add a metric).

What it must not do: do any I/O, or be imported by the pure core.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from vipd.metrics_agent import REGISTRY
from vipd.metrics_registry import OptionalGauge

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
    "owner: a priority-255 advert, which no vipd node sends (forged, or a real address owner). "
    "not-allowed: a multicast advert from a source outside election.vrrp.allowed_sources.",
    ["reason"],
    registry=REGISTRY,
)
# vipd.vrrp.ratelimit's budgets, one per kind of thing a master does because of another host.
RATE_LIMIT_KINDS = ("answer", "defence", "log")
VRRP_RATE_LIMITED = Counter(
    "vipd_vrrp_rate_limited_total",
    "What the leader left out under vipd.vrrp.ratelimit's per-source budgets, by kind. answer: "
    "an immediate advert answering a lower-priority advert (the advert is dropped before the "
    "election; the periodic adverts go on). defence: a re-announcement (gratuitous ARP / "
    "unsolicited NA) for a claimant of the VIP. log: a log line about a source (the next "
    "one of that source says suppressed=N). 0 in a healthy cluster; a rise means a host "
    "floods the segment with adverts or claims (a split brain alone stays within budget).",
    ["kind"],
    registry=REGISTRY,
)
# vipd.vrrp.auth's Result values that drop an advert (a missing trailer only in enforce mode).
AUTH_FAILURE_REASONS = ("missing", "malformed", "unknown-key", "bad-hmac", "stale", "replay")
VRRP_AUTH_FAILURES = Counter(
    "vipd_vrrp_auth_failures_total",
    "VRRP adverts dropped by election.vrrp.auth_hmac, by reason. missing: no trailer (enforce "
    "mode: a peer without auth_hmac, a dual master in waiting). unknown-key, bad-hmac: another "
    "key or a forgery. stale: a timestamp outside the window (clock skew or an old capture). "
    "replay: a sequence not above the sender's last. malformed: a trailer of another type.",
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

# -- membership (vipd.membership) -------------------------------------------------------------

MEMBERSHIP_LISTS = ("election.vrrp.unicast_peers", "health.peers", "ipvs.backends")
MEMBERSHIP_SOURCES = ("endpointslices", "nodes")
MEMBERSHIP_PEERS = Gauge(
    "vipd_membership_peers",
    "Addresses in a peer list that follows the control plane (a *_from key), static ones "
    "included, this node's own excluded: the control-plane nodes less one. A drop while no "
    "node was removed means the API lists fewer members than there are.",
    ["list"],
    registry=REGISTRY,
)
MEMBERSHIP_READ_FAILURES = Counter(
    "vipd_membership_read_failures_total",
    "Reads of a followed peer list that failed (no API server of membership.api_servers "
    "answered, or an empty answer); the last good set is kept. 0 in steady state.",
    ["list"],
    registry=REGISTRY,
)
MEMBERSHIP_DROPPED = Counter(
    "vipd_membership_objects_dropped_total",
    "EndpointSlices, endpoints, Nodes or addresses from the API server that are not what "
    "their type says, dropped from the membership set, by source. Always 0 unless something "
    "writes malformed objects.",
    ["source"],
    registry=REGISTRY,
)
MEMBERSHIP_HELD = Gauge(
    "vipd_membership_held",
    "1 while membership's admission rule keeps this node out of the VRRP election (it is "
    "not, or not long enough, in the set the other nodes read); 0 otherwise.",
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

ROUTED_WITHDRAW_REASONS = ("unhealthy", "stop", "leader")

# -- bgp mode's speaker (vipd.routed.bgp, vipd.routed.exabgp) -------------------------------

BGP_SESSION_UP = Gauge(
    "vipd_bgp_session_up",
    "1 while this node's BGP session to the router `peer` is established (announce.mode: "
    "bgp), 0 otherwise, also while the speaker process is down.",
    ["peer"],
    registry=REGISTRY,
)

BGP_ANNOUNCED = Gauge(
    "vipd_bgp_announced_prefixes",
    "Prefixes (VIP /32 or /128) this node's BGP speaker is announcing now; 0 while the "
    "speaker process is down.",
    registry=REGISTRY,
)

BGP_WITHDRAWALS = Counter(
    "vipd_bgp_withdrawals_total",
    "BGP announcements withdrawn, by reason: unhealthy, waiting (the ECMP pool rule), stop "
    "(vipd stopping), speaker-died (the speaker process died), bfd-down (a peer's BFD "
    "session went down).",
    ["reason"],
    registry=REGISTRY,
)

BGP_WITHDRAW_REASONS = ("unhealthy", "waiting", "stop", "speaker-died", "bfd-down")
