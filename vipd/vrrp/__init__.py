"""VRRP (RFC 9568, and RFC 3768 for v2 peers): the codec (``packet``), the state machine
(``state``), the raw sockets (``transport``) and the election backend (``driver``)."""
