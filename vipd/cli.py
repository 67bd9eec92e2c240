"""The ``vipd`` command line: run, check, status, lab, version.

What it is: argument parsing and exit codes. Configuration errors are one line on stderr,
naming the key and the rule, with exit code 2, before anything on the host is touched.

What it must not do: hold logic of its own beyond choosing what to run.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from vipd import __version__
from vipd import log as vlog

if TYPE_CHECKING:
    from vipd.config import Config
    from vipd.host.conflict import Conflict
    from vipd.preflight import Preflight

EXIT_CONFIG = 2
EXIT_LISTEN = 3  # metrics.listen is taken (another vipd on this node?): vipd.endpoint.server
CONFLICT_RETRY = 1.0  # s between probes while a foreign host holds the VIP (vipd run)


STDIN = "-"  # --config -: the YAML text from standard input


def _read_text(path: str | None) -> tuple[str, str]:
    """The YAML text and the name errors call it by: ``path``, standard input for ``-``, or
    without ``--config`` the text in ``$VIPD_CONFIG`` (how the rendered manifests carry one
    config to the static pod and the DaemonSet alike). Raises `config.ConfigError`."""
    from vipd import config

    if path is None:
        text = os.environ.get("VIPD_CONFIG", "")
        if not text.strip():
            raise config.ConfigError(
                "", "no config: pass --config FILE (- for stdin), or the YAML in $VIPD_CONFIG"
            )
        return text, "$VIPD_CONFIG"
    if path == STDIN:
        return sys.stdin.read(), "<stdin>"
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise config.ConfigError("", f"cannot read the config file: {reason}", file=path) from None


def _read_data(path: str | None) -> object:
    from vipd import config

    text, name = _read_text(path)
    return config.read_text(text, name)


def _read_config(path: str | None) -> Config:
    """The validated config from ``path`` (see `_read_text`). Raises `config.ConfigError`."""
    from vipd import config

    return config.parse(_read_data(path), env=os.environ, hostname=socket.gethostname())


def _load(path: str | None) -> tuple[Config, Preflight]:
    """Config (`_read_config`) + preflight, or a one-line error and exit 2."""
    from vipd import config, preflight

    try:
        cfg = _read_config(path)
        pre = preflight.check_host(cfg, preflight.read_host())
        _check_ca_file(cfg)
        _check_lease(cfg)
        from vipd.endpoint.server import check_security

        check_security(cfg.metrics)  # TLS files load, auth: token's credentials are found
    except config.ConfigError as exc:
        print(f"vipd: config error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None
    return cfg, pre


def _reloader(path: str | None) -> Callable[[], Config] | None:
    """What SIGHUP reads: the same file (or ``$VIPD_CONFIG``) with the start-up checks that
    need no host (the CA file); None when the config came from stdin, which is read once."""
    if path == STDIN:
        return None

    def load() -> Config:
        cfg = _read_config(path)
        _check_ca_file(cfg)
        return cfg

    return load


def _check_ca_file(cfg: Config) -> None:
    """health.ca_file must load as CA certificates (checked at start, like the interface)."""
    if cfg.health is None or cfg.health.ca_file is None:
        return
    from vipd import config
    from vipd.health.checker import make_ssl_context

    try:
        make_ssl_context(cfg.health.ca_file)
    except ValueError as exc:
        raise config.ConfigError("health.ca_file", str(exc)) from None


def _check_lease(cfg: Config) -> None:
    """Lease mode: the credentials must be found and load (checked at start)."""
    if cfg.election.mode == "lease" and cfg.election.lease is not None:
        from vipd import kube

        kube.check(kube.Access.from_lease(cfg.election.lease))


def cmd_run(args: argparse.Namespace) -> int:
    from vipd.host.faultsig import block_fault_signals

    # Before any thread exists (the probe, pyroute2, the endpoint): every later thread
    # inherits the mask.
    block_fault_signals()
    cfg, pre = _load(args.config)
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
    first = _Background(_first_probe, cfg, pre)
    # The agent's imports (asyncio, the loop, the backend: most of a start's CPU) run while
    # the probe's thread waits for answers; they touch nothing on the host.
    from vipd import agent

    conflict = _wait_out_conflict(cfg, pre, logger, first.result)
    if conflict is not None:
        vlog.event(logger, logging.INFO, "preflight", finding=conflict)
    vlog.event(
        logger,
        logging.INFO,
        "endpoint listening",
        listen=cfg.metrics.listen,
        paths="/metrics /healthz /readyz",
    )
    return agent.run(cfg, pre, endpoint, _reloader(args.config))


class _Background:
    """``fn(*args)`` in a thread of its own from now; `result` joins it (and re-raises)."""

    def __init__(self, fn: Callable[..., object], *args: object) -> None:
        self._value: object = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = fn(*args)
            except BaseException as exc:  # handed to the caller, who decides
                self._error = exc

        self._thread = threading.Thread(target=run, name="vipd-probe", daemon=True)
        self._thread.start()

    def result(self) -> object:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _first_probe(cfg: Config, pre: Preflight) -> Conflict | None:
    """The start-up probe (VRRP mode), see `_wait_out_conflict`."""
    if cfg.election.mode != "vrrp":
        return None
    from vipd.host import arpwatch

    return arpwatch.check(cfg, pre)


def _wait_out_conflict(
    cfg: Config,
    pre: Preflight,
    logger: logging.Logger,
    first: Callable[[], object] | None = None,
) -> str | None:
    """``vipd run``: while a foreign host answers for the VIP, stay out of the election and
    probe again every ``CONFLICT_RETRY`` s; join once it is gone. Exiting instead would turn
    a transient holder (another node's crash leftover, removed when its vipd restarts) into
    a node that never joins under systemd, which does not restart after exit 2. ``first``:
    the first probe's result, when it already runs in the background (`_Background`)."""
    from vipd.host import arpwatch
    from vipd.host.conflict import Conflict

    if cfg.election.mode != "vrrp":
        return None
    refused = 0
    while True:
        early = first() if first is not None and refused == 0 else None
        found = early if isinstance(early, Conflict) else arpwatch.check(cfg, pre)
        if not found.foreign:
            break
        refused += 1
        if vlog.sparse(refused, 30):
            vlog.event(
                logger,
                logging.WARNING,
                "VIP held by another host",
                problem=found.describe(),
                macs=",".join(found.macs),
                probes=refused,
                retry_s=CONFLICT_RETRY,
            )
        time.sleep(CONFLICT_RETRY)
    if refused:
        vlog.event(logger, logging.INFO, "VIP no longer held by another host: joining")
    return _describe_probe(cfg, pre, found)


def _describe_probe(cfg: Config, pre: Preflight, found: Conflict) -> str:
    if found.macs:
        return (
            f"VIP {found.vip} answered by {', '.join(found.macs)}: held by the VRRP router "
            f"{', '.join(found.vrrp_heard)} advertising VRID {cfg.election.vrrp.vrid}"
        )
    vips = ", ".join(map(str, cfg.vips))
    return f"no other host answered a probe for VIP {vips} on {pre.link.name}"


def _check_conflict(cfg: Config, pre: Preflight) -> str | None:
    """RFC 5227 / DAD probe for the VIP before claiming it (vipd.host.arpwatch); exit 2 when a
    foreign host answers for it. Returns a finding to report, or None."""
    if cfg.election.mode != "vrrp":
        return None
    from vipd.host import arpwatch

    found = arpwatch.check(cfg, pre)
    if found.foreign:
        print(f"vipd: config error: vip: {found.describe()}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG)
    return _describe_probe(cfg, pre, found)


def _check_offline(path: str | None) -> int:
    """The config file alone: parsed and validated, nothing on the host, the wire or the API
    server looked at (no interface, no probe, no credentials), so it runs anywhere the file
    is, e.g. in CI or on a build host. Every error is printed, not only the first."""
    from vipd import config

    name = path or "$VIPD_CONFIG"
    try:
        data = _read_data(path)
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
    print(f"  VIP {vips}, election {cfg.election.mode}, endpoint {cfg.metrics.listen}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    if args.offline:
        return _check_offline(args.config)
    cfg, pre = _load(args.config)
    conflict = _check_conflict(cfg, pre)
    print(f"config {args.config or '$VIPD_CONFIG'}: valid")
    vips = ", ".join(map(str, cfg.vips))
    sources = ", ".join(map(str, pre.sources or (pre.source,)))
    print(f"  node {cfg.node}, VIP {vips} on {pre.link.name} (source {sources})")
    print(f"  endpoint {cfg.metrics.listen}: /metrics /healthz /readyz /status")
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
        _check_access(cfg)
        return 0
    v = cfg.election.vrrp
    peers = pre.unicast_peers
    mode = f"unicast to {', '.join(map(str, peers))}" if peers else "multicast"
    print(
        f"  VRRPv{v.version} VRID {v.vrid} priority {v.priority} advert {v.advert_interval}s "
        f"{mode}, preempt {'on' if v.preempt else 'off'}"
    )
    if cfg.health is not None:
        h = cfg.health
        print(
            f"  health: {h.path} on {h.local} port {h.port} every {h.interval:g}s "
            f"(timeout {h.timeout:g}s, rise {h.rise}, fall {h.fall}), "
            f"TLS {'verified against ' + h.ca_file if h.ca_file else 'not verified'}; "
            f"while unhealthy priority {max(1, v.priority - h.weight)}"
        )
    for finding in pre.findings:
        print(f"  preflight: {finding}")
    if conflict is not None:
        print(f"  preflight: {conflict}")
    _check_access(cfg)
    return 0


def _check_access(cfg: Config) -> None:
    """Lease mode and IPVS discovery: ask the API server (a SelfSubjectAccessReview per
    verb, with the credentials vipd would run with) whether vipd may do what it needs; exit
    2 naming what is missing. An API server that does not answer (``kubeadm init`` has not
    started it yet) is said, not an error."""
    from vipd import kube

    asks: list[tuple[kube.Access, list[kube.Need]]] = []
    if cfg.election.mode == "lease" and cfg.election.lease is not None:
        lease = cfg.election.lease
        asks.append((kube.Access.from_lease(lease), kube.lease_needs(lease)))
    if cfg.ipvs.enabled and cfg.ipvs.discovery.enabled:
        asks.append((kube.Access.from_discovery(cfg.ipvs.discovery), kube.DISCOVERY_NEEDS))
    denied: list[str] = []
    for access, needs in asks:
        got = kube.review(access, needs)
        if got.error is not None:
            print(f"  access: not checked with {got.credentials}: the API server did not answer "
                  f"({got.error})")  # fmt: skip
        elif got.missing:
            denied.append(
                f"{access.key}: {got.credentials} may not "
                + ", ".join(n.describe() for n in got.missing)
            )
        else:
            print(f"  access: {got.credentials} may " + ", ".join(n.describe() for n in needs))
    if denied:
        for line in denied:
            print(f"vipd: config error: {line} (grant it: vipd manifest rbac)", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG)


def cmd_status(args: argparse.Namespace) -> int:
    import json

    from vipd.endpoint import status

    url = args.url
    if url is None and args.config is not None:
        from vipd import config

        try:
            cfg = _read_config(args.config)
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
    installation without it (the container image) says so instead of failing on an import."""
    import importlib.util

    if importlib.util.find_spec("vipd.lab") is None:
        print(
            "vipd lab: the lab is not installed here (the container image carries only the "
            "agent): run it from a source checkout",
            file=sys.stderr,
        )
        return EXIT_CONFIG
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
        plan = manifest.plan(_read_data(args.config))
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
