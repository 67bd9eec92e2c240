"""Test doubles, and nothing else: the API server's health endpoints (``apiserver``) and the
Lease API (``lease_emulator``). Nothing outside ``vipd.lab`` imports them
(tests/unit/test_imports.py)."""
