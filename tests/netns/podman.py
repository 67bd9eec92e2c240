"""Podman for the tests: the lab's own wrapper (vipd/lab/podman.py), shared with the kubelet bed."""

from vipd.lab.podman import BASE, CA_BUNDLE, IMAGE, TOOLS, Podman, missing_tools

__all__ = ["BASE", "CA_BUNDLE", "IMAGE", "TOOLS", "Podman", "missing_tools"]
