"""Kernel-side quiet following: an eBPF socket filter that keeps the followed advert's copies
off the VRRP socket and leaves only their number and the last one's arrival time.

What it is: the eBPF program, the layout of its one-entry array map, the writer of the
pattern it matches and the reader of what it counted. A Backup's only reaction to an advert
from its master, while that advert does not change, is to restart its Master_Down_Timer
(RFC 9568 §6.4.2), so it needs the last arrival, not the datagrams. The program runs on the
VRRP socket itself: a datagram that matches the pattern in the map (every byte of the VRRP
message, the IPv4 header's length, addresses, protocol and TTL 255, unfragmented) is counted,
its arrival stamped with ``bpf_ktime_get_ns`` (CLOCK_MONOTONIC, the clock of
``time.monotonic()``) and dropped; everything else is kept and wakes the loop. Reading the
map is a memory read through ``mmap``: no system call, no wake-up per advert.

The pattern changes under a sequence count (a seqlock): the writer makes it odd, writes,
makes it even; the program keeps every datagram that it checked while the count was odd or
changed. So while the pattern changes a copy is delivered to the socket, never lost, and the
driver drops a duplicate by its arrival time as it does for the classic filters
(``vrrp.transport``). The count only grows; the reader compares it with what it saw before.
(The program's loads are not fenced: x86-64 keeps loads in order. Elsewhere a copy of the
old advert compared while the pattern changed could count for the new one, which restarts
the down timer from a moment when that master was still heard anyway.)

What it must not do: load anything into the daemon's own process that stays there. The
``bpf()`` system call needs ctypes, which costs a Python process a few hundred KiB for good;
``load`` forks, the child makes the map and the program and hands both descriptors back over
a socket (SCM_RIGHTS), and exits. The child runs with ordinary scheduling even when the daemon
is real-time. It decides nothing about the election either: the driver
reads ``read()`` exactly as it reads the classic quiet socket.

Needs CAP_BPF (or CAP_SYS_ADMIN) where unprivileged BPF is off (the Debian and Fedora
default); without it ``load`` raises and the transport keeps the classic filters.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import signal
import socket
import struct
import threading
from ipaddress import IPv4Address

# The map's value (one entry, native byte order): the sequence count, the pattern's length
# in 32-bit words (0: nothing followed), the datagram length it matches, then the count and
# last arrival the program writes, then (value, mask) per word of the IPv4 datagram.
SEQ, WORDS, LENGTH, COUNT, LAST_NS, PATTERN = 0, 4, 8, 16, 24, 32
# The longest IPv4 advert: a 20-byte header, the 8-byte VRRP header, 255 addresses and
# VRRPv2's 8-byte authentication data.
MAX_WORDS = 5 + 2 + 255 + 2
VALUE_SIZE = PATTERN + 8 * MAX_WORDS
MAP_SIZE = mmap.PAGESIZE * -(-VALUE_SIZE // mmap.PAGESIZE)
_HEAD = struct.Struct("@III")  # seq, words, length
_SEEN = struct.Struct("@QQ")  # count, last_ns
_WORD = struct.Struct("@II")  # value, mask

# linux/bpf.h
NR_BPF = {"x86_64": 321, "aarch64": 280}
BPF_MAP_CREATE, BPF_PROG_LOAD = 0, 5
BPF_MAP_TYPE_ARRAY = 2
BPF_F_MMAPABLE = 1 << 10
BPF_PROG_TYPE_SOCKET_FILTER = 1
SO_ATTACH_BPF = 50
FUNC_MAP_LOOKUP_ELEM, FUNC_KTIME_GET_NS = 1, 5
NAME = b"vipd_follow"

# eBPF opcodes (linux/bpf_common.h, linux/bpf.h)
_MOV64_X, _MOV64_K, _AND64_X, _ADD64_K = 0xBF, 0xB7, 0x5F, 0x07
_LD_IMM64, _LD_ABS_W = 0x18, 0x20
_LDX_W, _STX_DW, _ST_W, _ATOMIC_DW = 0x61, 0x7B, 0x62, 0xDB
_JEQ_K, _JNE_X, _JSET_K, _JLE_K = 0x15, 0x5D, 0x45, 0xB5
_CALL, _EXIT = 0x85, 0x95
_PSEUDO_MAP_FD = 1
_ACCEPT, _MATCHED = "accept", "matched"
# __sk_buff.len: the datagram's length (for a raw IPv4 socket: from the IP header on,
# trimmed to the header's total length by the IP layer)
_SKB_LEN = 0

Insn = tuple[int, int, int, int | str, int]  # opcode, dst, src, offset or label, imm


def _pack(insns: list[Insn]) -> bytes:
    out = []
    labels = _labels(insns)
    for at, (code, dst, src, off, imm) in enumerate(insns):
        if isinstance(off, str):
            off = labels[off] - at - 1
        out.append(struct.pack("<BBhi", code, (src << 4) | dst, off, imm))
    return b"".join(out)


def _labels(insns: list[Insn]) -> dict[str, int]:
    # The two labels are in program()'s last ten instructions: "matched" their first,
    # "accept" their last two.
    return {_MATCHED: len(insns) - 10, _ACCEPT: len(insns) - 2}


def program(map_fd: int) -> bytes:
    """The socket filter, over the map ``map_fd`` (its loader's descriptor number)."""
    r0, r1, r2, r6, r7, r8, r9, r10 = 0, 1, 2, 6, 7, 8, 9, 10
    insns: list[Insn] = [
        (_MOV64_X, r6, r1, 0, 0),  # r6 = skb (LD_ABS reads it from r6)
        (_ST_W, r10, 0, -4, 0),  # key 0 on the stack
        (_MOV64_X, r2, r10, 0, 0),
        (_ADD64_K, r2, 0, 0, -4),
        (_LD_IMM64, r1, _PSEUDO_MAP_FD, 0, map_fd),
        (0, 0, 0, 0, 0),
        (_CALL, 0, 0, 0, FUNC_MAP_LOOKUP_ELEM),
        (_JEQ_K, r0, 0, _ACCEPT, 0),
        (_MOV64_X, r7, r0, 0, 0),  # r7 = the value
        (_LDX_W, r8, r7, SEQ, 0),  # r8 = seq
        (_JSET_K, r8, 0, _ACCEPT, 1),  # being written
        (_LDX_W, r9, r7, WORDS, 0),  # r9 = words
        (_JEQ_K, r9, 0, _ACCEPT, 0),  # nothing followed
        (_LDX_W, r1, r6, _SKB_LEN, 0),
        (_LDX_W, r2, r7, LENGTH, 0),
        (_JNE_X, r1, r2, _ACCEPT, 0),  # every load below is inside the datagram
    ]
    for i in range(MAX_WORDS):
        if i:
            insns.append((_JLE_K, r9, 0, _MATCHED, i))  # the pattern has i words
        insns += [
            (_LD_ABS_W, 0, 0, 0, 4 * i),  # r0 = word i, host order; r1..r5 clobbered
            (_LDX_W, r1, r7, PATTERN + 8 * i + 4, 0),
            (_AND64_X, r0, r1, 0, 0),
            (_LDX_W, r1, r7, PATTERN + 8 * i, 0),
            (_JNE_X, r0, r1, _ACCEPT, 0),
        ]
    insns += [
        # matched:
        (_CALL, 0, 0, 0, FUNC_KTIME_GET_NS),
        (_LDX_W, r1, r7, SEQ, 0),
        (_JNE_X, r1, r8, _ACCEPT, 0),  # rewritten while we compared
        (_STX_DW, r7, r0, LAST_NS, 0),
        (_MOV64_K, r1, 0, 0, 1),
        (_ATOMIC_DW, r7, r1, COUNT, 0),  # lock *(u64 *)(r7 + COUNT) += r1
        (_MOV64_K, r0, 0, 0, 0),
        (_EXIT, 0, 0, 0, 0),  # dropped
        # accept:
        (_MOV64_K, r0, 0, 0, -1),
        (_EXIT, 0, 0, 0, 0),  # kept whole
    ]
    return _pack(insns)


def pattern(src: IPv4Address, dst: IPv4Address, message: bytes) -> list[tuple[int, int]]:
    """(value, mask) per 32-bit word of the IPv4 datagram that carries ``message`` from
    ``src`` to ``dst``, as the program compares them (LD_ABS gives host order): version 4 and
    a 20-byte header, the total length, no fragment (MF or offset), TTL 255, protocol 112,
    the addresses and the whole message. The type of service, identification, DF flag and
    header checksum are not compared: they may differ between copies of one advert."""
    if len(message) % 4:
        raise ValueError(f"a VRRP message is whole 32-bit words, not {len(message)} bytes")
    words = [
        ((0x45 << 24) | (20 + len(message)), 0xFF00FFFF),
        (0, 0x00003FFF),
        ((255 << 24) | (112 << 16), 0xFFFF0000),
        (int.from_bytes(src.packed, "big"), 0xFFFFFFFF),
        (int.from_bytes(dst.packed, "big"), 0xFFFFFFFF),
    ]
    for at in range(0, len(message), 4):
        words.append((int.from_bytes(message[at : at + 4], "big"), 0xFFFFFFFF))
    if len(words) > MAX_WORDS:
        raise ValueError(f"an advert of {len(message)} bytes is longer than any VRRP advert")
    return words


class FollowMap:
    """The map as the daemon sees it: an ``mmap`` of its value."""

    def __init__(self, map_fd: int) -> None:
        self._mem = mmap.mmap(map_fd, MAP_SIZE)  # holds the map; the descriptor may go
        self._fence = threading.Lock()
        self.seen = self.read()[0]

    def _barrier(self) -> None:
        # A lock's acquire and release are full memory barriers: the program must not see
        # the even count before the pattern (x86 keeps stores in order anyway).
        with self._fence:
            pass

    def set(self, words: list[tuple[int, int]], length: int) -> None:
        """Match ``words`` (from ``pattern``) on datagrams of ``length`` bytes."""
        seq = _HEAD.unpack_from(self._mem, SEQ)[0]
        self._mem[SEQ : SEQ + 4] = struct.pack("@I", (seq + 1) & 0xFFFFFFFF)
        self._barrier()
        for i, word in enumerate(words):
            _WORD.pack_into(self._mem, PATTERN + 8 * i, *word)
        _HEAD.pack_into(self._mem, SEQ, (seq + 1) & 0xFFFFFFFF, len(words), length)
        self._barrier()
        self._mem[SEQ : SEQ + 4] = struct.pack("@I", (seq + 2) & 0xFFFFFFFF)

    def clear(self) -> None:
        """Match nothing (a pattern of no words)."""
        self.set([], 0)

    def read(self) -> tuple[int, int]:
        """(copies dropped since the map was made, the last one's ``bpf_ktime_get_ns``): a
        look that takes nothing."""
        return _SEEN.unpack_from(self._mem, COUNT)

    def take(self) -> tuple[int, int]:
        """The copies counted since the last call and the last one's arrival (ns)."""
        count, last_ns = _SEEN.unpack_from(self._mem, COUNT)
        new = (count - self.seen) & 0xFFFFFFFFFFFFFFFF
        self.seen = count
        return new, last_ns

    def close(self) -> None:
        self._mem.close()


def load(timeout: float = 5.0) -> tuple[int, int]:
    """Make the map and load the program in a child process; (map fd, program fd) here.
    Raises OSError (with the kernel's reason) where it cannot be done."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; its outcome is checked in the parent
            code = 0
            try:
                parent.close()
                _ordinary_scheduling()
                fds = _create()
                socket.send_fds(child, [b"ok"], list(fds))
            except BaseException as exc:
                code = 1
                try:
                    child.send(f"{getattr(exc, 'errno', 0) or 0} {exc}".encode()[:4000])
                except BaseException:
                    code = 2
            finally:
                os._exit(code)
        child.close()
        parent.settimeout(timeout)
        try:
            msg, got, _flags, _addr = socket.recv_fds(parent, 4096, 2)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            raise OSError(
                errno.ETIMEDOUT, f"the BPF loader did not answer in {timeout} s"
            ) from None
        finally:
            os.waitpid(pid, 0)
        if msg == b"ok" and len(got) == 2:
            return got[0], got[1]
        for fd in got:
            os.close(fd)
        number, _, text = msg.decode(errors="replace").partition(" ")
        raise OSError(int(number or 0) or errno.EIO, text or "the BPF loader failed")
    finally:
        parent.close()
        child.close()


def _ordinary_scheduling() -> None:
    """In the child: give up the real-time policy a fast-advert daemon inherits
    (``vipd.host.sched``). The verifier's ~10 ms of CPU is no deadline's and must not keep a
    core from the real-time threads that have one (this node's and its peers' in the lab)."""
    with contextlib.suppress(OSError, AttributeError):
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def _create() -> tuple[int, int]:  # pragma: no cover - runs in load()'s child
    import ctypes  # only here: the child exits right after

    nr = NR_BPF.get(os.uname().machine)
    if nr is None:
        raise OSError(errno.ENOSYS, f"bpf() system call number unknown on {os.uname().machine}")
    libc = ctypes.CDLL(None, use_errno=True)

    def bpf(cmd: int, attr: bytes) -> int:
        buf = ctypes.create_string_buffer(attr, 128)
        fd = int(libc.syscall(nr, cmd, buf, 128))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"bpf({cmd}): {os.strerror(err)}")
        return fd

    attr = struct.pack(
        "@IIIIIII16s", BPF_MAP_TYPE_ARRAY, 4, VALUE_SIZE, 1, BPF_F_MMAPABLE, 0, 0, NAME
    )
    map_fd = bpf(BPF_MAP_CREATE, attr)
    code = program(map_fd)
    insns = ctypes.create_string_buffer(code, len(code))
    gpl = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(1 << 16)

    def attr_with(level: int) -> bytes:
        return struct.pack(
            "@IIQQIIQII16s",
            BPF_PROG_TYPE_SOCKET_FILTER,
            len(code) // 8,
            ctypes.addressof(insns),
            ctypes.addressof(gpl),
            level,
            len(log) if level else 0,
            ctypes.addressof(log) if level else 0,
            0,
            0,
            NAME,
        )

    try:
        prog_fd = bpf(BPF_PROG_LOAD, attr_with(0))
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.ENOSYS):
            raise
        try:  # again with the verifier's log, for the reason
            bpf(BPF_PROG_LOAD, attr_with(1))
        except OSError:
            lines = log.value.decode(errors="replace").strip().splitlines()
            raise OSError(exc.errno, f"{exc.strerror}: {' | '.join(lines[-3:])}") from None
        raise
    return map_fd, prog_fd
