"""What the kernel says of a unix socket (sock_diag, NETLINK_SOCK_DIAG): its peer,
and the file a socket was bound to. Used to know that a descriptor a process of
the service user handed over is a connection to the supervisor's own socket,
not one end of a socketpair the user relays (a blind red team's round ten).

Only sockets of the suite's own network namespace are found; a socket the
kernel does not list is no answer (None), never a guess."""

from __future__ import annotations

import os
import socket
import struct

from pty_acceptance.host import proc
from pty_acceptance.host.observe import socket_inode

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLMSG_ERROR = 2
UDIAG_SHOW_VFS, UDIAG_SHOW_PEER = 0x2, 0x4
UNIX_DIAG_VFS, UNIX_DIAG_PEER = 1, 2
ALL_STATES = 0xFFFFFFFF
NO_COOKIE = 0xFFFFFFFF
REPLY_LIMIT = 1 << 16


def _attributes(ino: int, show: int) -> dict[int, bytes] | None:
    """The attributes sock_diag gives for the unix socket `ino` (None: not listed)."""
    req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, ALL_STATES, ino, show, NO_COOKIE, NO_COOKIE)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(5)
        nl.send(struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + req)
        data = nl.recv(REPLY_LIMIT)
    if len(data) < 16:
        return None
    length, kind = struct.unpack_from("=IH", data)
    if kind == NLMSG_ERROR or length > len(data) or length < 32:
        return None
    if struct.unpack_from("=I", data, 20)[0] != ino:  # unix_diag_msg's udiag_ino
        return None
    out, at = {}, 32  # nlmsghdr (16), unix_diag_msg (16)
    while at + 4 <= length:
        size, kind = struct.unpack_from("=HH", data, at)
        if size < 4 or at + size > length:
            break
        out[kind] = data[at + 4:at + size]
        at += (size + 3) & ~3
    return out


def peer_inode(fd: int) -> int | None:
    """The inode of the socket at the other end of the connected unix socket `fd`
    (None: not listed, or no peer)."""
    attrs = _attributes(os.fstat(fd).st_ino, UDIAG_SHOW_PEER)
    peer = (attrs or {}).get(UNIX_DIAG_PEER, b"")
    return struct.unpack("=I", peer[:4])[0] or None if len(peer) >= 4 else None


def bound_file(ino: int) -> tuple[int, int, int] | None:
    """(major, minor, inode) of the file the unix socket `ino` is bound to (an
    accepted socket carries its listener's), None when it is bound to none."""
    attrs = _attributes(ino, UDIAG_SHOW_VFS)
    vfs = (attrs or {}).get(UNIX_DIAG_VFS, b"")
    if len(vfs) < 8:
        return None
    file_ino, dev = struct.unpack("=II", vfs[:8])  # struct unix_diag_vfs; dev as the kernel keeps it
    return dev >> 20, dev & 0xFFFFF, file_ino


_listeners: dict[tuple[int, int], tuple[int, int, int]] = {}  # (pid, start) -> the socket file it was seen to hold


def connected_to(fd: int, path: str) -> str | None:
    """None when `fd` is a connection to the socket bound at `path` (lstat'ed here);
    else what it is. The kernel's word twice: while the other end is open, it was
    accepted on that socket file (sock_diag); and whatever the other end did since
    (the supervisor may already have refused and closed it), the credentials the
    connection carries (SO_PEERCRED: the process that listened) are root's and name a
    process that holds a socket bound to that file."""
    st = os.lstat(path)
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    pid, uid, _gid = _peercred(fd)
    if uid != 0:
        return f"its other end is uid {uid}'s (pid {pid}), not root's"
    peer = peer_inode(fd)
    if peer is not None and (bound := bound_file(peer)) != want:
        return (f"its peer (socket inode {peer}) is bound to "
                f"{'no file' if bound is None else 'device %d:%d inode %d' % bound}, not to {path} "
                f"(device {want[0]}:{want[1]} inode {want[2]})")
    if not _holds(pid, want):
        return f"its other end, pid {pid}, holds no socket bound to {path}"
    return None


def _peercred(fd: int) -> tuple[int, int, int]:
    with socket.socket(fileno=os.dup(fd)) as s:
        pid, uid, gid = struct.unpack("=iII", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid, gid


def _holds(pid: int, want: tuple[int, int, int]) -> bool:
    """Process `pid` holds a socket bound to the file `want` names (checked once per process)."""
    try:
        start = proc.start_ticks(pid)
        targets = proc.fds(pid).values()
    except (OSError, ValueError):
        return False
    if _listeners.get((pid, start)) == want:
        return True
    for target in targets:
        ino = socket_inode(target)
        if ino is not None and bound_file(ino) == want:
            _listeners[(pid, start)] = want
            return True
    return False
    if _listeners.get((pid, start)) == want:
        return True
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for name in names:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if link.startswith("socket:[") and bound_file(int(link[8:-1])) == want:
            _listeners[(pid, start)] = want
            return True
    return False
