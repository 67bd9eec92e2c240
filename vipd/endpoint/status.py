"""``vipd status``: read a running vipd's /status document and print it for an operator.

What it is: ``render(doc)`` (pure: the JSON document in, lines of text out) and ``fetch(url)``
(one HTTP GET with a timeout). The document is what ``vipd.agent.Agent.status()`` builds on the
event loop and ``vipd.endpoint.server`` serves at ``/status``, with the endpoint's own
verdicts added::

    node, version, vip (the first VIP), interface, source, backend ("vrrp"|"lease"),
    vips: [{vip, bound, role, vrid}],                       every VIP, in the config's order
    role ("leader"|"follower"|"init"), role_since_s, last_reason, vip_bound,
    duplicate_claim, interface_up,
    vrrp: {vrid, version, state, priority, advert_interval_s, master_down_interval_s, mode},
    master: {address, priority, self, advert_age_s} | null,
    peers: [{address, priority, last_seen_s}],             newest first
    backends: [{name, address, healthy, detail}],          empty until health checking lands
    tracks: [{name, up, value, weight, error}],            the tracked checks (track)
    counters: {transitions, adverts_sent, adverts_received, advert_send_errors,
               invalid_adverts: {reason: n}, garp_sent, duplicate_claims,
               rate_limited: {answer, defence, log}},
    membership: {lists: [{list, from, static, members}], read, read_through: {source: url},
                 failed_rounds, held, held_why}             with a *_from key: the peer
                                                           lists followed from the cluster
    instances: [{vips, role, vrrp, master, peers, ...}]    with two VRRP virtual routers
                                                           (one per family): each one's part
    healthy, health_reason, ready, ready_reason, heartbeat_age_s   (added by the endpoint)

    The election fields at the top (role, vrrp, master, peers, counters) are the first
    instance's: the only one with a single VIP family.

A key this version does not know is ignored, and a missing one prints as "-", so a newer
daemon can be read by an older ``vipd status`` and the other way round.

What it must not do: change anything on the node (it only reads), or hang: the GET has a
timeout, and a vipd that does not answer is an error line and exit code 1.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

DEFAULT_URL = "http://127.0.0.1:2112"


class StatusError(Exception):
    """The endpoint could not be read; ``str()`` is one line."""


def url_for_listen(listen: str) -> str:
    """The URL to reach a vipd listening on ``listen`` from the same node."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def fetch(base_url: str, timeout: float = 3.0) -> dict[str, Any]:
    url = base_url.rstrip("/") + "/status"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            doc = json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:
        raise StatusError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise StatusError(f"cannot read {url}: {why} (is vipd running here?)") from None
    except ValueError as exc:
        raise StatusError(f"{url}: not a JSON status document: {exc}") from None
    if not isinstance(doc, dict):
        raise StatusError(f"{url}: not a JSON status document")
    return doc


def _s(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}{unit}"
    return f"{value}{unit}"


def _g(value: Any) -> str:
    """A configured number as written (10, 0.5), not as a measurement (10.000)."""
    return f"{value:g}" if isinstance(value, int | float) else _s(value)


def _ago(seconds: Any) -> str:
    return "-" if not isinstance(seconds, int | float) else f"{seconds:.3f} s ago"


def render(doc: Mapping[str, Any]) -> str:
    """The status document as aligned lines, most important first."""
    g = doc.get
    vrrp: Mapping[str, Any] = g("vrrp") or {}
    routed: Mapping[str, Any] = g("routed") or {}  # routing-table mode's ECMP pool
    lines: list[tuple[str, str]] = []
    role = _s(g("role"))
    since = g("role_since_s")
    role_text = f"{role} ({_s(g('backend'))}"
    if vrrp:
        role_text += f" {_s(vrrp.get('state'))}"
    role_text += ")" if since is None else f", for {since:.3f} s)"
    lines.append(("role", role_text))
    bound = g("vip_bound")
    vips = g("vips") or []
    if len(vips) > 1:
        vip_text = f"{', '.join(_s(v.get('vip')) for v in vips)} on {_s(g('interface'))}"
    else:
        vip_text = f"{_s(g('vip'))} on {_s(g('interface'))}"
        if routed:
            vip_text += ", announced here" if bound else ", not announced here"
        else:
            vip_text += ", bound here" if bound else ", not bound here"
    if g("duplicate_claim"):
        vip_text += "; ANOTHER NODE CLAIMS IT TOO (split brain)"
    lines.append(("VIP", vip_text))
    if len(vips) > 1:
        for i, v in enumerate(vips):
            text = f"{_s(v.get('vip'))}: {_s(v.get('role'))}"
            text += ", bound here" if v.get("bound") else ", not bound here"
            if v.get("vrid") is not None:
                text += f" (VRID {v['vrid']})"
            lines.append(("VIPs" if i == 0 else "", text))
    lines.append(("node", f"{_s(g('node'))} (source {_s(g('source'))}, vipd {_s(g('version'))})"))
    if vrrp:
        lines.append(
            (
                "vrrp",
                f"VRRPv{_s(vrrp.get('version'))} VRID {_s(vrrp.get('vrid'))} priority "
                f"{_s(vrrp.get('priority'))}, advert {_g(vrrp.get('advert_interval_s'))} s, "
                f"{_s(vrrp.get('mode'))}",
            )
        )
    lease: Mapping[str, Any] = g("lease") or {}
    if lease:
        lines.append(
            (
                "lease",
                f"{_s(lease.get('name'))} held by {_s(lease.get('holder'))}, last renewal "
                f"{_ago(lease.get('last_renewal_age_s'))}, duration "
                f"{_g(lease.get('duration_s'))} s / renew deadline "
                f"{_g(lease.get('renew_deadline_s'))} s / retry {_g(lease.get('retry_period_s'))}"
                f" s, credentials {_s(lease.get('credentials'))}",
            )
        )
    if routed:
        phases = routed.get("phases") or {}
        lines.append(
            (
                "routed",
                f"{'announcing' if routed.get('announcing') else 'not announcing'}"
                f" ({_s(g('last_reason')) or 'no decision yet'}): table "
                f"{_s(routed.get('table'))} protocol {_s(routed.get('protocol'))}, drain "
                f"{_g(routed.get('drain_s'))} s; "
                + (", ".join(f"{k} {v}" for k, v in sorted(phases.items())) or "no route yet"),
            )
        )
    master = g("master")
    if routed:
        pass  # every node decides for itself: no master, no adverts to hear
    elif isinstance(master, Mapping):
        text = _s(master.get("address"))
        if master.get("priority") is not None:
            text += f" priority {master['priority']}"
        if master.get("self"):
            text += " (this node)"
        elif master.get("advert_age_s") is not None:
            text += f", last advert {_ago(master.get('advert_age_s'))}"
        lines.append(("master", text))
    else:
        lines.append(("master", "none known"))
    peers = g("peers") or []
    if routed:
        pass
    elif peers:
        for i, p in enumerate(peers):
            lines.append(
                (
                    "peers" if i == 0 else "",
                    f"{_s(p.get('address'))} priority {_s(p.get('priority'))}, "
                    f"last advert {_ago(p.get('last_seen_s'))}",
                )
            )
    else:
        lines.append(("peers", "none heard (VRRP backups are silent; a leader hears no one)"))
    backends = g("backends") or []
    if backends:
        for i, b in enumerate(backends):
            health = "healthy" if b.get("healthy") else "UNHEALTHY"
            detail = f" ({b['detail']})" if b.get("detail") else ""
            lines.append(
                (
                    "backends" if i == 0 else "",
                    f"{_s(b.get('name'))} {_s(b.get('address'))} {health}{detail}",
                )
            )
    else:
        lines.append(("backends", "none (health checking is not configured)"))
    for i, t in enumerate(g("tracks") or []):
        up = "up" if t.get("up") else f"DOWN ({_s(t.get('error'))})"
        value = f", value {t['value']}" if t.get("value") else ""
        lines.append(
            (
                "tracks" if i == 0 else "",
                f"{_s(t.get('name'))} {up}, weight {_s(t.get('weight'))}{value}",
            )
        )
    lines += _membership(g("membership"))
    ready = "yes" if g("ready") else f"NO: {_s(g('ready_reason'))}"
    healthy = "yes" if g("healthy") else f"NO: {_s(g('health_reason'))}"
    lines.append(("ready", ready))
    lines.append(("healthy", healthy))
    if g("last_reason"):
        lines.append(("last change", str(g("last_reason"))))
    counters: Mapping[str, Any] = g("counters") or {}
    if counters:
        parts = []
        for key, value in counters.items():
            if isinstance(value, Mapping):  # e.g. invalid adverts by reason
                inner = ", ".join(f"{k} {v}" for k, v in sorted(value.items())) or "none"
                value = f"({inner})"
            parts.append(f"{key.replace('_', ' ')} {value}")
        lines.append(("counters", ", ".join(parts)))
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in lines)


def _membership(m: Any) -> list[tuple[str, str]]:
    """The followed peer lists: members (and from where), the API server read through, a
    run of failed reads (the last good set in force) and the unicast admission hold."""
    if not isinstance(m, Mapping):
        return []
    lines: list[tuple[str, str]] = []
    for i, lst in enumerate(m.get("lists") or []):
        members = ", ".join(map(str, lst.get("members") or [])) or "none"
        static = ", ".join(map(str, lst.get("static") or []))
        text = f"{_s(lst.get('list'))} from {'+'.join(map(str, lst.get('from') or []))}: {members}"
        text += f" (static: {static})" if static else ""
        lines.append(("membership" if i == 0 else "", text))
    if not m.get("read"):
        lines.append(("", "not read yet"))
    for source, url in sorted((m.get("read_through") or {}).items()):
        lines.append(("", f"{source} read through {url}"))
    if m.get("failed_rounds"):
        lines.append(("", f"{m['failed_rounds']} failed reads in a row: the last good set holds"))
    if m.get("held"):
        lines.append(("", f"HELD OUT OF THE ELECTION: {_s(m.get('held_why'))}"))
    return lines
