"""Where the Kubernetes test bed finds the real components that ``scripts/setup-kube`` built.

What it is: ``find()`` returns the directory holding kube-apiserver, kubectl, etcd and
etcdctl (``$VIPD_KUBE_BIN``, else the newest complete set under ``$VIPD_KUBE_CACHE`` or
``/var/cache/vipd-kube``), or raises ``Missing`` saying what is missing where (``BUILD_COMMAND``
builds them). ``kube_vip()`` is kube-vip in such a directory when ``scripts/setup-kube``
could build it (it is optional), else None. ``version()`` asks a binary for its version.

What it must not do: build or download anything (``scripts/setup-kube`` does), or pick a
directory that lacks one of the required binaries.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REQUIRED = ("kube-apiserver", "kubectl", "etcd", "etcdctl")
KUBE_VIP = "kube-vip"  # optional: a benchmark peer
DEFAULT_CACHE = "/var/cache/vipd-kube"
BUILD_COMMAND = "scripts/setup-kube"


class Missing(RuntimeError):
    """The binaries are not there; the message says how to build them."""


def _complete(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in REQUIRED)


def find() -> Path:
    given = os.environ.get("VIPD_KUBE_BIN")
    if given:
        path = Path(given)
        if _complete(path):
            return path
        lacking = [n for n in REQUIRED if not os.access(path / n, os.X_OK)]
        raise Missing(f"VIPD_KUBE_BIN={given} lacks {', '.join(lacking)}")
    cache = Path(os.environ.get("VIPD_KUBE_CACHE", DEFAULT_CACHE))
    found = sorted((d for d in cache.glob("kube-*") if _complete(d)), key=lambda d: d.name)
    if not found:
        raise Missing(f"no complete kube-apiserver/kubectl/etcd/etcdctl build under {cache}")
    return found[-1]


def kube_vip(directory: Path) -> Path | None:
    """kube-vip beside the components in ``directory``, if it was built."""
    path = directory / KUBE_VIP
    return path if os.access(path, os.X_OK) else None


def version(binary: Path) -> str:
    """``kube-apiserver v1.37.2`` / ``etcd 3.6.16``: the binary's own answer."""
    if binary.name == "kube-apiserver":
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, check=False, timeout=20
        ).stdout.strip()  # "Kubernetes v1.37.2"
        return f"kube-apiserver {out.split()[-1] if out else '?'}"
    if binary.name == "etcd":
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, check=False, timeout=20
        ).stdout
        for line in out.splitlines():
            if line.startswith("etcd Version:"):
                return f"etcd {line.split(':', 1)[1].strip()}"
        return "etcd ?"
    return binary.name
