"""rtnetlink message framing: walking the messages of one read (RFC 3549 §2.3.2).

What it is: the one place that splits a netlink read into messages and reads an
acknowledgement's error code, for the address actuator and the link watcher.

What it must not do: open sockets or know about any message body beyond the header and
NLMSG_ERROR's error field.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

NLMSG_ERROR = 2
NLMSG_DONE = 3
HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id


def messages(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(type, sequence, whole message) for each complete message in ``data``."""
    offset = 0
    while offset + HEADER.size <= len(data):
        length, msg_type, _flags, seq, _pid = HEADER.unpack_from(data, offset)
        if length < HEADER.size or offset + length > len(data):
            return
        yield msg_type, seq, data[offset : offset + length]
        # NLMSG_ALIGN: every message starts on a 4-byte boundary.
        offset += (length + 3) & ~3


def error_code(message: bytes) -> int:
    """The errno an NLMSG_ERROR message carries (0: the request was acknowledged)."""
    if len(message) < HEADER.size + 4:
        raise ValueError("NLMSG_ERROR message too short")
    code: int = struct.unpack_from("=i", message, HEADER.size)[0]
    return -code
