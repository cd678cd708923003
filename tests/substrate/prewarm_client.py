"""The client half of prewarm.py: what ansible runs as the Python interpreter of a module (stdlib only).

It hands an AnsiballZ run to the warm server and exits with the module's status; anything else (or no server)
it execs the real Python for, so it behaves as that Python does.
"""

import base64
import io
import json
import os
import re
import signal
import socket
import struct
import sys
import zipfile

ANSIBALLZ_MARK = b"_ANSIBALLZ_WRAPPER = True"


def _runs_warm(argv, site_dir):
    """True for an AnsiballZ file whose payload brings no ansible/ file of its own (read once)."""
    if len(argv) != 1 or not os.path.isfile(argv[0]):
        return False
    with open(argv[0], "rb") as handle:
        text = handle.read()
    return ANSIBALLZ_MARK in text[:4096] and _brings_no_ansible_files(text, site_dir)


_ZIP_DATA = re.compile(rb"^zip_data='([A-Za-z0-9+/=]+)',$", re.M)  # module_common's wrapper arguments


def _brings_no_ansible_files(text, site_dir):
    """True when every ansible/ file of the payload is one of the venv's ansible-core (the stub __init__ files aside).

    The warm server has ansible.module_utils.basic preloaded from the venv, so the ``ansible`` package there is the
    venv's: a payload that brings files of its own under ansible/ (a ``library/`` module as ansible.legacy.*, a
    playbook's ``module_utils/``) would not find them, and runs on the real Python instead."""
    found = _ZIP_DATA.search(text)
    if found is None:  # no payload: nothing of its own
        return True
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(found.group(1)))) as payload:
        names = [n for n in payload.namelist() if n.startswith("ansible/") and not n.endswith("/")]
    return all(os.path.isfile(os.path.join(site_dir, name)) for name in names)


def recv_exact(conn, size):
    """SIZE bytes from CONN, or None when it closes first (the server's reader uses it too)."""
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def main(sock_path, python, site_dir):
    argv = sys.argv[1:]
    conn = None
    if _runs_warm(argv, site_dir):
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
