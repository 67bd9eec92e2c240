"""The health check's HTTP/1.1 exchange, as bytes in and bytes out.

What it is: the request (``GET <path>`` with ``Host``, ``Connection: close``) and the parser
of the response's status line. The check is the one a load balancer in front of kubeadm's
API servers makes (kubeadm's "High Availability Considerations", ha-considerations.md in
kubernetes/kubeadm: an HTTPS ``GET /healthz`` on each node's 6443 that must answer 200):
only the status line matters, the body is never read. kube-apiserver serves ``/readyz``,
``/healthz`` and ``/livez`` to anonymous clients (the ``system:public-info-viewer`` role);
with anonymous auth turned off it answers 401, which is a failed check like any other status
but 200.

What it must not do: any I/O. RFC 9112 §3 (request line), §4 (status line), RFC 9110 §7.2
(Host, with IPv6 literals in brackets).
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv6Address

__all__ = [
    "PATHS",
    "ProtocolError",
    "host_port",
    "parse_status_line",
    "request",
    "url",
    "valid_path",
]

PATHS = ("/readyz", "/healthz", "/livez")
# kube-apiserver's health endpoints take ``exclude=<check>`` (repeatable) to leave checks out,
# e.g. ``/readyz?exclude=etcd``; check names are like ``etcd``, ``poststarthook/rbac``.
_QUERY = re.compile(r"exclude=[A-Za-z0-9][A-Za-z0-9._/-]*(?:&exclude=[A-Za-z0-9][A-Za-z0-9._/-]*)*")
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?: [^\r\n]*)?\r?\n")


class ProtocolError(ValueError):
    """The server's answer is not an HTTP/1.x status line."""


def host_port(addr: IPv4Address | IPv6Address, port: int) -> str:
    return f"[{addr}]:{port}" if isinstance(addr, IPv6Address) else f"{addr}:{port}"


def url(addr: IPv4Address | IPv6Address, port: int, path: str) -> str:
    return f"https://{host_port(addr, port)}{path}"


def valid_path(path: str) -> bool:
    """One of `PATHS`, optionally with ``?exclude=<check>[&exclude=<check>…]``."""
    base, sep, query = path.partition("?")
    return base in PATHS and (not sep or _QUERY.fullmatch(query) is not None)


def request(addr: IPv4Address | IPv6Address, port: int, path: str, agent: str) -> bytes:
    if not valid_path(path):
        raise ValueError(
            f"path must be one of {', '.join(PATHS)}, optionally with ?exclude=<check> "
            f"(got {path!r})"
        )
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host_port(addr, port)}\r\nUser-Agent: {agent}\r\n"
        "Accept: */*\r\nConnection: close\r\n\r\n"
    ).encode("ascii")


def parse_status_line(line: bytes) -> int:
    """The status code of ``HTTP/1.x NNN reason\\r\\n``; ProtocolError for anything else."""
    m = _STATUS_LINE.fullmatch(line)
    if m is None:
        shown = line[:40].decode("ascii", "backslashreplace")
        raise ProtocolError(f"not an HTTP/1.x status line: {shown!r}")
    return int(m.group(1))
