"""Podman for the lab and the tests: vipd's image built from a locally made base, no registry.

What it is: a rootful podman set up for this kind of machine, as code. Storage and config
live in one directory outside the checkout (``$VIPD_PODMAN_DIR``, default
``/var/tmp/vipd-podman``) so layers survive between runs; runc instead of crun (crun fails
on this machine's hybrid cgroups), explicit ulimits (rootful podman asks for more than the
sandbox allows), the host's CA bundle mounted into builds (pip inside the build must trust
what the host trusts), ``--pull=never`` (no registry is reachable) and never podman's bridge
network (it would change the host's firewall and forwarding): builds use the host network,
runs a lab namespace.

The base image (``localhost/vipd-base:bookworm``) is Debian 12 with python3 and its venv
module, made by mmdebstrap from the host's own apt sources and imported; it is made once
per machine and reused (a stale base only means older Debian packages in a test image;
it is never shipped). Cost on this 2-core machine: base ~45 s once; image build ~30 s
from scratch, ~3 s when only vipd's source changed (dependency layer cached).

What it must not do: pull, push, use podman's default storage, or touch the host's network.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

BASE = "localhost/vipd-base:bookworm"
IMAGE = "localhost/vipd:test"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
APT_SOURCES = ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list")
TOOLS = ("podman", "runc", "mmdebstrap")


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


class Podman:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or Path(os.environ.get("VIPD_PODMAN_DIR", "/var/tmp/vipd-podman"))
        for sub in ("storage", "run", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "storage.conf").write_text(
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{self.root / "storage"}"\n'
            f'runroot = "{self.root / "run"}"\n'
        )
        (self.root / "containers.conf").write_text(
            "[containers]\n"
            'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
            "[engine]\n"
            'runtime = "runc"\n'
        )
        self.env = {
            **os.environ,
            "CONTAINERS_STORAGE_CONF": str(self.root / "storage.conf"),
            "CONTAINERS_CONF": str(self.root / "containers.conf"),
            "TMPDIR": str(self.root / "tmp"),
        }

    def cmd(
        self, *args: str, check: bool = True, timeout: float = 600, input_text: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["podman", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input_text,
            check=False,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)}: exit {proc.returncode}: {proc.stderr}")
        return proc

    def popen(self, args: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                ["podman", *args],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def ensure_base(self) -> None:
        """Make the Debian base image unless this machine already has it."""
        with (self.root / "base.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs must not both make it
            if self.cmd("image", "exists", BASE, check=False).returncode == 0:
                return
            sources = next((s for s in APT_SOURCES if Path(s).is_file()), None)
            if sources is None:
                raise RuntimeError(f"no apt sources file for mmdebstrap (looked at {APT_SOURCES})")
            strap = subprocess.Popen(
                [
                    "mmdebstrap", "--quiet", "--variant=apt",
                    "--include=python3,python3-venv,ca-certificates",
                    "--aptopt=APT::Install-Recommends \"false\"",
                    *(f"--dpkgopt=path-exclude=/usr/share/{d}/*"
                      for d in ("doc", "man", "locale", "info")),
                    "bookworm", "-", sources,
                ],
                stdout=subprocess.PIPE,
                env=self.env,
            )  # fmt: skip
            imported = subprocess.run(
                ["podman", "import", "--change", "ENV LANG=C.UTF-8",
                 "--change", 'CMD ["python3"]', "-", BASE],
                stdin=strap.stdout, env=self.env, capture_output=True, text=True,
                timeout=900, check=False,
            )  # fmt: skip
            assert strap.stdout is not None
            strap.stdout.close()
            if strap.wait(timeout=60) != 0 or imported.returncode != 0:
                raise RuntimeError(f"making {BASE} failed: {imported.stderr}")

    def build(self, context: Path, tag: str = IMAGE) -> subprocess.CompletedProcess[str]:
        return self.cmd(
            "build", "--pull=never", "--network=host",
            "-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro",
            "--build-arg", f"BASE={BASE}",
            "-t", tag, "-f", str(context / "Containerfile"), str(context),
            timeout=1200,
        )  # fmt: skip
