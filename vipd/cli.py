"""The ``vipd`` command line: run, check, status, lab, version.

What it is: argument parsing, what each command prints, and exit codes. Configuration errors
are one line on stderr, naming the key and the rule, with exit code 2, before anything on the
host is touched. The start-up checks themselves (the config, preflight, the probe for the
VIP, the access review) are ``vipd.startup``'s.

What it must not do: hold logic of its own beyond choosing what to run.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from vipd import __version__, startup
from vipd import log as vlog
from vipd.startup import EXIT_CONFIG as EXIT_CONFIG  # re-exported: the tests, the docs
from vipd.startup import STDIN

EXIT_LAB_MISSING = 2  # vipd lab where only the agent is installed (a wheel, the image)
EXIT_LISTEN = 3  # metrics.listen is taken (another vipd on this node?): vipd.endpoint.server


def cmd_run(args: argparse.Namespace) -> int:
    from vipd.host.faultsig import block_fault_signals

    # Before any thread exists (the probe, pyroute2, the endpoint): every later thread
    # inherits the mask.
    block_fault_signals()
    cfg, pre = startup.load(args.config)
    from vipd.endpoint import server

    # The endpoint's port is bound before anything else happens: it is the per-node lock that
    # keeps a second vipd out of the election (`vipd adopt` relies on it).
    try:
        endpoint = server.Endpoint.bind(cfg.metrics.listen, cfg.metrics)
    except server.ListenError as exc:
        print(f"vipd: {exc}", file=sys.stderr)
        return EXIT_LISTEN
    logger = vlog.setup(cfg.log.format, cfg.log.level)
    for finding in pre.findings:
        vlog.event(logger, logging.INFO, "preflight", finding=finding)
    first = startup.Background(startup.first_probe, cfg, pre)
    # The agent's imports (asyncio, the loop, the backend: most of a start's CPU) run while
    # the probe's thread waits for answers; they touch nothing on the host.
    from vipd import daemon

    conflict = startup.wait_out_conflict(cfg, pre, logger, first.result)
    if conflict is not None:
        vlog.event(logger, logging.INFO, "preflight", finding=conflict)
    vlog.event(
        logger,
        logging.INFO,
        "endpoint listening",
        listen=cfg.metrics.listen,
        paths="/metrics /healthz /readyz",
    )
    return daemon.run(cfg, pre, endpoint, startup.reloader(args.config))


def _check_offline(path: str | None) -> int:
    """The config file alone: parsed and validated, nothing on the host, the wire or the API
    server looked at (no interface, no probe, no credentials), so it runs anywhere the file
    is, e.g. in CI or on a build host. Every error is printed, not only the first."""
    from vipd import config

    name = path or "$VIPD_CONFIG"
    try:
        data = startup.read_data(path)
    except config.ConfigError as exc:
        print(f"vipd: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    found = config.errors(data, env=os.environ, hostname=socket.gethostname())
    if found:
        for err in found:
            print(f"vipd: config error: {err}", file=sys.stderr)
        print(f"config {name}: {len(found)} error(s)", file=sys.stderr)
        return EXIT_CONFIG
    cfg = config.parse(data, env=os.environ, hostname=socket.gethostname())
    print(f"config {name}: valid (offline: host, wire and API not checked)")
    vips = ", ".join(map(str, cfg.vips))
    how = f"election {cfg.election.mode}"
    if cfg.announce.ecmp:
        how = f"announce {cfg.announce.mode} (ECMP pool: no election)"
    elif cfg.announce.routed:
        how = f"announce {cfg.announce.mode}, pool leader: the {cfg.election.mode} holder announces"
    print(f"  VIP {vips}, {how}, endpoint {cfg.metrics.listen}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    if args.offline:
        return _check_offline(args.config)
    cfg, pre = startup.load(args.config)
    conflict = startup.check_conflict(cfg, pre)
    print(f"config {args.config or '$VIPD_CONFIG'}: valid")
    vips = ", ".join(map(str, cfg.vips))
    sources = ", ".join(map(str, pre.sources or (pre.source,)))
    print(f"  node {cfg.node}, VIP {vips} on {pre.link.name} (source {sources})")
    print(f"  endpoint {cfg.metrics.listen}: /metrics /healthz /readyz /status")
    if cfg.announce.routed:
        a, h = cfg.announce, cfg.health
        health = "no health checks"
        if h is not None:
            health = (
                f"health {h.path} on {h.local} port {h.port}, peers "
                f"{', '.join(map(str, h.peers)) or 'none (a lone node announces at once)'}"
            )
        who = "every node whose API server is healthy" if a.ecmp else "the elected holder"
        table = "" if a.speaker else f"table {a.table} protocol {a.protocol} "  # bgp: none
        print(
            f"  {a.mode} mode: {table}drain {a.drain:g}s pool {a.pool} ({who} announces); {health}"
        )
        if a.speaker:
            b = a.bgp
            routers = ", ".join(
                f"{p.address} AS{p.asn}" + (" md5" if p.password_file else "") for p in b.peers
            )
            print(
                f"  bgp mode: AS{b.local_asn} router-id {b.router_id or 'the node address'} "
                f"hold {b.hold_time}s; routers {routers} (password files checked)"
            )
        if a.ecmp:
            for finding in pre.findings:
                print(f"  preflight: {finding}")
            return 0
    if cfg.election.mode == "lease":
        lease = cfg.election.lease
        assert lease is not None
        print(
            f"  Lease {lease.namespace}/{lease.name} duration {lease.duration}s renew deadline "
            f"{lease.renew_deadline:g}s retry {lease.retry_period:g}s via "
            f"{lease.api_server or 'the kubeconfig server'} "
            f"({lease.kubeconfig or 'admin.conf, else in-cluster'})"
        )
        for finding in pre.findings:
            print(f"  preflight: {finding}")
        startup.check_access(cfg)
        return 0
    v = cfg.election.vrrp
    peers = pre.unicast_peers
    mode = f"unicast to {', '.join(map(str, peers))}" if peers else "multicast"
    print(
        f"  VRRPv{v.version} VRID {v.vrid} priority {v.priority} advert {v.advert_interval}s "
        f"{mode}, preempt {'on' if v.preempt else 'off'}"
    )
    if cfg.health is not None:
        from vipd import track

        h = cfg.health
        print(
            f"  health: {h.path} on {h.local} port {h.port} every {h.interval:g}s "
            f"(timeout {h.timeout:g}s, rise {h.rise}, fall {h.fall}), "
            f"TLS {'verified against ' + h.ca_file if h.ca_file else 'not verified'}; "
            f"while unhealthy priority {track.effective_priority(v.priority, h.weight, False)}"
        )
    for finding in pre.findings:
        print(f"  preflight: {finding}")
    if conflict is not None:
        print(f"  preflight: {conflict}")
    startup.check_access(cfg)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    import json

    from vipd.endpoint import status

    url = args.url
    if url is None and args.config is not None:
        from vipd import config

        try:
            cfg = startup.read_config(args.config)
        except config.ConfigError as exc:
            print(f"vipd: config error: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        url = status.url_for_listen(cfg.metrics.listen)
    try:
        doc = status.fetch(url or status.DEFAULT_URL, timeout=args.timeout)
    except status.StatusError as exc:
        print(f"vipd status: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.json else status.render(doc))
    return 0


def cmd_version(_args: argparse.Namespace) -> int:
    print(f"vipd {__version__}")
    return 0


def cmd_lab(argv: Sequence[str]) -> int:
    """``vipd lab ARGS``: ``python -m vipd.lab ARGS`` in this process's place.

    A process boundary rather than an import: nothing the daemon runs imports the lab, and an
    installation without it (the wheel, the container image) says so and exits 2 instead of
    failing on an import."""
    import importlib.util

    if importlib.util.find_spec("vipd.lab") is None:
        print(
            "vipd lab: the lab is not installed here: the lab runs from a clone of the vipd "
            "repository (scripts/setup, then .venv/bin/vipd lab); the wheel and the container "
            "image carry only the agent",
            file=sys.stderr,
        )
        return EXIT_LAB_MISSING
    os.execv(sys.executable, [sys.executable, "-m", "vipd.lab", *argv])


def cmd_manifest(args: argparse.Namespace) -> int:
    from vipd import config
    from vipd.deploy import manifest

    source = "stdin" if args.config == STDIN else os.path.basename(args.config)
    try:
        opts = manifest.Options(
            image=args.image,
            namespace=args.namespace,
            static_manifest=args.static_manifest,
            adopt_timeout=args.adopt_timeout,
            super_admin=args.super_admin,
            node_label=args.node_label,
            name=args.name,
        )
        plan = manifest.plan(startup.read_data(args.config))
        text = manifest.render(args.kind, plan, opts, source=source)
    except (config.ConfigError, manifest.ManifestError) as exc:
        print(f"vipd: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if plan.dropped_node is not None:
        print(
            f"vipd manifest: node ({plan.dropped_node!r}) left out: every pod uses the name of "
            "its node (NODE_NAME)",
            file=sys.stderr,
        )
    if opts.image == manifest.DEFAULT_IMAGE:
        print(
            f"vipd manifest: image {opts.image} is the local default, which only a node that "
            "built or loaded it has: pass --image REGISTRY/vipd:TAG (docs/install-image.md)",
            file=sys.stderr,
        )
    sys.stdout.write(text)
    return 0


def cmd_adopt(args: argparse.Namespace) -> int:
    from vipd.deploy import adopt

    return adopt.adopt(args.manifest, args.listen, args.timeout, args.interval)


def _help_width() -> int:
    """The terminal's width for --help, found as ``shutil.get_terminal_size`` finds it
    ($COLUMNS, then the terminal of stdout, else 80), without importing shutil: argparse
    makes a formatter for every add_argument, and shutil brings zlib, bz2 and lzma (0.5 MiB
    of a daemon's RSS) to a ``vipd run`` that never prints help."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns if columns > 0 else 80) - 2


class _HelpFormatter(argparse.HelpFormatter):
    def __init__(
        self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
        width: int | None = None,
    ) -> None:  # fmt: skip
        super().__init__(
            prog, indent_increment, max_help_position, _help_width() if width is None else width
        )


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help formatter does not import shutil (`_help_width`); the
    subcommands' parsers are of the same class (argparse makes them with ``type(parent)``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def cmd_import(args: argparse.Namespace) -> int:
    from vipd.importers import command

    return command.run(args.source, args.file, args.instance)


def build_parser(
    lab_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.ArgumentParser:
    """The parser. ``vipd lab`` is only named here: its options are the lab's own
    (``python -m vipd.lab --help``) and `main` hands its arguments over unparsed. A caller
    that has the lab (the docs tests) passes ``vipd.lab.runner.add_arguments`` as
    ``lab_arguments`` to see them in this parser."""
    parser = _Parser(prog="vipd", description="Virtual-IP agent for Kubernetes control planes.")
    parser.add_argument("--version", action="version", version=f"vipd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p_run = sub.add_parser("run", help="run the agent")
    p_run.add_argument(
        "--config", "-c", help="YAML config file, - for stdin (default: the YAML in $VIPD_CONFIG)"
    )
    p_run.set_defaults(func=cmd_run)

    p_check = sub.add_parser("check", help="validate the config and run the preflight checks")
    p_check.add_argument(
        "--config", "-c", help="YAML config file, - for stdin (default: the YAML in $VIPD_CONFIG)"
    )
    p_check.add_argument(
        "--offline",
        action="store_true",
        help="validate the file alone, printing every error: no interface, wire or API checks",
    )
    p_check.set_defaults(func=cmd_check)

    p_status = sub.add_parser("status", help="show what a running vipd on this node is doing")
    p_status.add_argument(
        "--url", help="the vipd endpoint (default: from --config, else http://127.0.0.1:2112)"
    )
    p_status.add_argument(
        "--config", "-c", help="YAML config file (- for stdin), for metrics.listen"
    )
    p_status.add_argument("--json", action="store_true", help="print the raw JSON document")
    p_status.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    p_status.set_defaults(func=cmd_status)

    p_lab = sub.add_parser(
        "lab",
        help="run vipd on network-namespace nodes, inject faults, measure the outage "
        "(options: vipd lab --help)",
    )
    if lab_arguments:
        lab_arguments(p_lab)

    from vipd.deploy import manifest as m  # constants only: no I/O, cheap

    p_man = sub.add_parser(
        "manifest",
        help="print the static pod, DaemonSet or RBAC manifest for a config",
        description="Render Kubernetes manifests from one vipd config, so the static pod and "
        "the DaemonSet cannot drift apart.",
    )
    p_man.add_argument("kind", choices=m.KINDS)
    p_man.add_argument("--config", "-c", required=True, help="YAML config file, - for stdin")
    p_man.add_argument(
        "--image",
        default=m.DEFAULT_IMAGE,
        help="vipd image, as the nodes pull it (default %(default)s, which only a node that "
        "built it has: a warning says so)",
    )
    p_man.add_argument(
        "--namespace", default=m.DEFAULT_NAMESPACE, help="pods' namespace (%(default)s)"
    )
    p_man.add_argument(
        "--name",
        default=m.NAME,
        help="the name of every object (pods, DaemonSet, ServiceAccount, RBAC) and their "
        "app.kubernetes.io/instance label: a second vipd on the same nodes needs its own "
        "(%(default)s)",
    )
    p_man.add_argument(
        "--static-manifest",
        default=None,
        help="the static pod's file on each node, which adopt removes (default: "
        f"{m.MANIFESTS_DIR}/NAME.yaml, {m.DEFAULT_STATIC_MANIFEST} with the default name)",
    )
    p_man.add_argument(
        "--adopt-timeout",
        type=float,
        default=m.DEFAULT_ADOPT_TIMEOUT,
        help="seconds adopt waits for the static vipd (%(default)s)",
    )
    p_man.add_argument(
        "--super-admin",
        action="store_true",
        help="Lease mode, static pod on the `kubeadm init` node of Kubernetes >= 1.29: mount "
        "super-admin.conf (switch back to admin.conf after init)",
    )
    p_man.add_argument(
        "--node-label",
        metavar="KEY",
        help="DaemonSet: run only on control-plane nodes that also have this label, so the "
        "first apply hands over one node at a time as you label them (leader last)",
    )
    p_man.set_defaults(func=cmd_manifest)

    p_adopt = sub.add_parser(
        "adopt",
        help="remove the static pod's manifest and wait until it released the metrics port",
    )
    p_adopt.add_argument(
        "--manifest", default=m.DEFAULT_STATIC_MANIFEST, help="static manifest (%(default)s)"
    )
    p_adopt.add_argument(
        "--listen",
        default=m.DEFAULT_METRICS_LISTEN,
        help="vipd's metrics.listen, the per-node lock (%(default)s)",
    )
    p_adopt.add_argument(
        "--timeout", type=float, default=m.DEFAULT_ADOPT_TIMEOUT, help="seconds (%(default)s)"
    )
    p_adopt.add_argument(
        "--interval", type=float, default=0.25, help="seconds between checks (%(default)s)"
    )
    p_adopt.set_defaults(func=cmd_adopt)

    p_import = sub.add_parser(
        "import", help="print a vipd config converted from keepalived's or kube-vip's"
    )
    p_import.add_argument("source", choices=("keepalived", "kube-vip"))
    p_import.add_argument("file", help="keepalived.conf, or kube-vip's manifest (- for stdin)")
    p_import.add_argument(
        "--instance", action="append", default=[], help="keepalived: import this vrrp_instance"
    )
    p_import.set_defaults(func=cmd_import)

    p_version = sub.add_parser("version", help="print the version")
    p_version.set_defaults(func=cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["lab"]:
        return cmd_lab(words[1:])
    args = build_parser().parse_args(words)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
