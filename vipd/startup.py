"""The start-up checks of ``vipd run`` and ``vipd check``: everything between reading the
config and joining the election.

What it is
    The config read from a file, standard input or ``$VIPD_CONFIG`` (`read_config`), checked
    against the host (``vipd.preflight``), its CA file and Lease credentials loaded
    (`load`), the RFC 5227 / RFC 4862 probe for the VIP before claiming it
    (``vipd.vrrp.startprobe``: `check_conflict` for ``vipd check``, `wait_out_conflict` for
    ``vipd run``, whose first probe runs in the background while the agent's modules load),
    and ``vipd check``'s access review (`check_access`: a SelfSubjectAccessReview per verb).
    Configuration errors are one line on stderr naming the key, and exit code 2
    (`EXIT_CONFIG`), before anything on the host is touched.

What it must not do: change anything on the host, or join the election (``vipd.agent``
does). Its modules are imported where they are needed, so that ``vipd version`` or ``vipd
manifest`` load none of them.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from vipd import log as vlog

if TYPE_CHECKING:
    from vipd.config import Config
    from vipd.host.conflict import Conflict
    from vipd.preflight import Preflight

EXIT_CONFIG = 2
CONFLICT_RETRY = 1.0  # s between probes while a foreign host holds the VIP (vipd run)

STDIN = "-"  # --config -: the YAML text from standard input


def read_text(path: str | None) -> tuple[str, str]:
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


def read_data(path: str | None) -> object:
    from vipd import config

    text, name = read_text(path)
    return config.read_text(text, name)


def read_config(path: str | None) -> Config:
    """The validated config from ``path`` (see `read_text`). Raises `config.ConfigError`."""
    from vipd import config

    return config.parse(read_data(path), env=os.environ, hostname=socket.gethostname())


def load(path: str | None) -> tuple[Config, Preflight]:
    """Config (`read_config`) + preflight, or a one-line error and exit 2."""
    from vipd import config, preflight

    try:
        cfg = read_config(path)
        check_scripts(cfg)
        check_auth_keys(cfg)
        check_bgp_passwords(cfg)
        pre = preflight.check_host(cfg, preflight.read_host())
        check_ca_file(cfg)
        check_lease(cfg)
        from vipd.endpoint.server import check_security

        check_security(cfg.metrics)  # TLS files load, auth: token's credentials are found
    except config.ConfigError as exc:
        print(f"vipd: config error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None
    return cfg, pre


def reloader(path: str | None) -> Callable[[], Config] | None:
    """What SIGHUP reads: the same file (or ``$VIPD_CONFIG``) with the start-up checks that
    need no host (the CA file); None when the config came from stdin, which is read once."""
    if path == STDIN:
        return None

    def load() -> Config:
        cfg = read_config(path)
        check_ca_file(cfg)
        check_scripts(cfg)
        check_auth_keys(cfg)
        check_bgp_passwords(cfg)
        return cfg

    return load


def check_auth_keys(cfg: Config) -> None:
    """election.vrrp.auth_hmac: every key file must be readable, private and hold a key
    (``vipd.vrrp.keyfile``); the error names the key id and the file, never the key."""
    v = cfg.election.vrrp_section
    if cfg.election.mode != "vrrp" or v is None or v.auth_hmac is None:
        return
    from vipd import config
    from vipd.vrrp import keyfile

    for key_id, path in v.auth_hmac.keys:
        try:
            keyfile.read_key(path)
        except keyfile.KeyFileError as exc:
            raise config.ConfigError(f"election.vrrp.auth_hmac.keys.{key_id}", str(exc)) from None


def check_bgp_passwords(cfg: Config) -> None:
    """announce.bgp.peers[].password_file: readable, root-owned, 0600/0400, 1-80 bytes
    (``vipd.routed.bgp_password``); the error names the file, never the password."""
    if not cfg.announce.speaker:
        return
    from vipd import config
    from vipd.routed.bgp_password import PasswordFileError, read_password

    for i, peer in enumerate(cfg.announce.bgp.peers):
        if peer.password_file is None:
            continue
        try:
            read_password(peer.password_file)
        except PasswordFileError as exc:
            key = f"announce.bgp.peers[{i}].password_file"
            raise config.ConfigError(key, str(exc)) from None


def check_ca_file(cfg: Config) -> None:
    """health.ca_file must load as CA certificates (checked at start, like the interface)."""
    if cfg.health is None or cfg.health.ca_file is None:
        return
    from vipd import config
    from vipd.health.checker import make_ssl_context

    try:
        make_ssl_context(cfg.health.ca_file)
    except ValueError as exc:
        raise config.ConfigError("health.ca_file", str(exc)) from None


def check_scripts(cfg: Config) -> None:
    """Hooks and tracked scripts/files that others could change are refused (start, reload)."""
    from vipd import sandbox

    sandbox.check(cfg)


def check_lease(cfg: Config) -> None:
    """Lease mode and membership (a ``*_from`` key): the credentials must be found and load
    (checked at start)."""
    if cfg.election.mode == "lease" and cfg.election.lease is not None:
        from vipd import kube

        kube.check(kube.Access.from_lease(cfg.election.lease))
    from vipd.membership import policy

    if policy.followed_lists(cfg):  # membership reads with its own credentials
        from vipd import kube

        kube.check(cfg.membership.access(cfg.membership.api_servers[0]))


class Background:
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


def first_probe(cfg: Config, pre: Preflight) -> Conflict | None:
    """The start-up probe (VRRP mode), see `wait_out_conflict`."""
    if cfg.election.mode != "vrrp":
        return None
    from vipd.vrrp import startprobe

    return startprobe.check(cfg, pre)


def wait_out_conflict(
    cfg: Config,
    pre: Preflight,
    logger: logging.Logger,
    first: Callable[[], object] | None = None,
) -> str | None:
    """``vipd run``: while a foreign host answers for the VIP, stay out of the election and
    probe again every ``CONFLICT_RETRY`` s; join once it is gone. Exiting instead would turn
    a transient holder (another node's crash leftover, removed when its vipd restarts) into
    a node that never joins under systemd, which does not restart after exit 2. ``first``:
    the first probe's result, when it already runs in the background (`Background`)."""
    from vipd.host.conflict import Conflict
    from vipd.vrrp import startprobe

    if cfg.election.mode != "vrrp":
        return None
    refused = 0
    while True:
        early = first() if first is not None and refused == 0 else None
        found = early if isinstance(early, Conflict) else startprobe.check(cfg, pre)
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
    return describe_probe(cfg, pre, found)


def describe_probe(cfg: Config, pre: Preflight, found: Conflict) -> str:
    if found.macs:
        return (
            f"VIP {found.vip} answered by {', '.join(found.macs)}: held by the VRRP router "
            f"{', '.join(found.vrrp_heard)} advertising VRID {cfg.election.vrrp.vrid}"
        )
    vips = ", ".join(map(str, cfg.vips))
    return f"no other host answered a probe for VIP {vips} on {pre.link.name}"


def check_conflict(cfg: Config, pre: Preflight) -> str | None:
    """RFC 5227 / DAD probe for the VIP before claiming it (vipd.vrrp.startprobe); exit 2 when a
    foreign host answers for it. Returns a finding to report, or None."""
    if cfg.election.mode != "vrrp":
        return None
    from vipd.vrrp import startprobe

    found = startprobe.check(cfg, pre)
    if found.foreign:
        print(f"vipd: config error: vip: {found.describe()}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG)
    return describe_probe(cfg, pre, found)


def check_access(cfg: Config) -> None:
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
    from vipd.membership import policy, reader

    followed = policy.sources_of(policy.followed_lists(cfg))
    if followed:
        access = cfg.membership.access(cfg.membership.api_servers[0])
        asks.append((access, [n for s in followed for n in reader.NEEDS[s]]))
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
