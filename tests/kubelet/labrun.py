"""``vipd lab --kubeadm …`` run as a user runs it, for the tests on real kubelets: the
process's result and, for a step the lab judged a problem, its post-mortem (the vipd log lines
and VRRP adverts the JSON report carries), printed and returned for the failure's message,
last, where a CI excerpt (its head and tail) shows them."""

from __future__ import annotations

import contextlib
import json
import subprocess

from vipd.lab.topology import python_argv


def run_lab(*argv: str, timeout: float) -> tuple[subprocess.CompletedProcess[str], str]:
    """``vipd lab ARGV``: the finished process and the post-mortem text ("" without one)."""
    run = subprocess.run(
        python_argv("vipd", "lab", *argv),
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    print(run.stderr[-3000:])
    post_mortem = ""
    with contextlib.suppress(json.JSONDecodeError):
        for logs in json.loads(run.stdout).get("logs", []):
            post_mortem += "\n".join([f"\nvipd logs of {logs['step']}:", *logs["lines"][-80:]])
            post_mortem += "\n".join(["\nVRRP adverts on the bridge:", *logs.get("wire", [])])
    print(post_mortem)
    return run, post_mortem
