#!/usr/bin/env python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Install the pinned command-line tools of meta/tools.yml, each checked against its SHA-256.

    scripts/install_tools.py [--pins meta/tools.yml] [--dest /usr/local/bin] [--platform linux/ARCH]
                             [--mirror URL] [--only NAME ...]

Used by the execution environment build (execution-environment.yml) and usable on any controller.
Each tool's asset is the one meta/tools.yml pins for the platform: --platform, else the build's
TARGETARCH (buildx and buildah set it), else this machine's (platform.machine()).
Every tool is downloaded and verified before anything is installed: a tool with no checksum or no
asset for the platform, a checksum mismatch or a missing archive member is reported with a message
naming the tool, the other tools are still verified, and nothing is installed while any problem remains.
An asset whose digest meta/tools.yml leaves empty (not confirmed upstream) takes it from the
environment variable KROPS_TOOL_SHA256_<NAME>_<ARCH>, else KROPS_TOOL_SHA256_<NAME> (the execution
environment passes them as build arguments; a multi-platform build needs the first, since the
digests differ per platform); neither ever replaces a pinned digest.
--mirror replaces scheme and host of every URL (an internal mirror with the same paths).
Exit status: 0 when every tool is installed, 1 otherwise.
"""

import argparse
import hashlib
import io
import os
import platform as host
import re
import sys
import tarfile
import urllib.parse
import urllib.request

import yaml


PLATFORMS = ("linux/amd64", "linux/arm64")
# platform.machine() names -> the Go/OCI architecture names of TARGETARCH and meta/tools.yml.
MACHINES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class ToolError(Exception):
    pass


def load_pins(path):
    with open(path, encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    tools = (data or {}).get("tools")
    if not isinstance(tools, dict) or not tools:
        raise ToolError(
            f"{path}: expected a `tools:` mapping of name -> {{version, assets: {{platform: {{url, sha256}}}}}}"
        )
    for name, pin in tools.items():
        assets = (pin or {}).get("assets") if isinstance(pin, dict) else None
        if not isinstance(assets, dict) or not assets:
            raise ToolError(f"{path}: {name} has no `assets:` mapping of platform -> {{url, sha256, checksum_source}}")
        for key, asset in assets.items():
            if key not in PLATFORMS:
                raise ToolError(f"{path}: {name} has an asset for {key}; platforms are {', '.join(PLATFORMS)}")
            if not isinstance(asset, dict) or not asset.get("url"):
                raise ToolError(f"{path}: {name} {key} has no url")
            # A copied entry left with the other platform's file would install the wrong binary.
            if not names_arch(asset["url"], key.split("/")[1]):
                raise ToolError(f"{path}: {name} {key}: {asset['url']} does not name {key.split('/')[1]}")
    return tools


def names_arch(url, arch):
    return any(marker in url for marker in (f"-{arch}", f"/{arch}/", f".{arch}", f"_{arch}"))


def lacking(tools, platform):
    """The tools meta/tools.yml pins no asset for on this platform, sorted."""
    return sorted(name for name, pin in tools.items() if platform not in pin["assets"])


def build_platform(given=None, environ=None, machine=None, system=None):
    """linux/<arch> to install for: the given one, else TARGETARCH, else this machine's."""
    environ = os.environ if environ is None else environ
    if given:
        if given not in PLATFORMS:
            raise ToolError(f"unknown platform {given}: choose from {', '.join(PLATFORMS)}")
        return given
    arch = (environ.get("TARGETARCH") or "").strip()
    if arch:
        if f"linux/{arch}" not in PLATFORMS:
            raise ToolError(f"TARGETARCH is {arch}: meta/tools.yml pins assets for {', '.join(PLATFORMS)}")
        return f"linux/{arch}"
    system = system or host.system()
    if system != "Linux":  # the pins are Linux binaries; they would not run here
        raise ToolError(f"this machine runs {system}: meta/tools.yml pins Linux assets; pass --platform to fetch one")
    machine = machine or host.machine()
    if machine not in MACHINES:
        raise ToolError(f"this machine is {machine}: pass --platform ({', '.join(PLATFORMS)})")
    return f"linux/{MACHINES[machine]}"


def asset_for(name, pin, platform):
    """The tool's asset for the platform, with its version; ToolError when meta/tools.yml has none."""
    asset = pin["assets"].get(platform)
    if asset is None:
        raise ToolError(
            "{} {}: meta/tools.yml pins no {} asset (only {}); pin its url, sha256 and checksum_source there".format(
                name, pin.get("version"), platform, ", ".join(pin["assets"])
            )
        )
    return dict(asset, version=pin.get("version"), platform=platform)


def mirrored(url, mirror):
    if not mirror:
        return url
    parts, base = urllib.parse.urlsplit(url), urllib.parse.urlsplit(mirror)
    return urllib.parse.urlunsplit((base.scheme, base.netloc, base.path.rstrip("/") + parts.path, parts.query, ""))


def fetch(url, timeout=120):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def env_name(name, arch=None):
    return "KROPS_TOOL_SHA256_" + re.sub(r"[^A-Z0-9]", "_", name.upper()) + (f"_{arch.upper()}" if arch else "")


def wanted_digest(name, pin, environ):
    """The SHA-256 to check: the pin, else the tool's environment variable (the platform's first);
    ToolError when neither."""
    pinned = (pin.get("sha256") or "").strip().lower()
    arch = (pin.get("platform") or "").partition("/")[2]
    variable = env_name(name, arch) if arch and environ.get(env_name(name, arch)) else env_name(name)
    given = (environ.get(variable) or "").strip().lower()
    if given and not re.fullmatch(r"[0-9a-f]{64}", given):
        raise ToolError(
            f"{name} {pin.get('version')}: {variable} is {environ.get(variable)!r}, not a SHA-256 (64 hex digits)"
        )
    if pinned:
        if given and given != pinned:
            raise ToolError(
                f"{name} {pin.get('version')}: {variable} is set but meta/tools.yml pins {pinned}; unset it "
                "(the environment only supplies digests meta/tools.yml leaves empty)"
            )
        return pinned
    if given:
        return given
    raise ToolError(
        "{} {}: no SHA-256 is pinned in meta/tools.yml (checksum_source: {}); read the digest of {} on its release "
        "page and write it there, or pass it as {} (a build argument of the execution environment)".format(
            name,
            pin.get("version"),
            pin.get("checksum_source", "unknown"),
            pin.get("url"),
            variable if not arch else f"{env_name(name, arch)} or {env_name(name)}",
        )
    )


def verified(name, pin, mirror=None, environ=None):
    """Download and check one tool's asset (asset_for); {filename: content} of what it installs."""
    want = wanted_digest(name, pin, os.environ if environ is None else environ)
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
    return files


def write(files, dest):
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


def install(name, pin, dest, mirror=None, platform=None):
    """Download, verify and install one tool for the platform; returns the installed paths."""
    return write(verified(name, asset_for(name, pin, build_platform(platform)), mirror), dest)


def main(argv=None):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pins", default=os.path.join(root, "meta", "tools.yml"))
    parser.add_argument("--dest", default="/usr/local/bin")
    parser.add_argument(
        "--platform", default=None, help="linux/amd64 or linux/arm64 (default: TARGETARCH, else this machine)"
    )
    parser.add_argument("--mirror", default=os.environ.get("KROPS_TOOLS_MIRROR") or None)
    parser.add_argument("--only", nargs="*", default=None, help="install only these tools")
    args = parser.parse_args(argv)
    try:
        pins = load_pins(args.pins)
        platform = build_platform(args.platform)
        names = args.only if args.only else list(pins)
        unknown = [n for n in names if n not in pins]
        if unknown:
            raise ToolError("unknown tool(s) {}; meta/tools.yml pins {}".format(", ".join(unknown), ", ".join(pins)))
    except ToolError as exc:
        sys.stderr.write(f"install_tools: {exc}\n")
        return 1
    # Verify every tool first, so one run names every problem; install only when all passed.
    ready, problems = {}, []
    for name in names:
        try:
            ready[name] = verified(name, asset_for(name, pins[name], platform), args.mirror)
        except ToolError as exc:
            problems.append(str(exc))
    if problems:
        for problem in problems:
            sys.stderr.write(f"install_tools: {problem}\n")
        if len(names) > 1:
            sys.stderr.write(
                "install_tools: verified {}; installed nothing ({} problem{} above)\n".format(
                    ", ".join(ready) or "nothing", len(problems), "" if len(problems) == 1 else "s"
                )
            )
        return 1
    for name in names:
        for path in write(ready[name], args.dest):
            print("installed {} {}: {}".format(name, pins[name]["version"], path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
