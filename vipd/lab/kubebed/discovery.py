"""vipd's IPVS discovery run the way the rendered DaemonSet runs it, recording its answers.

What it is: ``python -m vipd.lab.kubebed.discovery`` reads the config from ``$VIPD_CONFIG``
(as ``vipd run`` in the DaemonSet does), makes the discovery source vipd makes
(``vipd.ipvs.discovery.EndpointSliceSource``, with the credentials ``vipd.kube`` picks: in a
pod with no kubeconfig in the config, the ServiceAccount token), and lists the
``default/kubernetes`` EndpointSlices every ``--interval`` seconds, printing one JSON line per
answer: ``{"t": monotonic, "backends": [...]}`` or ``{"t": ..., "error": "..."}``; the first
line names the credentials in use. `spawn_in_pod` starts it in a node's namespace inside a
private mount namespace whose ``/run`` holds the ServiceAccount's token and CA where a
kubelet mounts them, so the in-cluster path is the one exercised.

What it must not do: decide anything (the test judges the backend set), touch the host's
``/run`` (the tmpfs lives in the child's own mount namespace), or run IPVS (the host kernel
has none: what is recorded is discovery's backend set, the source of what IPVS would get).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from vipd import config
from vipd.ipvs.discovery import EndpointSliceSource
from vipd.lab.topology import Lab, Node, python_argv, python_env

# Where a kubelet mounts the pod's ServiceAccount token (and where the client's in-cluster
# loader reads it): /var/run is a link to /run on this machine's Debian.
TOKEN_DIR = "/run/secrets/kubernetes.io/serviceaccount"

_MOUNT_SCRIPT = (
    "set -e; d=" + TOKEN_DIR + "; mount -t tmpfs -o size=1m,mode=755 tmpfs /run; "
    'mkdir -p "$d"; cp "$1" "$d/token"; cp "$2" "$d/ca.crt"; echo "$3" > "$d/namespace"; '
    'shift 3; exec "$@"'
)


def spawn_in_pod(
    lab: Lab,
    node: Node,
    *,
    config_text: str,
    env: dict[str, str],
    token_file: Path,
    ca_file: Path,
    namespace: str,
    out: IO[bytes],
    interval: float = 0.5,
) -> subprocess.Popen[Any]:
    """Start the recorder in ``node``'s namespace as the DaemonSet's container would run:
    ``config_text`` in ``$VIPD_CONFIG``, the container's ``env``, the token mounted."""
    argv = [
        "unshare", "--mount", "--propagation", "private",
        "sh", "-c", _MOUNT_SCRIPT, "sh", str(token_file), str(ca_file), namespace,
        *python_argv("vipd.lab.kubebed.discovery", "--interval", str(interval)),
    ]  # fmt: skip
    return lab.spawn(
        node.ns,
        argv,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=python_env({"VIPD_CONFIG": config_text, **env}),
    )


def read(path: Path) -> list[dict[str, Any]]:
    """The recorded answers so far (a torn last line is left for the next read)."""
    out: list[dict[str, Any]] = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--interval", type=float, default=0.5)
    args = ap.parse_args(argv)
    text = os.environ.get("VIPD_CONFIG", "")
    cfg = config.parse(config.read_text(text, "$VIPD_CONFIG"), os.environ, socket.gethostname())
    source = EndpointSliceSource(cfg.ipvs.discovery, cfg.vip.version)
    print(json.dumps({"t": time.monotonic(), "using": source.session.using.label}), flush=True)
    while True:
        rec: dict[str, Any] = {"t": time.monotonic()}
        try:
            rec["backends"] = [str(a) for a in source.fetch()]
        except Exception as exc:
            rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
        print(json.dumps(rec), flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
