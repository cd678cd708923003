# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Phase 1, export: Secret <mgmt>-kubeconfig merged into the target kubeconfig (0600), context renamed,
server rewritten on load-balancer platforms; the nodes are Ready."""

from __future__ import annotations

import base64
import os
import tempfile

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
        "%s-lb" % pv.mgmt,
    ]
    rc, out, err = run_command(argv, timeout=60)
    if rc != 0 or not out.strip().isdigit():
        raise command_failed(
            "export", argv, rc, out, err, "finding the published port of the load balancer %s-lb" % pv.mgmt
        )
    return int(out.strip())


def render_kubeconfig(raw, context, server=None):
    """The exported kubeconfig with its context (and cluster and user) named ``context``, the server rewritten."""
    try:
        return kube.render_kubeconfig(raw, context, server)
    except kube.KubeError as exc:
        raise PivotError("export", "the management kubeconfig Secret is not usable: %s" % exc)


def run(pv):
    phase = "export"
    if pv.already_moved:
        return
    secret_name = "%s-kubeconfig" % pv.mgmt
    secret = kube.get(pv.source, "v1", "Secret", secret_name, pv.namespace)
    if secret is None and not pv.check_mode and (pv.target is not None or existing_target(pv) is not None):
        pv.say("Secret %s/%s already moved; using %s" % (pv.namespace, secret_name, pv.target_kubeconfig))
    else:
        if secret is None and not pv.check_mode:
            total = pv.options.get("mgmt_ready_timeout") or pv.env["mgmt-ready-timeout"]
            deadline = pv.mgmt_deadline or pv.clock() + pv.wait_left("mgmt", total)
            pv.say(">>> waiting for Secret %s/%s" % (pv.namespace, secret_name))
            try:
                pv.budgeted_wait(
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
                    lambda state: "Secret %s/%s not found yet" % (pv.namespace, secret_name),
                )
            except kube.WaitTimeout:
                raise PivotError(
                    phase,
                    "Secret %s/%s (the management cluster's kubeconfig) did not appear on the kind cluster "
                    "within mgmt-ready-timeout; check `clusterctl describe cluster %s -n %s`"
                    % (pv.namespace, secret_name, pv.mgmt, pv.namespace),
                )
            secret = kube.get(pv.source, "v1", "Secret", secret_name, pv.namespace)
        if secret is None:
            raise PivotError(
                phase,
                "Secret %s/%s (the management cluster's kubeconfig) does not exist on the kind cluster"
                % (pv.namespace, secret_name),
            )
        try:
            raw = base64.b64decode((secret.get("data") or {}).get("value") or "").decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            raw = ""
        if not raw:
            raise PivotError(
                phase, "Secret %s/%s has no base64 kubeconfig under data.value" % (pv.namespace, secret_name)
            )
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
                if kube.write_kubeconfig(pv.target_kubeconfig, text, pv.target_context, check_mode=True):
                    pv.changed()
            except kube.KubeError as exc:
                raise PivotError(phase, "the management kubeconfig %s: %s" % (pv.target_kubeconfig, exc))
        else:
            # Merged: other contexts of an existing file (~/.kube/config) survive; the file is 0600.
            try:
                if kube.write_kubeconfig(pv.target_kubeconfig, text, pv.target_context):
                    pv.changed()
                    pv.say("wrote %s (context %s)" % (pv.target_kubeconfig, pv.target_context))
            except kube.KubeError as exc:
                raise PivotError(phase, "cannot export the management kubeconfig: %s" % exc)
            pv.connect_kubeconfig = pv.target_kubeconfig
        try:
            pv.target = pv.connect(pv.connect_kubeconfig, pv.target_context)
        except kube.KubeError as exc:
            raise PivotError(phase, "the management cluster %s does not answer: %s" % (pv.mgmt, exc))
    if _same_cluster(pv):
        raise PivotError(
            phase,
            "the exported management kubeconfig points at the kind cluster itself (%s); refusing to move onto the source"
            % pv.target.configuration.host,
        )
    wait_nodes(pv)


def _same_cluster(pv):
    try:
        return pv.source is not None and pv.source.configuration.host == pv.target.configuration.host
    except AttributeError:
        return False


def _node_states(objects):
    nodes = {name: kube.readiness(obj)[0] for (_ns, name), obj in objects.items()}
    if not nodes:
        return False, "Nodeless"
    if all(nodes.values()):
        return True, "Ready"
    return False, "Pending: %s not Ready" % ", ".join(sorted(n for n, ready in nodes.items() if not ready))


def wait_nodes(pv):
    if pv.check_mode:
        return
    timeout = pv.timeout("node")
    pv.say(">>> waiting up to %ss for the management cluster's nodes" % timeout)
    try:
        pv.budgeted_wait(
            "nodes",
            "export",
            "nodes",
            timeout,
            pv.wait_left("nodes", timeout),
            lambda limit: kube.watch_until(pv.target, "v1", "Node", None, _node_states, limit, on_progress=pv.say),
            lambda state: "nodes of %s: %s" % (pv.mgmt, state),
        )
    except kube.WaitTimeout as exc:
        nodes = kube.list_objects(pv.target, "v1", "Node")
        if any(kube.readiness(n)[0] for n in nodes):
            pv.say("! %s after %ss; continuing (node pools that register late are tolerated)" % (exc.state, timeout))
            return
        raise PivotError(
            "export",
            "no node of the management cluster %s became Ready within %ss (%s); check its machines"
            % (pv.mgmt, timeout, exc.state),
        )
    except (kube.KubeError,) + API_ERRORS as exc:
        raise PivotError(
            "export", "cannot read the nodes of the management cluster %s: %s" % (pv.mgmt, kube.error_text(exc))
        )
