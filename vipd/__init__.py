"""vipd: a node-level virtual-IP agent for Kubernetes control planes.

The package is split into a pure core that never touches sockets, netlink or clocks (the
VRRP codec and state machine in ``vipd.vrrp``, the Lease decision in ``vipd.lease.logic``, the
IPVS plan, the health rules, ``vipd.config``) and a thin asyncio shell: ``vipd.agent`` around
one election backend (``vipd.vrrp.driver`` or ``vipd.lease.driver``, through the port in
``vipd.election``), with ``vipd.host`` (netlink, ARP, sockets), ``vipd.endpoint`` (HTTP) and
``vipd.kube`` (the Kubernetes API). ``vipd.lab`` is the test bed; the agent never imports it.
"""

__version__ = "0.1.0"
