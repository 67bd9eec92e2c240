"""The network-namespace lab (``vipd lab``, ``python -m vipd.lab``): nodes on a bridge, real
vipd processes, faults, and the outage a client sees. Test doubles are in ``fakes``, the
certificate maker in ``pki``. Not part of the agent: the container image leaves it out."""
