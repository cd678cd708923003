# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The emulated world as a long-running process, for Molecule (extensions/molecule/emulated) and the benchmark.

    python -m tests.substrate.world_server STATE_DIR

starts the kind cluster's StrictKubeEmulator, Debian's docker-registry on 127.0.0.1, and the
emulated Flux and CAPI reconciling in the background; then writes STATE_DIR/world.json (kubeconfig
path, registry host:port, pid) and a kubeconfig, and runs until SIGTERM, when it stops the
registry and the API servers. Workload clusters that CAPI provisions get their own API servers in
this process. Nothing is written outside STATE_DIR.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

import yaml

from tests.substrate.capi_world import CapiController
from tests.substrate.fixtures import ManagedProcess, free_port, wait_until_answers
from tests.substrate.flux_world import FluxController, World
from tests.substrate.strict_api import StrictKubeEmulator

KIND_NAME = "kind-krops-local-host"


def start_registry(state):
    port = free_port()
    root = state / "registry"
    root.mkdir(exist_ok=True)
    config = state / "registry.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "warn"},
                "storage": {"filesystem": {"rootdirectory": str(root)}, "delete": {"enabled": True}},
                "http": {"addr": "127.0.0.1:%d" % port},
            }
        )
    )
    binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    server = ManagedProcess([binary, "serve", str(config)], state / "registry.log")
    wait_until_answers("http://127.0.0.1:%d/v2/" % port, process=server.process)
    return server, "127.0.0.1:%d" % port


def main(argv):
    if len(argv) != 1:
        sys.stderr.write("usage: python -m tests.substrate.world_server STATE_DIR\n")
        return 2
    state = Path(argv[0]).resolve()
    state.mkdir(parents=True, exist_ok=True)
    registry_process, registry = start_registry(state)
    spawned = []

    def spawn(name):
        api = StrictKubeEmulator(name).start()
        spawned.append(api)
        api.write_kubeconfig(state / (f"{name}.kubeconfig"), context=name)
        return api

    kind = StrictKubeEmulator(KIND_NAME).start()
    kubeconfig = kind.write_kubeconfig(state / "kind.kubeconfig", context=KIND_NAME)
    world = World()
    world.add_cluster(kind)
    FluxController(world, state / "work", registry_aliases={"krops-registry:5000": registry})
    CapiController(world, spawn=spawn)
    world.start()
    (state / "world.json").write_text(
        json.dumps({"kubeconfig": kubeconfig, "context": KIND_NAME, "registry": registry, "pid": os.getpid()})
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    errors = world.stop()
    for api in [kind] + spawned:
        api.stop()
    registry_process.stop()
    (state / "world.json").unlink(missing_ok=True)
    if errors:
        sys.stderr.write("world errors:\n{}\n".format("\n".join(errors)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
