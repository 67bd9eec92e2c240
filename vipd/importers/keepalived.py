"""keepalived's ``keepalived.conf`` → a vipd config (``vipd import keepalived``).

What it is
    The statements `vipd.importers.kaconf` read, mapped key by key onto vipd's config
    (docs/reference/cli.md, "vipd import", has the table). keepalived's meaning of each
    keyword is its man page's, ``keepalived.conf(5)``, and its defaults are those of
    https://github.com/acassen/keepalived (``keepalived/vrrp/vrrp_parser.c``, ``vrrp.c``):
    VRRP version 2 unless ``vrrp_version``/``version`` says otherwise (IPv6 is always 3),
    priority 100 (255, the address owner's, for ``state MASTER`` without a priority),
    ``advert_int`` 1 s, a ``vrrp_script`` every 1 s with weight 0, which puts the instance
    in FAULT while the script fails.

    One vipd config is one virtual router per address family (RFC 9568 §7), so the
    ``vrrp_instance``s become at most one IPv4 and one IPv6 router that share every
    ``election.vrrp`` key. Two instances of one family, or an IPv4 and an IPv6 instance that
    differ in a shared key, are errors naming both; so is a keyword that is not keepalived's.

Its parts: the statements' values, an instance as read and the keys two routers share are
`vipd.importers.kavalues`'s; the keyword tables `vipd.importers.katables`'s.

What it must not do: read files (includes go through the caller's `kaconf.Files`), or guess.
"""

from __future__ import annotations

from collections.abc import Sequence

from vipd.importers import Dropped, Imported
from vipd.importers.kaconf import Files, KaError, Stmt, parse
from vipd.importers.katables import (
    GARP,
    GLOBAL_GARP,
    INSTANCE_DROPS,
    NOTIFY,
    SCHEDULERS,
    TOP_DROPS,
)
from vipd.importers.kavalues import (
    _address,
    _agree,
    _command,
    _Instance,
    _int,
    _name,
    _note,
    _number,
    _one,
    _peers,
    _Refuse,
    _track_name,
)
from vipd.importers.render import Doc, finish

__all__ = ["convert"]

IPVS_PORT = 6443  # the API server's: the one virtual_server vipd's IPVS can take over


class _Converter:
    def __init__(self, name: str) -> None:
        self.name = name
        self.doc = Doc()
        self.dropped: list[Dropped] = []
        self.version: tuple[int, str] | None = None  # global vrrp_version
        self.scripts: dict[str, Stmt] = {}
        self.track_files: dict[str, Stmt] = {}
        self.instances: list[_Instance] = []
        self.servers: list[Stmt] = []
        self.garp: dict[str, tuple[object, str]] = {}

    def drop(self, s: Stmt, why: str, what: str = "") -> None:
        self.dropped.append(Dropped(what or " ".join(s.words), s.where, why))

    # -- the top level ----------------------------------------------------------------------

    def top(self, stmts: Sequence[Stmt]) -> None:
        for s in stmts:
            k = s.keyword
            if k == "global_defs":
                self.globals(s)
            elif k == "vrrp_script":
                self.scripts[_name(s)] = s
            elif k in ("vrrp_track_file", "track_file"):
                self.track_files[_name(s)] = s
            elif k == "vrrp_instance":
                self.instances.append(_Instance(_name(s), s))
            elif k == "virtual_server":
                self.servers.append(s)
            elif k in TOP_DROPS:
                self.drop(s, TOP_DROPS[k], f"{k} {' '.join(s.args)}".strip())
            else:
                raise _Refuse(f"{s.where}: unknown keepalived section {k!r}")

    def globals(self, s: Stmt) -> None:
        for g in s.block or ():
            if g.keyword == "vrrp_version":
                self.version = (int(str(_one(g, int))), g.where)
            elif g.keyword in GLOBAL_GARP:
                self.garp[GLOBAL_GARP[g.keyword]] = (_one(g, _number), g.where)
            else:
                # global_defs holds the daemon's own settings (router_id, script_user,
                # notification_email...): none moves the VIP
                self.drop(g, "a keepalived daemon setting with no vipd equivalent")

    # -- one vrrp_instance --------------------------------------------------------------------

    def instance(self, inst: _Instance) -> None:
        where = inst.stmt.where
        version_set: tuple[int, str] | None = None
        sh = inst.shared
        track: list[Stmt] = []
        options: list[Stmt] = []  # addresses written with a prefix or options
        for s in inst.stmt.block or ():
            k = s.keyword
            if k == "virtual_ipaddress":
                for a in s.block or ():
                    address = _address(a.keyword, a.where)
                    if address in inst.vips:
                        self.drop(a, "the address is listed before: vipd binds it once")
                        continue
                    inst.vips.append(address)
                    if "/" in a.keyword or a.args:
                        options.append(a)
            elif k == "interface":
                sh["interface"] = (_one(s), s.where)
            elif k == "virtual_router_id":
                sh["vrid"] = (_one(s, int), s.where)
            elif k == "priority":
                sh["priority"] = (_one(s, int), s.where)
            elif k == "advert_int":
                sh["advert_interval"] = (_one(s, _number), s.where)
            elif k == "version":
                version_set = (int(str(_one(s, int))), s.where)
            elif k == "nopreempt":
                sh["preempt"] = (False, s.where)
            elif k == "preempt":
                sh["preempt"] = (True, s.where)
            elif k == "preempt_delay":
                sh["preempt_delay"] = (_one(s, _number), s.where)
            elif k == "use_vmac":
                sh["vmac"] = (True, s.where)
                if s.args:
                    self.drop(s, "vipd names its macvlan vrrp.<vrid>", f"use_vmac {s.args[0]}")
            elif k == "unicast_peer":
                peers = [_address(p.keyword, p.where) for p in s.block or ()]
                for p in s.block or ():
                    if p.args:
                        self.drop(p, "per-peer options are not in vipd")
                sh["unicast_peers"] = ([*_peers(inst), *map(str, peers)], s.where)
            elif k == "unicast_src_ip":
                # vipd's one list serves every node and skips this node's own address, so
                # keepalived's source joins the peers: the other nodes must send to it
                src = str(_address(str(_one(s)), s.where))
                sh["unicast_peers"] = ([src, *_peers(inst)], s.where)
            elif k == "authentication":
                self.auth(s, sh)
            elif k == "auth_hmac":
                self.auth_hmac(s, sh)
            elif k == "track_script":
                track += list(s.block or ())
            elif k == "track_file":
                track += [Stmt(("@file", *t.words), None, t.where) for t in s.block or ()]
            elif k in NOTIFY:
                cmd = _command(s.args, k, s.where, self.dropped)
                if cmd is not None:
                    # keepalived passes notify its own arguments (and none to the others)
                    sh[NOTIFY[k]] = (cmd, f"{k} ({s.where}); vipd appends <vip> <state> <reason>")
            elif k in GARP:
                sh[GARP[k]] = (_one(s, _number), f"{k} ({s.where})")
            elif k in INSTANCE_DROPS:
                self.drop(s, INSTANCE_DROPS[k])
            else:
                raise _Refuse(f"{s.where}: unknown keyword {k!r} in vrrp_instance {inst.name}")
        for a in options:
            # "dev <the instance's interface>" alone is where vipd binds it anyway
            if "/" in a.keyword or a.args != ("dev", sh.get("interface", ("",))[0]):
                self.drop(a, "vipd binds every VIP as /32 (/128) on `interface`")
        if not inst.vips:
            raise _Refuse(f"{where}: vrrp_instance {inst.name} has no virtual_ipaddress")
        families = {v.version for v in inst.vips}
        if len(families) > 1:
            raise _Refuse(f"{where}: vrrp_instance {inst.name} mixes IPv4 and IPv6 addresses")
        version = version_set or self.version or (2, "keepalived's default")
        if inst.family == 6:
            version = (3, version[1] if version[0] == 3 else "IPv6 is always VRRPv3")
        sh["version"] = version
        if "priority" not in sh:
            state = next((s for s in inst.stmt.block or () if s.keyword == "state"), None)
            if state is not None and state.args[:1] == ("MASTER",):
                raise _Refuse(
                    f"{state.where}: vrrp_instance {inst.name}: state MASTER without a priority "
                    "is keepalived's address owner (priority 255), which vipd does not support"
                )
        if sh.get("priority", (0,))[0] == 255:
            raise _Refuse(
                f"{sh['priority'][1]}: vrrp_instance {inst.name}: priority 255 (the address "
                "owner's) is not supported by vipd; choose 1-254"
            )
        for t in track:
            self.track(inst, t)

    def auth(self, s: Stmt, sh: dict[str, tuple[object, str]]) -> None:
        kind = next((a for a in s.block or () if a.keyword == "auth_type"), None)
        pw = next((a for a in s.block or () if a.keyword == "auth_pass"), None)
        if kind is not None and kind.args[:1] == ("AH",):
            self.drop(s, "VRRPv2 AH authentication is not supported by vipd", "auth_type AH")
        elif pw is not None:
            # keepalived sends only the first 8 characters (it truncates longer ones)
            sh["auth_pass"] = (str(_one(pw))[:8], pw.where)

    def auth_hmac(self, s: Stmt, sh: dict[str, tuple[object, str]]) -> None:
        """keepalived >= 2.4's ``auth_hmac`` block → ``election.vrrp.auth_hmac``. vipd reads
        keys only from files, so ``key ID file:PATH`` carries over and a key written in the
        config is dropped with the file to put it in (its bytes never reach the output)."""
        keys: dict[int, str] = {}
        out: dict[str, object] = {}
        for a in s.block or ():
            k = a.keyword
            if k == "key":
                if len(a.args) != 2:
                    raise _Refuse(f"{a.where}: auth_hmac key takes an id and a value")
                kid = _int(a.args[0], a)
                if not 1 <= kid <= 255 or kid in keys:
                    raise _Refuse(f"{a.where}: auth_hmac key {kid}: ids are 1-255, each once")
                value = a.args[1]
                if value.startswith("file:"):  # ${...} never gets here: kaconf refuses it
                    keys[kid] = value[len("file:") :]
                else:
                    keys[kid] = f"/etc/vipd/vrrp-key-{kid}"
                    self.drop(
                        a,
                        "vipd reads keys only from files: write keepalived's value as it is "
                        f"(hex:... or the string) into {keys[kid]}, owned by root, mode 0600",
                        f"auth_hmac key {kid} (its value)",
                    )
            elif k == "active_key":
                out["send_key"] = _one(a, int)
            elif k == "anti_replay":
                out["anti_replay"] = _one(a)
            elif k == "time_window":
                out["window"] = _one(a, int)
            elif k == "mode":
                out["mode"] = _one(a)
            else:
                raise _Refuse(f"{a.where}: unknown keyword {k!r} in auth_hmac")
        if not keys:
            raise _Refuse(f"{s.where}: auth_hmac without a key")
        sh["auth_hmac"] = ({"keys": keys, **out}, s.where)

    def track(self, inst: _Instance, t: Stmt) -> None:
        file = t.keyword == "@file"
        words = t.words[1:] if file else t.words
        name = words[0]
        over: int | None = None
        if len(words) >= 3 and words[1] == "weight":
            over = _int(words[2], t)
            if words[3:]:
                self.drop(t, "vipd has no reverse weights", f"{name} weight {over} reverse")
        if file:
            self.track_file(inst, name, t, over)
            return
        src = self.scripts.get(name)
        if src is None:
            raise _Refuse(f"{t.where}: track_script {name}: no vrrp_script {name}")
        # keepalived runs a script every second unless it says otherwise (VRRP_SCRIPT_DI)
        item: dict[str, object] = {"name": _track_name(name), "interval": 1}
        weight = 0
        for s in src.block or ():
            k = s.keyword
            if k == "script":
                cmd = _command(s.args, f"vrrp_script {name}", s.where, self.dropped)
                if cmd is None:
                    return
                item["script"] = cmd
            elif k in ("interval", "timeout"):
                item[k] = _one(s, _number)
            elif k in ("rise", "fall"):
                item[k] = _one(s, int)
            elif k == "weight":
                weight = _int(s.args[0] if s.args else "", s)
                if s.args[1:]:
                    self.drop(s, "vipd has no reverse weights")
            else:
                self.drop(s, "no vipd equivalent")
        if "script" not in item:
            raise _Refuse(f"{src.where}: vrrp_script {name} has no script")
        weight = weight if over is None else over
        self.put_weight(inst, item, weight, f"vrrp_script {name} ({src.where})")

    def put_weight(self, inst: _Instance, item: dict[str, object], weight: int, src: str) -> None:
        if weight == 0:
            item["weight"] = "fault"  # keepalived: a failing check with weight 0 is FAULT
        elif weight < 0:
            item["weight"] = -weight
        else:
            # keepalived adds a positive weight while the check is up; vipd subtracts while it
            # is down: the same priorities with the base raised by the weight
            base, where = inst.shared.get("priority", (100, "keepalived's default priority"))
            assert isinstance(base, int)
            inst.shared["priority"] = (base + weight, f"{where}, + weight {weight} of {src}")
            item["weight"] = weight
        order = ("name", "script", "file", "interval", "timeout", "rise", "fall", "weight")
        item = {k: item[k] for k in order if k in item}
        for old in self.doc.tree.get("track", []):
            if old["name"] == item["name"]:
                if old != item:
                    raise _Refuse(f"{src} is tracked with two weights: vipd has one per check")
                return
        self.doc.append("track", item, f"{src}, tracked by vrrp_instance {inst.name}")

    def track_file(self, inst: _Instance, name: str, t: Stmt, over: int | None) -> None:
        src = self.track_files.get(name)
        if src is None:
            raise _Refuse(f"{t.where}: track_file {name}: no vrrp_track_file {name}")
        path = next((s for s in src.block or () if s.keyword == "file"), None)
        weight = next((_int(str(_one(s)), s) for s in src.block or () if s.keyword == "weight"), 1)
        weight = weight if over is None else over
        if path is None:
            raise _Refuse(f"{src.where}: vrrp_track_file {name} has no file")
        if weight != 1:
            # vipd adds the file's number to the priority as it is: keepalived's weight 1
            self.drop(t, f"vipd reads the file's number as keepalived's weight 1, not {weight}")
            return
        item = {"name": _track_name(name), "file": str(_one(path))}
        self.doc.append("track", item, f"vrrp_track_file {name} ({src.where})")

    # -- IPVS ------------------------------------------------------------------------------------

    def server(self, s: Stmt, vips: Sequence[object]) -> None:
        what = f"virtual_server {' '.join(s.args)}"
        if len(s.args) != 2 or s.args[1] != str(IPVS_PORT):
            self.drop(s, f"vipd load-balances VIP:{IPVS_PORT} (the API server) only", what)
            return
        if _address(s.args[0], s.where) not in vips or len(vips) != 1:
            self.drop(s, "vipd's IPVS takes the one VIP of the config", what)
            return
        if self.doc.has("ipvs"):
            raise _Refuse(f"{s.where}: a second {what}")
        backends: list[str] = []
        for k in s.block or ():
            if k.keyword == "lb_algo" and str(_one(k)) in SCHEDULERS:
                self.doc.set("ipvs.scheduler", _one(k), f"lb_algo ({k.where})")
            elif k.keyword == "lb_kind" and str(_one(k)) in ("NAT", "DR"):
                self.doc.set("ipvs.forwarding", str(_one(k)).lower(), f"lb_kind ({k.where})")
            elif k.keyword == "real_server":
                if k.args[1:] != (str(IPVS_PORT),):
                    self.drop(k, f"vipd's real servers listen on {IPVS_PORT}")
                    continue
                backends.append(str(_address(k.args[0], k.where)))
                for c in k.block or ():
                    if c.keyword != "weight":
                        self.drop(c, "vipd checks each backend's /readyz (health section)")
            elif k.keyword != "protocol" or k.args != ("TCP",):
                self.drop(k, "no vipd equivalent")
        if not backends:
            self.drop(s, "no real_server on the API server's port", what)
            return
        self.doc.set("ipvs.enabled", True, f"{what} ({s.where})")
        self.doc.set("ipvs.backends", backends, "its real_servers")
        if not self.doc.has("health"):
            self.doc.set("health", {}, "IPVS needs vipd's API server health checks (/readyz)")

    # -- the result ---------------------------------------------------------------------------

    def select(self, names: Sequence[str]) -> None:
        """Keep only the instances named (``--instance``); the others are dropped."""
        have = [i.name for i in self.instances]
        for name in names:
            if name not in have:
                raise _Refuse(
                    f"{self.name}: no vrrp_instance {name} (there are: {', '.join(have) or 'none'})"
                )
        for inst in self.instances:
            if inst.name not in names:
                what = f"vrrp_instance {inst.name}"
                self.dropped.append(Dropped(what, inst.stmt.where, "not chosen with --instance"))
        self.instances = [i for i in self.instances if i.name in names]

    def finish(self) -> None:
        for inst in self.instances:
            self.instance(inst)
        families: dict[int, list[_Instance]] = {}
        for inst in self.instances:
            families.setdefault(inst.family, []).append(inst)
        for family, group in sorted(families.items()):
            if len(group) > 1:
                listed = ", ".join(f"{i.name} ({i.stmt.where})" for i in group)
                raise _Refuse(
                    f"{len(group)} IPv{family} vrrp_instances: {listed}: one vipd config runs one "
                    "virtual router per address family; choose one with --instance NAME"
                )
        by_family = {family: group[0] for family, group in families.items()}
        if not by_family:
            raise _Refuse(f"{self.name}: no vrrp_instance: nothing to import")
        routers = [by_family[f] for f in sorted(by_family)]
        for r in routers:
            r.shared.setdefault("priority", (100, "keepalived's default"))
            r.shared.setdefault("advert_interval", (1, "keepalived's default"))
        shared = _agree(routers)
        vips = [v for r in routers for v in r.vips]
        names = " and ".join(f"vrrp_instance {r.name} ({r.stmt.where})" for r in routers)
        self.doc.header += [f"vipd config imported from keepalived's {self.name}", ""]
        if len(vips) == 1:
            self.doc.set("vip", str(vips[0]), f"virtual_ipaddress of {names}")
        else:
            self.doc.set("vips", [str(v) for v in vips], f"virtual_ipaddress of {names}")
        if "interface" in shared:
            self.doc.set(
                "interface", shared["interface"][0], f"interface ({shared['interface'][1]})"
            )
        self.doc.set("election.mode", "vrrp")
        if "vrid" not in shared:
            raise _Refuse(f"{routers[0].stmt.where}: {names}: no virtual_router_id")
        for key in ("vrid", "priority", "advert_interval", "version", "preempt"):
            if key in shared:
                self.doc.set(f"election.vrrp.{key}", shared[key][0], _note(key, shared[key][1]))
        for key in ("preempt_delay", "unicast_peers", "auth_pass", "auth_hmac", "vmac"):
            if key in shared:
                value, where = shared[key]
                if key == "auth_pass" and shared["version"][0] != 2:
                    self.dropped.append(
                        Dropped("authentication", where, "VRRPv3 has no authentication")
                    )
                    continue
                self.doc.set(f"election.vrrp.{key}", value, _note(key, where))
        for key, (value, where) in sorted(self.garp.items()):
            self.doc.set(key, value, f"global_defs vrrp_{key.split('.')[1]} ({where})")
        for key in sorted(k for k in shared if k.startswith(("garp.", "notify."))):
            self.doc.set(key, shared[key][0], shared[key][1])
        for s in self.servers:
            self.server(s, vips)
        # track items were appended while reading the instances; move them last
        if "track" in self.doc.tree:
            self.doc.tree["track"] = self.doc.tree.pop("track")


def convert(text: str, name: str, files: Files, instances: Sequence[str] = ()) -> Imported:
    """keepalived config ``text`` (read from ``name``; its includes through ``files``) →
    the vipd config, what was dropped and the errors. ``instances``: import only the
    ``vrrp_instance``s of these names (at most one per address family), not all."""
    conv = _Converter(name)
    try:
        conv.top(parse(text, name, files))
        if instances:
            conv.select(instances)
        conv.finish()
    except (KaError, _Refuse) as e:
        return Imported("", (), (str(e),))
    return finish(conv.doc, conv.dropped, ())
