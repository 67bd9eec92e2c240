"""BFD (RFC 5880, asynchronous mode; RFC 5881, single-hop IPv4 and IPv6) inside vipd's own
process, so that BFD and what vipd announces share fate: a vipd that dies stops answering
BFD, and its peer takes the route away within the detection time.

``packet`` (the Control packet codec, pure), ``session`` (one session's state machine,
pure), ``driver`` (the UDP sockets and timers on the asyncio loop), ``__main__`` (the
driver alone, for the lab and the tests). docs/design/bfd.md says how they fit.

The seam for a routing client (the embedded BGP speaker) is :class:`BfdSessions`::

    sessions = BfdSessions(on_state)          # on the running loop
    sessions.add_peer("192.0.2.1", tx_ms=100, rx_ms=100, mult=3, local="192.0.2.0")
    ...
    def on_state(peer: str, up: bool, diag: int) -> None:
        # up False: withdraw / tear down the session with ``peer`` (RFC 5882 §4.2),
        # unless ``diag == Diag.ADMINISTRATIVELY_DOWN`` (the peer disabled BFD on
        # purpose: RFC 5882 §3.2 says that is not a path failure)
    sessions.remove_peer("192.0.2.1")         # AdminDown to the peer, then forgotten
    sessions.close()                          # every peer, and the sockets
"""

from vipd.bfd.driver import BfdSessions, OnChange, OnState, PeerStatus
from vipd.bfd.packet import Diag, State

__all__ = ["BfdSessions", "Diag", "OnChange", "OnState", "PeerStatus", "State"]
