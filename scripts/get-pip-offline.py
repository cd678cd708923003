"""Offline stand-in for ansible-test's get-pip bootstrap.

ansible-test downloads get-pip.py to seed pip into the virtual environments it
creates; that download cannot work without internet. This script seeds pip from
the interpreter's own ensurepip, then installs the requested packages with the
machine's usual pip configuration (index, proxy, CA).
"""

import os
import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main():
    env = dict(os.environ)
    # ensurepip points PIP_CONFIG_FILE at /dev/null, which would hide the machine's configuration.
    env.pop("PIP_CONFIG_FILE", None)
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"], env=env)
    env.pop("PIP_CONFIG_FILE", None)
    args = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY]
    subprocess.check_call([sys.executable, "-m", "pip", "install"] + args, env=env)


if __name__ == "__main__":
    main()
