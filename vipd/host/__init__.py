"""What touches the host: netlink (``netlink``, ``address``, ``linkwatch``), the neighbour
announcements and their watch (``neighbor``, ``announce``, ``arpwatch``, ``conflict``), the
virtual MAC (``vmac`` pure, ``vmaclink`` the macvlan), scheduling (``sched``) and systemd's
readiness protocol (``sdnotify``). Pure parts take bytes and return bytes; the rest are thin
drivers the agent and the backends call."""
