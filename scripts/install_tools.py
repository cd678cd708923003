#!/usr/bin/env python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Install the pinned command-line tools of meta/tools.yml, each checked against its SHA-256.

    scripts/install_tools.py [--pins meta/tools.yml] [--dest /usr/local/bin] [--mirror URL] [--only NAME ...]

Used by the execution environment build (execution-environment.yml) and usable on any controller.
Every download is verified before anything is installed; a tool with no pinned checksum, a
checksum mismatch or a missing archive member stops the run with a message naming the tool.
--mirror replaces scheme and host of every URL (an internal mirror with the same paths).
Exit status: 0 when every tool is installed, 1 otherwise.
"""

import argparse
import hashlib
import io
import os
import sys
import tarfile
import urllib.parse
import urllib.request

import yaml


class ToolError(Exception):
    pass


def load_pins(path):
    with open(path, encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    tools = (data or {}).get("tools")
    if not isinstance(tools, dict) or not tools:
        raise ToolError(f"{path}: expected a `tools:` mapping of name -> {{version, url, sha256}}")
    return tools


def mirrored(url, mirror):
    if not mirror:
        return url
    parts, base = urllib.parse.urlsplit(url), urllib.parse.urlsplit(mirror)
    return urllib.parse.urlunsplit((base.scheme, base.netloc, base.path.rstrip("/") + parts.path, parts.query, ""))


def fetch(url, timeout=120):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def install(name, pin, dest, mirror=None):
    """Download, verify and install one tool; returns the installed paths."""
    want = (pin.get("sha256") or "").strip().lower()
    if len(want) != 64:
        raise ToolError(
            "{} {}: no SHA-256 is pinned in meta/tools.yml (checksum_source: {}); confirm the digest of {} "
            "and write it there".format(name, pin.get("version"), pin.get("checksum_source", "unknown"), pin.get("url"))
        )
    url = mirrored(pin["url"], mirror)
    try:
        data = fetch(url)
    except OSError as exc:
        raise ToolError("{} {}: cannot download {}: {}".format(name, pin.get("version"), url, exc)) from None
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise ToolError(
            "{} {}: SHA-256 mismatch for {}: expected {}, got {}; nothing was installed".format(
                name, pin.get("version"), url, want, got
            )
        )
    members = ([pin["member"]] + list(pin.get("also") or [])) if pin.get("member") else []
    files = {}
    if members:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            for member in members:
                try:
                    files[os.path.basename(member)] = archive.extractfile(member).read()
                except (KeyError, AttributeError):
                    raise ToolError("{} {}: {} has no file {}".format(name, pin.get("version"), url, member)) from None
    else:
        files[name] = data
    installed = []
    os.makedirs(dest, exist_ok=True)
    for filename, content in files.items():
        target = os.path.join(dest, filename)
        with open(target + ".tmp", "wb") as handle:
            handle.write(content)
        os.chmod(target + ".tmp", 0o755)
        os.replace(target + ".tmp", target)
        installed.append(target)
    return installed


def main(argv=None):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pins", default=os.path.join(root, "meta", "tools.yml"))
    parser.add_argument("--dest", default="/usr/local/bin")
    parser.add_argument("--mirror", default=os.environ.get("KROPS_TOOLS_MIRROR") or None)
    parser.add_argument("--only", nargs="*", default=None, help="install only these tools")
    args = parser.parse_args(argv)
    try:
        pins = load_pins(args.pins)
        names = args.only if args.only else list(pins)
        unknown = [n for n in names if n not in pins]
        if unknown:
            raise ToolError("unknown tool(s) {}; meta/tools.yml pins {}".format(", ".join(unknown), ", ".join(pins)))
        for name in names:
            for path in install(name, pins[name], args.dest, args.mirror):
                print("installed {} {}: {}".format(name, pins[name]["version"], path))
    except ToolError as exc:
        sys.stderr.write(f"install_tools: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
