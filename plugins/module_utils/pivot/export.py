# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Phase 1, export: Secret <mgmt>-kubeconfig merged into the target kubeconfig (0600), context renamed,
server rewritten on load-balancer platforms; the nodes are Ready."""

from __future__ import annotations

import base64
import os
import tempfile

from ansible_collections.krops.platform.plugins.module_utils import kubeconfigs
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils.pivot.common import (
    API_ERRORS,
    PivotError,
    command_failed,
    existing_target,
    find_binary,
    run_command,
)


def lb_port_from_docker(pv):
    """Published host port of the <mgmt>-lb container's 6443/tcp (local-host)."""
    docker = find_binary("docker", pv.options.get("docker_binary"))
    argv = [
        docker,
        "inspect",
        "-f",
        '{{(index (index .NetworkSettings.Ports "6443/tcp") 0).HostPort}}',
        f"{pv.mgmt}-lb",
    ]
    rc, out, err = run_command(argv, timeout=60)
    if rc != 0 or not out.strip().isdigit():
        raise command_failed(
            "export", argv, rc, out, err, f"finding the published port of the load balancer {pv.mgmt}-lb"
        )
    return int(out.strip())


def render_kubeconfig(raw, context, server=None):
    """The exported kubeconfig with its context (and cluster and user) named ``context``, the server rewritten."""
    try:
        return kubeconfigs.render_kubeconfig(raw, context, server)
    except kube.KubeError as exc:
        raise PivotError("export", f"the management kubeconfig Secret is not usable: {exc}")


def _await_kubeconfig_secret(pv, phase, secret_name):
    """The management cluster's kubeconfig Secret on the kind cluster, waited for within mgmt-ready-timeout (CAPI
    writes it once the control plane is up); PivotError when it does not appear in time."""
    total = pv.options.get("mgmt_ready_timeout") or pv.env.mgmt_ready_timeout
    deadline = pv.mgmt_deadline or pv.clock() + pv.wait_left("mgmt", total)
    pv.say(f">>> waiting for Secret {pv.namespace}/{secret_name}")
    try:
        pending = pv.budgeted_wait(
            "mgmt",
            phase,
            "management cluster",
            total,
            pv.remaining(deadline),
            lambda limit: kube.watch_until(
                pv.source,
                "v1",
                "Secret",
                pv.namespace,
                lambda objs: ((pv.namespace, secret_name) in objs, None),
                limit,
            ),
            lambda state: f"Secret {pv.namespace}/{secret_name} not found yet",
        )
    except kube.WaitTimeout:
        raise PivotError(
            phase,
            f"Secret {pv.namespace}/{secret_name} (the management cluster's kubeconfig) did not appear on the kind cluster "
            f"within mgmt-ready-timeout; check `clusterctl describe cluster {pv.mgmt} -n {pv.namespace}`",
        )
    return None if pending else kube.get(pv.source, "v1", "Secret", secret_name, pv.namespace)


def run(pv):
    phase = "export"
    if pv.already_moved:
        return
    secret_name = f"{pv.mgmt}-kubeconfig"
    secret = kube.get(pv.source, "v1", "Secret", secret_name, pv.namespace)
    if secret is None and not pv.check_mode and (pv.target is not None or existing_target(pv) is not None):
        pv.say(f"Secret {pv.namespace}/{secret_name} already moved; using {pv.target_kubeconfig}")
    else:
        if secret is None and not pv.check_mode:
            secret = _await_kubeconfig_secret(pv, phase, secret_name)
            if pv.pending:
                return
        if secret is None:
            raise PivotError(
                phase,
                f"Secret {pv.namespace}/{secret_name} (the management cluster's kubeconfig) does not exist on the kind cluster",
            )
        try:
            raw = base64.b64decode((secret.get("data") or {}).get("value") or "").decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            raw = ""
        if not raw:
            raise PivotError(phase, f"Secret {pv.namespace}/{secret_name} has no base64 kubeconfig under data.value")
        server = pv.options.get("target_server")
        if not server and pv.profile.lb_rewrite:  # the Secret names the container address; the host reaches the LB port
            port = pv.options.get("lb_port") or lb_port_from_docker(pv)
            server = "https://127.0.0.1:%d" % int(port)
        text = render_kubeconfig(raw, pv.target_context, server)
        if pv.check_mode:
            pv._tempdir = tempfile.mkdtemp(prefix="krops-pivot-")
            pv.connect_kubeconfig = os.path.join(pv._tempdir, "target.kubeconfig")
            kube.write_private(pv.connect_kubeconfig, text)
            try:
                if kubeconfigs.write_kubeconfig(pv.target_kubeconfig, text, check_mode=True):
                    pv.changed()
            except kube.KubeError as exc:
                raise PivotError(phase, f"the management kubeconfig {pv.target_kubeconfig}: {exc}")
        else:
            # Merged: other contexts of an existing file (~/.kube/config) survive; the file is 0600.
            try:
                if kubeconfigs.write_kubeconfig(pv.target_kubeconfig, text):
                    pv.changed()
                    pv.say(f"wrote {pv.target_kubeconfig} (context {pv.target_context})")
            except kube.KubeError as exc:
                raise PivotError(phase, f"cannot export the management kubeconfig: {exc}")
            pv.connect_kubeconfig = pv.target_kubeconfig
        try:
            pv.target = pv.connect(pv.connect_kubeconfig, pv.target_context)
        except kube.KubeError as exc:
            raise PivotError(phase, f"the management cluster {pv.mgmt} does not answer: {exc}")
    if _same_cluster(pv):
        raise PivotError(
            phase,
            f"the exported management kubeconfig points at the kind cluster itself ({pv.target.configuration.host}); refusing to move onto the source",
        )
    wait_nodes(pv)


def _same_cluster(pv):
    try:
        return pv.source is not None and pv.source.configuration.host == pv.target.configuration.host
    except AttributeError:
        return False


def _node_states(objects):
    """kube.node_states, its state as the line the pivot prints."""
    ready, nodes = kube.node_states(objects)
    if not nodes:
        return False, "Nodeless"
    if ready:
        return True, "Ready"
    return False, "Pending: {} not Ready".format(", ".join(n["name"] for n in nodes if not n["ready"]))


def wait_nodes(pv):
    if pv.check_mode:
        return
    timeout = pv.timeout("node")
    pv.say(f">>> waiting up to {timeout}s for the management cluster's nodes")
    try:
        if pv.budgeted_wait(
            "nodes",
            "export",
            "nodes",
            timeout,
            pv.wait_left("nodes", timeout),
            lambda limit: kube.watch_until(pv.target, "v1", "Node", None, _node_states, limit, on_progress=pv.say),
            lambda state: f"nodes of {pv.mgmt}: {state}",
        ):
            return
    except kube.WaitTimeout as exc:
        nodes = kube.list_objects(pv.target, "v1", "Node")
        if any(kube.readiness(n)[0] for n in nodes):
            pv.say(f"! {exc.state} after {timeout}s; continuing (node pools that register late are tolerated)")
            return
        raise PivotError(
            "export",
            f"no node of the management cluster {pv.mgmt} became Ready within {timeout}s ({exc.state}); check its machines",
        )
    except (kube.KubeError,) + API_ERRORS as exc:
        raise PivotError("export", f"cannot read the nodes of the management cluster {pv.mgmt}: {kube.error_text(exc)}")
