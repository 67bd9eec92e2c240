"""Runs tests/vm/guest inside a qemu guest booting Debian's linux-image-amd64 (the host
kernel has no IPVS): one boot, one pytest process (tests/vm/vmrun.sh). About 2 minutes under
software emulation.

Skips, with the reason printed, only where qemu, a kernel with ip_vs modules, busybox-static
or ipvsadm is missing, or when not root (9p reads the host's files as the qemu user); under
CI=true each of those is a failure: scripts/setup installs them all.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.prereq import missing

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def vm_problem() -> str | None:
    if os.geteuid() != 0:
        return f"needs root to share the host's files with the guest (uid {os.geteuid()})"
    if shutil.which("qemu-system-x86_64") is None:
        return "needs qemu-system-x86_64 (apt-get install qemu-system-x86; scripts/setup does it)"
    if not glob.glob("/lib/modules/*/kernel/net/netfilter/ipvs/ip_vs.ko*") or not glob.glob(
        "/boot/vmlinuz-*"
    ):
        return "needs a kernel with ip_vs modules in /boot (apt-get install linux-image-amd64)"
    if not Path("/bin/busybox").exists():
        return "needs /bin/busybox (apt-get install busybox-static)"
    if shutil.which("ipvsadm") is None:
        return "needs ipvsadm (apt-get install ipvsadm)"
    return None


def run_in_guest(command: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (a shell line, cwd = this checkout) as root in a fresh guest."""
    with tempfile.NamedTemporaryFile(
        "w", prefix="vipd-vm-", suffix=".sh", dir="/tmp", delete=False
    ) as f:
        f.write(f"#!/bin/sh\ncd {ROOT} && VIPD_VM_GUEST=1 {command}\n")
    os.chmod(f.name, 0o755)
    try:
        return subprocess.run(
            [str(HERE / "vmrun.sh"), f.name],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "VM_TIMEOUT": str(int(timeout) - 10)},
        )
    finally:
        os.unlink(f.name)


def test_ipvs_in_a_real_kernel() -> None:
    problem = vm_problem()
    if problem is not None:
        missing(problem)
    python = Path(sys.executable)
    done = run_in_guest(f"exec {python} -m pytest -q -p no:cacheprovider -rfEs tests/vm/guest")
    log = Path(tempfile.gettempdir()) / f"vipd-vm-{os.getpid()}.log"
    log.write_text(done.stdout + done.stderr)
    print(f"guest output: {log}\n", done.stdout[-20000:], done.stderr[-5000:])
    summary = [x for x in done.stdout.splitlines() if x.startswith(("FAILED", "ERROR"))]
    assert done.returncode == 0, (
        f"guest pytest exit {done.returncode} (full output: {log}): {summary}"
    )
    assert " passed" in done.stdout and "skipped" not in done.stdout
