"""Certificates for the lab and the tests, made with the ``openssl`` command.

What it is: `make_ca` (a self-signed CA) and `make_cert` (a server certificate for a list of
subject alternative names, self-signed or signed by such a CA). Every key is EC P-256 and
every certificate short-lived (``days``); the files are written to a run-time directory and
never committed. A self-signed server certificate is also marked as a CA
(``basicConstraints=CA:TRUE``) so that a client can pass the certificate itself as its trust
anchor, the way a kubeconfig's ``certificate-authority`` names a file.

What it must not do: be imported by anything outside ``vipd.lab`` (the daemon verifies
certificates, it never makes them), or write anywhere but the directory it is given.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Iterable
from pathlib import Path

DEFAULT_SANS = ("kubernetes", "127.0.0.1")
_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _openssl(*args: str) -> None:
    proc = subprocess.run(
        ["openssl", *args], capture_output=True, text=True, check=False, timeout=30
    )
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {proc.stderr.strip()}")


def subject_alt_names(names: Iterable[str]) -> str:
    """``IP:`` for address literals, ``DNS:`` for the rest, in the order given, no repeats."""
    out: list[str] = []
    for name in names:
        try:
            entry = f"IP:{ipaddress.ip_address(name)}"
        except ValueError:
            entry = f"DNS:{name}"
        if entry not in out:
            out.append(entry)
    return ",".join(out)


def make_ca(directory: Path, name: str = "vipd-lab-ca", days: int = 2) -> tuple[Path, Path]:
    """A self-signed CA; returns (certificate, key). Reused when it exists already."""
    crt, key = directory / f"{name}.crt", directory / f"{name}.key"
    if not crt.exists():
        _openssl(
            "req", "-x509", *_EC, "-keyout", str(key), "-out", str(crt), "-days", str(days),
            "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        key.chmod(0o600)
    return crt, key


def make_cert(
    directory: Path,
    name: str = "vipd-lab-apiserver",
    *,
    sans: Iterable[str] = DEFAULT_SANS,
    ca: tuple[Path, Path] | None = None,
    days: int = 2,
) -> tuple[Path, Path]:
    """A server certificate for ``sans``, self-signed or signed by ``ca``; (cert, key).

    Reused when ``<name>.crt`` exists already (one lab run makes each certificate once)."""
    crt, key = directory / f"{name}.crt", directory / f"{name}.key"
    if crt.exists():
        return crt, key
    san = "subjectAltName=" + subject_alt_names(sans)
    if ca is None:
        _openssl(
            "req", "-x509", *_EC, "-keyout", str(key), "-out", str(crt), "-days", str(days),
            "-subj", f"/CN={name}", "-addext", san,
            "-addext", "basicConstraints=critical,CA:TRUE",
        )  # fmt: skip
        key.chmod(0o600)
        return crt, key
    csr = directory / f"{name}.csr"
    ext = directory / f"{name}.ext"
    ext.write_text(san + "\n")
    _openssl(
        "req", "-new", *_EC, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-CAcreateserial", "-out", str(crt), "-days", str(days), "-extfile", str(ext),
    )  # fmt: skip
    key.chmod(0o600)
    return crt, key
