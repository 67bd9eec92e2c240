"""The config sections besides ``election``: ``garp``, ``log``, ``health``, ``ipvs``,
``notify``, ``track`` and ``metrics``, each a frozen dataclass whose fields declare the keys,
their defaults and their rules (`vipd.config.schema`).

What it must not do: check anything on the host (``vipd.preflight``) or do any I/O.

Where the rules come from: the gratuitous ARP and hook keys are keepalived's
(``garp_master_repeat``, ``garp_master_delay``, ``garp_master_refresh``, ``notify_*``,
``track_script``/``track_file``, see keepalived's ``doc/man/man5/keepalived.conf.5``); the IPVS
schedulers are those Debian's kernel builds (``net/netfilter/ipvs/ip_vs_*.c``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Any, Literal

from vipd.config.kubeapi import IpvsDiscovery, host_port_url, tls_server_name
from vipd.config.membership import members_from
from vipd.config.rules import Command, IPAddress, backends, command, file_or_null, ip_literal
from vipd.config.schema import (
    Check,
    choice,
    derived,
    flag,
    integer,
    number,
    read,
    seconds,
    spec,
)
from vipd.health import http as health_http

__all__ = [
    "DEFAULT_METRICS_LISTEN",
    "IPVS_SCHEDULERS",
    "NOTIFY_STATES",
    "Garp",
    "Health",
    "HealthPath",
    "Ipvs",
    "Log",
    "LogFormat",
    "LogLevel",
    "Metrics",
    "Notify",
    "Track",
    "read_tracks",
]

LogFormat = Literal["logfmt", "json"]
LogLevel = Literal["debug", "info", "warning", "error"]
# "/readyz", "/healthz" or "/livez", optionally "?exclude=<check>[&exclude=<check>…]"
HealthPath = str


@dataclass(frozen=True, slots=True)
class Garp:
    # frames per burst (keepalived's garp_master_repeat)
    repeat: int = field(default=5, metadata=spec(integer(1, 100)))
    # seconds between the frames of a burst
    interval: float = field(default=0.01, metadata=spec(seconds(0, 1)))
    # seconds between re-announcements while active; 0 = off
    refresh: float = field(
        default=0.0,
        metadata=spec(
            number(
                "must be 0 (off) or a number of seconds from 1 to 86400",
                lambda v: v == 0 or 1 <= v <= 86400,
            )
        ),
    )
    # seconds until the second burst; 0 = none (garp_master_delay)
    delay: float = field(
        default=5.0,
        metadata=spec(
            number(
                "must be 0 (no second burst) or a number of seconds up to 3600",
                lambda v: 0 <= v <= 3600,
            )
        ),
    )


@dataclass(frozen=True, slots=True)
class Log:
    format: LogFormat = field(
        default="logfmt", metadata=spec(choice("logfmt", "json"), env=("VIPD_LOG_FORMAT", "str"))
    )
    level: LogLevel = field(
        default="info", metadata=spec(choice("debug", "info", "warning", "error"))
    )


# -- health --------------------------------------------------------------------------------


def _path(c: Check, key: str, value: object, _: Mapping[str, Any]) -> HealthPath:
    if not isinstance(value, str) or not health_http.valid_path(value):
        c.fail(
            key,
            'must be "/readyz", "/healthz" or "/livez", optionally followed by '
            '"?exclude=<check>" (repeatable with "&"), e.g. "/readyz?exclude=etcd"',
            value,
        )
    return value


def _local(c: Check, key: str, value: object, _: Mapping[str, Any]) -> IPAddress:
    local = ip_literal(c, key, value, "the local API server")
    if local.is_unspecified or local.is_multicast:
        c.fail(key, "must be a unicast address the API server listens on", value)
    return local


def _timeout(c: Check, key: str, value: object, got: Mapping[str, Any]) -> float:
    # A check that is still running when the next one is due would overlap it; the driver
    # keeps one check per target in flight, so it must end before the next tick.
    interval = got["interval"]
    return c.number(
        key,
        value,
        f"must be a number of seconds from 0.01 to less than health.interval ({interval:g})",
        lambda v: 0.01 <= v < interval,
    )


def _weight(c: Check, key: str, value: object, _: Mapping[str, Any]) -> int:
    why = " (the priority reduction while the local API server is unhealthy; 0 = no gating)"
    weight = c.integer(key, value, 0, 253, why)
    election = c.election
    if weight > 0 and election.mode == "vrrp" and not election.vrrp.preempt:
        c.fail(
            key,
            "must be 0 with election.vrrp.preempt: false: a healthy backup takes the VIP "
            "from an unhealthy leader only by preempting it (equal priorities with "
            "preempt: true avoid a second move)",
            weight,
        )
    return weight


def _peers(c: Check, key: str, value: object, got: Mapping[str, Any]) -> tuple[IPAddress, ...]:
    if value is not None and c.election.mode == "vrrp" and value != []:
        c.fail(
            key,
            "is only used with election.mode: lease or announce.mode: routing-table (VRRP "
            "gates by priority: health.weight)",
            value,
        )
    return backends(c, key, value, got)


def _peers_from(c: Check, key: str, value: object, got: Mapping[str, Any]) -> tuple[str, ...]:
    if value is not None and c.election.mode == "vrrp" and value != []:
        c.fail(
            key,
            "is only used with election.mode: lease or announce.mode: routing-table (VRRP "
            "follows the members with election.vrrp.unicast_peers_from)",
            value,
        )
    return members_from(c, key, value, got)


@dataclass(frozen=True, slots=True)
class Health:
    """The ``health`` section: HTTPS checks of the API servers (vipd.health).

    Present means on: the local API server (``local``) is checked and gates leadership by
    ``weight``; the IPVS backends are checked on the same ``path``/``port``.
    """

    path: HealthPath = field(default="/readyz", metadata=spec(_path))
    port: int = field(default=6443, metadata=spec(integer(1, 65535)))
    # where the local API server answers
    local: IPAddress = field(default=IPv4Address("127.0.0.1"), metadata=spec(_local))
    # seconds between the starts of two checks of one target
    interval: float = field(default=1.0, metadata=spec(seconds(0.05, 300)))
    # seconds one check may take; < interval (default 0.8 x interval)
    timeout: float = field(
        default=0.8,
        metadata=spec(
            _timeout, needs=("interval",), absent=lambda c, got: round(0.8 * got["interval"], 6)
        ),
    )
    # consecutive successes to become healthy (a target starts unhealthy)
    rise: int = field(default=2, metadata=spec(integer(1, 100)))
    fall: int = field(default=3, metadata=spec(integer(1, 100)))  # failures to be unhealthy
    # None: TLS without verification
    ca_file: str | None = field(
        default=None,
        metadata=spec(
            file_or_null(
                "must be the path of a PEM file of CA certificates, or null for no verification"
            )
        ),
    )
    # VRRP priority reduction while the local API server is unhealthy
    weight: int = field(default=253, metadata=spec(_weight))
    # Lease mode: the other control-plane nodes' API servers, checked to know whether a
    # healthy peer can take over (empty: ipvs.backends); the local address never counts.
    peers: tuple[IPAddress, ...] = field(default=(), metadata=spec(_peers))
    # membership sources merged into peers while running (vipd.membership)
    peers_from: tuple[str, ...] = field(default=(), metadata=spec(_peers_from))


# -- ipvs ----------------------------------------------------------------------------------

# IPVS schedulers of Debian's kernel (net/netfilter/ipvs/ip_vs_*.c); others are refused.
IPVS_SCHEDULERS = ("rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo",
                   "ovf", "mh", "twos")  # fmt: skip


def _one_vip(c: Check, p: str, got: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    """Once the service is known (enabled, port, scheduler, forwarding)."""
    if got["enabled"] and len(c.vips) > 1:
        # The IPVS service, its discovery and its health pool are built for one VIP.
        c.fail(
            f"{p}.enabled",
            "supports one VIP in this version (vips lists several): balance one "
            "endpoint, or run IPVS without vipd for the others",
            got["enabled"],
        )


def _pool(c: Check, p: str, got: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    if got["enabled"] and not got["backends"]:
        c.fail(
            f"{p}.backends",
            "must list the control-plane nodes' addresses when ipvs.enabled is true",
        )
    if got["enabled"] and c.health is None:
        c.fail(
            f"{p}.enabled",
            "needs the health section: a backend joins the pool only once its API server "
            "answers the health check",
        )


def _one_follower(c: Check, p: str, got: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    if got["backends_from"] and got["discovery"].enabled:
        c.fail(
            f"{p}.discovery.enabled",
            "must be false with ipvs.backends_from (which reads the same EndpointSlices "
            'with membership\'s access: use backends_from: ["endpointslices"] alone)',
            True,
        )


@dataclass(frozen=True, slots=True)
class Ipvs:
    """IPVS load balancing of VIP:port/TCP on the leader (vipd.ipvs)."""

    enabled: bool = field(default=False, metadata=spec(flag()))
    port: int = field(default=6443, metadata=spec(integer(1, 65535)))
    scheduler: str = field(default="rr", metadata=spec(choice(*IPVS_SCHEDULERS)))
    forwarding: Literal["nat", "dr"] = field(
        default="nat", metadata=spec(choice("nat", "dr"), then=_one_vip)
    )
    backends: tuple[IPAddress, ...] = field(default=(), metadata=spec(backends, then=_pool))
    # membership sources merged into backends while running (vipd.membership)
    backends_from: tuple[str, ...] = field(default=(), metadata=spec(members_from))
    discovery: IpvsDiscovery = field(
        default=IpvsDiscovery(), metadata=spec(section=IpvsDiscovery, then=_one_follower)
    )


# -- notify and track ----------------------------------------------------------------------

NOTIFY_STATES = ("leader", "backup", "fault", "stop")


@dataclass(frozen=True, slots=True)
class Notify:
    """``notify``: commands run on a change of state (keepalived's ``notify_master``,
    ``notify_backup``, ``notify_fault``, ``notify_stop`` and ``notify``), each under
    ``timeout``; ``()`` is no command (``vipd.notify``)."""

    leader: Command = field(default=(), metadata=spec(command))
    backup: Command = field(default=(), metadata=spec(command))
    fault: Command = field(default=(), metadata=spec(command))
    stop: Command = field(default=(), metadata=spec(command))
    # every state change, after the state's own command
    all: Command = field(default=(), metadata=spec(command))
    # seconds, then the hook's process group is killed
    timeout: float = field(default=10.0, metadata=spec(seconds(0.1, 600)))

    def command(self, name: str) -> Command:
        value: Command = getattr(self, name)
        return value


def _track_name(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,63}", value):
        c.fail(key, "must be 1 to 63 letters, digits, '_', '.' or '-'", value)
    return value


def _track_file(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.startswith("/")):
        c.fail(key, "must be an absolute path", value)
    return value


def _one_check(c: Check, p: str, got: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    if bool(got["script"]) == (got["file"] is not None):
        c.fail(p, "needs exactly one of script and file")


def _track_timeout(c: Check, key: str, value: object, got: Mapping[str, Any]) -> float:
    interval = got["interval"]
    item = key.rsplit(".", 1)[0]
    return c.number(
        key,
        value,
        f"must be a number of seconds from 0.01 up to {item}.interval ({interval:g})",
        lambda v: 0.01 <= v <= interval,
    )


def _track_weight(c: Check, key: str, value: object, _: Mapping[str, Any]) -> int:
    if value == "fault":
        return 0  # `fault` says it
    why = ' (the priority reduction while the check is down), or "fault"'
    return c.integer(key, value, 0, 253, why)


@dataclass(frozen=True, slots=True)
class Track:
    """One ``track`` item: a script (exit 0 = up) or a file (``vipd.track``), checked every
    ``interval`` under ``timeout``, up after ``rise`` good results and down after ``fall``
    bad ones (it starts down, like a health target). While down it lowers the VRRP priority
    by ``weight`` (floored at 1, with the health gate), or with ``fault`` takes the node out
    of the election; in Lease mode a down track counts as an unhealthy local API server."""

    name: str = field(
        metadata=spec(_track_name, absent=lambda c, _: f"track-{c.index}"),
    )
    script: Command = field(default=(), metadata=spec(command))
    file: str | None = field(default=None, metadata=spec(_track_file, then=_one_check))
    interval: float = field(default=2.0, metadata=spec(seconds(0.1, 3600)))
    timeout: float = field(
        default=1.0,
        metadata=spec(
            _track_timeout, needs=("interval",), absent=lambda c, got: min(1.0, got["interval"])
        ),
    )
    rise: int = field(default=1, metadata=spec(integer(1, 100)))
    fall: int = field(default=1, metadata=spec(integer(1, 100)))
    weight: int = field(default=0, metadata=spec(_track_weight))
    # not a key of its own: written as ``weight: fault``
    fault: bool = field(default=False, metadata=derived(lambda sec: sec.get("weight") == "fault"))


def read_tracks(c: Check, key: str, value: object, _: Mapping[str, Any]) -> tuple[Track, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        c.fail(key, "must be a list of checks (each with script or file)", value)
    out: list[Track] = []
    for i, item in enumerate(value):
        c.index = i
        t = read(c, f"{key}[{i}]", Track, item)
        if any(o.name == t.name for o in out):
            c.fail(f"{key}[{i}].name", "is used twice: each check needs its own", t.name)
        out.append(t)
    return tuple(out)


# -- metrics -------------------------------------------------------------------------------


def _listen(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str:
    rule = (
        'must be "HOST:PORT" with an IP address literal as HOST ("[::]:2112" for IPv6) '
        "and a port from 1 to 65535"
    )
    if not isinstance(value, str):
        c.fail(key, rule, value)
    m = re.fullmatch(r"(\[([^\]]+)\]|[^:\[\]]+):([0-9]{1,5})", value)
    if m is None:
        c.fail(key, rule, value)
    host = m.group(2) if m.group(2) is not None else m.group(1)
    try:
        ip = ip_address(host)
    except ValueError:
        c.fail(key, rule, value)
    if isinstance(ip, IPv6Address) != (m.group(2) is not None) or "%" in host:
        c.fail(key, rule, value)
    if not 1 <= int(m.group(3)) <= 65535:
        c.fail(key, rule, value)
    return value


_SCRIPT_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}"


def _script_user(c: Check, key: str, value: object, _: Mapping[str, Any]) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # a uid written as a number
    if value is not None and (
        not isinstance(value, str) or not re.fullmatch(f"{_SCRIPT_NAME}(:{_SCRIPT_NAME})?", value)
    ):
        c.fail(
            key,
            'must be a user name or uid, optionally with ":group" (a group name or gid), '
            "or null (vipd's own)",
            value,
        )
    return value


@dataclass(frozen=True, slots=True)
class Scripts:
    """``scripts``: who the notify hooks and tracked scripts run as, and whether vipd refuses
    a script or tracked file that someone else could change (keepalived's ``script_user`` and
    ``enable_script_security``; ``vipd.script_security``, ``vipd.sandbox``)."""

    # A user name or uid, optionally ":group" (a group name or gid); None: vipd's own ids.
    user: str | None = field(default=None, metadata=spec(_script_user))
    # false: run and read them whoever can change them (a risk)
    security: bool = field(default=True, metadata=spec(flag()))


METRICS_AUTH_MODES = ("none", "token", "client-cert")
_METRICS_FILE = file_or_null("must be the path of a file, or null")


def _metrics_tls_pair(c: Check, _: str, got: Mapping[str, Any], __: Mapping[str, Any]) -> None:
    if (got["cert_file"] is None) != (got["key_file"] is None):
        c.fail(
            "metrics.key_file",
            "must be set with metrics.cert_file (both or neither)",
            got["key_file"],
        )


def _metrics_auth(c: Check, key: str, value: object, got: Mapping[str, Any]) -> str:
    if value not in METRICS_AUTH_MODES or not isinstance(value, str):
        c.fail(key, f"must be one of {', '.join(METRICS_AUTH_MODES)}", value)
    if value != "none" and got["cert_file"] is None:
        c.fail(
            key,
            "needs TLS (metrics.cert_file and metrics.key_file): credentials are not sent in clear",
            value,
        )
    return value


def _metrics_client_ca(c: Check, _: str, got: Mapping[str, Any], __: Mapping[str, Any]) -> None:
    if (got["auth"] == "client-cert") != (got["client_ca_file"] is not None):
        c.fail(
            "metrics.client_ca_file",
            'must be set exactly when metrics.auth is "client-cert"',
            got["client_ca_file"],
        )


_metrics_api_server = host_port_url(
    "must be an https://HOST[:PORT] URL, or null to use the kubeconfig's server", strip=False
)


@dataclass(frozen=True, slots=True)
class Metrics:
    # host:port of the HTTP endpoint (/metrics, /healthz, /readyz, /status). vipd binds it
    # before joining the election, so it is also the per-node lock between two vipd instances.
    listen: str = field(default="0.0.0.0:2112", metadata=spec(_listen))
    # TLS (PEM files, both or neither; None: plain HTTP) and who may read /metrics and /status:
    # "none", "token" (TokenReview + SubjectAccessReview against the API server, through
    # kubeconfig/api_server/tls_server_name as in election.lease) or "client-cert" (signed by
    # client_ca_file). Both need TLS. /healthz and /readyz are always open (the probes).
    cert_file: str | None = field(default=None, metadata=spec(_METRICS_FILE))
    key_file: str | None = field(default=None, metadata=spec(_METRICS_FILE))
    client_ca_file: str | None = field(default=None, metadata=spec(_METRICS_FILE))
    kubeconfig: str | None = field(
        default=None, metadata=spec(_METRICS_FILE, then=_metrics_tls_pair)
    )
    auth: str = field(
        default="none",
        metadata=spec(_metrics_auth, needs=("cert_file",), then=_metrics_client_ca),
    )
    api_server: str | None = field(
        default="https://127.0.0.1:6443", metadata=spec(_metrics_api_server)
    )
    tls_server_name: str | None = field(default="kubernetes", metadata=spec(tls_server_name))

    @property
    def host(self) -> str:
        return self.listen.rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


DEFAULT_METRICS_LISTEN = Metrics().listen
