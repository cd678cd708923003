#!/usr/bin/env python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Build the krops.platform tarball and refuse it when it would ship a secret.

    scripts/build_collection.py [--source DIR] [--output DIR]

Runs `ansible-galaxy collection build` (galaxy.yml's build_ignore leaves out key files, caches
and development-only files), then reads every member of the tarball. The build fails, and the
tarball is deleted, when a member

- holds an age secret key (AGE-SECRET-KEY-1 followed by 58 bech32 characters), whatever its name;
- or has a name build_ignore must have kept out (an age key file, a test cache, a local environment).

A pattern cannot read content, so the content check is what keeps a key pasted into any file out.
Exit status: 0 and the tarball's path on stdout; 1 with one line per finding on stderr.
"""

import argparse
import fnmatch
import os
import re
import subprocess
import sys
import tarfile

# age's identity encoding: "AGE-SECRET-KEY-1" and the bech32 data part (upper case).
AGE_SECRET = re.compile(rb"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}")

# Names that must never be in the tarball, whatever galaxy.yml says (a second line of defence).
FORBIDDEN = (
    "*.agekey",
    "*.age.key",
    ".hypothesis",
    ".hypothesis/*",
    "*/.hypothesis/*",
    ".pytest_cache",
    ".pytest_cache/*",
    "*/.pytest_cache/*",
    "tests/output/*",
    ".venv/*",
    ".collections/*",
    "*/.git/*",
    ".git/*",
)


def findings(tarball):
    """One line per member that holds an age secret key or has a forbidden name."""
    problems = []
    with tarfile.open(tarball) as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            name = member.name[2:] if member.name.startswith("./") else member.name
            if any(fnmatch.fnmatch(name, pattern) for pattern in FORBIDDEN):
                problems.append(
                    f"{name}: must not be packed (key file, test cache or local environment); "
                    "add it to build_ignore in galaxy.yml"
                )
                continue
            if not member.isfile():
                continue
            data = archive.extractfile(member).read()
            if AGE_SECRET.search(data):
                problems.append(
                    f"{name}: holds an age secret key (AGE-SECRET-KEY-1...); remove the key from the file "
                    "(keep keys outside the repository, e.g. ~/.config/krops/age.agekey)"
                )
    return problems


def build(source, output):
    galaxy = os.path.join(os.path.dirname(sys.executable), "ansible-galaxy")
    if not os.path.exists(galaxy):
        galaxy = "ansible-galaxy"
    os.makedirs(output, exist_ok=True)
    proc = subprocess.run(
        [galaxy, "collection", "build", "--force", "--output-path", output, source],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit("build_collection: ansible-galaxy collection build failed (exit %d)" % proc.returncode)
    built = [
        line.split("Created collection for ", 1)[1].split(" at ", 1)[1].strip()
        for line in proc.stdout.splitlines()
        if line.startswith("Created collection for ")
    ]
    if len(built) != 1:
        raise SystemExit("build_collection: cannot find the tarball in ansible-galaxy's output:\n" + proc.stdout)
    return built[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--source", default=root, help="collection root (galaxy.yml); default: this checkout")
    parser.add_argument("--output", default=os.path.join(root, "build"), help="folder for the tarball")
    parser.add_argument("--check", metavar="TARBALL", help="only check an existing tarball")
    args = parser.parse_args(argv)
    tarball = args.check or build(args.source, args.output)
    problems = findings(tarball)
    if problems:
        if not args.check:
            os.remove(tarball)
        sys.stderr.write("".join(f"build_collection: {line}\n" for line in problems))
        sys.stderr.write(
            "build_collection: refused %s (%d finding(s))%s\n"
            % (tarball, len(problems), "" if args.check else "; the tarball was deleted")
        )
        return 1
    print(tarball)
    return 0


if __name__ == "__main__":
    sys.exit(main())
