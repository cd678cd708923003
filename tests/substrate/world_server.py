# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The emulated host (tests/substrate/lifecycle.py) as a long-running process, for Molecule
(extensions/molecule/emulated) and anything else that drives the playbooks from outside pytest.

    python -m tests.substrate.world_server STATE_DIR

builds an EmulatedWorld under STATE_DIR (the Docker Engine API double on a unix socket, the kind,
docker, helm and clusterctl stand-ins, emulated Flux, CAPI and CAPD), then writes STATE_DIR/world.json:
``env`` (what ansible-playbook needs: PATH, HOME, DOCKER_HOST, ENGINE_SOCK, REGISTRY_PORT, ...),
``control`` (GET <control>/world/leftovers tells what is left on the host) and ``pid``; it runs until
SIGTERM, then stops everything and removes world.json. Nothing is written outside STATE_DIR (and
the engine socket's folder under /tmp, removed at the end).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

from tests.substrate.lifecycle import EmulatedWorld


def main(argv):
    if len(argv) != 1:
        sys.stderr.write("usage: python -m tests.substrate.world_server STATE_DIR\n")
        return 2
    state = Path(argv[0]).resolve()
    state.mkdir(parents=True, exist_ok=True)
    world = EmulatedWorld(state).start()
    (state / "world.json").write_text(
        json.dumps({"env": world.env, "control": world.control.url, "home": str(world.home), "pid": os.getpid()})
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    errors = world.stop()
    (state / "world.json").unlink(missing_ok=True)
    if errors:
        sys.stderr.write("world errors:\n{}\n".format("\n".join(errors)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
