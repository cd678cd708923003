# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Phase 2, prepare: charts, provider manifests, pivot manifests (${VAR} substituted), credentials and
SOPS secrets on the target; providers Ready and at least at the source's version."""

from __future__ import annotations

import base64
import json
import os

from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils.pivot.common import (
    API_ERRORS,
    CHARTS,
    PivotError,
    SubstitutionError,
    apply_object,
    command_failed,
    find_binary,
    load_documents,
    parse_documents,
    parse_version,
    run_command,
)


def source_variables(pv):
    """Merged data of the source's flux-namespace ConfigMaps (by name), overlaid by pivot-manifest-vars."""
    variables = {}
    if pv.source is not None:
        try:
            maps = kube.list_objects(pv.source, "v1", "ConfigMap", pv.boot.flux_namespace)
        except (kube.KubeError,) + API_ERRORS as exc:
            raise PivotError(
                "prepare",
                f"cannot read the ConfigMaps of {pv.boot.flux_namespace} on the kind cluster: {kube.error_text(exc)}",
            )
        for cm in sorted(maps, key=lambda o: o["metadata"]["name"]):
            variables.update({k: str(v) for k, v in (cm.get("data") or {}).items()})
    variables.update(pv.env.pivot_manifest_vars)
    variables.update(pv.options.get("manifest_vars") or {})
    return variables


def run_tags(pv):
    """The run tags ConfigMap of the source (flux_handoff writes it on the target; flux.run_tags derives
    the GCP label forms there again)."""
    if pv.source is None:
        return {}
    cm = kube.get(pv.source, "v1", "ConfigMap", pv.boot.run_configmap, pv.boot.flux_namespace)
    return dict((cm or {}).get("data") or {})


def _helm_installed(pv, helm, release, namespace):
    argv = [
        helm,
        "list",
        "-n",
        namespace,
        "--filter",
        f"^{release}$",
        "-o",
        "json",
        "--kubeconfig",
        pv.connect_kubeconfig,
        "--kube-context",
        pv.target_context,
    ]
    rc, out, err = run_command(argv, timeout=120)
    if rc != 0:
        raise command_failed(
            "prepare", argv, rc, out, err, f"listing helm release {namespace}/{release} on the management cluster"
        )
    try:
        releases = json.loads(out or "[]") or []
    except ValueError:
        releases = []
    for item in releases:
        if item.get("name") == release:
            return item
    return None


def install_charts(pv):
    helm = find_binary("helm", pv.options.get("helm_binary"))
    timeout = pv.timeout("wait")
    for key in ("cert-manager", "capi-operator"):
        release, chart, repo, namespace, values = CHARTS[key]
        version = pv.config.charts.pin(key)
        if key == "cert-manager" and not version.startswith("v"):
            version = "v" + version
        current = _helm_installed(pv, helm, release, namespace)
        entry = {"release": release, "namespace": namespace, "chart": chart, "version": version}
        wanted = f"{chart}-{version}"
        if (
            current
            and current.get("chart") in (wanted, "{}-{}".format(chart, version.lstrip("v")))
            and current.get("status") == "deployed"
        ):
            entry["state"] = "unchanged"
            pv.result["charts"].append(entry)
            continue
        entry["state"] = "upgraded" if current else "installed"
        pv.result["charts"].append(entry)
        pv.changed()
        if pv.check_mode:
            continue
        argv = [
            helm,
            "upgrade",
            "--install",
            release,
            chart,
            "--repo",
            repo,
            "--version",
            version,
            "-n",
            namespace,
            "--create-namespace",
            "--wait",
            "--timeout",
            "%ds" % timeout,
            "--kubeconfig",
            pv.connect_kubeconfig,
            "--kube-context",
            pv.target_context,
        ]
        for value in values:
            argv += ["--set", value]
        pv.say(f">>> helm upgrade --install {release} {chart} {version}")
        rc, out, err = run_command(argv, timeout=timeout + 120)
        if rc != 0:
            raise command_failed(
                "prepare", argv, rc, out, err, f"installing chart {chart} {version} on the management cluster"
            )


def _apply_docs(pv, docs, origin):
    applied = []
    for doc in docs:
        state = apply_object(pv.target, doc, pv.check_mode)
        item = dict(kube.identity(doc), state=state, file=origin)
        item["namespace"] = item["namespace"] or ""
        pv.result["applied"].append(item)
        if state != "unchanged":
            pv.changed()
        applied.append(doc)
    return applied


def aws_credentials(pv):
    """Secret capa-system/aws-credentials on the target (aws): option, else copied from the source."""
    value = pv.options.get("aws_b64encoded_credentials")
    if not value and pv.source is not None:
        secret = kube.get(pv.source, "v1", "Secret", "aws-credentials", "capa-system")
        encoded = ((secret or {}).get("data") or {}).get("AWS_B64ENCODED_CREDENTIALS")
        if encoded:
            value = base64.b64decode(encoded).decode("utf-8")
    if not value:
        raise PivotError(
            "prepare",
            "aws: no credentials for Secret capa-system/aws-credentials: set AWS_B64ENCODED_CREDENTIALS "
            "(clusterawsadm bootstrap credentials encode-as-profile) or create that Secret on the kind cluster",
        )
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": "aws-credentials", "namespace": "capa-system"},
        "stringData": {"AWS_B64ENCODED_CREDENTIALS": value},
    }
    _apply_docs(pv, [secret], "(aws credentials)")


# Credential steps by the profile's pivot_credentials (platforms whose pivot-manifests carry them have none).
CREDENTIALS = {"aws": aws_credentials}


def decrypt_sops_secrets(pv):
    """(relative, documents) of every pivot-sops-secrets file: decrypted, then substituted."""
    files = list(pv.env.pivot_sops_secrets)
    if not files:
        return []
    sops = find_binary("sops", pv.options.get("sops_binary"))
    key_file = os.path.expanduser(pv.options.get("age_key_file") or pv.boot.age_key_file)
    if not os.path.isabs(key_file):
        key_file = pv.path(key_file)
    if not os.path.exists(key_file):
        raise PivotError(
            "prepare",
            "age key file {} does not exist; SOPS secrets {} cannot be decrypted".format(key_file, ", ".join(files)),
        )
    decrypted = []
    for relative in files:
        path = pv.path(relative)
        argv = [sops, "--decrypt", "--input-type", "yaml", "--output-type", "yaml", path]
        rc, out, err = run_command(argv, env={"SOPS_AGE_KEY_FILE": key_file}, timeout=120)
        if rc != 0:
            raise command_failed("prepare", argv, rc, "", err, f"decrypting {relative}")
        # Decrypted, then substituted like the pivot manifests (Flux decrypts before postBuild too).
        decrypted.append((relative, parse_documents(out, relative, pv.variables)))
    return decrypted


def _provider_docs(docs):
    return [d for d in docs if capi.is_provider(d)]


def _provider_version(obj):
    return (obj.get("status") or {}).get("installedVersion") or (obj.get("spec") or {}).get("version") or ""


def wait_providers(pv, providers):
    timeout = pv.timeout("wait")
    for doc in providers:
        meta = doc["metadata"]
        name, namespace = meta["name"], meta.get("namespace") or "default"
        label = "{} {}/{}".format(doc["kind"], namespace, name)
        if not pv.check_mode:
            pv.say(f">>> waiting up to {timeout}s for {label} Ready")

            def evaluate(objs, key=(namespace, name)):
                ready, reason, message = kube.readiness(objs.get(key))
                return ready, f"{reason} {message}"

            def watch(limit, api=(doc["apiVersion"], doc["kind"], namespace), evaluate=evaluate):
                return kube.watch_until(pv.target, api[0], api[1], api[2], evaluate, limit, on_progress=pv.say)

            def describe(state, label=label):
                return "{} not Ready: {}".format(label, (state or "").strip())

            key = f"provider {label}"
            try:
                if pv.budgeted_wait(key, "prepare", "providers", timeout, pv.wait_left(key, timeout), watch, describe):
                    return
            except kube.WaitTimeout as exc:
                raise PivotError(
                    "prepare",
                    "{} did not become Ready on the management cluster within {}s ({}); "
                    "check the cluster-api-operator logs there".format(label, timeout, (exc.state or "").strip()),
                )
            current = kube.get(pv.target, doc["apiVersion"], doc["kind"], name, namespace) or doc
        else:
            current = kube.get(pv.target, doc["apiVersion"], doc["kind"], name, namespace) or doc
            current = dict(current, spec=dict(current.get("spec") or {}, **(doc.get("spec") or {})))
        pv.result["providers"].append(
            {
                "kind": doc["kind"],
                "namespace": namespace,
                "name": name,
                "version": _provider_version(current),
                "source_version": None,
            }
        )
    check_provider_versions(pv)


def check_provider_versions(pv):
    if pv.source is None:
        return
    source = {}
    wanted = {entry["kind"] for entry in pv.result["providers"]}
    # Only kinds the source serves: asking a DynamicClient for an unknown kind re-runs discovery.
    served = capi.provider_resources(pv.source, wanted)
    for kind, res in sorted(served.items()):
        for item in res.get().items:
            obj = item.to_dict()
            source[(kind, obj["metadata"]["name"])] = _provider_version(obj)
    problems = []
    for entry in pv.result["providers"]:
        src = source.get((entry["kind"], entry["name"]))
        entry["source_version"] = src
        if not src:
            continue
        have, want = parse_version(entry["version"]), parse_version(src)
        if have is None or want is None:
            problems.append(
                "{} {}: cannot compare versions {!r} and {!r}".format(
                    entry["kind"], entry["name"], entry["version"], src
                )
            )
        elif have < want:
            problems.append(
                "{} {} is {} on the target but {} on the kind cluster".format(
                    entry["kind"], entry["name"], entry["version"], src
                )
            )
    if problems:
        raise PivotError(
            "prepare",
            "target providers older than the source's (clusterctl move needs the target at least at the "
            "source's version; raise spec.version in the provider manifests): " + "; ".join(problems),
        )


def run(pv):
    if pv.already_moved and pv.source is None:
        return
    pv.variables = source_variables(pv)
    pv.result["run_tags"] = run_tags(pv)
    # Load and substitute every manifest first: a bad file fails before anything is written.
    provider_docs, pivot_docs = [], []
    for relative in pv.env.provider_manifests:
        provider_docs.append((relative, load_documents(pv.path(relative), pv.variables)))
    unresolved, first = [], None
    for relative in pv.env.pivot_manifests:
        try:
            pivot_docs.append((relative, load_documents(pv.path(relative), pv.variables)))
        except SubstitutionError as exc:
            first = first or exc
            unresolved.append(str(exc))
    try:
        secret_docs = decrypt_sops_secrets(pv)
    except SubstitutionError as exc:
        first = first or exc
        unresolved.append(str(exc))
    if unresolved:
        raise PivotError("prepare", "; ".join(unresolved), {"unresolved": first.names})
    install_charts(pv)
    providers = []
    for relative, docs in provider_docs:
        providers += _provider_docs(_apply_docs(pv, docs, relative))
    for relative, docs in pivot_docs:
        providers += _provider_docs(_apply_docs(pv, docs, relative))
    if pv.profile.pivot_credentials:
        CREDENTIALS[pv.profile.pivot_credentials](pv)
    for relative, docs in secret_docs:
        _apply_docs(pv, docs, relative)
    wait_providers(pv, providers)
