"""Attacks benchmark: what forged VRRP adverts from a host on the segment cost vipd and
keepalived, side by side.

Run as root from the repository root::

    VIPD_KEEPALIVED_HMAC=/path/to/keepalived-2.4 \\
        .venv/bin/python bench/attacks.py [--rounds 1] [--only ATTACK ...] [--out bench/results]

What it does: per variant and attack, a fresh 3-node lab (priorities 150/100/50, n1 holds the
VIP, VRRPv3 at 0.1 s unless the attack says otherwise), then the attacker in the client
namespace (``vipd.lab.attacker``, no keys) sends the attack's adverts, and the holder
timeline (``HolderWatch``, from the nodes' address events) is read for a fixed time from the
first packet on. The attacks are those of tests/netns/test_attacks.py:

- ``owner``: one multicast advert with priority 255 (address owner), Max Adver Int 4095 cs;
- ``long-interval``: one with priority 254 and 4095 cs;
- ``owner-9s``: priority-255 adverts (100 cs) once a second for 9 s (10 adverts);
- ``ttl7-spoof``: unicast; 20 adverts to each of n1 and n2 from n3's address with TTL 7;
- ``flood``: 300 priority-1 multicast adverts at ~100/s; the holder's adverts on the wire
  while it lasts, less one per advert interval, are its ``answers``;
- ``v2-password``: VRRPv2 at 1 s with ``auth_pass``; one priority-254 advert carrying the
  password (which anyone on the segment reads off the wire).

Variants: ``vipd`` (this tree), ``keepalived-2.2.7`` (Debian's), and where
``VIPD_KEEPALIVED_HMAC`` names a keepalived >= 2.4: ``keepalived-2.4`` and, with
``auth_hmac`` (enforce, one key file) on every node, ``vipd+hmac`` and ``keepalived-2.4+hmac``
(the password attack then runs on a VRRPv2 instance with auth_hmac instead of the password:
the two do not go together). Per cell: seconds with no holder and with two or more holders
within the observed time, the holder changes, the holders at the end, and for the flood the
answers. Writes ``attacks.json`` (every round) and ``attacks.md`` (the table) into ``--out``.
No thresholds: the numbers go to docs/benchmarks.md.

What it must not do: leave a lab or a daemon behind, or judge.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from vipd.lab.attacker import attack, captured, forged, password_advert
from vipd.lab.daemons import Daemon, KeepalivedDaemon, VrrpSpec, make_daemon
from vipd.lab.responder import Responder
from vipd.lab.timeline import shared, unowned
from vipd.lab.topology import CLIENT4, VIP4, Lab, Node
from vipd.lab.watch import HolderWatch
from vipd.lab.wire import Capture
from vipd.vrrp.packet import GROUP_V4

ROOT = Path(__file__).resolve().parents[1]
PRIORITIES = (150, 100, 50)
INTERVAL = 0.1
GROUP = str(GROUP_V4)
PASSWORD = "vipd-pw"  # the lab's VRRPv2 password: anyone on the segment reads it
KEY = bytes(range(32))  # a test key: it protects nothing
HMAC_ENV = "VIPD_KEEPALIVED_HMAC"


class Keepalived24(KeepalivedDaemon):
    """keepalived >= 2.4 from ``binary`` (not Debian's), optionally with ``auth_hmac`` (key
    id 1 from ``key_file``, enforce)."""

    def __init__(
        self, lab: Lab, node: Node, spec: VrrpSpec, binary: str, key_file: str | None
    ) -> None:
        super().__init__(lab, node, spec, lab.nodes)
        self.binary = binary
        self.key_file = key_file

    def _instance(self, family: Literal[4, 6], prefix: str) -> list[str]:
        lines = super()._instance(family, prefix)
        if self.key_file is None:
            return lines
        at = lines.index("    virtual_ipaddress {")
        block = [
            "    auth_hmac {",
            f"        key 1 file:{self.key_file}",
            "        active_key 1",
            "        mode enforce",
            "    }",
        ]
        return lines[:at] + block + lines[at:]

    def _pid_args(self, run_dir: Path) -> list[str]:
        # No -b: a keepalived built without BFD refuses it.
        return super()._pid_args(run_dir)[:-2]

    def _prepare(self) -> list[str]:
        run_dir = self._run_dir()
        run_dir.mkdir(parents=True, exist_ok=False)
        conf = run_dir / "keepalived.conf"
        conf.write_text(self.config())
        env = ["env", f"TMPDIR={run_dir}"]
        pids = self._pid_args(run_dir)
        check = self.lab.exec(
            self.node.ns, [*env, self.binary, "-t", "-f", str(conf), *pids], check=False
        )
        if check.returncode != 0:
            raise RuntimeError(f"keepalived -t rejected {conf}: {check.stderr.strip()}")
        return [*env, self.binary, "-n", "-l", "-D", "-G", "-P", "-f", str(conf), *pids]


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    kind: Literal["vipd", "keepalived", "keepalived24"]
    hmac: bool = False

    def daemons(self, lab: Lab, spec: VrrpSpec, binary: str | None) -> list[Daemon]:
        key_file = _key_file(lab) if self.hmac else None
        if self.kind == "vipd":
            if key_file is not None:
                spec = replace(spec, auth_pass=None, auth_hmac={"keys": {1: key_file}})
            return [make_daemon("vipd", lab, n, spec) for n in lab.nodes]
        if self.kind == "keepalived":
            return [make_daemon("keepalived", lab, n, spec) for n in lab.nodes]
        assert binary is not None
        if key_file is not None:
            spec = replace(spec, auth_pass=None)
        return [Keepalived24(lab, n, spec, binary, key_file) for n in lab.nodes]


def _key_file(lab: Lab) -> str:
    path = lab.workdir / "vrrp-key-1"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"hex:{KEY.hex()}\n")
    return str(path)


Jobs = Callable[[Lab], None]


@dataclass(frozen=True, slots=True)
class Attack:
    name: str
    spec: VrrpSpec
    send: Jobs
    observe: float  # seconds of timeline read from the first packet on
    flood: bool = False


def _multicast(jobs: list[str], gap: float) -> Jobs:
    def send(lab: Lab) -> None:
        attack(lab, "multicast", CLIENT4, 255, [(GROUP, m) for m in jobs], gap=gap)

    return send


def _spoof_ttl7(lab: Lab) -> None:
    n1, n2, n3 = lab.nodes
    jobs = [(n.ipv4, forged(254, 10, n3.ipv4, n.ipv4, VIP4)) for n in (n1, n2)] * 20
    attack(lab, "spoof", n3.ipv4, 7, jobs, gap=INTERVAL / 2)


V3 = VrrpSpec(vip=VIP4, advert_interval=INTERVAL)
V2 = VrrpSpec(vip=VIP4, advert_interval=1.0, version=2, auth_pass=PASSWORD)

ATTACKS = [
    Attack("owner", V3, _multicast([forged(255, 4095, CLIENT4, GROUP, VIP4)], 0.0), 10.0),
    Attack("long-interval", V3, _multicast([forged(254, 4095, CLIENT4, GROUP, VIP4)], 0.0), 10.0),
    Attack("owner-9s", V3, _multicast([forged(255, 100, CLIENT4, GROUP, VIP4)] * 10, 1.0), 12.0),
    Attack("ttl7-spoof", replace(V3, unicast=True), _spoof_ttl7, 4.0),
    Attack("flood", V3, _multicast([forged(1, 10, CLIENT4, GROUP, VIP4)] * 300, 0.01), 5.0, True),
    Attack(
        "v2-password",
        V2,
        _multicast([password_advert(254, 100, CLIENT4, GROUP, VIP4, PASSWORD)], 0.0),
        10.0,
    ),
]


def _until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def run_cell(variant: Variant, atk: Attack, binary: str | None) -> dict[str, Any]:
    """One fresh lab, one variant, one attack."""
    spec = atk.spec
    with Lab(nodes=3) as lab:
        daemons = variant.daemons(lab, spec, binary)
        for n in lab.nodes:
            Responder(lab, n).start()
        for d, prio in zip(daemons, PRIORITIES, strict=True):
            d.start(prio)
        try:
            up = spec.master_down_interval(PRIORITIES[0]) + 15.0
            if not _until(lambda: lab.holders(spec.vip) == ["n1"], up):
                logs = "\n".join(d.log_tail(10) for d in daemons)
                raise RuntimeError(
                    f"{variant.name}: no single holder: {lab.holders(spec.vip)}\n{logs}"
                )
            time.sleep(max(1.0, 4 * spec.advert_interval))
            n1 = lab.node("n1")
            cap = Capture(lab, [n1]) if atk.flood else None
            if cap is not None:
                cap.start()
            try:
                with HolderWatch(lab, spec.vip) as watch:
                    time.sleep(0.5)
                    wall0 = time.time()
                    t0 = time.monotonic()
                    atk.send(lab)
                    wall1 = time.time()
                    left = t0 + atk.observe - time.monotonic()
                    time.sleep(max(0.0, left))
                    end = time.monotonic()
                    tl = watch.timeline()
            finally:
                if cap is not None:
                    cap.stop()
            holders_end = lab.holders(spec.vip)
            ours = [] if cap is None else [a for a in captured(cap.paths["n1"]) if a.src == n1.ipv4]
        finally:
            for d in daemons:
                d.stop()
    row: dict[str, Any] = {
        "variant": variant.name,
        "attack": atk.name,
        "observed_s": round(end - t0, 3),
        "sent_s": round(wall1 - wall0, 3),
        "unheld_s": round(sum(b - a for a, b in unowned(tl, t0, end)), 3),
        "two_holders_s": round(sum(b - a for a, b in shared(tl, t0, end)), 3),
        "changes": len(tl.changes_between(t0, end)),
        # (seconds from the first packet, node, "+" bound / "-" removed)
        "change_log": [
            (round(c.t - t0, 4), c.node, "+" if c.held else "-")
            for c in tl.changes_between(t0, end)
        ],
        "holders_end": holders_end,
    }
    if atk.flood:
        during = [a for a in ours if wall0 <= a.ts <= wall1]
        row["holder_adverts_during_flood"] = len(during)
        row["answers"] = len(during) - round((wall1 - wall0) / spec.advert_interval)
    return row


def _cell_text(rows: list[dict[str, Any]]) -> str:
    unheld = max(r["unheld_s"] for r in rows)
    two = max(r["two_holders_s"] for r in rows)
    text = f"{unheld:.2f} / {two:.2f}"
    if any(not r["holders_end"] for r in rows):
        text += " (unheld at end)"
    if "answers" in rows[0]:
        text += f", {max(r['answers'] for r in rows)} answers"
    return text


def table(rows: list[dict[str, Any]], variants: list[str], attacks: list[str]) -> str:
    lines = [
        "| attack | " + " | ".join(variants) + " |",
        "|---|" + "---|" * len(variants),
    ]
    for a in attacks:
        cells = []
        for v in variants:
            mine = [r for r in rows if r["variant"] == v and r["attack"] == a]
            cells.append(_cell_text(mine) if mine else "—")
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--only", nargs="*", choices=[a.name for a in ATTACKS], help="these attacks")
    p.add_argument("--variants", nargs="*", help="only these variants (by name)")
    p.add_argument("--name", default="attacks", help="the results' file name")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    binary = os.environ.get(HMAC_ENV) or None
    if binary is not None and not os.access(binary, os.X_OK):
        raise SystemExit(f"{HMAC_ENV}={binary} is not an executable")
    variants = [Variant("vipd", "vipd"), Variant("keepalived-2.2.7", "keepalived")]
    if binary is not None:
        variants += [
            Variant("keepalived-2.4", "keepalived24"),
            Variant("vipd+hmac", "vipd", hmac=True),
            Variant("keepalived-2.4+hmac", "keepalived24", hmac=True),
        ]
    else:
        print(f"{HMAC_ENV} unset: without keepalived 2.4 and auth_hmac", file=sys.stderr)
    if args.variants:
        variants = [v for v in variants if v.name in args.variants]
    attacks = [a for a in ATTACKS if not args.only or a.name in args.only]
    load = os.getloadavg()
    rows: list[dict[str, Any]] = []
    for i in range(args.rounds):
        for atk in attacks:
            for v in variants:
                row = run_cell(v, atk, binary)
                row["round"] = i + 1
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    versions = {"keepalived-2.2.7": _version("keepalived")}
    if binary is not None:
        versions["keepalived-2.4"] = _version(binary)
    doc = {
        "command": sys.argv,
        "head": head,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_at_start": load,
        "load_at_end": os.getloadavg(),
        "versions": versions,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = (
        "Forged adverts from a host on the segment: seconds without a holder / with two or "
        f"more holders, worst of {args.rounds} round(s), from the first packet on "
        f"(HEAD {head[:10]}; {'; '.join(versions.values())}).\n\n"
        + table(rows, [v.name for v in variants], [a.name for a in attacks])
    )
    (args.out / f"{args.name}.md").write_text(md)
    print(md)
    return 0


def _version(binary: str) -> str:
    out = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False)
    return (out.stdout + out.stderr).strip().splitlines()[0]


if __name__ == "__main__":
    sys.exit(main())
