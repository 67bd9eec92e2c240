"""vipd's configuration: one YAML file plus a few environment overrides, validated into
frozen dataclasses.

What this module does
    ``load(path)`` reads the file, ``parse(data)`` validates an already-loaded mapping. Both
    return a `Config` or raise `ConfigError`, whose ``str()`` is one line naming the dotted key,
    the rule and the offending value::

        election.vrrp.vrid: must be an integer from 1 to 255 (got 300)

    Every value is checked before anything is returned: there is no half-applied config.
    Unknown keys are errors at every level (a typo must not silently become a default), and so
    are the keys of features this version does not have yet (``_NOT_IMPLEMENTED``).

What it must not do
    It is part of the pure core (``docs/design/architecture.md``): no asyncio, socket,
    pyroute2, time or subprocess. It does not look at the host: it does not read
    ``os.environ`` or the hostname by itself (the caller passes ``env`` and ``hostname``),
    and whether the interface exists or the VIP is already a node address is
    ``vipd.preflight``'s job.

Environment overrides (for manifests; applied before validation, so they obey the same rules;
an error caused by one names the variable; an empty variable counts as unset)

    =====================  ======================================  ==========
    variable               key                                     parsed as
    =====================  ======================================  ==========
    VIPD_VIP               vip                                     string
    VIPD_INTERFACE         interface                               string
    VIPD_NODE              node                                    string
    VIPD_VRID              election.vrrp.vrid                      integer
    VIPD_PRIORITY          election.vrrp.priority                  integer
    VIPD_ADVERT_INTERVAL   election.vrrp.advert_interval           number
    VIPD_LOG_FORMAT        log.format                              string
    =====================  ======================================  ==========

    ``node`` is resolved as: VIPD_NODE, else ``node`` in the file, else NODE_NAME (what a pod
    gets from the downward API), else the ``hostname`` the caller passed.

Rules and where they come from
    - ``vip`` (one) or ``vips`` (a list, e.g. an IPv4 and an IPv6 endpoint; not both keys) is
      an IP literal, never a DNS name: the control-plane endpoint is baked into the
      API server's certificates and kubeconfigs by ``kubeadm init`` (its
      ``controlPlaneEndpoint``), so it must not depend on a resolver. It must be a unicast
      address clients can reach: IPv4 not 0/8, loopback, link-local, multicast or 240/4;
      IPv6 global unicast (2000::/3) or unique local (fc00::/7). No VIP is listed twice.
    - Several VIPs, VRRP: the IPv4 ones are one virtual router and the IPv6 ones another
      (RFC 9568 §7: a virtual router has addresses of one family; the same VRID may be used
      by both families, as keepalived's per-family ``vrrp_instance``), so VRRPv2 (IPv4 only,
      RFC 3768) refuses an IPv6 VIP. The Lease backend moves the whole set with one Lease.
    - VRID 1..255 (RFC 9568 §5.2.3, RFC 3768 §5.3.3). Priority 1..254: 255 belongs to the
      address owner and 0 means "resigning" (RFC 9568 §5.2.4); vipd is never the owner because
      the VIP must not be a node address.
    - Advertisement interval: VRRPv3 carries centiseconds in 12 bits, so 0.01..40.95 s in
      10 ms steps (RFC 9568 §5.2.7); VRRPv2 carries whole seconds in 8 bits, 1..255 s
      (RFC 3768 §5.3.7), and keepalived drops v2 adverts whose interval differs from its own.
    - VRRPv2 is IPv4 only (RFC 3768). ``auth_pass`` is the v2 "simple text password" that
      keepalived still speaks (auth type 1, 8 bytes NUL padded); v3 has no authentication.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from typing import Any, Literal, NoReturn, TypeGuard, cast

import yaml

from vipd.health import http as health_http

__all__ = [
    "ENV_OVERRIDES",
    "Config",
    "ConfigError",
    "Election",
    "Garp",
    "Health",
    "Ipvs",
    "IpvsDiscovery",
    "Lease",
    "Log",
    "Metrics",
    "Notify",
    "Vrrp",
    "errors",
    "load",
    "parse",
]

IPAddress = IPv4Address | IPv6Address
LogFormat = Literal["logfmt", "json"]
LogLevel = Literal["debug", "info", "warning", "error"]

# variable -> (dotted key, kind). The kind decides how the string is converted before the
# normal validation runs; a string that doesn't convert is kept, so the error is the key's
# ordinary type error, with the variable named.
ENV_OVERRIDES: Mapping[str, tuple[str, Literal["str", "int", "float"]]] = {
    "VIPD_VIP": ("vip", "str"),
    "VIPD_INTERFACE": ("interface", "str"),
    "VIPD_NODE": ("node", "str"),
    "VIPD_VRID": ("election.vrrp.vrid", "int"),
    "VIPD_PRIORITY": ("election.vrrp.priority", "int"),
    "VIPD_ADVERT_INTERVAL": ("election.vrrp.advert_interval", "float"),
    "VIPD_LOG_FORMAT": ("log.format", "str"),
}

# Keys of features that are designed but not built. They are rejected like
# any unknown key, with a hint, so that nobody believes a health gate or IPVS is running.
# One key per line: each lands with its own feature and leaves this list on its own line.
_NOT_IMPLEMENTED: frozenset[str] = frozenset()


class _Unset:
    """Marker for "no offending value to show" (None is a legitimate value: YAML null)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


class ConfigError(Exception):
    """A configuration that vipd refuses to run with. ``str()`` is a single line.

    ``key`` is the dotted path (``election.vrrp.vrid``, ``election.vrrp.unicast_peers[1]``;
    empty for a problem with the file as a whole), ``rule`` what the value must be, ``got``
    the offending value when there is one, ``source`` the environment variable (or
    ``"hostname"``) the value came from, and ``file``/``line`` where a file-level problem is.
    """

    def __init__(
        self,
        key: str,
        rule: str,
        got: object = _UNSET,
        *,
        source: str | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> None:
        self.key = key
        self.rule = rule
        self.got = got
        self.source = source
        self.file = file
        self.line = line
        super().__init__(self._render())

    def _render(self) -> str:
        head = self.key or "config"
        if self.source:
            head = f"{head} (from {self.source})"
        if self.file is not None:
            where = self.file if self.line is None else f"{self.file}:{self.line}"
            head = where if not self.key else f"{where}: {head}"
        text = f"{head}: {self.rule}"
        if not isinstance(self.got, _Unset):
            text += f" (got {_show(self.got)})"
        # one line, always: YAML problem texts and odd values can carry newlines
        return " ".join(text.split())

    def __str__(self) -> str:
        return self._render()


def _show(value: object) -> str:
    """Render a value the way it would be written in YAML/JSON, shortened."""
    if isinstance(value, _Secret):
        return str(value)
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # e.g. a float NaN inside a container
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Secret:
    """Stands in for a password in an error message: show its length, never its text."""

    def __init__(self, text: str) -> None:
        self.length = len(text)

    def __str__(self) -> str:
        return f"{self.length} characters, not shown"


# -- the result ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Vrrp:
    vrid: int
    priority: int = 100
    advert_interval: float = 1.0  # seconds
    version: Literal[2, 3] = 3
    preempt: bool = True
    preempt_delay: float = 0.0  # seconds
    unicast_peers: tuple[IPAddress, ...] = ()  # empty: multicast to 224.0.0.18 / ff02::12
    auth_pass: str | None = None  # VRRPv2 simple password (auth type 1)
    vmac: bool = False  # RFC 5798 virtual MAC on a macvlan (vipd.host.vmac)
    # VRRPv3 over IPv4: the checksum we send (vipd.vrrp.packet); both forms are accepted.
    checksum: Literal["pseudo-header", "message-only"] = "pseudo-header"

    @property
    def advert_interval_cs(self) -> int:
        """The interval in centiseconds, the unit of the VRRPv3 header and vipd's timers."""
        return round(self.advert_interval * 100)


@dataclass(frozen=True, slots=True)
class Lease:
    """``election.lease``: a coordination.k8s.io/v1 Lease (``vipd.lease``)."""

    name: str = "vipd-cp-lock"
    namespace: str = "kube-system"
    duration: int = 15  # seconds; leaseDurationSeconds is an integer
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    kubeconfig: str | None = None  # None: admin.conf (super-admin.conf fallback), else in-cluster
    api_server: str | None = "https://127.0.0.1:6443"  # None: the kubeconfig's server
    tls_server_name: str | None = "kubernetes"
    keep_on_unreachable: bool = True


@dataclass(frozen=True, slots=True, init=False)
class Election:
    """``mode`` and the section of that mode: ``vrrp`` (mode vrrp) or ``lease`` (mode lease).

    ``vrrp`` is a property that raises in Lease mode, so that VRRP code stays free of
    None checks and a mix-up fails loudly; ``vrrp_section`` is the plain optional value.
    """

    mode: Literal["vrrp", "lease"]
    vrrp_section: Vrrp | None
    lease: Lease | None

    def __init__(
        self,
        mode: Literal["vrrp", "lease"],
        vrrp: Vrrp | None = None,
        lease: Lease | None = None,
    ) -> None:
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "vrrp_section", vrrp)
        object.__setattr__(self, "lease", lease)

    @property
    def vrrp(self) -> Vrrp:
        if self.vrrp_section is None:
            raise AttributeError(f"election.vrrp: not set (election.mode is {self.mode})")
        return self.vrrp_section


@dataclass(frozen=True, slots=True)
class Garp:
    repeat: int = 5  # frames per burst (keepalived's garp_master_repeat)
    interval: float = 0.01  # seconds between the frames of a burst
    refresh: float = 0.0  # seconds between re-announcements while active; 0 = off
    delay: float = 5.0  # seconds until the second burst; 0 = none (garp_master_delay)


@dataclass(frozen=True, slots=True)
class Log:
    format: LogFormat = "logfmt"
    level: LogLevel = "info"


# "/readyz", "/healthz" or "/livez", optionally "?exclude=<check>[&exclude=<check>…]"
HealthPath = str
_LOCALHOST = IPv4Address("127.0.0.1")


@dataclass(frozen=True, slots=True)
class Health:
    """The ``health`` section: HTTPS checks of the API servers (vipd.health).

    Present means on: the local API server (``local``) is checked and gates leadership by
    ``weight``; the IPVS backends are checked on the same ``path``/``port``.
    """

    path: HealthPath = "/readyz"
    port: int = 6443
    local: IPAddress = _LOCALHOST  # where the local API server answers
    interval: float = 1.0  # seconds between the starts of two checks of one target
    timeout: float = 0.8  # seconds one check may take; < interval (default 0.8 x interval)
    rise: int = 2  # consecutive successes to become healthy (a target starts unhealthy)
    fall: int = 3  # consecutive failures to become unhealthy
    ca_file: str | None = None  # None: TLS without verification
    weight: int = 253  # VRRP priority reduction while the local API server is unhealthy
    # Lease mode: the other control-plane nodes' API servers, checked to know whether a
    # healthy peer can take over (empty: ipvs.backends); the local address never counts.
    peers: tuple[IPAddress, ...] = ()


# IPVS schedulers of Debian's kernel (net/netfilter/ipvs/ip_vs_*.c); others are refused.
IPVS_SCHEDULERS = ("rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo",
                   "ovf", "mh", "twos")  # fmt: skip


@dataclass(frozen=True, slots=True)
class IpvsDiscovery:
    """``ipvs.discovery``: more backends from the ``default/kubernetes`` EndpointSlices."""

    enabled: bool = False
    interval: float = 10.0  # seconds between two lists
    kubeconfig: str | None = None  # None: admin.conf (super-admin.conf fallback), else in-cluster
    api_server: str | None = "https://127.0.0.1:6443"  # None: the kubeconfig's server


@dataclass(frozen=True, slots=True)
class Ipvs:
    """IPVS load balancing of VIP:port/TCP on the leader (vipd.ipvs)."""

    enabled: bool = False
    port: int = 6443
    scheduler: str = "rr"
    forwarding: Literal["nat", "dr"] = "nat"
    backends: tuple[IPAddress, ...] = ()
    discovery: IpvsDiscovery = IpvsDiscovery()


# A hook: the program (an absolute path) and its first arguments; vipd appends its own.
Command = tuple[str, ...]
NOTIFY_STATES = ("leader", "backup", "fault", "stop")


@dataclass(frozen=True, slots=True)
class Notify:
    """``notify``: commands run on a change of state (keepalived's ``notify_master``,
    ``notify_backup``, ``notify_fault``, ``notify_stop`` and ``notify``), each under
    ``timeout``; ``()`` is no command (``vipd.notify``)."""

    leader: Command = ()
    backup: Command = ()
    fault: Command = ()
    stop: Command = ()
    all: Command = ()  # every state change, after the state's own command
    timeout: float = 10.0  # seconds, then the hook's process group is killed

    def command(self, name: str) -> Command:
        value: Command = getattr(self, name)
        return value


@dataclass(frozen=True, slots=True)
class Track:
    """One ``track`` item: a script (exit 0 = up) or a file (``vipd.track``), checked every
    ``interval`` under ``timeout``, up after ``rise`` good results and down after ``fall``
    bad ones (it starts down, like a health target). While down it lowers the VRRP priority
    by ``weight`` (floored at 1, with the health gate), or with ``fault`` takes the node out
    of the election; in Lease mode a down track counts as an unhealthy local API server."""

    name: str
    script: Command = ()
    file: str | None = None
    interval: float = 2.0
    timeout: float = 1.0
    rise: int = 1
    fall: int = 1
    weight: int = 0
    fault: bool = False


DEFAULT_METRICS_LISTEN = "0.0.0.0:2112"
METRICS_AUTH_MODES = ("none", "token", "client-cert")


@dataclass(frozen=True, slots=True)
class Metrics:
    # host:port of the HTTP endpoint (/metrics, /healthz, /readyz, /status). vipd binds it
    # before joining the election, so it is also the per-node lock between two vipd instances.
    listen: str = "0.0.0.0:2112"  # DEFAULT_METRICS_LISTEN
    # TLS (PEM files, both or neither; None: plain HTTP) and who may read /metrics and /status:
    # "none", "token" (TokenReview + SubjectAccessReview against the API server, through
    # kubeconfig/api_server/tls_server_name as in election.lease) or "client-cert" (signed by
    # client_ca_file). Both need TLS. /healthz and /readyz are always open (the probes).
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None
    auth: str = "none"  # METRICS_AUTH_MODES
    kubeconfig: str | None = None
    api_server: str | None = "https://127.0.0.1:6443"
    tls_server_name: str | None = "kubernetes"

    @property
    def host(self) -> str:
        return self.listen.rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


@dataclass(frozen=True, slots=True)
class Config:
    node: str
    # ``vip`` or ``vips`` in the file, in the order written; never empty, no duplicates.
    vips: tuple[IPAddress, ...]
    interface: str | None  # None: vipd.preflight picks the interface holding the VIP's subnet
    election: Election
    garp: Garp = Garp()
    log: Log = Log()
    health: Health | None = None  # None: no health checks, no gating
    ipvs: Ipvs = Ipvs()
    metrics: Metrics = Metrics()
    notify: Notify = Notify()
    track: tuple[Track, ...] = ()

    @property
    def vip(self) -> IPAddress:
        """The first VIP: the one of a single-VIP config, and what a per-node label (the
        interface choice, ``vipd_node_info``) goes by when there are several."""
        return self.vips[0]

    def family(self, version: int) -> tuple[IPAddress, ...]:
        """The VIPs of one IP version (4 or 6): one VRRP virtual router's address list."""
        return tuple(v for v in self.vips if v.version == version)

    @property
    def families(self) -> tuple[int, ...]:
        """The IP versions among the VIPs, IPv4 first: one VRRP instance each."""
        return tuple(f for f in (4, 6) if any(v.version == f for v in self.vips))


# -- entry points ----------------------------------------------------------------------------


def load(path: str, env: Mapping[str, str] | None = None, hostname: str | None = None) -> Config:
    """Read and validate the YAML file at ``path``; see `parse` for ``env`` and ``hostname``.

    An unreadable file, a YAML syntax error or a key written twice in one mapping (which plain
    YAML loaders resolve silently, last one wins) is a `ConfigError` naming the file and line.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError("", f"cannot read the config file: {reason}", file=path) from None
    return parse(read_text(text, path), env, hostname)


def read_text(text: str, name: str) -> object:
    """YAML text → data, with the checks of `load` (duplicate keys, syntax) and errors naming
    ``name`` (a path, or ``$VIPD_CONFIG`` for a config passed in the environment)."""
    path = name
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # SafeConstructor: safe
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = e.problem or e.context or "invalid YAML"
        raise ConfigError("", f"invalid YAML: {problem}", file=path, line=line) from None
    except yaml.YAMLError as e:
        raise ConfigError("", f"invalid YAML: {e}", file=path) from None
    return data


def parse(
    data: object, env: Mapping[str, str] | None = None, hostname: str | None = None
) -> Config:
    """Validate already-loaded config data (a mapping, or None for an empty file).

    ``env`` holds the environment to take overrides from (see the module docstring); the
    caller passes ``os.environ`` or nothing, this module never reads it. ``hostname`` is the
    last fallback for ``node``; the caller passes ``socket.gethostname()`` or nothing.
    """
    env = env or {}
    if data is None:
        data = {}  # an empty file: everything may still come from the environment
    if not isinstance(data, Mapping):
        raise ConfigError("", f"must be a mapping of keys to values, not a {_kind(data)}")
    data, sources = _apply_env(data, env)
    return _Validator(sources).config(data, env, hostname)


def errors(
    data: object, env: Mapping[str, str] | None = None, hostname: str | None = None
) -> list[ConfigError]:
    """Every error of a document, not only the first (``vipd check --offline``).

    `parse` stops at the first error. This runs it again and again, each time without the
    key (or the environment variable) that the last error named, so that the next error
    shows; a key whose removal gives an error on that same key (a required one) ends the
    search, as does an error of the document as a whole. An empty list: `parse` accepts it.
    """
    env = dict(env or {})
    found: list[ConfigError] = []
    seen: set[tuple[str, str | None]] = set()
    items: set[tuple[str, str]] = set()
    while len(found) < 100:
        try:
            parse(data, env, hostname)
            break
        except ConfigError as exc:
            # A list item's index names another item once the one before it is removed.
            again = (exc.key, exc.source) in seen and not (
                exc.key.endswith("]") and (exc.key, exc.rule) not in items
            )
            items.add((exc.key, exc.rule))
            if again:
                # The key is required: go on with a stand-in, so the keys that depend on it
                # (the VIP's family, the mode's section) are still checked.
                stand_in = _STAND_INS.get(exc.key)
                if stand_in is None or not isinstance(data, Mapping):
                    break
                data = _set_key(data, exc.key, stand_in)
                if data is None:
                    break
                continue
            seen.add((exc.key, exc.source))
            found.append(exc)
            if exc.source is not None and exc.source in env:
                del env[exc.source]
                continue
            if not exc.key or not isinstance(data, Mapping):
                break
            pruned = _without(data, exc.key)
            if pruned is None:
                break
            data = pruned
    return found


# Valid values for required keys, used by `errors` after reporting a missing or bad one.
_STAND_INS: Mapping[str, object] = {
    "vip": "192.0.2.1",  # TEST-NET-1 (RFC 5737)
    "node": "node",
    "election.vrrp.vrid": 1,
}


def _set_key(data: Mapping[Any, Any], key: str, value: object) -> Mapping[Any, Any] | None:
    out: dict[Any, Any] = dict(data)
    return out if _set_path(out, key.split("."), value) else None


def _without(data: Mapping[Any, Any], key: str) -> Mapping[Any, Any] | None:
    """A copy of ``data`` without the dotted ``key`` (``a.b[2].c``), or None if it isn't there."""
    parts = [p for p in re.split(r"\.|(\[\d+\])", key) if p]
    if not parts:
        return None

    def drop(node: object, rest: list[str]) -> object:
        head = rest[0]
        m = re.fullmatch(r"\[(\d+)\]", head)
        if m is not None:
            i = int(m.group(1))
            if not isinstance(node, list) or i >= len(node):
                raise KeyError(key)
            if len(rest) == 1:
                return node[:i] + node[i + 1 :]
            return [*node[:i], drop(node[i], rest[1:]), *node[i + 1 :]]
        if not isinstance(node, Mapping) or head not in node:
            raise KeyError(key)
        out = dict(node)
        if len(rest) == 1:
            del out[head]
        else:
            out[head] = drop(node[head], rest[1:])
        return out

    try:
        result = drop(data, parts)
    except KeyError:
        return None
    assert isinstance(result, Mapping)
    return result


try:
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # a PyYAML built without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]


class _StrictLoader(_SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping. On libyaml's parser
    (``CSafeLoader``: 10-20x faster than the pure-Python one, ~7 ms less per start on the
    example config) where PyYAML was built with it, as every wheel is; the same safe
    constructor either way."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` then overriding a key is the point of merge keys
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key; the base class reports that
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is written twice (first on line {first})",
                    key_node.start_mark,
                )  # fmt: skip
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


# -- environment overrides -------------------------------------------------------------------


def _apply_env(
    data: Mapping[Any, Any], env: Mapping[str, str]
) -> tuple[Mapping[Any, Any], dict[str, str]]:
    """Return ``data`` with the overrides set (copy-on-write) and key -> variable sources."""
    out: dict[Any, Any] = dict(data)
    sources: dict[str, str] = {}
    for var, (key, kind) in ENV_OVERRIDES.items():
        raw = env.get(var, "")
        if raw == "":
            continue
        if _set_path(out, key.split("."), _convert(raw, kind)):
            sources[key] = var
    return out, sources


def _convert(raw: str, kind: str) -> object:
    text = raw.strip()
    if kind == "int" and re.fullmatch(r"[+-]?[0-9]+", text):
        return int(text)
    if kind == "float":
        try:
            value = float(text)
        except ValueError:
            return raw
        return int(value) if re.fullmatch(r"[+-]?[0-9]+", text) else value
    return raw if kind != "str" else text


def _set_path(root: dict[Any, Any], parts: list[str], value: object) -> bool:
    """Set root[p0][p1]... = value, copying the nested dicts on the way (the caller's data is
    never modified). A missing or null section is created; a section of the wrong type is left
    alone (validation reports it) and False is returned."""
    node = root
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = {}
        elif isinstance(child, Mapping):
            child = dict(child)
        else:
            return False
        node[part] = child
        node = child
    node[parts[-1]] = value
    return True


# -- validation ------------------------------------------------------------------------------

_HOSTNAME_LIKE = re.compile(
    r"(?=.*[A-Za-z_])[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?"
    r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?"
)
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_V4_THIS_NETWORK = IPv4Network("0.0.0.0/8")
_V4_RESERVED = IPv4Network("240.0.0.0/4")  # includes 255.255.255.255, the limited broadcast
_V6_GLOBAL_UNICAST = IPv6Network("2000::/3")
_V6_UNIQUE_LOCAL = IPv6Network("fc00::/7")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list | tuple):
        return "list"
    return type(value).__name__


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)  # YAML true is not 1


def _is_number(value: object) -> TypeGuard[int | float]:
    # .nan and .inf are floats in YAML; neither is a duration
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


class _Validator:
    def __init__(self, sources: Mapping[str, str]) -> None:
        self.sources = dict(sources)

    def fail(self, key: str, rule: str, got: object = _UNSET) -> NoReturn:
        raise ConfigError(key, rule, got, source=self.sources.get(key))

    # -- structure --

    def section(self, key: str, value: object, allowed: tuple[str, ...]) -> Mapping[str, Any]:
        """A mapping with only ``allowed`` keys; null (an empty YAML section) is empty."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(
                key or "config", f"must be a mapping with the keys {', '.join(allowed)}", value
            )
        for k in value:
            if not isinstance(k, str):
                self.fail(_join(key, str(k)), "keys must be strings", k)
            if k not in allowed:
                full = _join(key, k)
                hint = " (not implemented in this version)" if full in _NOT_IMPLEMENTED else ""
                import difflib  # only on this error: it is ~0.2 MiB every daemon would carry

                close = difflib.get_close_matches(k, allowed, n=1, cutoff=0.6)
                if close:
                    hint += f' (did you mean "{close[0]}"?)'
                self.fail(full, f"unknown key{hint}; allowed here: {', '.join(sorted(allowed))}")
        return value

    def integer(self, key: str, value: object, lo: int, hi: int, extra: str = "") -> int:
        if not _is_int(value) or not lo <= value <= hi:
            self.fail(key, f"must be an integer from {lo} to {hi}{extra}", value)
        return value

    def number(
        self, key: str, value: object, rule: str, ok: Callable[[float], bool] = lambda _: True
    ) -> float:
        """A finite int or float for which ``ok`` holds; the error shows the value as written."""
        if not _is_number(value) or not ok(value):
            self.fail(key, rule, value)
        return float(value)

    def choice(self, key: str, value: object, allowed: tuple[str, ...]) -> str:
        if value not in allowed or not isinstance(value, str):
            self.fail(key, "must be one of " + ", ".join(f'"{a}"' for a in allowed), value)
        return value

    # -- the document --

    def config(
        self, data: Mapping[str, Any], env: Mapping[str, str], hostname: str | None
    ) -> Config:
        top = self.section(
            "",
            data,
            (
                "node",
                "vip",
                "vips",
                "interface",
                "election",
                "garp",
                "log",
                "health",
                "ipvs",
                "metrics",
                "notify",
                "track",
            ),
        )
        vips = self.vips(top)
        interface = self.interface(top.get("interface"))
        node = self.node(top.get("node"), env, hostname)
        election = self.election(top.get("election"), vips)
        garp = self.garp(top.get("garp"))
        log = self.log(top.get("log"))
        health = self.health(top.get("health"), election, vips) if "health" in top else None
        metrics = self.metrics(top.get("metrics"))
        return Config(
            node=node,
            vips=vips,
            interface=interface,
            election=election,
            garp=garp,
            log=log,
            health=health,
            ipvs=self.ipvs(top.get("ipvs"), vips, health),
            metrics=metrics,
            notify=self.notify(top.get("notify")),
            track=self.tracks(top.get("track")),
        )

    def node(self, value: object, env: Mapping[str, str], hostname: str | None) -> str:
        if value is None and env.get("NODE_NAME"):
            value, self.sources["node"] = env["NODE_NAME"], "NODE_NAME"
        if value is None and hostname:
            value, self.sources["node"] = hostname, "hostname"
        if value is None:
            self.fail("node", "is not set: set node in the file, or VIPD_NODE or NODE_NAME")
        # Names go into logs, metrics labels and (later) the Lease holder identity; Kubernetes
        # node names are DNS-1123 subdomains, which this allows and a little more (hostnames).
        if not isinstance(value, str) or not re.fullmatch(r"[^\s/]{1,253}", value):
            self.fail("node", "must be a name of 1 to 253 characters without spaces or '/'", value)
        return value

    def vips(self, top: Mapping[str, Any]) -> tuple[IPAddress, ...]:
        """``vip`` (one address) or ``vips`` (a list), never both: two places for one fact
        would leave a reader guessing which one counts."""
        one, many = top.get("vip"), top.get("vips")
        if one is not None and many is not None:
            src = self.sources.get("vip")
            via = f" (vip comes from {src})" if src else ""
            self.fail(
                "vips",
                f"and vip are both set{via}: use vip for one address or vips for several",
                many,
            )
        if many is None:
            return (self.vip("vip", one),)
        if not isinstance(many, list) or not many:
            self.fail("vips", "must be a non-empty list of IP address literals", many)
        out: list[IPAddress] = []
        for i, item in enumerate(many):
            key = f"vips[{i}]"
            ip = self.vip(key, item)
            if ip in out:
                self.fail(key, f"is listed twice (first as vips[{out.index(ip)}])", item)
            out.append(ip)
        return tuple(out)

    def vip(self, key: str, value: object) -> IPAddress:
        if value is None:
            self.fail(
                key,
                "is required: the control-plane endpoint address (or set VIPD_VIP; vips: "
                "[...] for several)",
            )
        ip = self.ip_literal(key, value, what="the VIP")
        problem = _vip_problem(ip)
        if problem:
            self.fail(key, problem, value)
        return ip

    def ip_literal(self, key: str, value: object, what: str) -> IPAddress:
        if not isinstance(value, str):
            self.fail(key, "must be an IP address literal written as a string", value)
        text = value.strip()
        if "/" in text:
            self.fail(key, "must be a single address, without a prefix length", value)
        if "%" in text:
            self.fail(key, "must not carry an IPv6 zone (%interface)", value)
        try:
            ip = ip_address(text)
        except ValueError:
            if (key == "vip" or key.startswith("vips[")) and _HOSTNAME_LIKE.fullmatch(text):
                self.fail(
                    key,
                    "must be an IP address literal, not a DNS name: the control-plane endpoint "
                    "is baked into the API server's certificates",
                    value,
                )
            self.fail(key, f"must be an IP address literal ({what})", value)
        if isinstance(ip, IPv6Address) and ip.ipv4_mapped is not None:
            self.fail(
                key, "must be written in IPv4 form, not as an IPv4-mapped IPv6 address", value
            )
        return ip

    def interface(self, value: object) -> str | None:
        if value is None:
            return None
        # the kernel's dev_valid_name(): < IFNAMSIZ (16) bytes, no '/', ':' or whitespace
        if (
            not isinstance(value, str)
            or not re.fullmatch(r"[^\s/:]{1,15}", value)
            or value in {".", ".."}
            or len(value.encode()) > 15
        ):
            self.fail(
                "interface",
                "must be a Linux interface name (1 to 15 characters, no '/', ':' or spaces), "
                "or null to auto-detect",
                value,
            )
        return value

    def election(self, value: object, vips: tuple[IPAddress, ...]) -> Election:
        sec = self.section("election", value, ("mode", "vrrp", "lease"))
        mode = self.choice("election.mode", sec.get("mode", "vrrp"), ("vrrp", "lease"))
        # The section of the other mode may stay in the file (switching modes is one line);
        # it is still validated, so a typo in it is not silently carried along.
        if mode == "vrrp":
            vrrp = self.vrrp(sec.get("vrrp"), vips)
            lease = self.lease(sec["lease"]) if sec.get("lease") is not None else None
            return Election(mode="vrrp", vrrp=vrrp, lease=lease)
        vrrp_opt = self.vrrp(sec["vrrp"], vips) if sec.get("vrrp") is not None else None
        lease = self.lease(sec.get("lease"))
        if lease.api_server is not None:
            host = re.sub(r"^https://\[?([^\]/]*?)\]?(:[0-9]+)?/?$", r"\1", lease.api_server)
            try:
                same = ip_address(host) in vips
            except ValueError:
                same = False
            if same:
                self.fail(
                    "election.lease.api_server",
                    "must not be the VIP: the Lease that decides who holds the VIP cannot be "
                    "renewed through the VIP (use this node's own API server, e.g. "
                    "https://127.0.0.1:6443)",
                    lease.api_server,
                )
        return Election(mode="lease", vrrp=vrrp_opt, lease=lease)

    def lease(self, value: object) -> Lease:
        """``election.lease`` (vipd.lease); the timing rule is client-go's."""
        p = "election.lease"
        d = Lease()
        sec = self.section(
            p,
            value,
            ("name", "namespace", "duration", "renew_deadline", "retry_period", "kubeconfig",
             "api_server", "tls_server_name", "keep_on_unreachable"),
        )  # fmt: skip
        name = sec.get("name", d.name)
        if not isinstance(name, str) or not _DNS1123_SUBDOMAIN.fullmatch(name):
            self.fail(
                f"{p}.name",
                "must be a Kubernetes object name: 1 to 253 lower-case letters, digits, '-' "
                "or '.', starting and ending with a letter or digit",
                name,
            )
        namespace = sec.get("namespace", d.namespace)
        if not isinstance(namespace, str) or not _DNS1123_LABEL.fullmatch(namespace):
            self.fail(
                f"{p}.namespace",
                "must be a namespace name: 1 to 63 lower-case letters, digits or '-', "
                "starting and ending with a letter or digit",
                namespace,
            )
        duration = sec.get("duration", d.duration)
        if not _is_number(duration) or duration != int(duration) or not 1 <= duration <= 3600:
            self.fail(
                f"{p}.duration",
                "must be a whole number of seconds from 1 to 3600 (leaseDurationSeconds is "
                "an integer)",
                duration,
            )
        renew_deadline = self.number(
            f"{p}.renew_deadline",
            sec.get("renew_deadline", d.renew_deadline),
            "must be a number of seconds from 0.1 to 3600",
            lambda v: 0.1 <= v <= 3600,
        )
        retry_period = self.number(
            f"{p}.retry_period",
            sec.get("retry_period", d.retry_period),
            "must be a number of seconds from 0.05 to 3600",
            lambda v: 0.05 <= v <= 3600,
        )
        if not renew_deadline > 1.2 * retry_period:
            self.fail(
                f"{p}.renew_deadline",
                f"must be greater than 1.2 x retry_period ({1.2 * retry_period:g} s), as in "
                "client-go, so that a renewal can be retried before the deadline",
                sec.get("renew_deadline", d.renew_deadline),
            )
        if not int(duration) > renew_deadline:
            self.fail(
                f"{p}.duration",
                f"must be greater than renew_deadline ({renew_deadline:g} s): a leader must "
                "let go before its peers may take over",
                duration,
            )
        kubeconfig = sec.get("kubeconfig")
        if kubeconfig is not None and (
            not isinstance(kubeconfig, str) or not kubeconfig.strip() or "\0" in kubeconfig
        ):
            self.fail(
                f"{p}.kubeconfig",
                'must be the path of a kubeconfig file, "in-cluster", or null (auto: '
                "/etc/kubernetes/admin.conf, else in-cluster credentials)",
                kubeconfig,
            )
        api_server = sec.get("api_server", d.api_server)
        if api_server is not None and (
            not isinstance(api_server, str)
            or not re.fullmatch(
                r"https://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?/?", api_server
            )
        ):
            self.fail(
                f"{p}.api_server",
                "must be an https://HOST[:PORT] URL (this node's own API server), or null to "
                "use the kubeconfig's server",
                api_server,
            )
        tls_server_name = sec.get("tls_server_name", d.tls_server_name)
        if tls_server_name is not None and (
            not isinstance(tls_server_name, str) or not _HOSTNAME_LIKE.fullmatch(tls_server_name)
        ):
            self.fail(
                f"{p}.tls_server_name",
                "must be a DNS name in the API server's certificate, or null for the host",
                tls_server_name,
            )
        keep = sec.get("keep_on_unreachable", d.keep_on_unreachable)
        if not isinstance(keep, bool):
            self.fail(f"{p}.keep_on_unreachable", "must be true or false", keep)
        return Lease(
            name=name,
            namespace=namespace,
            duration=int(duration),
            renew_deadline=renew_deadline,
            retry_period=retry_period,
            kubeconfig=kubeconfig,
            api_server=api_server.rstrip("/") if api_server else None,
            tls_server_name=tls_server_name,
            keep_on_unreachable=keep,
        )

    def vrrp(self, value: object, vips: tuple[IPAddress, ...]) -> Vrrp:
        p = "election.vrrp"
        sec = self.section(
            p,
            value,
            ("vrid", "priority", "advert_interval", "version", "preempt", "preempt_delay",
             "unicast_peers", "auth_pass", "vmac", "checksum"),
        )  # fmt: skip
        if sec.get("vrid") is None:
            self.fail(
                f"{p}.vrid",
                "is required: the virtual router ID, 1 to 255, unique on the layer-2 network "
                "(or set VIPD_VRID)",
            )
        vrid = self.integer(f"{p}.vrid", sec["vrid"], 1, 255)

        raw_priority = sec.get("priority", 100)
        priority = self.integer(
            f"{p}.priority",
            raw_priority,
            1,
            254,
            "; 255 is reserved for the router that owns the address (RFC 9568 §5.2.4), and a "
            "VIP must not be a node address"
            if raw_priority == 255 and _is_int(raw_priority)
            else "",
        )

        version = sec.get("version", 3)
        if not _is_int(version) or version not in (2, 3):
            self.fail(f"{p}.version", "must be 2 or 3", version)
        v6 = [v for v in vips if isinstance(v, IPv6Address)]
        if version == 2 and v6:
            self.fail(
                f"{p}.version",
                f"must be 3 with an IPv6 VIP ({v6[0]}): VRRPv2 has no IPv6 (RFC 3768)",
                version,
            )

        advert_interval = self.advert_interval(f"{p}.advert_interval", sec, version)

        preempt = sec.get("preempt", True)
        if not isinstance(preempt, bool):
            self.fail(f"{p}.preempt", "must be true or false", preempt)
        preempt_delay = self.number(
            f"{p}.preempt_delay",
            sec.get("preempt_delay", 0.0),
            "must be a number of seconds from 0 to 1000",
            lambda v: 0 <= v <= 1000,
        )
        if preempt_delay and not preempt:
            # keepalived ignores it then; a setting that does nothing is a mistake to point out
            self.fail(
                f"{p}.preempt_delay", "has no effect with preempt: false; remove it", preempt_delay
            )

        peers = self.unicast_peers(f"{p}.unicast_peers", sec.get("unicast_peers", []), vips)
        auth_pass = self.auth_pass(f"{p}.auth_pass", sec.get("auth_pass"), version)
        vmac = self.vmac(f"{p}.vmac", sec.get("vmac", False), vips, peers)
        checksum = self.choice(
            f"{p}.checksum", sec.get("checksum", "pseudo-header"), ("pseudo-header", "message-only")
        )
        if checksum == "message-only" and (version != 3 or len(v6) == len(vips)):
            self.fail(
                f"{p}.checksum",
                "only applies to VRRPv3 over IPv4 (VRRPv2 always sums the message alone, IPv6 "
                "always includes its pseudo-header)",
                checksum,
            )
        return Vrrp(
            vrid=vrid,
            priority=priority,
            advert_interval=advert_interval,
            version=2 if version == 2 else 3,
            preempt=preempt,
            preempt_delay=preempt_delay,
            unicast_peers=peers,
            auth_pass=auth_pass,
            vmac=vmac,
            checksum=cast(Literal["pseudo-header", "message-only"], checksum),
        )

    def vmac(
        self, key: str, value: object, vips: tuple[IPAddress, ...], peers: tuple[IPAddress, ...]
    ) -> bool:
        """The virtual MAC option (vipd.host.vmac): IPv4 multicast only in this version."""
        if not isinstance(value, bool):
            self.fail(key, "must be true or false", value)
        if value and any(isinstance(v, IPv6Address) for v in vips):
            self.fail(key, "is only supported with an IPv4 VIP in this version", value)
        if value and peers:
            self.fail(
                key,
                "is only supported with multicast adverts (no unicast_peers) in this version",
                value,
            )
        return value

    def advert_interval(self, key: str, sec: Mapping[str, Any], version: int) -> float:
        value = sec.get("advert_interval", 1.0)
        if version == 2:
            rule = "must be a whole number of seconds from 1 to 255 with version 2"
            if not _is_number(value) or value != int(value) or not 1 <= value <= 255:
                self.fail(key, rule, value)
            return float(value)
        rule = (
            "must be a number of seconds from 0.01 to 40.95 in steps of 0.01 "
            "(VRRPv3 counts centiseconds)"
        )
        if not _is_number(value):
            self.fail(key, rule, value)
        cs = float(value) * 100
        if abs(cs - round(cs)) > 1e-6 or not 1 <= round(cs) <= 4095:
            self.fail(key, rule, value)
        return round(cs) / 100  # 0.1 stays 0.1, not 0.1 * 100 / 100 noise

    def unicast_peers(
        self, key: str, value: object, vips: tuple[IPAddress, ...]
    ) -> tuple[IPAddress, ...]:
        peers = self.node_addresses(
            key,
            value,
            vips,
            empty="must be a list of IP addresses (empty for multicast)",
            what="a peer's address",
            not_vip="must not be the VIP itself: list the other nodes' own addresses",
            unicast="must be a unicast address of another node",
            link_local_ok=True,
        )
        # One virtual router per family: a family without peers of its own would advertise
        # by multicast while the other goes unicast, which no peer configured this way hears.
        for version in sorted({v.version for v in vips}):
            if peers and not any(ip.version == version for ip in peers):
                v = f"IPv{version}"
                self.fail(
                    key,
                    f"lists no {v} peer, but the {v} VIPs are a virtual router of their own: "
                    f"list the peers' {v} addresses too (or no peers at all for multicast)",
                    value,
                )
        return peers

    def node_addresses(
        self,
        key: str,
        value: object,
        vips: tuple[IPAddress, ...],
        *,
        empty: str,
        what: str,
        not_vip: str,
        unicast: str,
        link_local_ok: bool,
    ) -> tuple[IPAddress, ...]:
        """A list of other nodes' addresses: IP literals of a VIP's family, unicast, not a VIP,
        no duplicates; null is empty. The rules' wording is the caller's."""
        if value is None:
            return ()
        if not isinstance(value, list):
            self.fail(key, empty, value)
        versions = {v.version for v in vips}
        family = " or ".join(f"IPv{n}" for n in sorted(versions))
        out: list[IPAddress] = []
        for i, item in enumerate(value):
            k = f"{key}[{i}]"
            ip = self.ip_literal(k, item, what=what)
            if ip.version not in versions:
                whose = "the VIP" if len(vips) == 1 else "the VIPs"
                self.fail(k, f"must be an {family} address, the family of {whose}", item)
            if ip in vips:
                self.fail(k, not_vip, item)
            if (
                ip.is_unspecified
                or ip.is_loopback
                or ip.is_multicast
                or (ip.is_link_local and not link_local_ok)
                or ip in _V4_RESERVED
            ):
                self.fail(k, unicast, item)
            if ip in out:
                self.fail(k, f"is listed twice (first as {key}[{out.index(ip)}])", item)
            out.append(ip)
        return tuple(out)

    def auth_pass(self, key: str, value: object, version: int) -> str | None:
        if value is None:
            return None
        if version != 2:
            self.fail(
                key,
                "is only used with version: 2 (VRRPv3 has no authentication); "
                "remove it or set version: 2",
            )
        if not isinstance(value, str):
            self.fail(key, "must be a string (quote it in YAML)", _Secret(str(value)))
        if not re.fullmatch(r"[\x20-\x7e]{1,8}", value):
            # keepalived truncates longer passwords to 8 bytes; refusing is clearer than that
            self.fail(key, "must be 1 to 8 printable ASCII characters", _Secret(value))
        return value

    def garp(self, value: object) -> Garp:
        p = "garp"
        sec = self.section(p, value, ("repeat", "interval", "refresh", "delay"))
        repeat = self.integer(f"{p}.repeat", sec.get("repeat", 5), 1, 100)
        interval = self.number(
            f"{p}.interval",
            sec.get("interval", 0.01),
            "must be a number of seconds from 0 to 1",
            lambda v: 0 <= v <= 1,
        )
        refresh = self.number(
            f"{p}.refresh",
            sec.get("refresh", 0.0),
            "must be 0 (off) or a number of seconds from 1 to 86400",
            lambda v: v == 0 or 1 <= v <= 86400,
        )
        delay = self.number(
            f"{p}.delay",
            sec.get("delay", 5.0),
            "must be 0 (no second burst) or a number of seconds up to 3600",
            lambda v: 0 <= v <= 3600,
        )
        return Garp(repeat=repeat, interval=interval, refresh=refresh, delay=delay)

    def log(self, value: object) -> Log:
        sec = self.section("log", value, ("format", "level"))
        fmt = self.choice("log.format", sec.get("format", "logfmt"), ("logfmt", "json"))
        level = self.choice(
            "log.level", sec.get("level", "info"), ("debug", "info", "warning", "error")
        )
        return Log(format=cast(LogFormat, fmt), level=cast(LogLevel, level))

    def health(self, value: object, election: Election, vips: tuple[IPAddress, ...]) -> Health:
        # An empty `health:` section (null) means "on, with every default".
        p = "health"
        sec = self.section(
            p,
            value,
            ("path", "port", "local", "interval", "timeout", "rise", "fall", "ca_file",
             "weight", "peers"),
        )  # fmt: skip
        path = sec.get("path", "/readyz")
        if not isinstance(path, str) or not health_http.valid_path(path):
            self.fail(
                f"{p}.path",
                'must be "/readyz", "/healthz" or "/livez", optionally followed by '
                '"?exclude=<check>" (repeatable with "&"), e.g. "/readyz?exclude=etcd"',
                path,
            )
        port = self.integer(f"{p}.port", sec.get("port", 6443), 1, 65535)
        local = self.ip_literal(f"{p}.local", sec.get("local", "127.0.0.1"), "the local API server")
        if local.is_unspecified or local.is_multicast:
            self.fail(
                f"{p}.local", "must be a unicast address the API server listens on", sec["local"]
            )
        interval = self.number(
            f"{p}.interval",
            sec.get("interval", 1.0),
            "must be a number of seconds from 0.05 to 300",
            lambda v: 0.05 <= v <= 300,
        )
        if "timeout" in sec:
            # A check that is still running when the next one is due would overlap it; the
            # driver keeps one check per target in flight, so it must end before the next tick.
            timeout = self.number(
                f"{p}.timeout",
                sec["timeout"],
                "must be a number of seconds from 0.01 to less than health.interval "
                f"({interval:g})",
                lambda v: 0.01 <= v < interval,
            )
        else:
            timeout = round(0.8 * interval, 6)
        rise = self.integer(f"{p}.rise", sec.get("rise", 2), 1, 100)
        fall = self.integer(f"{p}.fall", sec.get("fall", 3), 1, 100)
        ca_file = sec.get("ca_file")
        if ca_file is not None and (
            not isinstance(ca_file, str) or not ca_file.strip() or "\0" in ca_file
        ):
            self.fail(
                f"{p}.ca_file",
                "must be the path of a PEM file of CA certificates, or null for no verification",
                ca_file,
            )
        weight = self.integer(
            f"{p}.weight",
            sec.get("weight", 253),
            0,
            253,
            " (the priority reduction while the local API server is unhealthy; 0 = no gating)",
        )
        if weight > 0 and election.mode == "vrrp" and not election.vrrp.preempt:
            self.fail(
                f"{p}.weight",
                "must be 0 with election.vrrp.preempt: false: a healthy backup takes the VIP "
                "from an unhealthy leader only by preempting it (equal priorities with "
                "preempt: true avoid a second move)",
                weight,
            )
        peers: tuple[IPAddress, ...] = ()
        if sec.get("peers") is not None:
            if election.mode != "lease" and sec["peers"] != []:
                self.fail(
                    f"{p}.peers",
                    "is only used with election.mode: lease (VRRP gates by priority: "
                    "health.weight)",
                    sec["peers"],
                )
            peers = self.backends(f"{p}.peers", sec["peers"], vips)
        return Health(
            peers=peers,
            path=path,
            port=port,
            local=local,
            interval=interval,
            timeout=timeout,
            rise=rise,
            fall=fall,
            ca_file=ca_file,
            weight=weight,
        )

    def ipvs(self, value: object, vips: tuple[IPAddress, ...], health: Health | None) -> Ipvs:
        p = "ipvs"
        sec = self.section(
            p, value, ("enabled", "port", "scheduler", "forwarding", "backends", "discovery")
        )
        enabled = sec.get("enabled", False)
        if not isinstance(enabled, bool):
            self.fail(f"{p}.enabled", "must be true or false", enabled)
        port = self.integer(f"{p}.port", sec.get("port", 6443), 1, 65535)
        scheduler = self.choice(f"{p}.scheduler", sec.get("scheduler", "rr"), IPVS_SCHEDULERS)
        forwarding = self.choice(f"{p}.forwarding", sec.get("forwarding", "nat"), ("nat", "dr"))
        if enabled and len(vips) > 1:
            # The IPVS service, its discovery and its health pool are built for one VIP.
            self.fail(
                f"{p}.enabled",
                "supports one VIP in this version (vips lists several): balance one "
                "endpoint, or run IPVS without vipd for the others",
                enabled,
            )
        backends = self.backends(f"{p}.backends", sec.get("backends", []), vips)
        if enabled and not backends:
            self.fail(
                f"{p}.backends",
                "must list the control-plane nodes' addresses when ipvs.enabled is true",
            )
        if enabled and health is None:
            self.fail(
                f"{p}.enabled",
                "needs the health section: a backend joins the pool only once its API server "
                "answers the health check",
            )
        return Ipvs(
            enabled=enabled,
            port=port,
            scheduler=scheduler,
            forwarding=cast(Literal["nat", "dr"], forwarding),
            backends=backends,
            discovery=self.ipvs_discovery(sec.get("discovery")),
        )

    def ipvs_discovery(self, value: object) -> IpvsDiscovery:
        p = "ipvs.discovery"
        sec = self.section(p, value, ("enabled", "interval", "kubeconfig", "api_server"))
        enabled = sec.get("enabled", False)
        if not isinstance(enabled, bool):
            self.fail(f"{p}.enabled", "must be true or false", enabled)
        interval = self.number(
            f"{p}.interval",
            sec.get("interval", 10.0),
            "must be a number of seconds from 1 to 3600",
            lambda v: 1 <= v <= 3600,
        )
        kubeconfig = sec.get("kubeconfig")
        if kubeconfig is not None and (
            not isinstance(kubeconfig, str) or not kubeconfig.strip() or "\0" in kubeconfig
        ):
            self.fail(
                f"{p}.kubeconfig",
                'must be the path of a kubeconfig file, "in-cluster", or null (auto: '
                "/etc/kubernetes/admin.conf, else in-cluster credentials)",
                kubeconfig,
            )
        api_server = sec.get("api_server", "https://127.0.0.1:6443")
        if api_server is not None and (
            not isinstance(api_server, str) or not re.fullmatch(r"https://\S+", api_server)
        ):
            self.fail(
                f"{p}.api_server",
                "must be an https:// URL, or null to use the kubeconfig's server",
                api_server,
            )
        return IpvsDiscovery(
            enabled=enabled, interval=interval, kubeconfig=kubeconfig, api_server=api_server
        )

    def backends(
        self, key: str, value: object, vips: tuple[IPAddress, ...]
    ) -> tuple[IPAddress, ...]:
        return self.node_addresses(
            key,
            value,
            vips,
            empty="must be a list of the control-plane nodes' IP addresses",
            what="a control-plane node's address",
            not_vip="must not be the VIP itself: list the nodes' own addresses",
            unicast="must be a unicast address of a control-plane node",
            link_local_ok=False,
        )

    def notify(self, value: object) -> Notify:
        p = "notify"
        sec = self.section(p, value, (*NOTIFY_STATES, "all", "timeout"))
        commands = {
            name: self.command(f"{p}.{name}", sec.get(name)) for name in (*NOTIFY_STATES, "all")
        }
        timeout = self.number(
            f"{p}.timeout",
            sec.get("timeout", 10.0),
            "must be a number of seconds from 0.1 to 600",
            lambda v: 0.1 <= v <= 600,
        )
        return Notify(timeout=timeout, **commands)

    def tracks(self, value: object) -> tuple[Track, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            self.fail("track", "must be a list of checks (each with script or file)", value)
        out: list[Track] = []
        for i, item in enumerate(value):
            t = self.track(f"track[{i}]", item, i)
            if any(o.name == t.name for o in out):
                self.fail(f"track[{i}].name", "is used twice: each check needs its own", t.name)
            out.append(t)
        return tuple(out)

    def track(self, p: str, value: object, index: int) -> Track:
        sec = self.section(
            p,
            value,
            ("name", "script", "file", "interval", "timeout", "rise", "fall", "weight"),
        )
        name = sec.get("name", f"track-{index}")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,63}", name):
            self.fail(f"{p}.name", "must be 1 to 63 letters, digits, '_', '.' or '-'", name)
        script = self.command(f"{p}.script", sec.get("script"))
        file = sec.get("file")
        if file is not None and (not isinstance(file, str) or not file.startswith("/")):
            self.fail(f"{p}.file", "must be an absolute path", file)
        if bool(script) == (file is not None):
            self.fail(p, "needs exactly one of script and file")
        interval = self.number(
            f"{p}.interval",
            sec.get("interval", 2.0),
            "must be a number of seconds from 0.1 to 3600",
            lambda v: 0.1 <= v <= 3600,
        )
        timeout = self.number(
            f"{p}.timeout",
            sec.get("timeout", min(1.0, interval)),
            f"must be a number of seconds from 0.01 up to {p}.interval ({interval:g})",
            lambda v: 0.01 <= v <= interval,
        )
        rise = self.integer(f"{p}.rise", sec.get("rise", 1), 1, 100)
        fall = self.integer(f"{p}.fall", sec.get("fall", 1), 1, 100)
        raw = sec.get("weight", 0)
        fault = raw == "fault"
        weight = (
            0
            if fault
            else self.integer(
                f"{p}.weight",
                raw,
                0,
                253,
                ' (the priority reduction while the check is down), or "fault"',
            )
        )
        return Track(
            name=name,
            script=script,
            file=file,
            interval=interval,
            timeout=timeout,
            rise=rise,
            fall=fall,
            weight=weight,
            fault=fault,
        )

    def command(self, key: str, value: object) -> Command:
        """A hook: null (none), a string split like a shell's words (no shell runs it), or a
        list of strings; the first word an absolute path (no $PATH lookup under systemd)."""
        rule = (
            "must be a command: an absolute path and its arguments, as a string or a list of "
            'strings (e.g. "/usr/local/bin/vip-changed --page"), or null'
        )
        if value is None:
            return ()
        if isinstance(value, str):
            try:
                words = shlex.split(value)
            except ValueError:
                self.fail(key, rule, value)
        elif isinstance(value, list) and all(isinstance(w, str) for w in value):
            words = list(value)
        else:
            self.fail(key, rule, value)
        if not words or not words[0].startswith("/") or any("\0" in w for w in words):
            self.fail(key, rule, value)
        return tuple(words)

    def metrics(self, value: object) -> Metrics:
        sec = self.section(
            "metrics",
            value,
            ("listen", "cert_file", "key_file", "client_ca_file", "auth", "kubeconfig",
             "api_server", "tls_server_name"),
        )  # fmt: skip
        key = "metrics.listen"
        listen = sec.get("listen", DEFAULT_METRICS_LISTEN)
        rule = (
            'must be "HOST:PORT" with an IP address literal as HOST ("[::]:2112" for IPv6) '
            "and a port from 1 to 65535"
        )
        if not isinstance(listen, str):
            self.fail(key, rule, listen)
        m = re.fullmatch(r"(\[([^\]]+)\]|[^:\[\]]+):([0-9]{1,5})", listen)
        if m is None:
            self.fail(key, rule, listen)
        host = m.group(2) if m.group(2) is not None else m.group(1)
        try:
            ip = ip_address(host)
        except ValueError:
            self.fail(key, rule, listen)
        if isinstance(ip, IPv6Address) != (m.group(2) is not None) or "%" in host:
            self.fail(key, rule, listen)
        if not 1 <= int(m.group(3)) <= 65535:
            self.fail(key, rule, listen)
        d = Metrics()
        files: dict[str, str | None] = {}
        for name in ("cert_file", "key_file", "client_ca_file", "kubeconfig"):
            path = sec.get(name)
            if path is not None and (not isinstance(path, str) or not path.strip() or "\0" in path):
                self.fail(f"metrics.{name}", "must be the path of a file, or null", path)
            files[name] = path
        if (files["cert_file"] is None) != (files["key_file"] is None):
            self.fail("metrics.key_file", "must be set with metrics.cert_file (both or neither)",
                      files["key_file"])  # fmt: skip
        auth = sec.get("auth", d.auth)
        if auth not in METRICS_AUTH_MODES:
            self.fail("metrics.auth", f"must be one of {', '.join(METRICS_AUTH_MODES)}", auth)
        if auth != "none" and files["cert_file"] is None:
            self.fail("metrics.auth", "needs TLS (metrics.cert_file and metrics.key_file): "
                      "credentials are not sent in clear", auth)  # fmt: skip
        if (auth == "client-cert") != (files["client_ca_file"] is not None):
            self.fail("metrics.client_ca_file", 'must be set exactly when metrics.auth is '
                      '"client-cert"', files["client_ca_file"])  # fmt: skip
        api_server = sec.get("api_server", d.api_server)
        if api_server is not None and (
            not isinstance(api_server, str)
            or not re.fullmatch(
                r"https://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?/?", api_server
            )
        ):
            rule = "must be an https://HOST[:PORT] URL, or null to use the kubeconfig's server"
            self.fail("metrics.api_server", rule, api_server)
        server_name = sec.get("tls_server_name", d.tls_server_name)
        if server_name is not None and (
            not isinstance(server_name, str) or not _HOSTNAME_LIKE.fullmatch(server_name)
        ):
            self.fail("metrics.tls_server_name", "must be a DNS name in the API server's "
                      "certificate, or null for the host", server_name)  # fmt: skip
        return Metrics(
            listen=listen, cert_file=files["cert_file"], key_file=files["key_file"],
            client_ca_file=files["client_ca_file"], auth=auth, kubeconfig=files["kubeconfig"],
            api_server=api_server, tls_server_name=server_name,
        )  # fmt: skip


def _vip_problem(ip: IPAddress) -> str | None:
    """Why ``ip`` can't be a VIP that clients on other hosts reach, or None."""
    if isinstance(ip, IPv4Address):
        if ip in _V4_THIS_NETWORK:
            return 'must not be in 0.0.0.0/8, which means "this host" and is never a destination'
        if ip.is_loopback:
            return "must not be a loopback address: clients on other hosts must reach it"
        if ip.is_link_local:
            return "must not be a link-local address (169.254.0.0/16): it is never routed"
        if ip.is_multicast:
            return "must not be a multicast address: a VIP is a unicast address of one node"
        if ip in _V4_RESERVED:
            return "must not be in 240.0.0.0/4 (reserved, and the broadcast address)"
        return None
    if ip in _V6_GLOBAL_UNICAST or ip in _V6_UNIQUE_LOCAL:
        return None
    if ip.is_link_local:
        why = "a link-local address is not reachable from other links and needs a zone"
    elif ip.is_multicast:
        why = "a VIP is a unicast address of one node"
    elif ip.is_loopback or ip.is_unspecified:
        why = "clients on other hosts must reach it"
    else:
        why = "other IPv6 ranges are not unicast addresses a client can reach"
    return f"must be a global unicast (2000::/3) or unique local (fc00::/7) IPv6 address: {why}"


def _join(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key
