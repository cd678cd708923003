# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The providers' admission webhooks, as the strict emulator runs them.

Ported from upstream a second time, separately from plugins/module_utils/admission.py (the product's
registry that ``validate`` uses): the emulator must not judge the product with the product's code. Each
kind is one function written after the Go ``Default`` / ``ValidateCreate`` / ``validate`` it names; it
returns None or ``(code, message, causes)``, the webhook's own answer, which ``denial`` wraps the way
the apiserver does.

Sources (each function names its file):
- kubernetes-sigs/cluster-api v1.13.5 (internal/webhooks, controlplane/kubeadm, bootstrap/kubeadm,
  test/infrastructure/docker), feature gates in feature/feature.go;
- cluster-api-provider-aws v2.11.1, -azure v1.25.1, -gcp v1.12.0, -tinkerbell v0.7.0,
  cluster-api-control-plane-provider-talos v0.5.12, cluster-api-addon-provider-helm v0.6.4,
  cluster-api-operator v0.28.0 (defaulting only);
- k8s.io/apiserver v0.35.4 pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr (the
  ``admission webhook "<name>" denied the request: `` prefix, code kept, at least 400);
- controller-runtime v0.23.3 pkg/webhook/admission/validator_custom.go and response.go (an APIStatus
  error keeps its Status: NewInvalid is 422 Invalid; any other error is Denied: 403 Forbidden);
- k8s.io/apimachinery v0.35.4 pkg/api/errors NewInvalid and pkg/util/validation/field ErrorBody
  (strings %q, numbers %v, anything else JSON).

Simplification: the emulator evaluates the webhooks on a defaulted copy and stores the object as sent
(the defaults are not persisted). On update only kinds whose ValidateUpdate reruns the create checks are
checked (``ON_UPDATE``); update-only rules (immutable fields) are not modelled.
"""

from __future__ import annotations

import copy
import json
import re

# feature/feature.go @ cluster-api v1.13.5; feature/feature.go @ CAPZ v1.25.1.
DEFAULT_GATES = {
    "cluster-api/MachinePool": True,
    "cluster-api/ClusterTopology": False,
    "cluster-api/MachineTaintPropagation": False,
    "capz/ASOAPI": True,
}

_KUBE_SEMVER = re.compile(r"^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-0-9a-zA-Z_\.+]*)?$")
_LABEL = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _body(kind, value, detail):
    names = {"Invalid": "Invalid value", "Required": "Required value", "Forbidden": "Forbidden"}
    text = names[kind]
    if kind == "Invalid":
        if isinstance(value, bool):
            text += ": " + ("true" if value else "false")
        elif isinstance(value, (int, float)):
            text += ": " + str(value)
        elif isinstance(value, str):
            text += ": " + json.dumps(value)
        else:
            text += ": " + json.dumps(value, separators=(",", ":"), sort_keys=True)
    return text + ": " + detail


class _Errs(list):
    def invalid(self, field, value, detail):
        self.append(("FieldValueInvalid", field, _body("Invalid", value, detail)))

    def required(self, field, detail):
        self.append(("FieldValueRequired", field, _body("Required", None, detail)))

    def forbidden(self, field, detail):
        self.append(("FieldValueForbidden", field, _body("Forbidden", None, detail)))


def _new_invalid(group, kind, name, errs):
    """apierrors.NewInvalid: 422 with the aggregate (deduplicated; one error bare, several in [])."""
    if not errs:
        return None
    texts = []
    for _reason, field, body in errs:
        if f"{field}: {body}" not in texts:
            texts.append(f"{field}: {body}")
    agg = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    causes = [{"reason": r, "message": b, "field": f} for r, f, b in errs]
    return 422, f'{kind}.{group} "{name}" is invalid: {agg}', causes


def _plain(field, kind, detail):
    """A field.Error returned as is (no APIStatus): Denied, 403, its Error() text."""
    return 403, f"{field}: {_body(kind, None, detail)}", None


def _g(obj, path, default=None):
    cur = obj
    for key in path.split("."):
        if not isinstance(cur, dict) or key not in cur or cur[key] is None:
            return default
        cur = cur[key]
    return cur


def _meta_name(obj):
    return (obj.get("metadata") or {}).get("name") or ""


def _label_value_problems(value):
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _LABEL.match(value):
        out.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
            "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )
    return out


def _ref_set(ref):
    return isinstance(ref, dict) and bool(ref.get("name") or ref.get("kind") or ref.get("apiGroup"))


def _matches(selector, labels):
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        k, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        ok = {
            "In": k in labels and labels[k] in vals,
            "NotIn": not (k in labels and labels[k] in vals),
            "Exists": k in labels,
            "DoesNotExist": k not in labels,
        }.get(op, False)
        if not ok:
            return False
    return True


def _selector_text(selector):
    reqs = [(k, f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()]
    for e in selector.get("matchExpressions") or []:
        k, op, vals = e.get("key"), e.get("operator"), ",".join(sorted(e.get("values") or []))
        reqs.append((k, {"In": f"{k} in ({vals})", "NotIn": f"{k} notin ({vals})", "Exists": k}.get(op, "!" + k)))
    return ",".join(t for _k, t in sorted(reqs))


def _int_or_percent_problem(value):
    """intstr.GetScaledValueFromIntOrPercent."""
    if not isinstance(value, str):
        return None
    if not value.endswith("%"):
        return "invalid type: string is not a percentage"
    try:
        int(value[:-1], 10)
    except ValueError:
        return f'invalid value "{value}": strconv.Atoi: parsing "{value[:-1]}": invalid syntax'
    return None


def _parse_cidr(cidr):
    import ipaddress

    if "/" not in cidr:
        return False
    try:
        ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False
    return True


# ---- Cluster API core and KCP -------------------------------------------------------------------


def cluster(obj, gates):
    """internal/webhooks/cluster.go Cluster.validate (no Default without a topology)."""
    errs = _Errs()
    name = _meta_name(obj)
    for p in _label_value_problems(name):
        errs.invalid("metadata.name", name, "must be a valid label value " + p)
    spec = obj.get("spec") or {}
    if (
        not _ref_set(spec.get("controlPlaneRef"))
        and not _ref_set(spec.get("infrastructureRef"))
        and not spec.get("topology")
    ):
        errs.forbidden("spec", "one of spec.controlPlaneRef, spec.infrastructureRef or spec.topology must be set")
    for which in ("pods", "services"):
        for i, cidr in enumerate(_g(obj, f"spec.clusterNetwork.{which}.cidrBlocks", [])):
            if not _parse_cidr(cidr):
                errs.invalid(f"spec.clusterNetwork.{which}.cidrBlocks[{i}]", cidr, "invalid CIDR address: " + cidr)
    if spec.get("topology") and not gates["cluster-api/ClusterTopology"]:
        errs.forbidden("spec.topology", "can be set only if the ClusterTopology feature flag is enabled")
    return _new_invalid("cluster.x-k8s.io", "Cluster", name, errs)


def _machine_template_checks(obj, errs):
    tspec = _g(obj, "spec.template.spec", {})
    boot = tspec.get("bootstrap") or {}
    if not _ref_set(boot.get("configRef")) and boot.get("dataSecretName") is None:
        errs.required(
            "spec.template.spec.bootstrap",
            "expected either spec.template.spec.bootstrap.dataSecretName or spec.template.spec.bootstrap.configRef to be populated",
        )


def _cluster_name_same(obj, errs):
    if (_g(obj, "spec.clusterName", "")) != (_g(obj, "spec.template.spec.clusterName", "")):
        errs.invalid(
            "spec.clusterName",
            _g(obj, "spec.clusterName", ""),
            "spec.clusterName and spec.template.spec.clusterName must be set to the same value",
        )


def _version_ok(obj, errs):
    version = _g(obj, "spec.template.spec.version", "")
    if version and not _KUBE_SEMVER.match(version):
        errs.invalid("spec.template.spec.version", version, "must be a valid semantic version")


def _prefix_v(obj, path):
    parent, dummy, key = path.rpartition(".")
    holder = _g(obj, parent)
    if isinstance(holder, dict) and holder.get(key) and not str(holder[key]).startswith("v"):
        holder[key] = "v" + str(holder[key])


def machinepool(obj, gates):
    """internal/webhooks/machinepool.go Default + validate."""
    obj.setdefault("metadata", {}).setdefault("labels", {})["cluster.x-k8s.io/cluster-name"] = _g(
        obj, "spec.clusterName", ""
    )
    _prefix_v(obj, "spec.template.spec.version")
    if not gates["cluster-api/MachinePool"]:
        return _plain("spec", "Forbidden", "can be set only if the MachinePool feature flag is enabled")
    errs = _Errs()
    _machine_template_checks(obj, errs)
    _cluster_name_same(obj, errs)
    _version_ok(obj, errs)
    if _g(obj, "spec.template.spec.taints"):
        errs.forbidden("spec.taints", "taints feature for MachinePools is not yet implemented")
        if not gates["cluster-api/MachineTaintPropagation"]:
            errs.forbidden(
                "spec.taints",
                "taints are not allowed to be set when the feature gate MachineTaintPropagation is disabled",
            )
    return _new_invalid("cluster.x-k8s.io", "MachinePool", _meta_name(obj), errs)


def _default_selector(obj, own_label, own_value):
    spec = obj.setdefault("spec", {})
    sel = spec.setdefault("selector", {})
    ml = sel.setdefault("matchLabels", {})
    tl = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
    if not ml and not sel.get("matchExpressions"):
        ml[own_label] = own_value
        tl[own_label] = own_value
    ml["cluster.x-k8s.io/cluster-name"] = spec.get("clusterName", "")
    tl["cluster.x-k8s.io/cluster-name"] = spec.get("clusterName", "")


def machinedeployment(obj, gates):
    """internal/webhooks/machinedeployment.go Default + validate (+ validateRolloutStrategy)."""
    name = _meta_name(obj)
    spec = obj.setdefault("spec", {})
    strategy = spec.setdefault("rollout", {}).setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        ru.setdefault("maxSurge", 1)
        ru.setdefault("maxUnavailable", 0)
    _default_selector(obj, "cluster.x-k8s.io/deployment-name", name)
    _prefix_v(obj, "spec.template.spec.version")
    errs = _Errs()
    for p in _label_value_problems(name):
        errs.invalid("metadata.name", name, "must be a valid label value: " + p)
    _machine_template_checks(obj, errs)
    if not _matches(spec["selector"], _g(obj, "spec.template.metadata.labels", {})):
        errs.forbidden(
            "spec.template.metadata.labels",
            "must match spec.selector %s" % json.dumps(_selector_text(spec["selector"])),
        )
    _cluster_name_same(obj, errs)
    ru = _g(obj, "spec.rollout.strategy.rollingUpdate", {})
    for key in ("maxUnavailable", "maxSurge"):
        problem = _int_or_percent_problem(ru.get(key))
        if problem:
            errs.invalid(
                f"spec.rollout.strategy.rollingUpdate.{key}",
                str(ru[key]),
                "must be either an int or a percentage: " + problem,
            )
    if ru.get("maxUnavailable") == 0 and ru.get("maxSurge") == 0:
        errs.invalid("spec.rollout.strategy.rollingUpdate", "0", "maxUnavailable and maxSurge cannot both be 0")
    inflight = _g(obj, "spec.remediation.maxInFlight")
    problem = _int_or_percent_problem(inflight)
    if problem:
        errs.invalid("spec.remediation.maxInFlight", str(inflight), "must be either an int or a percentage: " + problem)
    _version_ok(obj, errs)
    return _new_invalid("cluster.x-k8s.io", "MachineDeployment", name, errs)


def machineset(obj, gates):
    """internal/webhooks/machineset.go Default + validate."""
    name = _meta_name(obj)
    _default_selector(obj, "cluster.x-k8s.io/set-name", name[:63])
    _prefix_v(obj, "spec.template.spec.version")
    errs = _Errs()
    _machine_template_checks(obj, errs)
    labels = _g(obj, "spec.template.metadata.labels", {})
    if not _matches(obj["spec"]["selector"], labels):
        errs.invalid(
            "spec.template.metadata.labels",
            labels,
            "must match spec.selector %s" % json.dumps(_selector_text(obj["spec"]["selector"])),
        )
    _cluster_name_same(obj, errs)
    _version_ok(obj, errs)
    return _new_invalid("cluster.x-k8s.io", "MachineSet", name, errs)


def machinehealthcheck(obj, gates):
    """internal/webhooks/machinehealthcheck.go Default + validate."""
    checks = obj.setdefault("spec", {}).setdefault("checks", {})
    if checks.get("nodeStartupTimeoutSeconds") is None:
        checks["nodeStartupTimeoutSeconds"] = 600
    errs = _Errs()
    sel = _g(obj, "spec.selector", {})
    if not sel.get("matchLabels") and not sel.get("matchExpressions"):
        errs.required("spec.selector", "selector must not be empty")
    cluster_label = (sel.get("matchLabels") or {}).get("cluster.x-k8s.io/cluster-name")
    if cluster_label is not None and cluster_label != _g(obj, "spec.clusterName", ""):
        errs.invalid(
            "spec.selector", sel, "cannot specify a cluster selector other than the one specified by ClusterName"
        )
    timeout = checks["nodeStartupTimeoutSeconds"]
    if timeout != 0 and timeout < 30:
        errs.invalid("spec.checks.nodeStartupTimeoutSeconds", timeout, "must be at least 30s")
    trigger = _g(obj, "spec.remediation.triggerIf.unhealthyLessThanOrEqualTo")
    problem = _int_or_percent_problem(trigger)
    if problem:
        errs.invalid(
            "spec.remediation.triggerIf.unhealthyLessThanOrEqualTo",
            str(trigger),
            "must be either an int or a percentage: " + problem,
        )
    return _new_invalid("cluster.x-k8s.io", "MachineHealthCheck", _meta_name(obj), errs)


def _files(prefix, files, errs):
    """api/bootstrap/kubeadm/v1beta2/kubeadmconfig_types.go KubeadmConfigSpec.validateFiles."""
    paths = set()
    for i, f in enumerate(files or []):
        if f.get("content") and f.get("contentFrom") is not None:
            errs.invalid(
                f"{prefix}.files[{i}]", f, "only one of content or contentFrom may be specified for a single file"
            )
        if f.get("path") in paths:
            errs.invalid(f"{prefix}.files[{i}].path", f, "path property must be unique among all files")
        paths.add(f.get("path"))


def kubeadmcontrolplane(obj, gates):
    """controlplane/kubeadm/internal/webhooks/kubeadmcontrolplane.go Default + ValidateCreate."""
    spec = obj.setdefault("spec", {})
    if spec.get("replicas") is None:
        spec["replicas"] = 1
    if not str(spec.get("version", "")).startswith("v"):
        spec["version"] = "v" + str(spec.get("version", ""))
    errs = _Errs()
    replicas = spec["replicas"]
    if replicas <= 0:
        errs.forbidden("spec.replicas", "cannot be less than or equal to 0")
    if not _g(obj, "spec.kubeadmConfigSpec.clusterConfiguration.etcd.external") and replicas % 2 == 0:
        errs.forbidden("spec.replicas", "cannot be an even number when etcd is stacked")
    ref = _g(obj, "spec.machineTemplate.spec.infrastructureRef", {})
    for key in ("apiGroup", "kind", "name"):
        if not ref.get(key):
            errs.invalid(f"spec.machineTemplate.infrastructure.{key}", ref.get(key, ""), "cannot be empty")
    if not _KUBE_SEMVER.match(spec["version"]):
        errs.invalid("spec.version", spec["version"], "must be a valid semantic version")
    _files("spec.kubeadmConfigSpec", _g(obj, "spec.kubeadmConfigSpec.files"), errs)
    return _new_invalid("controlplane.cluster.x-k8s.io", "KubeadmControlPlane", _meta_name(obj), errs)


def kubeadmconfigtemplate(obj, gates):
    """bootstrap/kubeadm/internal/webhooks/kubeadmconfigtemplate.go validate."""
    errs = _Errs()
    _files("spec.template.spec", _g(obj, "spec.template.spec.files"), errs)
    return _new_invalid("bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate", _meta_name(obj), errs)


def devcluster(obj, gates):
    """test/infrastructure/docker/internal/webhooks/devcluster.go defaultDevClusterSpec + validateDevClusterSpec."""
    backend = obj.setdefault("spec", {}).setdefault("backend", {})
    if backend.get("docker") is None and backend.get("inMemory") is None:
        backend["docker"] = {}
    if backend.get("docker") is None:
        return None
    domains = backend["docker"].get("failureDomains") or []
    for d in domains:
        if d.get("controlPlane") is None:
            d["controlPlane"] = False
    names = [d.get("name", "") for d in domains]
    errs = _Errs()
    if names != sorted(names):
        errs.invalid("spec.backend.docker.failureDomains", domains, "failure domains must be sorted by name")
    return _new_invalid("infrastructure.cluster.x-k8s.io", "DevCluster", _meta_name(obj), errs)


# ---- CAPA ----------------------------------------------------------------------------------------


def awsmanagedcontrolplane(obj, gates):
    """controlplane/eks/webhooks/awsmanagedcontrolplane_webhook.go Default + ValidateCreate (validateEKSVersion)."""
    spec = obj.setdefault("spec", {})
    if not spec.get("eksClusterName"):
        spec["eksClusterName"] = "{}_{}".format((obj.get("metadata") or {}).get("namespace", ""), _meta_name(obj))
    errs = _Errs()
    version = spec.get("version")
    if version is not None:
        m = re.match(r"^\s*v?([0-9]+(?:\.[0-9]+)*)(.*)*$", version)
        if m is None:
            errs.invalid("spec.version", version, "could not parse %s as version" % json.dumps(version))
        elif "." not in m.group(1):
            errs.invalid("spec.version", version, "illegal version string %s" % json.dumps(version))
        elif re.match(r"0[0-9]", m.group(1)):
            major = m.group(1).split(".")[0]
            errs.invalid(
                "spec.version",
                version,
                f"illegal zero-prefixed version component {json.dumps(major)} in {json.dumps(version)}",
            )
    return _new_invalid("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane", _meta_name(obj), errs)


def awsmanagedmachinepool(obj, gates):
    """exp/webhooks/awsmanagedmachinepool_webhook.go Default + ValidateCreate (validateScaling)."""
    spec = obj.setdefault("spec", {})
    if not spec.get("eksNodegroupName"):
        spec["eksNodegroupName"] = "{}_{}".format((obj.get("metadata") or {}).get("namespace", ""), _meta_name(obj))
    if spec.get("updateConfig") is None:
        spec["updateConfig"] = {"maxUnavailable": 1}
    errs = _Errs()
    scaling = spec.get("scaling") or {}
    lo, hi = scaling.get("minSize"), scaling.get("maxSize")
    if lo is not None:
        if lo < 0:
            errs.invalid("spec.scaling.minSize", lo, "must be greater or equal zero")
        if hi is not None and hi < lo:
            errs.invalid("spec.scaling.maxSize", hi, "must be greater than field spec.scaling.minSize")
    if hi is not None and hi < 0:
        errs.invalid("spec.scaling.maxSize", hi, "must be greater than zero")
    update = spec["updateConfig"]
    both = [update.get("maxUnavailable"), update.get("maxUnavailablePercentage")]
    if both == [None, None]:
        errs.invalid(
            "spec.updateConfig",
            update,
            "must specify one of maxUnavailable or maxUnavailablePercentage when using nodegroup updateconfig",
        )
    if None not in both:
        errs.invalid("spec.updateConfig", update, "cannot specify both maxUnavailable and maxUnavailablePercentage")
    return _new_invalid("infrastructure.cluster.x-k8s.io", "AWSManagedMachinePool", _meta_name(obj), errs)


# ---- CAPZ (ASO API) ------------------------------------------------------------------------------


def azureaso(obj, gates):
    """internal/webhooks/azureasomanaged{cluster,controlplane,machinepool}_webhook.go ValidateCreate."""
    if not gates["capz/ASOAPI"]:
        return _plain("spec", "Forbidden", "can be set only if the ASOAPI feature flag is enabled")
    return None


# ---- CAPG ----------------------------------------------------------------------------------------


def gcpmanagedcluster(obj, gates):
    """exp/webhooks/gcpmanagedcluster_webhook.go validateCustomSubnet (an aggregate, not an APIStatus: 403)."""
    net = _g(obj, "spec.network", {})
    if net.get("autoCreateSubnetworks") is None or net.get("autoCreateSubnetworks"):
        return None
    if any(s.get("region") == _g(obj, "spec.region") for s in net.get("subnets") or []):
        return None
    return _plain(
        "spec.network.subnet",
        "Required",
        "at least one given subnets region should be same as spec.network.region when spec.network.autoCreateSubnetworks is false",
    )


def gcpmanagedcontrolplane(obj, gates):
    """exp/webhooks/gcpmanagedcontrolplane_webhook.go Default (generateGKEName) + ValidateCreate."""
    spec = obj.setdefault("spec", {})
    if not spec.get("clusterName"):
        generated = "%s-%s" % ((obj.get("metadata") or {}).get("namespace", ""), _meta_name(obj).replace(".", "-"))
        spec["clusterName"] = generated if len(generated) < 40 else "capg-" + "x" * 27
    errs = _Errs()
    if len(spec["clusterName"]) > 40:
        errs.invalid("spec.ClusterName", spec["clusterName"], "cluster name cannot have more than 40 characters")
    autopilot = bool(spec.get("enableAutopilot"))
    if autopilot and spec.get("releaseChannel") is None:
        errs.required("spec.ReleaseChannel", "Release channel is required for an autopilot enabled cluster")
    # upstream passes spec.LoggingService as the bad value of both of these
    if autopilot and spec.get("loggingService") is not None:
        errs.invalid("spec.LoggingService", spec.get("loggingService"), "can't be set when autopilot is enabled")
    if autopilot and spec.get("monitoringService") is not None:
        errs.invalid("spec.MonitoringService", spec.get("loggingService"), "can't be set when autopilot is enabled")
    if spec.get("controlPlaneVersion") is not None and spec.get("version") is not None:
        errs.invalid(
            "spec.ControlPlaneVersion",
            spec.get("loggingService"),
            "spec.ControlPlaneVersion and spec.Version cannot be set at the same time: please use spec.Version",
        )
    return _new_invalid("infrastructure.cluster.x-k8s.io", "GCPManagedControlPlane", _meta_name(obj), errs)


def gcpmanagedmachinepool(obj, gates):
    """exp/webhooks/gcpmanagedmachinepool_webhook.go ValidateCreate (validateNodePoolName, validateScaling,
    util/webhook ValidateNonNegative)."""
    errs = _Errs()
    spec = obj.get("spec") or {}
    if len(spec.get("nodePoolName") or "") > 40:
        errs.invalid("spec.NodePoolName", spec["nodePoolName"], "node pool name cannot have more than 40 characters")
    scaling = spec.get("scaling")
    if scaling is not None:
        if scaling.get("enableAutoscaling") is False:
            for key in ("minCount", "maxCount", "locationPolicy"):
                if scaling.get(key) is not None:
                    errs.forbidden(f"spec.scaling.{key}", f"{key} cannot be specified when autoscaling is disabled")
        lo, hi = scaling.get("minCount"), scaling.get("maxCount")
        if lo is not None:
            if lo < 0:
                errs.invalid("spec.scaling.minCount", lo, "must be greater or equal zero")
            if hi is not None and hi < lo:
                errs.invalid("spec.scaling.maxCount", hi, "must be greater than field spec.scaling.minCount")
    for key in ("diskSizeGb", "localSsdCount", "maxPodsPerNode"):
        if spec.get(key) is not None and spec[key] < 0:
            errs.invalid(f"spec.template.spec.{key}", spec[key], "must be non-negative")
    return _new_invalid("infrastructure.cluster.x-k8s.io", "GCPManagedMachinePool", _meta_name(obj), errs)


# ---- CAPT, CACPPT, CAAPH, operator ---------------------------------------------------------------


def tinkerbellmachinetemplate(obj, gates):
    """api/v1beta1/tinkerbellmachinetemplate_webhook.go ValidateCreate."""
    errs = _Errs()
    for key in ("providerID", "hardwareName"):
        if _g(obj, f"spec.template.spec.{key}"):
            errs.forbidden(f"spec.template.spec.{key}", "cannot be set in templates")
    return _new_invalid("infrastructure.cluster.x-k8s.io", "TinkerbellMachineTemplate", _meta_name(obj), errs)


def taloscontrolplane(obj, gates):
    """api/v1alpha3/taloscontrolplane_webhook.go defaultTalosControlPlaneSpec + validate."""
    spec = obj.setdefault("spec", {})
    strategy = spec.get("rolloutStrategy") or {}
    if not strategy.get("type"):
        strategy["type"] = "RollingUpdate"
    spec["rolloutStrategy"] = strategy
    errs = _Errs()
    if strategy["type"] not in ("RollingUpdate", "OnDelete"):
        errs.invalid("spec.rolloutStrategy", strategy["type"], 'valid values are: ["RollingUpdate" "OnDelete"]')
    return _new_invalid("controlplane.cluster.x-k8s.io", "TalosControlPlane", _meta_name(obj), errs)


def _request_uri_problem(url):
    """Go net/url.ParseRequestURI's error, or None: it needs an absolute URI (scheme:...) or a path from /."""
    if url == "":
        return "empty url"
    if url.startswith(":"):
        return "missing protocol scheme"
    if url.startswith("/") or url == "*":
        return None
    scheme, colon, _rest = url.partition(":")
    if colon and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.\-]*", scheme):
        return None
    return "invalid URI for request"


def helmchartproxy(obj, gates):
    """api/v1alpha1/helmchartproxy_webhook.go ValidateCreate / isUrlValid (a plain error: 403)."""
    url = _g(obj, "spec.repoURL", "")
    problem = _request_uri_problem(url)
    if problem:
        return 403, f'specified repoURL {url} is not valid: parse "{url}": {problem}', None
    return None


# (group, kind) -> (validating webhook name, function)
WEBHOOKS = {
    ("cluster.x-k8s.io", "Cluster"): ("validation.cluster.cluster.x-k8s.io", cluster),
    ("cluster.x-k8s.io", "MachinePool"): ("validation.machinepool.cluster.x-k8s.io", machinepool),
    ("cluster.x-k8s.io", "MachineDeployment"): ("validation.machinedeployment.cluster.x-k8s.io", machinedeployment),
    ("cluster.x-k8s.io", "MachineSet"): ("validation.machineset.cluster.x-k8s.io", machineset),
    ("cluster.x-k8s.io", "MachineHealthCheck"): ("validation.machinehealthcheck.cluster.x-k8s.io", machinehealthcheck),
    ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane"): (
        "validation.kubeadmcontrolplane.controlplane.cluster.x-k8s.io",
        kubeadmcontrolplane,
    ),
    ("bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate"): (
        "validation.kubeadmconfigtemplate.bootstrap.cluster.x-k8s.io",
        kubeadmconfigtemplate,
    ),
    ("infrastructure.cluster.x-k8s.io", "DevCluster"): (
        "validation.devcluster.infrastructure.cluster.x-k8s.io",
        devcluster,
    ),
    ("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane"): (
        "validation.awsmanagedcontrolplanes.controlplane.cluster.x-k8s.io",
        awsmanagedcontrolplane,
    ),
    ("infrastructure.cluster.x-k8s.io", "AWSManagedMachinePool"): (
        "validation.awsmanagedmachinepool.infrastructure.cluster.x-k8s.io",
        awsmanagedmachinepool,
    ),
    ("infrastructure.cluster.x-k8s.io", "AzureASOManagedCluster"): (
        "validation.azureasomanagedcluster.infrastructure.cluster.x-k8s.io",
        azureaso,
    ),
    ("infrastructure.cluster.x-k8s.io", "AzureASOManagedControlPlane"): (
        "validation.azureasomanagedcontrolplane.infrastructure.cluster.x-k8s.io",
        azureaso,
    ),
    ("infrastructure.cluster.x-k8s.io", "AzureASOManagedMachinePool"): (
        "validation.azureasomanagedmachinepool.infrastructure.cluster.x-k8s.io",
        azureaso,
    ),
    ("infrastructure.cluster.x-k8s.io", "GCPManagedCluster"): ("vgcpmanagedcluster.kb.io", gcpmanagedcluster),
    ("infrastructure.cluster.x-k8s.io", "GCPManagedControlPlane"): (
        "vgcpmanagedcontrolplane.kb.io",
        gcpmanagedcontrolplane,
    ),
    ("infrastructure.cluster.x-k8s.io", "GCPManagedMachinePool"): (
        "vgcpmanagedmachinepool.kb.io",
        gcpmanagedmachinepool,
    ),
    ("infrastructure.cluster.x-k8s.io", "TinkerbellMachineTemplate"): (
        "validation.tinkerbellmachinetemplate.infrastructure.x-k8s.io",
        tinkerbellmachinetemplate,
    ),
    ("controlplane.cluster.x-k8s.io", "TalosControlPlane"): (
        "validate.taloscontrolplane.controlplane.cluster.x-k8s.io",
        taloscontrolplane,
    ),
    ("addons.cluster.x-k8s.io", "HelmChartProxy"): ("vhelmchartproxy.kb.io", helmchartproxy),
}
# ValidateUpdate reruns the create checks (validate(old, new) in each file) for these kinds.
ON_UPDATE = {
    ("cluster.x-k8s.io", "Cluster"),
    ("cluster.x-k8s.io", "MachinePool"),
    ("cluster.x-k8s.io", "MachineDeployment"),
    ("cluster.x-k8s.io", "MachineSet"),
    ("cluster.x-k8s.io", "MachineHealthCheck"),
    ("bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate"),
    ("infrastructure.cluster.x-k8s.io", "DevCluster"),
    ("controlplane.cluster.x-k8s.io", "TalosControlPlane"),
}


def denial(group, kind, obj, operation="CREATE", gates=None):
    """None, or (code, reason, message, details) of the apiserver's answer when the webhook denies."""
    hook = WEBHOOKS.get((group, kind))
    if hook is None or (operation == "UPDATE" and (group, kind) not in ON_UPDATE):
        return None
    merged = dict(DEFAULT_GATES)
    merged.update(gates or {})
    answer = hook[1](copy.deepcopy(obj), merged)
    if answer is None:
        return None
    code, message, causes = answer
    reason = "Invalid" if code == 422 else "Forbidden"
    details = None
    if causes is not None:
        details = {"name": _meta_name(obj), "group": group, "kind": kind, "causes": causes}
    return max(code, 400), reason, f'admission webhook "{hook[0]}" denied the request: {message}', details
