"""The Kubernetes test bed's certificates and keys, made with the ``openssl`` command.

What it is: ``Authority`` (a self-signed CA: EC P-256, valid two days) that issues leaf
certificates with ``issue`` — server, client or both extended key usages, subject
alternative names given as IP addresses and DNS names, and an optional organisation (the
Kubernetes group of a client certificate, e.g. ``system:masters``) — and ``signing_key``
(the ServiceAccount token key pair the API servers share). The layout follows kubeadm's
``/etc/kubernetes/pki``: one CA for etcd (its members' peer and client certificates, and the
API servers' etcd client certificate), one for Kubernetes (serving certificates and the
bed's admin client certificate).

Every file is a run-time artefact in the bed's work directory, never committed; keys are
written with mode 0600.

What it must not do: trust anything outside its directory, reuse a key between two
certificates, or hide an ``openssl`` failure (every failure raises ``PkiError`` with the
command's stderr).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Usage = Literal["server", "client", "both"]

DAYS = 2  # a bed lives minutes; two days covers a clock an hour off (faketime) with room
_CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
_EKU: dict[Usage, str] = {
    "server": "serverAuth",
    "client": "clientAuth",
    "both": "serverAuth,clientAuth",
}


class PkiError(RuntimeError):
    """An ``openssl`` step failed; the message carries its stderr."""


def _openssl(args: Sequence[str]) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise PkiError(f"openssl {' '.join(args[:3])}…: {proc.stderr.strip()}")


def _private(path: Path) -> None:
    os.chmod(path, 0o600)


@dataclass(frozen=True, slots=True)
class Pair:
    """A certificate and its key, as files."""

    cert: Path
    key: Path


class Authority:
    """A CA in ``directory`` (``<name>.crt``/``.key``), made on first use."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self.cert = directory / f"{name}.crt"
        self.key = directory / f"{name}.key"
        directory.mkdir(parents=True, exist_ok=True)
        if not self.cert.exists():
            _openssl(
                [
                    "req", "-x509", *_CURVE, "-nodes", "-keyout", str(self.key),
                    "-out", str(self.cert), "-days", str(DAYS), "-subj", f"/CN={name}",
                    "-addext", "basicConstraints=critical,CA:TRUE",
                    "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                ]
            )  # fmt: skip
            _private(self.key)

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        usage: Usage,
        organisation: str | None = None,
        sans: Sequence[str] = (),
    ) -> Pair:
        """A leaf certificate ``<stem>.crt`` signed by this CA, with a fresh key.

        ``sans`` are IP literals or DNS names; each goes in as ``IP:`` or ``DNS:``.
        """
        crt = self.directory / f"{stem}.crt"
        key = self.directory / f"{stem}.key"
        if crt.exists() and key.exists():
            return Pair(crt, key)
        csr = self.directory / f"{stem}.csr"
        ext = self.directory / f"{stem}.ext"
        subject = f"/CN={common_name}" + (f"/O={organisation}" if organisation else "")
        lines = [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={_EKU[usage]}",
        ]
        if sans:
            lines.append("subjectAltName=" + ",".join(_san(s) for s in sans))
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            ["req", "-new", *_CURVE, "-nodes", "-keyout", str(key), "-out", str(csr),
             "-subj", subject]
        )  # fmt: skip
        _private(key)
        _openssl(
            [
                "x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
                "-CAcreateserial", "-out", str(crt), "-days", str(DAYS), "-extfile", str(ext),
            ]
        )  # fmt: skip
        csr.unlink()
        ext.unlink()
        return Pair(crt, key)


def _san(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return f"DNS:{value}"
    return f"IP:{value}"


def signing_key(directory: Path, stem: str = "sa") -> Pair:
    """The ServiceAccount token signing key (EC P-256, ES256) and its public half.

    ``Pair.cert`` is the public key (``--service-account-key-file``), ``Pair.key`` the
    private one (``--service-account-signing-key-file``).
    """
    key = directory / f"{stem}.key"
    pub = directory / f"{stem}.pub"
    if not key.exists():
        directory.mkdir(parents=True, exist_ok=True)
        _openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-out", str(key)])  # fmt: skip
        _private(key)
        _openssl(["pkey", "-in", str(key), "-pubout", "-out", str(pub)])
    return Pair(pub, key)
