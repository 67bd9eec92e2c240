"""Kubernetes Lease leader election. The pure decision core: ``model`` (the vocabulary),
``state`` (what a node has seen, and when), one module per rule (``unreachable``, ``giveway``,
``foreign``) and ``logic`` (`Elector`). The election backend that drives it with the
``kubernetes`` client: ``codec``, ``api``, ``watch``, ``feed``, ``evidence``, ``handover`` and
``driver`` (`LeaseElection`). The Lease API emulator the tests use lives with the lab
(``vipd.lab.fakes.lease_emulator``)."""
