"""Kubernetes Lease leader election: the pure decision core (``logic``) and the election
backend that drives it with the ``kubernetes`` client (``driver``). The Lease API emulator the
tests use lives with the lab (``vipd.lab.fakes.lease_emulator``)."""
