"""A kube-vip static pod or DaemonSet manifest → a vipd config (``vipd import kube-vip``).

What it is
    kube-vip is configured by its container's environment (``pkg/kubevip/config_envvar.go``
    in https://github.com/kube-vip/kube-vip lists the names; ``config_environment.go`` reads
    them). The control-plane VIP with ARP and leader election maps onto vipd's Lease
    election: the same Lease (``vip_leasename``, kube-vip's default ``plndr-cp-lock``), in
    ``cp_namespace``, with kube-vip's timers, so vipd and kube-vip share one holder while
    nodes are replaced one by one (docs/operations.md, "Replacing kube-vip"). The table is
    in docs/reference/cli.md, "vipd import".

    Refused (an error): a manifest with no kube-vip container or with two; a kube-vip that
    holds no control-plane VIP (``cp_enable`` off) or runs no election (without
    ``vip_leaderelection`` every node claims the VIP: the choice of vipd's election is the
    user's); a DNS name as the address; an environment variable kube-vip does not read.
    kube-vip's BGP and routing-table modes map onto vipd's (`vipd.importers.kvrouted`).
    Dropped (listed): Services of type LoadBalancer, kube-vip's IPVS
    (vipd's needs the control-plane nodes' addresses, which the manifest does not have), and
    the rest of kube-vip's own settings.

What it must not do: read files or the environment; it takes the manifest's text.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import yaml

from vipd.importers import Dropped, Imported, kvrouted
from vipd.importers.render import Doc, finish

__all__ = ["KNOWN", "convert"]

# Every name kube-vip reads (pkg/kubevip/config_envvar.go), and vip_cidr, the older name of
# vip_subnet that manifests of kube-vip before v0.5 carry.
_KNOWN = """vip_arp vip_arpRate vip_preserve_on_leadership_loss vip_leaderelection vip_leasename
    vip_leaseduration vip_renewdeadline vip_retryperiod vip_leaseannotations vip_loglevel
    instance_name vip_interface vip_loseleadership vip_loseleadership_timeout_seconds
    vip_interfaceloglobal vip_servicesinterface vip_allow_interface_not_up vip_subnet
    egress_podcidr egress_servicecidr egress_withnftables per_service_election_on_demand
    egress_enableinternalsnat vip_address address port annotation vip_ddns vip_nodename
    vip_singlenode vip_startleader bgp_enable bgp_attach_ip_to_interface bgp_routerid
    bgp_routerinterface bgp_as bgp_peeraddress bgp_peers bgp_peeras bgp_peerpass bgp_multihop
    bgp_sourceif bgp_sourceip bgp_hold_time bgp_keepalive_interval
    control_plane_health_check_address control_plane_health_check_period_seconds
    control_plane_health_check_timeout_seconds control_plane_health_check_failure_threshold
    control_plane_health_check_ca_path zebra_enable zebra_url zebra_version zebra_software_name
    mpbgp_nexthop vip_wireguard vip_routingtable vip_routingtableid vip_routingtabletype
    vip_routingprotocol vip_cleanroutingtable vip_skipdad cp_namespace cp_enable cp_detect
    kubernetes_addr svc_enable svc_namespace svc_election svc_leasename lb_class_only
    lb_class_name lb_class_legacy_handling lb_enable lb_port lb_fwdmethod
    enable_service_security enable_node_labeling prometheus_server vip_configmap dns_mode
    dhcp_mode dhcp_backoff_attempts disable_service_updates enable_endpoints
    mirror_dest_interface iptables_backend backend_health_check_interval health_check_port
    enable_upnp egress_clean config_file debounce_time vip_cidr"""
KNOWN = frozenset(_KNOWN.split())
KUBEVIP_LEASE = "plndr-cp-lock"  # kube-vip's default vip_leasename (cmd/kube-vip.go)
_SERVICES = ("svc_", "lb_class_", "egress_", "enable_service_security", "enable_endpoints")
_SERVICES_WHY = "Services of type LoadBalancer: vipd has no equivalent (it holds the API VIP)"
_LB_WHY = (
    "kube-vip's IPVS finds the control-plane nodes itself; vipd's (ipvs.enabled) needs their "
    "addresses in ipvs.backends (or ipvs.discovery): set the ipvs section by hand"
)


class _Refuse(Exception):
    pass


def _true(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes", "on")


def _containers(docs: list[Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(``Kind/name container``, container) of every pod template in the documents."""
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        kind = doc.get("kind")
        spec = doc.get("spec") or {}
        if kind != "Pod":
            spec = ((spec.get("template") or {}).get("spec")) or {}
        name = (doc.get("metadata") or {}).get("name", "?")
        for c in spec.get("containers") or ():
            if isinstance(c, Mapping):
                yield f"{kind}/{name} container {c.get('name', '?')}", c


def _is_kubevip(c: Mapping[str, Any]) -> bool:
    env = {e.get("name") for e in c.get("env") or () if isinstance(e, Mapping)}
    return "kube-vip" in str(c.get("image", "")) or bool(env & {"cp_enable", "vip_arp"})


def _line(text: str, name: str) -> int | None:
    pattern = re.compile(rf"^\s*(?:-\s*)?name:\s*[\"']?{re.escape(name)}[\"']?\s*$")
    for n, line in enumerate(text.splitlines(), 1):
        if pattern.match(line):
            return n
    return None


def convert(text: str, name: str) -> Imported:
    """kube-vip manifest ``text`` (read from ``name``) → the vipd config, what was dropped
    and the errors."""
    dropped: list[Dropped] = []
    try:
        doc = _convert(text, name, dropped)
    except _Refuse as e:
        return Imported("", (), (str(e),))
    return finish(doc, dropped, ())


def _convert(text: str, name: str, dropped: list[Dropped]) -> Doc:
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        raise _Refuse(f"{name}: invalid YAML: {e}") from None
    found = [(w, c) for w, c in _containers(docs) if _is_kubevip(c)]
    if not found:
        raise _Refuse(f"{name}: no kube-vip container (a Pod or DaemonSet running kube-vip)")
    if len(found) > 1:
        raise _Refuse(f"{name}: several kube-vip containers: {', '.join(w for w, _ in found)}")
    who, container = found[0]

    env: dict[str, str] = {}
    where: dict[str, str] = {}
    for item in container.get("env") or ():
        key = str(item.get("name"))
        line = _line(text, key)
        where[key] = f"{name}:{line}" if line else f"{name}, {who}"
        if key not in KNOWN:
            raise _Refuse(f"{where[key]}: env {key}: not a setting kube-vip reads")
        if "valueFrom" in item:
            if key != "vip_nodename":
                dropped.append(Dropped(f"env {key}", where[key], "a valueFrom is not imported"))
            continue  # vip_nodename from spec.nodeName: vipd's NODE_NAME, in its manifests
        value = item.get("value")
        if value is not None and str(value) != "":
            env[key] = str(value)

    def used(key: str) -> tuple[str, str]:
        return env.pop(key), where[key]

    def drop(key: str, why: str) -> None:
        value, at = used(key)
        dropped.append(Dropped(f"env {key}={value}", at, why))

    out = Doc()
    out.header += [f"vipd config imported from kube-vip's {name} ({who})", ""]
    if not _true(env.get("cp_enable", "false")):
        raise _Refuse(f"{name}: cp_enable is not true: this kube-vip holds no control-plane VIP")
    used("cp_enable")

    addresses = {k: used(k) for k in ("address", "vip_address") if k in env}
    values = {v for v, _ in addresses.values()}
    if not values:
        raise _Refuse(f"{name}: no address (or vip_address): no VIP to import")
    if len(values) > 1:
        raise _Refuse(f"{name}: address and vip_address differ: {' and '.join(sorted(values))}")
    (vip,) = values
    key, (_, at) = next(iter(addresses.items()))
    try:
        ipaddress.ip_address(vip)
    except ValueError:
        raise _Refuse(
            f"{at}: {key}={vip}: vipd takes an IP literal, not a DNS name (the endpoint is in "
            "the API server's certificates)"
        ) from None
    out.set("vip", vip, f"env {key} ({at})")
    if "vip_interface" in env:
        value, at = used("vip_interface")
        out.set("interface", value, f"env vip_interface ({at})")

    arp = _true(env.pop("vip_arp", "false"))
    if not arp and (_true(env.get("bgp_enable", "")) or _true(env.get("vip_routingtable", ""))):
        try:
            kvrouted.routed(env, where, out, dropped, used)
        except kvrouted.RoutedRefused as e:
            raise _Refuse(f"{name}: {e}" if str(e).startswith("bgp_enable") else str(e)) from None
        _tail(env, where, out, used, drop)
        return out
    if not arp:
        raise _Refuse(
            f"{name}: vip_arp is not true and neither bgp_enable nor vip_routingtable is: "
            "kube-vip moves the VIP another way here (WireGuard mode), which vipd does not do"
        )
    if not _true(env.get("vip_leaderelection", "false")):
        raise _Refuse(
            f"{name}: vip_leaderelection is not true: every kube-vip claims the VIP, there is no "
            "election to carry over; vipd always elects one leader: write election by hand "
            "(VRRP or Lease, docs/reference/config.md)"
        )
    used("vip_leaderelection")
    for k in [k for k, v in env.items() if v.strip().lower() == "false"]:
        used(k)  # a feature kube-vip has off: nothing to carry over
    for k in sorted(k for k in env if k.startswith(("bgp_", "zebra_", "mpbgp_"))):
        drop(k, "kube-vip's BGP is off here (bgp_enable is not true): nothing to announce")
    out.set("election.mode", "lease", f"env vip_leaderelection ({where['vip_leaderelection']})")
    if "vip_leasename" in env:
        lease, at = used("vip_leasename")
        out.set("election.lease.name", lease, f"env vip_leasename ({at})")
    else:
        out.set("election.lease.name", KUBEVIP_LEASE, "kube-vip's default vip_leasename")
    if "cp_namespace" in env:
        value, at = used("cp_namespace")
        out.set("election.lease.namespace", value, f"env cp_namespace ({at})")
    for env_key, key, kind in (
        ("vip_leaseduration", "duration", int),
        ("vip_renewdeadline", "renew_deadline", float),
        ("vip_retryperiod", "retry_period", float),
    ):
        if env_key in env:
            value, at = used(env_key)
            try:
                number = kind(value)
            except ValueError:
                raise _Refuse(f"{at}: {env_key}={value}: not a number of seconds") from None
            if isinstance(number, float) and number.is_integer():
                number = int(number)
            out.set(f"election.lease.{key}", number, f"env {env_key} ({at})")
    _tail(env, where, out, used, drop)
    return out


def _tail(
    env: dict[str, str],
    where: dict[str, str],
    out: Doc,
    used: Callable[[str], tuple[str, str]],
    drop: Callable[[str, str], None],
) -> None:
    """What every mode shares: the subnet, port, metrics, Services, IPVS, the rest dropped."""
    for k in ("vip_subnet", "vip_cidr"):
        if k in env:
            value, at = env[k], where[k]
            if value.lstrip("/") in ("32", "128"):
                used(k)  # vipd binds /32 and /128: the same
            else:
                drop(k, "vipd binds the VIP as /32 (/128)")
    if env.get("dns_mode") == "first":
        used("dns_mode")  # kube-vip's default; it only matters for a DNS name
    if "port" in env:
        value, at = env["port"], where["port"]
        if value == "6443":
            used("port")  # vipd's health.port and ipvs.port default
        else:
            drop("port", "vipd uses it only for health checks and IPVS: set health.port/ipvs.port")
    if "prometheus_server" in env:
        value, at = used("prometheus_server")
        host, _, port = value.rpartition(":")
        listen = f"{host or '0.0.0.0'}:{port}"
        out.set(
            "metrics.listen", listen, f"env prometheus_server ({at}): beside kube-vip vipd exits 3"
        )
    if _true(env.get("svc_enable", "false")):
        for k in sorted(k for k in env if k.startswith(_SERVICES)):
            drop(k, _SERVICES_WHY)
    else:
        for k in [k for k in env if k.startswith(_SERVICES)]:
            used(k)  # services are off: these do nothing in kube-vip either
    for k in sorted(k for k in env if k.startswith("lb_")):
        if k == "lb_enable" and not _true(env[k]):
            used(k)
        else:
            drop(k, _LB_WHY)
    for k in sorted(env):
        drop(k, "a kube-vip setting with no vipd equivalent")
