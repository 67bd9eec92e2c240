"""``python -m vipd.bfd``: run BFD sessions alone and print every change as a JSON line.

What it is: a tool for the lab and the tests (tests/netns/test_bfd.py), not part of the
agent: it runs :class:`vipd.bfd.driver.BfdSessions` for the peers named on the command line
until SIGTERM or SIGINT (then tells each peer AdminDown), and writes one JSON object per line
to stdout: ``{"event": "change", ...}`` for every state change, ``{"event": "state", ...}``
for every ``on_state`` call, each with ``t``, the loop's monotonic clock (CLOCK_MONOTONIC,
the same in every network namespace, so a test can compare it with its own).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from vipd.bfd.driver import BfdSessions
from vipd.bfd.packet import diag_label
from vipd.bfd.session import StateChange


def _emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def _run(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()

    def on_state(peer: str, up: bool, diag: int) -> None:
        _emit(event="state", t=loop.time(), peer=peer, up=up, diag=diag_label(diag))

    def on_change(peer: str, change: StateChange) -> None:
        _emit(
            event="change",
            t=loop.time(),
            peer=peer,
            old=change.old.name,
            new=change.new.name,
            diag=diag_label(change.diag),
            remote_state=change.remote_state.name,
            remote_diag=diag_label(change.remote_diag),
        )

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sessions = BfdSessions(on_state, on_change=on_change)
    try:
        for spec in args.peer:
            addr, _, rest = spec.partition(",")
            local, _, interface = rest.partition(",")
            sessions.add_peer(
                addr,
                args.tx_ms,
                args.rx_ms,
                args.mult,
                local=local or None,
                interface=interface or None,
            )
        _emit(event="ready", t=loop.time())
        await stop.wait()
    finally:
        sessions.close()
        _emit(event="closed", t=loop.time(), dropped=dict(sessions.dropped))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vipd.bfd", description=__doc__)
    parser.add_argument(
        "--peer",
        action="append",
        required=True,
        metavar="ADDR[,LOCAL[,IFNAME]]",
        help="a peer, with the source address it expects and the link (repeatable)",
    )
    parser.add_argument("--tx-ms", type=int, default=100)
    parser.add_argument("--rx-ms", type=int, default=100)
    parser.add_argument("--mult", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except (OSError, ValueError) as err:
        print(f"vipd.bfd: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
