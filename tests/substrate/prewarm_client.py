"""The client half of prewarm.py: what ansible runs as the Python interpreter of a module (stdlib only).

It hands an AnsiballZ run to the warm server and exits with the module's status; anything else (or no server)
it execs the real Python for, so it behaves as that Python does.
"""

import json
import os
import signal
import socket
import struct
import sys

ANSIBALLZ_MARK = b"_ANSIBALLZ_WRAPPER = True"


def _is_ansiballz(argv):
    if len(argv) != 1 or not os.path.isfile(argv[0]):
        return False
    with open(argv[0], "rb") as handle:
        return ANSIBALLZ_MARK in handle.read(4096)


def recv_exact(conn, size):
    """SIZE bytes from CONN, or None when it closes first (the server's reader uses it too)."""
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def main(sock_path, python):
    argv = sys.argv[1:]
    conn = None
    if _is_ansiballz(argv):
        try:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(sock_path)
        except OSError:
            conn = None
    if conn is None:
        os.execv(python, [python] + argv)
    body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    conn.sendmsg([struct.pack("!Q", len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", 0, 1, 2))])
    conn.sendall(body)
    raw = recv_exact(conn, 8)
    if raw is None:
        os.kill(os.getpid(), signal.SIGKILL)
    (child,) = struct.unpack("!q", raw)

    forwarded = []

    def forward(signum, _frame):
        forwarded.append(signum)
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    raw = recv_exact(conn, 8)
    if raw is None:  # the module died without a status (a signal): so does this process, by the same signal
        signum = forwarded[-1] if forwarded else signal.SIGKILL
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    sys.stdout.flush()
    os._exit(struct.unpack("!q", raw)[0] & 0xFF)
