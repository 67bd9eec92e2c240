"""The macvlan that carries the virtual MAC (see ``vipd.host.vmac`` for why and which settings).

What it is: the driver that creates ``vrrp.<vrid>`` on the parent at start (reusing a
matching leftover of a crashed run, replacing anything else of that name), brings it up with
the sysctls ``vipd.host.vmac`` lists, and removes it and restores the parent's sysctls at stop.
Start and stop only, never the takeover path, so pyroute2's synchronous IPRoute is fine here
(the daemon calls it in a worker thread: IPRoute runs an asyncio loop of its own).

What it must not do: bind or remove the VIP (``vipd.host.address`` does, on the macvlan's
index), or touch any link but the parent's sysctls and the macvlan of its own name.
"""

from __future__ import annotations

from vipd.host import vmac

# Plain strings, not pathlib: the driver imports this module whatever the config, and pathlib
# (with urllib.parse) would cost every daemon ~0.4-0.6 MiB of RSS for a few sysctl paths.
SYSCTL = "/proc/sys/net"


def _sysctl(*parts: str) -> str:
    return "/".join((SYSCTL, *parts))


def _read(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read()


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(value + "\n")


class VmacLink:
    """``vrrp.<vrid>`` on ``parent``: ``start()`` returns its ifindex, ``stop()`` removes it."""

    def __init__(self, parent: str, parent_index: int, vrid: int) -> None:
        self.parent = parent
        self.parent_index = parent_index
        self.name = vmac.link_name(vrid)
        self.mac = vmac.virtual_mac(vrid)
        self.index: int | None = None
        self.reused = False
        self._saved: list[tuple[str, str]] = []

    def start(self) -> int:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=self.name)
            if found:
                link = ipr.get_links(found[0])[0]
                info = link.get_attr("IFLA_LINKINFO")
                kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
                data = info.get_attr("IFLA_INFO_DATA") if info is not None else None
                mode = data.get_attr("IFLA_MACVLAN_MODE") if kind == "macvlan" and data else None
                if vmac.reusable(
                    kind, link.get_attr("IFLA_LINK"), link.get_attr("IFLA_ADDRESS"), mode,
                    self.parent_index, self.mac,
                ):  # fmt: skip
                    self.reused = True
                    # A leftover may still hold the VIP: the controller's first resync
                    # observes the macvlan and removes it on a follower.
                else:
                    ipr.link("del", index=found[0])
            if not self.reused:
                ipr.link(
                    "add",
                    ifname=self.name,
                    kind="macvlan",
                    link=self.parent_index,
                    macvlan_mode=vmac.MACVLAN_MODE,
                    address=self.mac,
                )
            self.index = int(ipr.link_lookup(ifname=self.name)[0])
            # Before the link is up, so it never sends an IPv6 frame from the virtual MAC.
            for family, key, value in vmac.LINK_SYSCTLS:
                _write(_sysctl(family, "conf", self.name, key), value)
            for key, value in vmac.PARENT_SYSCTLS:
                path = _sysctl("ipv4", "conf", self.parent, key)
                old = _read(path).strip()
                if old != value:
                    self._saved.append((path, old))
                    _write(path, value)
            ipr.link("set", index=self.index, state="up")
        return self.index

    def stop(self) -> None:
        """Remove the macvlan (and the VIP with it) and restore the parent's sysctls.

        Every step is tried; the first failure is raised after the rest were done (the
        caller logs and counts it)."""
        from pyroute2 import IPRoute

        errors: list[Exception] = []
        with IPRoute() as ipr:
            for index in ipr.link_lookup(ifname=self.name):
                try:
                    ipr.link("del", index=index)
                except Exception as exc:
                    errors.append(exc)
        for path, old in self._saved:
            try:
                _write(path, old)
            except OSError as exc:
                errors.append(exc)
        self._saved.clear()
        if errors:
            raise errors[0]
