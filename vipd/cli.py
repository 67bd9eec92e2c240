"""The ``vipd`` command line: run, check, lab, version.

What it is: argument parsing and exit codes. Configuration errors are one line on stderr,
naming the key and the rule, with exit code 2, before anything on the host is touched.

What it must not do: hold logic of its own beyond choosing what to run.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from vipd import __version__

if TYPE_CHECKING:
    from vipd.config import Config
    from vipd.preflight import Preflight

EXIT_CONFIG = 2


def _load(path: str) -> tuple[Config, Preflight]:
    """Config + preflight, or a one-line error and exit 2."""
    from vipd import config, preflight

    try:
        cfg = config.load(path, env=os.environ, hostname=socket.gethostname())
        pre = preflight.check_host(cfg, preflight.read_host())
    except config.ConfigError as exc:
        print(f"vipd: config error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None
    return cfg, pre


def cmd_run(args: argparse.Namespace) -> int:
    from vipd import daemon
    from vipd import log as vlog

    cfg, pre = _load(args.config)
    logger = vlog.setup(cfg.log.format, cfg.log.level)
    for finding in pre.findings:
        logger.info("preflight", extra={"fields": {"finding": finding}})
    return daemon.run(cfg, pre)


def cmd_check(args: argparse.Namespace) -> int:
    cfg, pre = _load(args.config)
    v = cfg.election.vrrp
    peers = pre.unicast_peers
    mode = f"unicast to {', '.join(map(str, peers))}" if peers else "multicast"
    print(f"config {args.config}: valid")
    print(f"  node {cfg.node}, VIP {cfg.vip} on {pre.link.name} (source {pre.source})")
    print(
        f"  VRRPv{v.version} VRID {v.vrid} priority {v.priority} advert {v.advert_interval}s "
        f"{mode}, preempt {'on' if v.preempt else 'off'}"
    )
    for finding in pre.findings:
        print(f"  preflight: {finding}")
    return 0


def cmd_version(_args: argparse.Namespace) -> int:
    print(f"vipd {__version__}")
    return 0


def cmd_lab(args: argparse.Namespace) -> int:
    from vipd.lab import runner

    return runner.run(args)


def build_parser(lab_arguments: bool = True) -> argparse.ArgumentParser:
    """The parser; ``lab_arguments=False`` leaves out the lab's options, whose module pulls in
    the whole lab (on top of what the daemon loads anyway: ~2.3 MiB of RSS and tens of ms at
    start), so that ``vipd run`` does not pay for them."""
    parser = argparse.ArgumentParser(
        prog="vipd", description="Virtual-IP agent for Kubernetes control planes."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p_run = sub.add_parser("run", help="run the agent")
    p_run.add_argument("--config", "-c", required=True, help="YAML config file")
    p_run.set_defaults(func=cmd_run)

    p_check = sub.add_parser("check", help="validate the config and run the preflight checks")
    p_check.add_argument("--config", "-c", required=True, help="YAML config file")
    p_check.set_defaults(func=cmd_check)

    p_lab = sub.add_parser(
        "lab", help="run vipd on network-namespace nodes, inject faults, measure the outage"
    )
    if lab_arguments:
        from vipd.lab import runner

        runner.add_arguments(p_lab)
    p_lab.set_defaults(func=cmd_lab)

    p_version = sub.add_parser("version", help="print the version")
    p_version.set_defaults(func=cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(lab_arguments=words[:1] == ["lab"]).parse_args(words)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
