"""Kubernetes Lease leader election: the pure decision core (``logic``), the API driver
(``driver``) and the Lease API emulator used by the tests and ``vipd lab --election lease``
(``emulator``)."""
