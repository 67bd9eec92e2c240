"""vipd's IPVS virtual service in the kernel, through pyroute2's IPVS (generic netlink) API,
and the source NAT that makes NAT forwarding work between nodes of one subnet.

What it is
    `IpvsActuator` is observe → plan → apply for exactly one virtual service, VIP:port/TCP:
    ``observe`` dumps the kernel's services and keeps only that key (kube-proxy's services
    and anyone else's are never looked at again), ``apply`` runs the operations of
    `vipd.ipvs.plan.plan`, ``converge`` does both and returns what it changed (nothing on a
    converged table). It takes a ``netns`` so that tests can drive several nodes from one
    process.

    `Masquerade` keeps an nftables table ``vipd_ipvs`` (one rule) plus the two sysctls that
    NAT forwarding needs. Without it a real server on the same subnet as the client answers
    the client directly, from its own address, and the client drops the reply (it talked to
    the VIP). The rule masquerades only connections whose original destination is
    VIP:port/TCP, the director's own IPVS traffic, so the real server replies to the director,
    which undoes both translations. ``net.ipv4.vs.conntrack=1`` lets netfilter see IPVS
    connections at all (the rule matches on them) and ``ip_forward`` (IPv6:
    ``conf.all.forwarding``) lets the replies through. The sysctls are set, never reset:
    Kubernetes nodes need forwarding on anyway, and kube-proxy's IPVS mode sets
    ``vs.conntrack`` too, so turning either off when vipd steps down could break them.

pyroute2 pitfalls handled here (pyroute2 ``pyroute2/netlink/generic/ipvs.py``)
    - ``IPVSDest`` defaults to direct routing (3): the forwarding method is always passed.
    - ``IPVSDest.from_message()["fwd_method"]`` always reads 3: the raw
      ``IPVS_DEST_ATTR_FWD_METHOD`` attribute is read instead.
    - ``"update"`` means delete in pyroute2's command map: ``"set"`` is used to edit.
    - The kernel reports a real server that is an address of this host as "local" (1)
      whatever was asked; that is read back as the configured method, or every pass would
      "edit" it.

What it must not do: decide membership (``vipd.ipvs.plan``) or touch any service but its own.
It is synchronous (pyroute2's asyncio flavour does not run on uvloop); the reconciler calls it
from a worker thread, never from the election loop.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Any

from vipd.ipvs.plan import (
    FORWARDING_CODES,
    AddServer,
    AddService,
    DelServer,
    DelService,
    EditServer,
    EditService,
    Forwarding,
    Op,
    RealServer,
    Service,
    ServiceKey,
    Table,
    describe,
    plan,
)

IPAddress = IPv4Address | IPv6Address
_LOCALNODE = 1
_FORWARDING_OF_CODE = {code: name for name, code in FORWARDING_CODES.items()}
NFT_TABLE = "vipd_ipvs"


class IpvsError(RuntimeError):
    """The kernel refused an IPVS request (or IPVS is not available)."""


class IpvsActuator:
    """Keeps vipd's one virtual service converged, in ``netns`` (None: this namespace)."""

    def __init__(self, key: ServiceKey, forwarding: Forwarding, netns: str | None = None) -> None:
        self.key = key
        self.forwarding = forwarding
        self.netns = netns
        self._ipvs: Any = None

    def _sock(self) -> Any:
        if self._ipvs is None:
            from pyroute2 import IPVS

            try:
                self._ipvs = IPVS(netns=self.netns) if self.netns else IPVS()
            except Exception as exc:  # the genl family is missing: no ip_vs in this kernel
                raise IpvsError(f"IPVS is not available: {exc}") from exc
        return self._ipvs

    def _service_obj(self, service: Service | ServiceKey) -> Any:
        from pyroute2 import IPVSService

        key = service.key if isinstance(service, Service) else service
        fields: dict[str, Any] = {
            "addr": str(key.addr),
            "port": key.port,
            "protocol": key.protocol,
        }
        if isinstance(service, Service):
            fields["sched_name"] = service.scheduler
        return IPVSService(**fields)

    def _dest_obj(self, server: RealServer, full: bool = True) -> Any:
        from pyroute2 import IPVSDest

        fields: dict[str, Any] = {"addr": str(server.addr), "port": server.port}
        if full:
            fields["fwd_method"] = FORWARDING_CODES[server.forwarding]
            fields["weight"] = server.weight
        return IPVSDest(**fields)

    # -- observe -------------------------------------------------------------------------

    def observe(self) -> Table | None:
        """vipd's service as the kernel has it now, or None; other services are skipped."""
        ipvs = self._sock()
        for msg in ipvs.service("dump"):
            attrs = _nla(msg, "IPVS_CMD_ATTR_SERVICE")
            if attrs is None or attrs.get_attr("IPVS_SVC_ATTR_FWMARK"):
                continue  # a firewall-mark service is never vipd's
            addr = attrs.get_attr("IPVS_SVC_ATTR_ADDR")
            if addr is None:
                continue
            key = ServiceKey(
                ip_address(addr),
                int(attrs.get_attr("IPVS_SVC_ATTR_PORT")),
                int(attrs.get_attr("IPVS_SVC_ATTR_PROTOCOL")),
            )
            if key != self.key:
                continue
            service = Service(key, str(attrs.get_attr("IPVS_SVC_ATTR_SCHED_NAME")))
            return Table(service, frozenset(self._observe_servers(ipvs)))
        return None

    def _observe_servers(self, ipvs: Any) -> Iterable[RealServer]:
        for msg in ipvs.dest("dump", service=self._service_obj(self.key)):
            attrs = _nla(msg, "IPVS_CMD_ATTR_DEST")
            if attrs is None:
                continue
            code = int(attrs.get_attr("IPVS_DEST_ATTR_FWD_METHOD") or 0)
            # A local real server reads back as "local" whatever was asked; tunnelling (2)
            # is never vipd's, so it reads as the method vipd does not want and is edited.
            other: Forwarding = "dr" if self.forwarding == "nat" else "nat"
            forwarding = (
                self.forwarding if code == _LOCALNODE else _FORWARDING_OF_CODE.get(code, other)
            )
            yield RealServer(
                ip_address(attrs.get_attr("IPVS_DEST_ATTR_ADDR")),
                int(attrs.get_attr("IPVS_DEST_ATTR_PORT")),
                forwarding,
                int(attrs.get_attr("IPVS_DEST_ATTR_WEIGHT")),
            )

    # -- apply ---------------------------------------------------------------------------

    def apply(self, ops: Sequence[Op]) -> None:
        ipvs = self._sock()
        for op in ops:
            if isinstance(op, AddService | EditService | DelService):
                subject = op.service.key if not isinstance(op, DelService) else op.key
            else:
                subject = op.key
            if subject != self.key:  # plan() never does this; a bug must not touch others
                raise IpvsError(f"refusing {op}: {subject} is not vipd's service {self.key}")
            try:
                if isinstance(op, AddService):
                    ipvs.service("add", service=self._service_obj(op.service))
                elif isinstance(op, EditService):
                    ipvs.service("set", service=self._service_obj(op.service))
                elif isinstance(op, DelService):
                    ipvs.service("del", service=self._service_obj(op.key))
                elif isinstance(op, AddServer):
                    ipvs.dest(
                        "add", service=self._service_obj(op.key), dest=self._dest_obj(op.server)
                    )
                elif isinstance(op, EditServer):
                    ipvs.dest(
                        "set", service=self._service_obj(op.key), dest=self._dest_obj(op.server)
                    )
                else:
                    ipvs.dest(
                        "del",
                        service=self._service_obj(op.key),
                        dest=self._dest_obj(op.server, full=False),
                    )
            except Exception as exc:
                code = getattr(exc, "code", None)
                if isinstance(op, DelService | DelServer) and code in (errno.ESRCH, errno.ENOENT):
                    continue  # already gone: the goal of a delete is reached
                if isinstance(op, AddService | AddServer) and code == errno.EEXIST:
                    continue  # someone (a racing pass) added it: the next observe sees it
                raise IpvsError(f"{describe(op)}: {exc}") from exc

    def converge(self, want: Table | None) -> list[Op]:
        """Observe, plan, apply; returns the operations applied ([] when converged)."""
        ops = plan(self.observe(), want)
        if ops:
            self.apply(ops)
        return ops

    def remove(self) -> bool:
        """Delete vipd's service if it exists (step-down, stop, crash); True if it did."""
        return bool(self.converge(None))

    def close(self) -> None:
        if self._ipvs is not None:
            try:
                self._ipvs.close()
            finally:
                self._ipvs = None


def _nla(msg: Any, name: str) -> Any:
    try:
        return msg.get_attr(name)
    except Exception:
        return None


# -- source NAT for NAT forwarding -------------------------------------------------------------


class Masquerade:
    """The nftables rule and sysctls NAT forwarding needs (module docstring), in ``netns``."""

    def __init__(self, key: ServiceKey, netns: str | None = None) -> None:
        self.key = key
        self.netns = netns
        self.family = "ip" if isinstance(key.addr, IPv4Address) else "ip6"

    def _cmd(self, argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, check=False, timeout=30
        )

    def ruleset(self) -> str:
        """The table, replaced atomically: add (so that delete can't fail), delete, define."""
        t = f"{self.family} {NFT_TABLE}"
        return (
            f"add table {t}\n"
            f"delete table {t}\n"
            f"table {t} {{\n"
            "  chain postrouting {\n"
            "    type nat hook postrouting priority srcnat; policy accept;\n"
            f"    meta l4proto tcp ct direction original ct original {self.family} daddr "
            f"{self.key.addr} ct original proto-dst {self.key.port} masquerade "
            'comment "vipd: IPVS NAT replies return through the director"\n'
            "  }\n"
            "}\n"
        )

    def present(self) -> bool:
        done = self._cmd(["nft", "list", "table", self.family, NFT_TABLE])
        return done.returncode == 0 and f"{self.key.addr}" in done.stdout

    def ensure(self) -> bool:
        """Install the rule and sysctls when missing; True if it changed anything."""
        changed = self._sysctls()
        if not self.present():
            self.install()
            changed = True
        return changed

    def install(self) -> None:
        """(Re)create the table with its rule, atomically (no sysctls)."""
        done = self._cmd(["nft", "-f", "-"], stdin=self.ruleset())
        if done.returncode != 0:
            raise IpvsError(f"nft: installing table {NFT_TABLE}: {done.stderr.strip()}")

    def remove(self) -> bool:
        """Delete the table if present; True if it was there."""
        if not self.present():
            return False
        t = f"{self.family} {NFT_TABLE}"
        done = self._cmd(["nft", "-f", "-"], stdin=f"add table {t}\ndelete table {t}\n")
        if done.returncode != 0:
            raise IpvsError(f"nft: deleting table {NFT_TABLE}: {done.stderr.strip()}")
        return True

    def _sysctls(self) -> bool:
        wanted = ["net/ipv4/vs/conntrack"]
        wanted.append(
            "net/ipv4/ip_forward" if self.family == "ip" else "net/ipv6/conf/all/forwarding"
        )
        changed = False
        for name in wanted:
            if self.netns:
                dotted = name.replace("/", ".")
                cur = self._cmd(["sysctl", "-n", dotted]).stdout.strip()
                if cur != "1":
                    done = self._cmd(["sysctl", "-q", "-w", f"{dotted}=1"])
                    if done.returncode != 0:
                        raise IpvsError(f"sysctl {dotted}=1: {done.stderr.strip()}")
                    changed = True
                continue
            path = os.path.join("/proc/sys", name)
            try:
                with open(path) as f:
                    if f.read().strip() == "1":
                        continue
                with open(path, "w") as f:
                    f.write("1\n")
                changed = True
            except OSError as exc:
                raise IpvsError(f"sysctl {name.replace('/', '.')}=1: {exc}") from exc
        return changed
