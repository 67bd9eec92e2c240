"""keepalived >= 2.4 with ``auth_hmac`` in the lab: its configs, the recorder of the fixtures in
tests/unit/data/keepalived_auth_hmac.json, and a raw-socket sender of vipd-signed adverts.

What it is: ``SCENARIOS`` (VRRP version, family, multicast or unicast, keys and key ids, replay
rule, rollout mode), ``config`` (the keepalived.conf of one scenario on lab node n1, peer n2),
``record`` (run keepalived on n1 of a 2-node ``vipd.lab.topology.Lab`` per scenario, capture
what enters the bridge from n1 with ``vipd.lab.wire.Capture``, stop it with SIGTERM so the
priority-0 advert is captured too) and ``Sender`` (a raw VRRP socket opened in a node's
namespace that sends bytes built by ``vipd.vrrp.packet`` and ``vipd.vrrp.auth``).

keepalived 2.4 is newer than Debian's, so it is not on CI's machines: the binary is named by
the environment variable ``VIPD_KEEPALIVED_HMAC`` (a keepalived 2.4 or later with its VRRP
authentication support, github.com/acassen/keepalived). Nothing here builds or fetches it.

Recording (as root, from the repository root):

    VIPD_KEEPALIVED_HMAC=/path/to/keepalived \\
        .venv/bin/python -m tests.netns.keepalived_hmac tests/unit/data/keepalived_auth_hmac.json

What it must not do: touch anything outside the lab's namespaces and workdir, or run under CI
without the binary (the tests that use it skip, saying why).
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from vipd.lab.nsthread import in_netns
from vipd.lab.topology import Lab, Node, vip_for
from vipd.lab.wire import Capture, iter_pcap

ENV = "VIPD_KEEPALIVED_HMAC"
VRRP_PROTO = 112

# Test keys only: they protect nothing. Key 1 is the draft's appendix key (bytes 00..1f).
KEYS: dict[int, bytes] = {
    1: bytes(range(32)),
    2: bytes.fromhex("7f" * 8 + "a5" * 8 + "3c" * 8 + "e1" * 8),
    7: b"vipd-test-passphrase-thirty-two-bytes",  # an ASCII key, as keepalived allows
    255: bytes(range(0xC0, 0x100)),  # 64 bytes, the longest keepalived takes
}


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    version: Literal[2, 3]
    family: Literal[4, 6]
    unicast: bool
    keys: tuple[int, ...]
    active: int
    anti_replay: Literal["time", "monotonic"] = "time"
    window: int | None = None  # None: keepalived's default, max(3 * advert_int, 5)
    mode: Literal["enforce", "permissive", "receive-only"] = "enforce"
    advert_int: float = 1.0
    vips: int = 1
    key_from_file: bool = False  # ``key ID file:PATH`` instead of the inline ``hex:`` value
    vrid: int = 51


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("v3-ipv4-multicast-time-key1", 3, 4, False, (1,), 1, window=5),
    Scenario("v3-ipv6-multicast-time-key1", 3, 6, False, (1,), 1, window=5),
    Scenario("v3-ipv4-unicast-monotonic-key2of1,2", 3, 4, True, (1, 2), 2, "monotonic"),
    Scenario("v3-ipv6-unicast-time-key255-file", 3, 6, True, (255,), 255, key_from_file=True),
    Scenario("v2-ipv4-multicast-monotonic-key7", 2, 4, False, (7,), 7, "monotonic"),
    Scenario("v2-ipv4-unicast-time-key1-2vips", 2, 4, True, (1, 2), 1, window=10, vips=2),
    Scenario("v3-ipv4-multicast-permissive-key2", 3, 4, False, (2,), 2, mode="permissive"),
    Scenario("v3-ipv4-multicast-receive-only", 3, 4, False, (1,), 1, mode="receive-only"),
    Scenario("v3-ipv6-multicast-fast-3vips", 3, 6, False, (1,), 1, advert_int=0.2, vips=3),
)


def binary() -> str | None:
    """The keepalived >= 2.4 binary ``VIPD_KEEPALIVED_HMAC`` names, or None if unset/missing."""
    path = os.environ.get(ENV, "")
    return path if path and os.access(path, os.X_OK) else None


def version_of(path: str) -> str:
    """keepalived's first ``-v`` line, e.g. ``Keepalived v2.4.3 (08/13,2026), git commit …``."""
    out = subprocess.run([path, "-v"], capture_output=True, text=True, check=False)
    return (out.stdout + out.stderr).strip().splitlines()[0]


def vips_of(scenario: Scenario) -> list[str]:
    base = ipaddress.ip_address(vip_for(scenario.family))
    return [str(base + i) for i in range(scenario.vips)]


def key_value(key_id: int) -> str:
    return "hex:" + KEYS[key_id].hex()


def config(
    scenario: Scenario,
    me: Node,
    peer: Node,
    *,
    priority: int,
    key_dir: Path,
    state: str = "MASTER",
    key_ids: tuple[int, ...] | None = None,
    active: int | None = None,
    mode: str | None = None,
    prefix: str = "lab",
) -> str:
    """keepalived.conf for ``me`` in ``scenario``; the key files go to ``key_dir`` (0600)."""
    s = scenario
    lines = [
        "global_defs {",
        f"    router_id {prefix}-{me.name}",
        f"    vrrp_version {s.version}",
        "}",
        f"vrrp_instance VI_{s.vrid} {{",
        f"    state {state}",
        "    interface eth0",
        f"    virtual_router_id {s.vrid}",
        f"    priority {priority}",
        f"    advert_int {s.advert_int:g}",
    ]
    if s.unicast:
        lines += [
            f"    unicast_src_ip {me.addr(s.family)}",
            "    unicast_peer {",
            f"        {peer.addr(s.family)}",
            "    }",
        ]
    lines.append("    auth_hmac {")
    for key_id in key_ids or s.keys:
        if s.key_from_file:
            path = key_dir / f"key{key_id}"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(key_value(key_id) + "\n")
            lines.append(f"        key {key_id} file:{path}")
        elif all(32 <= b < 127 and b not in b' "#!' for b in KEYS[key_id]):
            lines.append(f"        key {key_id} {KEYS[key_id].decode()}")
        else:
            lines.append(f"        key {key_id} {key_value(key_id)}")
    lines.append(f"        active_key {active or s.active}")
    lines.append(f"        anti_replay {s.anti_replay}")
    if s.window is not None and s.anti_replay == "time":
        lines.append(f"        time_window {s.window}")
    lines.append(f"        mode {mode or s.mode}")
    lines.append("    }")
    lines += [
        "    virtual_ipaddress {",
        *(f"        {v}/{32 if s.family == 4 else 128}" for v in vips_of(s)),
        "    }",
        "}",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class Keepalived:
    """One keepalived process in a lab node's namespace, its log in the lab's workdir."""

    lab: Lab
    node: Node
    path: str
    conf_text: str
    name: str
    proc: subprocess.Popen[Any] | None = None
    mastered: int = 0  # where in the log it first entered MASTER (set by the caller)
    run_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.run_dir = self.lab.workdir / f"{self.node.name}-{self.name}"
        self.run_dir.mkdir(parents=True, exist_ok=True)

    @property
    def log_path(self) -> Path:
        return self.run_dir / "keepalived.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _pids(self) -> list[str]:
        d = self.run_dir
        return [
            "-p",
            str(d / "keepalived.pid"),
            "-r",
            str(d / "vrrp.pid"),
            "-c",
            str(d / "checkers.pid"),
        ]  # no -b: a keepalived built without BFD refuses it

    def start(self) -> None:
        conf = self.run_dir / "keepalived.conf"
        conf.write_text(self.conf_text)
        env = ["env", f"TMPDIR={self.run_dir}"]
        check = self.lab.exec(
            self.node.ns, [*env, self.path, "-t", "-f", str(conf), *self._pids()], check=False
        )
        if check.returncode != 0:
            raise RuntimeError(f"keepalived -t rejected {conf}: {check.stderr.strip()}")
        log = self.log_path.open("ab")
        argv = [*env, self.path, "-n", "-l", "-D", "-G", "-P", "-f", str(conf), *self._pids()]
        self.proc = self.lab.spawn(self.node.ns, argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def wait_log(self, needle: str, timeout: float, since: int = 0) -> bool:
        """True once ``needle`` is in the log past its first ``since`` characters."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.log()[since:]:
                return True
            time.sleep(0.05)
        return needle in self.log()[since:]


def ip_packets(pcap: Path) -> list[dict[str, Any]]:
    """The VRRP IP packets of a capture: timestamp, src, dst, TTL, the IP packet, its payload."""
    out: list[dict[str, Any]] = []
    for ts, frame in iter_pcap(pcap):
        ethertype = struct.unpack("!H", frame[12:14])[0]
        ip = frame[14:]
        if ethertype == 0x0800 and ip[9] == VRRP_PROTO:
            ihl, total = (ip[0] & 0x0F) * 4, struct.unpack("!H", ip[2:4])[0]
            pkt, payload = ip[:total], ip[ihl:total]
            src, dst = ipaddress.ip_address(ip[12:16]), ipaddress.ip_address(ip[16:20])
            ttl = ip[8]
        elif ethertype == 0x86DD and ip[6] == VRRP_PROTO:
            plen = struct.unpack("!H", ip[4:6])[0]
            pkt, payload = ip[: 40 + plen], ip[40 : 40 + plen]
            src, dst = ipaddress.ip_address(ip[8:24]), ipaddress.ip_address(ip[24:40])
            ttl = ip[7]
        else:
            continue
        out.append(
            {
                "captured_at": round(ts, 6),
                "src": str(src),
                "dst": str(dst),
                "ttl": ttl,
                "ip_packet": pkt.hex(),
                "payload": payload.hex(),
            }
        )
    return out


def record_one(path: str, scenario: Scenario, adverts: int = 3) -> dict[str, Any]:
    """Run keepalived on n1 in ``scenario`` until it sent ``adverts`` adverts as master, stop
    it (SIGTERM: one more, priority 0) and return the fixture record."""
    with Lab(nodes=2) as lab:
        n1, n2 = lab.node("n1"), lab.node("n2")
        capture = Capture(lab, [n1])
        capture.start()
        key_dir = lab.workdir / "keys"
        key_dir.mkdir(mode=0o700)
        text = config(scenario, n1, n2, priority=200, key_dir=key_dir, prefix=lab.prefix)
        ka = Keepalived(lab, n1, path, text, scenario.name)
        try:
            ka.start()
            if not ka.wait_log("Entering MASTER STATE", 10):
                raise RuntimeError(f"{scenario.name}: keepalived never became master:\n{ka.log()}")
            deadline = time.monotonic() + 10 + adverts * scenario.advert_int
            pcap = capture.paths[n1.name]
            while len(ip_packets(pcap)) < adverts and time.monotonic() < deadline:
                time.sleep(0.05)
            ka.stop()
            time.sleep(0.5)
        finally:
            ka.stop()
            capture.stop()
        packets = ip_packets(pcap)
        log = ka.log()
    if len(packets) < adverts + 1:
        raise RuntimeError(f"{scenario.name}: {len(packets)} adverts captured:\n{log}")
    key_dir_str = str(key_dir)
    return {
        "name": scenario.name,
        "version": scenario.version,
        "family": scenario.family,
        "unicast": scenario.unicast,
        "mode": scenario.mode,
        "anti_replay": scenario.anti_replay,
        "time_window": scenario.window,
        "advert_int": scenario.advert_int,
        "vrid": scenario.vrid,
        "vips": vips_of(scenario),
        "keys": {str(k): KEYS[k].hex() for k in scenario.keys},
        "active_key": scenario.active,
        "keepalived_conf": text.replace(key_dir_str, "/KEYDIR"),
        "adverts": packets,
    }


def record(path: str) -> dict[str, Any]:
    return {
        "keepalived": version_of(path),
        "recorded_with": "tests/netns/keepalived_hmac.py (module docstring: how)",
        "scenarios": [record_one(path, s) for s in SCENARIOS],
    }


class Sender:
    """A raw VRRP socket in ``node``'s namespace, bound to its address (IPv6 multicast: the
    link-local one, as keepalived and vipd send; unicast: the global one keepalived lists as
    its peer), hop limit 255; the kernel builds the IP header (IPv4 total length = the payload
    given) and, for IPv6, the checksum over the whole payload."""

    def __init__(self, lab: Lab, node: Node, family: Literal[4, 6], *, unicast: bool) -> None:
        self.family = family
        self.src: ipaddress.IPv4Address | ipaddress.IPv6Address
        if family == 4:
            self.src = ipaddress.IPv4Address(node.ipv4)
            self.sock = in_netns(node.ns, lambda: self._open4(str(self.src)))
        else:
            if unicast:
                self.src = ipaddress.IPv6Address(node.ipv6)
            else:
                out = lab.ip(node.ns, "-6", "-o", "addr", "show", "dev", "eth0", "scope", "link")
                self.src = ipaddress.IPv6Address(out.split()[3].split("/")[0])
            index = int(lab.ip(node.ns, "-o", "link", "show", "eth0").split(":")[0])
            self.sock = in_netns(node.ns, lambda: self._open6(str(self.src), index))

    @staticmethod
    def _open4(src: str) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, VRRP_PROTO)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(src))
        sock.bind((src, 0))
        return sock

    @staticmethod
    def _open6(src: str, index: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, VRRP_PROTO)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_CHECKSUM, 6)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, index)
        sock.bind((src, 0, 0, index))
        return sock

    def send(self, payload: bytes, dst: str) -> None:
        if self.family == 4:
            self.sock.sendto(payload, (dst, 0))
        else:
            self.sock.sendto(payload, (dst, 0, 0, self.sock.getsockname()[3]))

    def close(self) -> None:
        self.sock.close()


def main(argv: list[str]) -> int:
    path = binary()
    if path is None or len(argv) != 1:
        print(f"usage: {ENV}=/path/to/keepalived python -m tests.netns.keepalived_hmac OUT.json")
        return 2
    data = record(path)
    Path(argv[0]).write_text(json.dumps(data, indent=1) + "\n")
    print(f"{argv[0]}: {len(data['scenarios'])} scenarios from {data['keepalived']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
