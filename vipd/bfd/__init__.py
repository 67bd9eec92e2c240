"""BFD (RFC 5880, RFC 5881 single-hop) inside vipd's process: the codec (``packet``) and the
session state machine (``session``), both pure."""
