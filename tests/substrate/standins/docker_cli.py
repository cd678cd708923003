# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A `docker` CLI stand-in: a client of the engine at DOCKER_HOST (the Docker Engine API double).

Commands krops runs: ``version``, ``info --format``, ``inspect [-f FORMAT] NAME...`` and ``exec
[-i] NODE CMD...`` (mkdir -p, cp /dev/stdin, cat: how kind_cluster writes containerd's hosts.toml).
``exec`` goes through tool_contracts.docker_exec_args (docker/cli's flags); without -i the CLI does
not forward stdin. Format strings are Go templates; the forms krops uses are evaluated here
(``{{.A.B}}``, ``{{json .A}}``, ``{{(index (index .A "key") 0).B}}``); any other form fails
instead of answering something made up.
"""

from __future__ import annotations

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import engine, exit_with, read_stdin, record  # noqa: E402

from tests.substrate import tool_contracts as contracts  # noqa: E402

CLIENT_VERSION = "28.3.0"


class TemplateError(Exception):
    pass


def _tokens(text):
    return re.findall(r'\(|\)|"[^"]*"|[^\s()]+', text)


def _evaluate(tokens, data):
    """A pipeline-free Go template expression: .Field.Path, json X, index X KEY..., (X).Field."""

    def term(pos):
        token = tokens[pos]
        if token == "(":
            value, pos = expr(pos + 1)
            if pos >= len(tokens) or tokens[pos] != ")":
                raise TemplateError("unclosed left paren")
            pos += 1
            if pos < len(tokens) and tokens[pos].startswith(".") and tokens[pos] != ".":
                value = _field(value, tokens[pos])
                pos += 1
            return value, pos
        if token.startswith('"'):
            return token[1:-1], pos + 1
        if token.isdigit():
            return int(token), pos + 1
        if token.startswith("."):
            return (_field(data, token) if token != "." else data), pos + 1
        raise TemplateError(f'function "{token}" not defined')

    def expr(pos):
        token = tokens[pos]
        if token == "index":
            value, pos = term(pos + 1)
            while pos < len(tokens) and tokens[pos] != ")":
                key, pos = term(pos)
                try:
                    value = value[key]
                except (KeyError, IndexError, TypeError):
                    raise TemplateError(f"error calling index: index of untyped nil: {key!r}")
            return value, pos
        if token == "json":
            value, pos = term(pos + 1)
            return json.dumps(value), pos
        return term(pos)

    value, pos = expr(0)
    if pos != len(tokens):
        raise TemplateError(f"unexpected {tokens[pos]} in operand")
    return value


def _field(value, path):
    for part in path.strip(".").split("."):
        if not isinstance(value, dict):
            raise TemplateError(f"can't evaluate field {part}")
        if part not in value:
            raise TemplateError(f"map has no entry for key {part!r}")
        value = value[part]
    return value


def render(template, data):
    def one(match):
        value = _evaluate(_tokens(match.group(1)), data)
        if value is None:
            return "<no value>"
        return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (dict, list)) else str(value)

    return re.sub(r"\{\{\s*(.*?)\s*\}\}", one, template)


def daemon(method, path, body=None):
    status, answer = engine(method, path, body)
    if status is None:
        exit_with(answer)
    return status, answer


def main(argv):
    stdin = read_stdin()
    record("docker", argv, stdin)
    try:
        contracts.check_docker(argv)
    except contracts.Refused as exc:
        exit_with(str(exc), exc.rc)
    if argv[:1] == ["version"]:
        print(f"Client: Docker Engine - Community\n Version:           {CLIENT_VERSION}")
        status, answer = engine("GET", "/version")
        if status is None:
            exit_with(answer)
        print(
            "\nServer: Docker Engine - Community\n Engine:\n  Version:          {}\n  API version:      {}".format(
                answer["Version"], answer["ApiVersion"]
            )
        )
        return
    if argv[:1] == ["info"]:
        fmt = None
        if argv[1:2] in (["--format"], ["-f"]) and len(argv) == 3:
            fmt = argv[2]
        elif len(argv) > 1:
            exit_with("docker stand-in: info %s is not emulated" % argv[1:], 2)
        _status, answer = daemon("GET", "/info")
        try:
            print(render(fmt, answer) if fmt else json.dumps(answer))
        except TemplateError as exc:
            exit_with(f"template parsing error: {exc}")
        return
    if argv[:1] == ["inspect"]:
        args, fmt = argv[1:], None
        if args[:1] in (["-f"], ["--format"]):
            if len(args) < 2:
                exit_with("flag needs an argument: 'f' in -f")
            fmt, args = args[1], args[2:]
        if not args:
            exit_with('"docker inspect" requires at least 1 argument.')
        found, missing = [], []
        for name in args:
            status, answer = daemon("GET", f"/containers/{name}/json")
            (found if status == 200 else missing).append(answer if status == 200 else name)
        for item in found:
            try:
                print(render(fmt, item) if fmt else json.dumps([item], indent=4))
            except TemplateError as exc:
                exit_with(f'template: :1: executing "" at <{fmt}>: {exc}')
        if missing:
            exit_with("Error: No such object: %s" % missing[0])
        return
    if argv[:1] == ["exec"]:
        try:
            options, container, command = contracts.docker_exec_args(argv[1:])
        except contracts.Refused as exc:
            exit_with(str(exc), exc.rc)
        forwarded = stdin if ("-i" in options or "--interactive" in options) else ""
        status, answer = daemon("POST", f"/_standin/containers/{container}/exec", {"argv": command, "stdin": forwarded})
        if status == 404:
            exit_with(f"Error response from daemon: No such container: {container}")
        if status != 200:
            exit_with("Error response from daemon: {}".format((answer or {}).get("message", status)))
        sys.stdout.write(answer["stdout"])
        sys.stderr.write(answer["stderr"])
        sys.exit(answer["rc"])
    exit_with("docker stand-in: unsupported command %s" % argv, 2)


if __name__ == "__main__":
    main(sys.argv[1:])
