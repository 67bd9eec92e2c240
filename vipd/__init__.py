"""vipd: a node-level virtual-IP agent for Kubernetes control planes.

The package is split into a pure core (``vipd.vrrp.packet``, ``vipd.vrrp.state``,
``vipd.config``) that never touches sockets, netlink or clocks, and a thin asyncio shell
(``vipd.daemon``, ``vipd.vrrp.transport``, ``vipd.actuators``) that does.
"""

__version__ = "0.1.0"
