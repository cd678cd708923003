#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: engine_ping
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Check that a container engine answers at the socket a krops run will use
description:
  - Sends the Engine API ping (C(GET /_ping), answered C(OK) by Docker and by Podman's Docker-compatible socket)
    to O(docker_host) and fails with one line naming the endpoint when nothing answers there, before any
    step that needs the engine (kind, the local registry, CAPD's containers) starts.
  - The endpoint is resolved as the community.docker modules resolve theirs. An C(ssh://) endpoint is not
    probed (RV(probed=false)).
  - It never changes anything.
options:
  docker_host:
    description:
      - The engine's address, V(unix:///path/to/socket) or V(tcp://host:port) (HTTPS when E(DOCKER_TLS) or
        E(DOCKER_TLS_VERIFY) is set, with the certificates in E(DOCKER_CERT_PATH)).
      - When not set, E(DOCKER_HOST), then V(unix:///var/run/docker.sock).
    type: str
  timeout:
    description: Seconds the engine gets to answer (at least 1).
    type: int
    default: 5
extends_documentation_fragment:
  - krops.platform.attributes
attributes:
  check_mode:
    details: The ping only reads, so it runs in check mode too.
  platform:
    details: Probes the engine from the host it runs on (the playbooks use localhost).
notes:
  - Reads only. A failure's message is one line that names the endpoint and the fix, start Docker or Podman's
    socket, or set E(DOCKER_HOST).
"""

EXAMPLES = r"""
- name: Check that the container engine answers
  krops.platform.engine_ping:

- name: Check the engine the local registry will use
  krops.platform.engine_ping:
    docker_host: unix:///run/user/1000/podman/podman.sock
"""

RETURN = r"""
docker_host:
  description: The endpoint probed.
  returned: always
  type: str
  sample: unix:///var/run/docker.sock
api_version:
  description: The highest Engine API version the engine supports (its C(Api-Version) header), when it sent one.
  returned: success
  type: str
  sample: "1.45"
probed:
  description: False when the endpoint was not probed (C(ssh://)).
  returned: success
  type: bool
  sample: true
"""

from ansible_collections.krops.platform.plugins.module_utils import engine, shell

NAME = "engine_ping"


def argument_spec():
    return dict(docker_host=dict(type="str"), timeout=dict(type="int", default=5))


def body(module, step):
    shell.positive(module.params, "timeout", unit=" second")
    step("pinging the engine")
    result = engine.ping(engine.docker_host(module.params["docker_host"]), module.params["timeout"])
    result["changed"] = False
    return result


def main():
    shell.run(NAME, argument_spec(), body)


if __name__ == "__main__":
    main()
