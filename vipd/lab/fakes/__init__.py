"""Test doubles, and nothing else: the API server's health endpoints (``apiserver``), the
kubelet's static-pod runner (``kubelet``) and the Lease API (``lease_emulator``). Nothing
outside ``vipd.lab`` imports them (tests/unit/test_imports.py)."""
