# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The `docker` CLI of the disconnected host (tests/substrate/airgap_host.py): docker_cli.py plus what the
air-gapped deploy runs.

- ``load -i|--input FILE``: the archive's images into the engine (``Loaded image: <name>`` per tag);
- ``save [-o|--output FILE] IMAGE...``: the images as one archive, to the file or to stdout (refused to a
  terminal, as docker/cli does: "cowardly refusing to save to a terminal. Use the -o flag or redirect");
- ``ps --filter label=K[=V]... --format '{{.Names}}'``: the running containers whose labels match every filter;
- ``exec -i NODE ctr --namespace=k8s.io images import -``: containerd's import of the archive on stdin, inside a
  node container (kind or CAPD); a container that is no node has no ctr.

The engine side (what the archive holds, what a node holds) is the host's: these commands call its control
server (``AIRGAP_HOST_CONTROL``). Everything else is docker_cli.py. Flags: docker/cli
cli/command/image/load.go, save.go, cli/command/container/list.go (v28).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import docker_cli  # noqa: E402
from common import engine, exit_with  # noqa: E402

from tests.substrate import tool_contracts as contracts  # noqa: E402


def _host(path, body):
    request = urllib.request.Request(
        os.environ["AIRGAP_HOST_CONTROL"] + path, data=json.dumps(body).encode(), method="POST"
    )
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:
        exit_with(json.loads(exc.read() or b"{}").get("error", f"HTTP {exc.code}"))


def _option(args, short, long):
    """(value of -x/--long, the other words); docker/cli's pflag forms -x V, --long V, --long=V."""
    value, rest, index = None, [], 0
    while index < len(args):
        word = args[index]
        if word in (short, long):
            if index + 1 >= len(args):
                exit_with(f"flag needs an argument: {word}", 125)
            value = args[index + 1]
            index += 2
            continue
        if word.startswith(long + "="):
            value = word.split("=", 1)[1]
        elif word.startswith("-"):
            exit_with(f"unknown flag: {word}\nSee 'docker --help'.", 125)
        else:
            rest.append(word)
        index += 1
    return value, rest


def load(args):
    path, rest = _option(args, "-i", "--input")
    if rest or path is None:
        exit_with('"docker load" requires no arguments: give the archive with --input', 1)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        exit_with(f"open {path}: {exc.strerror.lower()}")
    answer = _host("/docker/load", {"archive": base64.b64encode(data).decode()})
    for name in answer["loaded"]:
        print(f"Loaded image: {name}")


def save(args):
    out, refs = _option(args, "-o", "--output")
    if not refs:
        exit_with('"docker save" requires at least 1 argument.')
    if out is None and sys.stdout.isatty():
        exit_with("cowardly refusing to save to a terminal. Use the -o flag or redirect")
    data = base64.b64decode(_host("/docker/save", {"images": refs})["archive"])
    if out is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        with open(out, "wb") as handle:
            handle.write(data)


def ps(args):
    filters, fmt, index = [], None, 0
    while index < len(args):
        word = args[index]
        if word in ("--filter", "-f", "--format") and index + 1 < len(args):
            if word == "--format":
                fmt = args[index + 1]
            else:
                filters.append(args[index + 1])
            index += 2
            continue
        exit_with(f"unknown flag: {word}\nSee 'docker ps --help'.", 125)
    if fmt not in (None, "{{.Names}}"):
        exit_with(f"docker stand-in: ps --format {fmt} is not emulated", 2)
    labels = []
    for item in filters:
        key, _eq, value = item.partition("=")
        if key != "label":
            exit_with(f"docker stand-in: ps --filter {item} is not emulated", 2)
        labels.append(value)
    query = json.dumps({"label": labels}) if labels else None
    status, found = engine("GET", "/containers/json" + (f"?filters={urllib.request.quote(query)}" if query else ""))
    if status != 200:
        exit_with(f"Error response from daemon: {found}")
    for container in found:
        print(container["Names"][0].lstrip("/"))


def main(argv):
    if argv[:1] == ["load"]:
        return load(argv[1:])
    if argv[:1] == ["save"]:
        return save(argv[1:])
    if argv[:1] == ["ps"]:
        return ps(argv[1:])
    if argv[:1] == ["exec"]:
        try:
            options, container, command = contracts.docker_exec_args(argv[1:])
        except contracts.Refused as exc:
            exit_with(str(exc), exc.rc)
        if command[:1] == ["ctr"]:
            if command[1:] != ["--namespace=k8s.io", "images", "import", "-"]:
                exit_with(f"docker stand-in: {' '.join(command)} is not emulated", 2)
            stdin = sys.stdin.buffer.read() if ("-i" in options or "--interactive" in options) else b""
            answer = _host("/node/import", {"node": container, "archive": base64.b64encode(stdin).decode()})
            sys.stdout.write(answer["stdout"])
            sys.stderr.write(answer.get("stderr", ""))
            sys.exit(answer["rc"])
    return docker_cli.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
