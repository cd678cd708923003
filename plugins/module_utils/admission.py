# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Admission webhooks of the providers the trees install, as a registry.

The schemas and CEL rules (validate_schema, cel) are what the API server checks on its own. The
providers add admission webhooks: a mutating one that defaults, then a validating one that may deny.
Both live in Go code, not in the CRDs, so a tree can pass every schema and still be refused. This
module ports them, one ``Rule`` per upstream check, each with the exact message and its source.

``review(obj)`` does what the API server does with an object on create: run the kind's defaulting
webhook, then its validating webhook, and return the denial (or None). The denial's text is the
apiserver's: ``admission webhook "<name>" denied the request: <the webhook's message>``
(k8s.io/apiserver v0.35.4 ``pkg/admission/plugin/webhook/errors/statuserror.go`` ToStatusErr). The code
is 422 when the webhook returned an apierrors.NewInvalid and 403 for any other error
(controller-runtime v0.23.3 ``pkg/webhook/admission/validator_custom.go``: an APIStatus error keeps its
status, anything else is ``Denied``, which is 403 Forbidden in ``response.go`` ValidationResponse).

Feature gates: each rule that depends on one reads ``gates`` (owner, gate) -> bool, which starts from
the upstream defaults (``GATE_DEFAULTS``) and takes the tree's ``spec.manager.featureGates``.

Only create-time rules are ported (Flux creates the objects); update-only rules (immutability, no
downgrades) are not. docs/upstream-facts.md "Admission webhooks" lists the kinds, the rules and the
kinds that have no create rule.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re

from ansible_collections.krops.platform.plugins.module_utils import kube

CAPI = ("kubernetes-sigs/cluster-api", "v1.13.5")
CAPA = ("kubernetes-sigs/cluster-api-provider-aws", "v2.11.1")
CAPZ = ("kubernetes-sigs/cluster-api-provider-azure", "v1.25.1")
CAPG = ("kubernetes-sigs/cluster-api-provider-gcp", "v1.12.0")
CAPT = ("tinkerbell/cluster-api-provider-tinkerbell", "v0.7.0")
CACPPT = ("siderolabs/cluster-api-control-plane-provider-talos", "v0.5.12")
CAAPH = ("kubernetes-sigs/cluster-api-addon-provider-helm", "v0.6.4")

CORE = "cluster.x-k8s.io"
CONTROLPLANE = "controlplane.cluster.x-k8s.io"
BOOTSTRAP = "bootstrap.cluster.x-k8s.io"
INFRA = "infrastructure.cluster.x-k8s.io"
ADDONS = "addons.cluster.x-k8s.io"

# (owner, gate) -> default. cluster-api feature/feature.go @ v1.13.5; CAPZ feature/feature.go @ v1.25.1.
GATE_DEFAULTS = {
    ("cluster-api", "MachinePool"): True,
    ("cluster-api", "MachineSetPreflightChecks"): True,
    ("cluster-api", "ClusterTopology"): False,
    ("cluster-api", "MachineTaintPropagation"): False,
    ("capz", "ASOAPI"): True,
}
# Which operator provider sets the gates of which owner: (provider kind, provider name) -> owner.
GATE_OWNERS = {("CoreProvider", "cluster-api"): "cluster-api", ("InfrastructureProvider", "azure"): "capz"}

# k8s.io/apimachinery pkg/util/validation/validation.go (IsValidLabelValue, LabelValueMaxLength 63).
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
# cluster-api util/version/version.go @ v1.13.5 KubeSemver: a full vX.Y.Z, "v" required.
KUBE_SEMVER = re.compile(r"^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-0-9a-zA-Z_\.+]*)?$")
_BOOTSTRAP_MSG = (
    "expected either spec.template.spec.bootstrap.dataSecretName or spec.template.spec.bootstrap.configRef "
    "to be populated"
)
_CLUSTER_NAME_MSG = "spec.clusterName and spec.template.spec.clusterName must be set to the same value"


def label_value_errors(value):
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        errs.append(_LABEL_VALUE_MSG)
    return errs


def go_value(value):
    """How field.Error prints a bad value: %q for strings, %v for numbers and booleans (apimachinery
    pkg/util/validation/field/errors.go ErrorBody); other values as compact JSON (Go prints %#v)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class FieldError:
    """A field.Error: ``<field>: <Type>[: <value>]: <detail>`` (Required and Forbidden print no value)."""

    TYPES = {"Invalid": "Invalid value", "Required": "Required value", "Forbidden": "Forbidden"}
    REASONS = {"Invalid": "FieldValueInvalid", "Required": "FieldValueRequired", "Forbidden": "FieldValueForbidden"}

    def __init__(self, type_, field, bad_value, detail):
        self.type, self.field, self.bad_value, self.detail = type_, field, bad_value, detail

    def body(self):
        text = self.TYPES[self.type]
        if self.type == "Invalid":
            text += ": " + go_value(self.bad_value)
        return f"{text}: {self.detail}"

    def __str__(self):
        return f"{self.field}: {self.body()}"


class Rule:
    """One upstream check. ``check(obj, gates)`` yields (field, bad value) per violation. ``plain``: the webhook
    returns the field.Error itself (not wrapped in NewInvalid), first and alone, so the answer is 403."""

    __slots__ = ("check", "detail", "field", "function", "group", "kind", "plain", "source", "type")

    def __init__(self, group, kind, type_, field, detail, check, source, function, plain=False):
        self.group, self.kind, self.type, self.field, self.detail = group, kind, type_, field, detail
        self.check, self.source, self.function, self.plain = check, source, function, plain

    def as_dict(self):
        repo, tag, path = self.source
        return {
            "kind": f"{self.kind}.{self.group}",
            "type": self.type,
            "field": self.field,
            "message": self.detail,
            "source": {"repo": repo, "tag": tag, "file": path, "function": self.function},
        }


class Denial:
    """What the API server answers: code, reason, message, and the webhook's field errors."""

    def __init__(self, webhook, code, reason, message, errors, rules):
        self.webhook, self.code, self.reason, self.message, self.errors, self.rules = (
            webhook,
            code,
            reason,
            message,
            errors,
            rules,
        )

    def status(self, group, kind, name):
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.code == 422:
            body["details"] = {
                "name": name,
                "group": group,
                "kind": kind,
                "causes": [
                    {"reason": FieldError.REASONS[e.type], "message": e.body(), "field": e.field} for e in self.errors
                ],
            }
        return body


# --- object access -----------------------------------------------------------------------------


def _get(obj, *path):
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _set_default(obj, path, value):
    """Set obj[path] when absent (creating the parents), the way Go fills a zero field."""
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    if obj.get(path[-1]) in (None, ""):
        obj[path[-1]] = value


def _name(obj):
    return _get(obj, "metadata", "name") or ""


# --- shared checks (each a port of one upstream helper) -----------------------------------------


def _ref_defined(ref):
    return isinstance(ref, dict) and any(ref.get(k) for k in ("apiGroup", "kind", "name"))


def _no_bootstrap(obj, _gates):
    boot = _get(obj, "spec", "template", "spec", "bootstrap") or {}
    if not _ref_defined(boot.get("configRef")) and boot.get("dataSecretName") is None:
        yield "spec.template.spec.bootstrap", None


def _cluster_name_differs(obj, _gates):
    name = _get(obj, "spec", "clusterName") or ""
    if name != (_get(obj, "spec", "template", "spec", "clusterName") or ""):
        yield "spec.clusterName", name


def _template_version(obj, _gates):
    version = _get(obj, "spec", "template", "spec", "version") or ""
    if version and not KUBE_SEMVER.match(version):
        yield "spec.template.spec.version", version


def _name_label_value(sep):
    # Cluster.validate writes "must be a valid label value %s", MachineDeployment.validate "...value: %s".
    def check(obj, _gates):
        for err in label_value_errors(_name(obj)):
            yield "metadata.name", (_name(obj), f"must be a valid label value{sep} {err}")

    return check


def _selector_matches(selector, labels):
    """metav1.LabelSelectorAsSelector(...).Matches for matchLabels and matchExpressions."""
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _selector_string(selector):
    """labels.Selector String(): requirements sorted by key, joined by commas."""
    parts = [(k, f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), sorted(expr.get("values") or [])
        text = {"In": f"{key} in ({','.join(values)})", "NotIn": f"{key} notin ({','.join(values)})"}.get(
            op, key if op == "Exists" else f"!{key}"
        )
        parts.append((key, text))
    return ",".join(text for _key, text in sorted(parts))


def _template_matches_selector(field_type):
    def check(obj, _gates):
        selector = _get(obj, "spec", "selector") or {}
        labels = _get(obj, "spec", "template", "metadata", "labels") or {}
        if not _selector_matches(selector, labels):
            yield "spec.template.metadata.labels", labels

    return check


def _selector_detail(obj):
    return "must match spec.selector %s" % json.dumps(_selector_string(_get(obj, "spec", "selector") or {}))


def _scaled_error(value):
    """intstr.GetScaledValueFromIntOrPercent's error, or None (k8s.io/apimachinery pkg/util/intstr)."""
    if value is None or isinstance(value, int):
        return None
    if not value.endswith("%"):
        return "invalid type: string is not a percentage"
    digits = value[:-1]
    if not re.fullmatch(r"[+-]?[0-9]+", digits):
        return f'invalid value "{value}": strconv.Atoi: parsing "{digits}": invalid syntax'
    return None


def _int_or_percent(path):
    def check(obj, _gates):
        value = _get(obj, *path)
        err = _scaled_error(value)
        if err:
            yield ".".join(path), (str(value), f"must be either an int or a percentage: {err}")

    return check


def _both_zero(obj, _gates):
    rolling = _get(obj, "spec", "rollout", "strategy", "rollingUpdate") or {}
    if rolling.get("maxUnavailable") == 0 and rolling.get("maxSurge") == 0:
        yield "spec.rollout.strategy.rollingUpdate", str(rolling.get("maxSurge"))


def _cidr_blocks(which):
    def check(obj, _gates):
        for i, cidr in enumerate(_get(obj, "spec", "clusterNetwork", which, "cidrBlocks") or []):
            try:
                ipaddress.ip_network(cidr, strict=False)
                if "/" not in cidr:
                    raise ValueError
            except ValueError:
                yield f"spec.clusterNetwork.{which}.cidrBlocks[{i}]", (cidr, f"invalid CIDR address: {cidr}")

    return check


def _gate_off(owner, gate):
    def check(obj, gates):
        if not gates.get((owner, gate), GATE_DEFAULTS[(owner, gate)]):
            yield "spec", None

    return check


def _files_conflict(prefix):
    def check(obj, _gates):
        seen = set()
        for i, item in enumerate(_get(obj, *prefix, "files") or []):
            if item.get("content") and item.get("contentFrom") is not None:
                yield "{}.files[{}]".format(".".join(prefix), i), (item, _FILES["content"])
            if item.get("path") in seen:
                yield "{}.files[{}].path".format(".".join(prefix), i), (item, _FILES["path"])
            seen.add(item.get("path"))

    return check


# --- defaulting webhooks (each mutates a copy; ported from the Default functions) -----------------


def _default_labels_cluster_name(obj):
    obj.setdefault("metadata", {}).setdefault("labels", {})["cluster.x-k8s.io/cluster-name"] = (
        _get(obj, "spec", "clusterName") or ""
    )


def _default_replicas(obj):
    spec = obj.setdefault("spec", {})
    if spec.get("replicas") is None:
        ann = _get(obj, "metadata", "annotations") or {}
        low = ann.get("cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size")
        high = ann.get("cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size")
        spec["replicas"] = int(low) if low is not None and high is not None and str(low).isdigit() else 1


def _default_template_version(obj):
    version = _get(obj, "spec", "template", "spec", "version")
    if version and not version.startswith("v"):
        obj["spec"]["template"]["spec"]["version"] = "v" + version


def _default_machine_pool(obj):
    _default_labels_cluster_name(obj)
    _default_replicas(obj)
    _set_default(obj, ["spec", "template", "spec", "deletion", "nodeDeletionTimeoutSeconds"], 10)
    _default_template_version(obj)


def _default_machine_deployment(obj):
    _default_labels_cluster_name(obj)
    _default_replicas(obj)
    spec = obj["spec"]
    selector = spec.setdefault("selector", {})
    match = selector.setdefault("matchLabels", {})
    _set_default(obj, ["spec", "rollout", "strategy", "type"], "RollingUpdate")
    labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
    if spec["rollout"]["strategy"]["type"] == "RollingUpdate":
        rolling = spec["rollout"]["strategy"].setdefault("rollingUpdate", {})
        rolling.setdefault("maxSurge", 1)
        rolling.setdefault("maxUnavailable", 0)
    if not match and not selector.get("matchExpressions"):
        match["cluster.x-k8s.io/deployment-name"] = _name(obj)
        labels["cluster.x-k8s.io/deployment-name"] = _name(obj)
    match["cluster.x-k8s.io/cluster-name"] = spec.get("clusterName") or ""
    labels["cluster.x-k8s.io/cluster-name"] = spec.get("clusterName") or ""
    _default_template_version(obj)


def _default_machine_set(obj):
    _default_labels_cluster_name(obj)
    _default_replicas(obj)
    spec = obj["spec"]
    selector = spec.setdefault("selector", {})
    match = selector.setdefault("matchLabels", {})
    labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
    if not match and not selector.get("matchExpressions"):
        match["cluster.x-k8s.io/set-name"] = _name(obj)[:63]
        labels["cluster.x-k8s.io/set-name"] = _name(obj)[:63]
    match["cluster.x-k8s.io/cluster-name"] = spec.get("clusterName") or ""
    labels["cluster.x-k8s.io/cluster-name"] = spec.get("clusterName") or ""
    _default_template_version(obj)


def _default_mhc(obj):
    _default_labels_cluster_name(obj)
    _set_default(obj, ["spec", "checks", "nodeStartupTimeoutSeconds"], 600)


def _default_kcp(obj):
    spec = obj.setdefault("spec", {})
    if spec.get("replicas") is None:
        spec["replicas"] = 1
    if not str(spec.get("version", "")).startswith("v"):
        spec["version"] = "v" + str(spec.get("version", ""))
    strategy = spec.setdefault("rollout", {}).setdefault("strategy", {})
    strategy["type"] = "RollingUpdate"
    strategy.setdefault("rollingUpdate", {}).setdefault("maxSurge", 1)


def _default_dev_cluster(obj):
    backend = obj.setdefault("spec", {}).setdefault("backend", {})
    if backend.get("inMemory") is None and backend.get("docker") is None:
        backend["docker"] = {}
    if backend.get("docker") is not None:
        _set_default(obj, ["spec", "controlPlaneEndpoint", "port"], 6443)
        for domain in backend["docker"].get("failureDomains") or []:
            domain.setdefault("controlPlane", False)


def _default_amcp(obj):
    # EKS names: eks.GenerateEKSName; only its presence matters to the rules below.
    _set_default(obj, ["spec", "eksClusterName"], "{}_{}".format(_get(obj, "metadata", "namespace") or "", _name(obj)))
    spec = obj["spec"]
    spec.setdefault("identityRef", {"kind": "AWSClusterControllerIdentity", "name": "default"})
    spec["bootstrapSelfManagedAddons"] = True


def _default_ammp(obj):
    _set_default(
        obj, ["spec", "eksNodegroupName"], "{}_{}".format(_get(obj, "metadata", "namespace") or "", _name(obj))
    )
    if _get(obj, "spec", "updateConfig") is None:
        obj["spec"]["updateConfig"] = {"maxUnavailable": 1}


def _default_gcp_cp(obj):
    # generateGKEName: <namespace>-<name with . as ->, or "capg-" and a 27-character hash when that is 40 or longer
    name = "{}-{}".format(_get(obj, "metadata", "namespace") or "", _name(obj).replace(".", "-"))
    _set_default(obj, ["spec", "clusterName"], name if len(name) < 40 else "capg-" + "0" * 27)


def _default_hcp(obj):
    spec = obj.setdefault("spec", {})
    if not spec.get("releaseNamespace"):
        spec["releaseNamespace"] = "default"
    options = spec.setdefault("options", {})
    if options.get("atomic"):
        options["wait"] = True
    options.setdefault("timeout", "10m0s")


def _default_tcp(obj):
    spec = obj.setdefault("spec", {})
    if spec.get("replicas") is None:
        spec["replicas"] = 1
    _set_default(obj, ["spec", "infrastructureTemplate", "namespace"], _get(obj, "metadata", "namespace") or "")
    if not str(spec.get("version", "")).startswith("v"):
        spec["version"] = "v" + str(spec.get("version", ""))
    strategy = spec.get("rolloutStrategy") or {}
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {}).setdefault("maxSurge", 1)
    spec["rolloutStrategy"] = strategy


def _default_provider(obj):
    namespace = _get(obj, "metadata", "namespace") or ""
    for key in ("configSecret", "additionalManifests"):
        ref = _get(obj, "spec", key)
        if isinstance(ref, dict) and not ref.get("namespace"):
            ref["namespace"] = namespace


# (group, kind) -> (defaulting webhook or None, validating webhook name or None, source of both).
WEBHOOKS = {
    (CORE, "Cluster"): (None, "validation.cluster.cluster.x-k8s.io", CAPI + ("internal/webhooks/cluster.go",)),
    (CORE, "MachinePool"): (
        _default_machine_pool,
        "validation.machinepool.cluster.x-k8s.io",
        CAPI + ("internal/webhooks/machinepool.go",),
    ),
    (CORE, "MachineDeployment"): (
        _default_machine_deployment,
        "validation.machinedeployment.cluster.x-k8s.io",
        CAPI + ("internal/webhooks/machinedeployment.go",),
    ),
    (CORE, "MachineSet"): (
        _default_machine_set,
        "validation.machineset.cluster.x-k8s.io",
        CAPI + ("internal/webhooks/machineset.go",),
    ),
    (CORE, "MachineHealthCheck"): (
        _default_mhc,
        "validation.machinehealthcheck.cluster.x-k8s.io",
        CAPI + ("internal/webhooks/machinehealthcheck.go",),
    ),
    (CONTROLPLANE, "KubeadmControlPlane"): (
        _default_kcp,
        "validation.kubeadmcontrolplane.controlplane.cluster.x-k8s.io",
        CAPI + ("controlplane/kubeadm/internal/webhooks/kubeadmcontrolplane.go",),
    ),
    (BOOTSTRAP, "KubeadmConfigTemplate"): (
        None,
        "validation.kubeadmconfigtemplate.bootstrap.cluster.x-k8s.io",
        CAPI + ("bootstrap/kubeadm/internal/webhooks/kubeadmconfigtemplate.go",),
    ),
    (INFRA, "DevCluster"): (
        _default_dev_cluster,
        "validation.devcluster.infrastructure.cluster.x-k8s.io",
        CAPI + ("test/infrastructure/docker/internal/webhooks/devcluster.go",),
    ),
    (INFRA, "DevMachineTemplate"): (
        None,
        "validation.devmachinetemplate.infrastructure.cluster.x-k8s.io",
        CAPI + ("test/infrastructure/docker/internal/webhooks/devmachinetemplate.go",),
    ),
    (CONTROLPLANE, "AWSManagedControlPlane"): (
        _default_amcp,
        "validation.awsmanagedcontrolplanes.controlplane.cluster.x-k8s.io",
        CAPA + ("controlplane/eks/webhooks/awsmanagedcontrolplane_webhook.go",),
    ),
    (INFRA, "AWSManagedMachinePool"): (
        _default_ammp,
        "validation.awsmanagedmachinepool.infrastructure.cluster.x-k8s.io",
        CAPA + ("exp/webhooks/awsmanagedmachinepool_webhook.go",),
    ),
    (INFRA, "AzureASOManagedCluster"): (
        None,
        "validation.azureasomanagedcluster.infrastructure.cluster.x-k8s.io",
        CAPZ + ("internal/webhooks/azureasomanagedcluster_webhook.go",),
    ),
    (INFRA, "AzureASOManagedControlPlane"): (
        None,
        "validation.azureasomanagedcontrolplane.infrastructure.cluster.x-k8s.io",
        CAPZ + ("internal/webhooks/azureasomanagedcontrolplane_webhook.go",),
    ),
    (INFRA, "AzureASOManagedMachinePool"): (
        None,
        "validation.azureasomanagedmachinepool.infrastructure.cluster.x-k8s.io",
        CAPZ + ("internal/webhooks/azureasomanagedmachinepool_webhook.go",),
    ),
    (INFRA, "GCPManagedCluster"): (
        None,
        "vgcpmanagedcluster.kb.io",
        CAPG + ("exp/webhooks/gcpmanagedcluster_webhook.go",),
    ),
    (INFRA, "GCPManagedControlPlane"): (
        _default_gcp_cp,
        "vgcpmanagedcontrolplane.kb.io",
        CAPG + ("exp/webhooks/gcpmanagedcontrolplane_webhook.go",),
    ),
    (INFRA, "GCPManagedMachinePool"): (
        None,
        "vgcpmanagedmachinepool.kb.io",
        CAPG + ("exp/webhooks/gcpmanagedmachinepool_webhook.go",),
    ),
    (INFRA, "TinkerbellMachineTemplate"): (
        None,
        "validation.tinkerbellmachinetemplate.infrastructure.x-k8s.io",
        CAPT + ("api/v1beta1/tinkerbellmachinetemplate_webhook.go",),
    ),
    (CONTROLPLANE, "TalosControlPlane"): (
        _default_tcp,
        "validate.taloscontrolplane.controlplane.cluster.x-k8s.io",
        CACPPT + ("api/v1alpha3/taloscontrolplane_webhook.go",),
    ),
    (ADDONS, "HelmChartProxy"): (
        _default_hcp,
        "vhelmchartproxy.kb.io",
        CAAPH + ("api/v1alpha1/helmchartproxy_webhook.go",),
    ),
}
# The operator's providers: defaulting only (their ValidateCreate returns nil), cluster-api-operator
# internal/webhook/*provider_webhook.go and provider_webhook.go setDefaultProviderSpec @ v0.28.0.
for _kind in kube.PROVIDER_KINDS:
    WEBHOOKS[("operator.cluster.x-k8s.io", _kind)] = (
        _default_provider,
        None,
        ("kubernetes-sigs/cluster-api-operator", "v0.28.0", "internal/webhook/provider_webhook.go"),
    )


# --- the rules -------------------------------------------------------------------------------------


def _r(group, kind, type_, field, detail, check, function, plain=False):
    source = WEBHOOKS[(group, kind)][2]
    return Rule(group, kind, type_, field, detail, check, source, function, plain)


def _kcp_replicas(obj, _gates):
    replicas = _get(obj, "spec", "replicas")
    if replicas is not None and replicas <= 0:
        yield "spec.replicas", (None, "cannot be less than or equal to 0")
    external = _get(obj, "spec", "kubeadmConfigSpec", "clusterConfiguration", "etcd", "external")
    if replicas is not None and replicas % 2 == 0 and not external:
        yield "spec.replicas", (None, "cannot be an even number when etcd is stacked")


def _kcp_infra(part):
    def check(obj, _gates):
        value = _get(obj, "spec", "machineTemplate", "spec", "infrastructureRef", part) or ""
        if not value:
            yield f"spec.machineTemplate.infrastructure.{part}", value

    return check


def _kcp_version(obj, _gates):
    version = _get(obj, "spec", "version") or ""
    if not KUBE_SEMVER.match(version):
        yield "spec.version", version


def _eks_version(obj, _gates):
    # k8s.io/apimachinery pkg/util/version ParseGeneric (v0.35.4): at least major.minor.
    version = _get(obj, "spec", "version")
    if version is None:
        return
    match = re.match(r"^\s*v?([0-9]+(?:\.[0-9]+)*)(.*)*$", version)
    if not match:
        yield "spec.version", (version, "could not parse %s as version" % json.dumps(version))
    elif len(match.group(1).split(".")) < 2:
        yield "spec.version", (version, "illegal version string %s" % json.dumps(version))
    elif match.group(1).split(".")[0].startswith("0") and match.group(1).split(".")[0] != "0":
        first = match.group(1).split(".")[0]
        yield (
            "spec.version",
            (version, "illegal zero-prefixed version component %s in %s" % (json.dumps(first), json.dumps(version))),
        )


def _required_str(path, display):
    def check(obj, _gates):
        if not _get(obj, *path):
            yield display, None

    return check


def _scaling(min_key, max_key, max_zero):
    def check(obj, _gates):
        scaling = _get(obj, "spec", "scaling") or {}
        low, high = scaling.get(min_key), scaling.get(max_key)
        if low is not None and low < 0:
            yield f"spec.scaling.{min_key}", (low, "must be greater or equal zero")
        if low is not None and high is not None and high < low:
            yield f"spec.scaling.{max_key}", (high, f"must be greater than field spec.scaling.{min_key}")
        if max_zero and high is not None and high < 0:
            yield f"spec.scaling.{max_key}", (high, "must be greater than zero")

    return check


def _gke_both_versions(obj, _gates):
    if _get(obj, "spec", "controlPlaneVersion") is not None and _get(obj, "spec", "version") is not None:
        yield "spec.ControlPlaneVersion", _get(obj, "spec", "loggingService")


def _gke_name_length(obj, _gates):
    name = _get(obj, "spec", "clusterName") or ""
    if len(name) > 40:
        yield "spec.ClusterName", name


def _gke_custom_subnet(obj, _gates):
    network = _get(obj, "spec", "network") or {}
    if network.get("autoCreateSubnetworks") is False:
        region = _get(obj, "spec", "region")
        if not any(s.get("region") == region for s in network.get("subnets") or []):
            yield "spec.network.subnet", None


def _autopilot(key, when_set):
    def check(obj, _gates):
        spec = obj.get("spec") or {}
        if not spec.get("enableAutopilot"):
            return
        if when_set and spec.get(key) is not None:
            # upstream reports spec.LoggingService as the bad value for both fields
            yield "spec." + key[0].upper() + key[1:], spec.get("loggingService")
        elif not when_set and spec.get(key) is None:
            yield "spec.ReleaseChannel", None

    return check


def _node_pool_name(obj, _gates):
    name = _get(obj, "spec", "nodePoolName") or ""
    if len(name) > 40:
        yield "spec.NodePoolName", name


def _autoscaling_off(obj, _gates):
    scaling = _get(obj, "spec", "scaling") or {}
    if scaling.get("enableAutoscaling") is False:
        for key in ("minCount", "maxCount", "locationPolicy"):
            if scaling.get(key) is not None:
                yield f"spec.scaling.{key}", (None, f"{key} cannot be specified when autoscaling is disabled")


def _gke_non_negative(obj, _gates):
    for key in ("diskSizeGb", "localSsdCount", "maxPodsPerNode"):
        value = _get(obj, "spec", key)
        if value is not None and value < 0:
            yield f"spec.template.spec.{key}", value


def _update_config(obj, _gates):
    config = _get(obj, "spec", "updateConfig")
    if config is None:
        return
    count, percent = config.get("maxUnavailable"), config.get("maxUnavailablePercentage")
    if count is None and percent is None:
        yield (
            "spec.updateConfig",
            (
                config,
                "must specify one of maxUnavailable or maxUnavailablePercentage when using nodegroup updateconfig",
            ),
        )
    if count is not None and percent is not None:
        yield "spec.updateConfig", (config, "cannot specify both maxUnavailable and maxUnavailablePercentage")


def _template_forbidden(key):
    def check(obj, _gates):
        if _get(obj, "spec", "template", "spec", key):
            yield f"spec.template.spec.{key}", None

    return check


def _talos_rollout(obj, _gates):
    kind = _get(obj, "spec", "rolloutStrategy", "type") or ""
    if kind not in ("", "RollingUpdate", "OnDelete"):
        yield "spec.rolloutStrategy", kind


def _repo_url(obj, _gates):
    url = _get(obj, "spec", "repoURL") or ""
    problem = _parse_request_uri(url)
    if problem:
        yield "spec.repoURL", (url, f'specified repoURL {url} is not valid: parse "{url}": {problem}')


def _parse_request_uri(url):
    """The error of Go net/url ParseRequestURI (go/src/net/url/url.go parse, getScheme), or None. A request
    URI is absolute (a scheme) or an absolute path."""
    if not url:
        return "empty url"
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)?:", url)
    if url.startswith(":"):
        return "missing protocol scheme"
    if match or url == "*" or url.startswith("/"):
        return None
    return "invalid URI for request"


def _failure_domains_sorted(obj, _gates):
    domains = _get(obj, "spec", "backend", "docker", "failureDomains") or []
    names = [d.get("name") or "" for d in domains]
    if names != sorted(names):
        yield "spec.backend.docker.failureDomains", domains


def _mhc_selector_empty(obj, _gates):
    selector = _get(obj, "spec", "selector") or {}
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        yield "spec.selector", None


def _mhc_selector_cluster(obj, _gates):
    selector = _get(obj, "spec", "selector") or {}
    labels = selector.get("matchLabels") or {}
    if "cluster.x-k8s.io/cluster-name" in labels and labels["cluster.x-k8s.io/cluster-name"] != (
        _get(obj, "spec", "clusterName") or ""
    ):
        yield "spec.selector", selector


def _mhc_startup(obj, _gates):
    value = _get(obj, "spec", "checks", "nodeStartupTimeoutSeconds")
    if value is not None and value != 0 and value < 30:
        yield "spec.checks.nodeStartupTimeoutSeconds", value


def _cluster_refs(obj, _gates):
    spec = obj.get("spec") or {}
    if not any(_ref_defined(spec.get(k)) for k in ("controlPlaneRef", "infrastructureRef")) and not spec.get(
        "topology"
    ):
        yield "spec", None


def _cluster_topology_gate(obj, gates):
    if _get(obj, "spec", "topology") and not gates.get(("cluster-api", "ClusterTopology"), False):
        yield "spec.topology", None


def _taints_on_pool(obj, _gates):
    if _get(obj, "spec", "template", "spec", "taints"):
        yield "spec.taints", None


def _taints_gate(obj, gates):
    if _get(obj, "spec", "template", "spec", "taints") and not gates.get(
        ("cluster-api", "MachineTaintPropagation"), False
    ):
        yield "spec.taints", None


_MD = (CORE, "MachineDeployment")
_MS = (CORE, "MachineSet")
_MP = (CORE, "MachinePool")
_SEMVER_MSG = "must be a valid semantic version"

RULES = (
    # Cluster: internal/webhooks/cluster.go Cluster.validate / validateTopology / validateCIDRBlocks
    _r(
        CORE,
        "Cluster",
        "Invalid",
        "metadata.name",
        "must be a valid label value {detail}",
        _name_label_value(""),
        "Cluster.validate",
    ),
    _r(
        CORE,
        "Cluster",
        "Forbidden",
        "spec",
        "one of spec.controlPlaneRef, spec.infrastructureRef or spec.topology must be set",
        _cluster_refs,
        "Cluster.validate",
    ),
    _r(
        CORE,
        "Cluster",
        "Invalid",
        "spec.clusterNetwork.pods.cidrBlocks[i]",
        "{detail}",
        _cidr_blocks("pods"),
        "validateCIDRBlocks",
    ),
    _r(
        CORE,
        "Cluster",
        "Invalid",
        "spec.clusterNetwork.services.cidrBlocks[i]",
        "{detail}",
        _cidr_blocks("services"),
        "validateCIDRBlocks",
    ),
    _r(
        CORE,
        "Cluster",
        "Forbidden",
        "spec.topology",
        "can be set only if the ClusterTopology feature flag is enabled",
        _cluster_topology_gate,
        "Cluster.validateTopology",
    ),
    # MachinePool: internal/webhooks/machinepool.go MachinePool.validate
    _r(
        CORE,
        "MachinePool",
        "Forbidden",
        "spec",
        "can be set only if the MachinePool feature flag is enabled",
        _gate_off("cluster-api", "MachinePool"),
        "MachinePool.validate",
        plain=True,
    ),
    _r(
        CORE,
        "MachinePool",
        "Required",
        "spec.template.spec.bootstrap",
        _BOOTSTRAP_MSG,
        _no_bootstrap,
        "MachinePool.validate",
    ),
    _r(
        CORE,
        "MachinePool",
        "Invalid",
        "spec.clusterName",
        _CLUSTER_NAME_MSG,
        _cluster_name_differs,
        "MachinePool.validate",
    ),
    _r(
        CORE,
        "MachinePool",
        "Invalid",
        "spec.template.spec.version",
        _SEMVER_MSG,
        _template_version,
        "MachinePool.validate",
    ),
    _r(
        CORE,
        "MachinePool",
        "Forbidden",
        "spec.taints",
        "taints feature for MachinePools is not yet implemented",
        _taints_on_pool,
        "MachinePool.validate",
    ),
    _r(
        CORE,
        "MachinePool",
        "Forbidden",
        "spec.taints",
        "taints are not allowed to be set when the feature gate MachineTaintPropagation is disabled",
        _taints_gate,
        "MachinePool.validate",
    ),
    # MachineDeployment: internal/webhooks/machinedeployment.go MachineDeployment.validate
    _r(
        CORE,
        "MachineDeployment",
        "Invalid",
        "metadata.name",
        "must be a valid label value: {detail}",
        _name_label_value(":"),
        "MachineDeployment.validate",
    ),
    _r(
        CORE,
        "MachineDeployment",
        "Required",
        "spec.template.spec.bootstrap",
        _BOOTSTRAP_MSG,
        _no_bootstrap,
        "MachineDeployment.validate",
    ),
    _r(
        CORE,
        "MachineDeployment",
        "Forbidden",
        "spec.template.metadata.labels",
        "must match spec.selector {selector}",
        _template_matches_selector("Forbidden"),
        "MachineDeployment.validate",
    ),
    _r(
        CORE,
        "MachineDeployment",
        "Invalid",
        "spec.clusterName",
        _CLUSTER_NAME_MSG,
        _cluster_name_differs,
        "MachineDeployment.validate",
    ),
    _r(
        CORE,
        "MachineDeployment",
        "Invalid",
        "spec.rollout.strategy.rollingUpdate.maxUnavailable",
        "must be either an int or a percentage: {detail}",
        _int_or_percent(("spec", "rollout", "strategy", "rollingUpdate", "maxUnavailable")),
        "validateRolloutStrategy",
    ),
    _r(
        CORE,
        "MachineDeployment",
        "Invalid",
        "spec.rollout.strategy.rollingUpdate.maxSurge",
        "must be either an int or a percentage: {detail}",
        _int_or_percent(("spec", "rollout", "strategy", "rollingUpdate", "maxSurge")),
        "validateRolloutStrategy",
    ),
    _r(
        CORE,
        "MachineDeployment",
        "Invalid",
        "spec.rollout.strategy.rollingUpdate",
        "maxUnavailable and maxSurge cannot both be 0",
        _both_zero,
        "validateRolloutStrategy",
    ),
    _r(
        CORE,
        "MachineDeployment",
        "Invalid",
        "spec.remediation.maxInFlight",
        "must be either an int or a percentage: {detail}",
        _int_or_percent(("spec", "remediation", "maxInFlight")),
        "validateRemediationMaxInFlight",
    ),
    _r(
        CORE,
        "MachineDeployment",
        "Invalid",
        "spec.template.spec.version",
        _SEMVER_MSG,
        _template_version,
        "MachineDeployment.validate",
    ),
    # MachineSet: internal/webhooks/machineset.go MachineSet.validate
    _r(
        CORE,
        "MachineSet",
        "Required",
        "spec.template.spec.bootstrap",
        _BOOTSTRAP_MSG,
        _no_bootstrap,
        "MachineSet.validate",
    ),
    _r(
        CORE,
        "MachineSet",
        "Invalid",
        "spec.template.metadata.labels",
        "must match spec.selector {selector}",
        _template_matches_selector("Invalid"),
        "MachineSet.validate",
    ),
    _r(
        CORE,
        "MachineSet",
        "Invalid",
        "spec.clusterName",
        _CLUSTER_NAME_MSG,
        _cluster_name_differs,
        "MachineSet.validate",
    ),
    _r(
        CORE,
        "MachineSet",
        "Invalid",
        "spec.template.spec.version",
        _SEMVER_MSG,
        _template_version,
        "MachineSet.validate",
    ),
    # MachineHealthCheck: internal/webhooks/machinehealthcheck.go MachineHealthCheck.validate
    _r(
        CORE,
        "MachineHealthCheck",
        "Required",
        "spec.selector",
        "selector must not be empty",
        _mhc_selector_empty,
        "MachineHealthCheck.validate",
    ),
    _r(
        CORE,
        "MachineHealthCheck",
        "Invalid",
        "spec.selector",
        "cannot specify a cluster selector other than the one specified by ClusterName",
        _mhc_selector_cluster,
        "MachineHealthCheck.validate",
    ),
    _r(
        CORE,
        "MachineHealthCheck",
        "Invalid",
        "spec.checks.nodeStartupTimeoutSeconds",
        "must be at least 30s",
        _mhc_startup,
        "validateMachineHealthCheckNodeStartupTimeoutSeconds",
    ),
    _r(
        CORE,
        "MachineHealthCheck",
        "Invalid",
        "spec.remediation.triggerIf.unhealthyLessThanOrEqualTo",
        "must be either an int or a percentage: {detail}",
        _int_or_percent(("spec", "remediation", "triggerIf", "unhealthyLessThanOrEqualTo")),
        "validateMachineHealthCheckUnhealthyLessThanOrEqualTo",
    ),
    # KubeadmControlPlane: controlplane/kubeadm/internal/webhooks/kubeadmcontrolplane.go validateKubeadmControlPlaneSpec
    _r(
        CONTROLPLANE,
        "KubeadmControlPlane",
        "Forbidden",
        "spec.replicas",
        "{detail}",
        _kcp_replicas,
        "validateKubeadmControlPlaneSpec",
    ),
    _r(
        CONTROLPLANE,
        "KubeadmControlPlane",
        "Invalid",
        "spec.machineTemplate.infrastructure.apiGroup",
        "cannot be empty",
        _kcp_infra("apiGroup"),
        "validateKubeadmControlPlaneSpec",
    ),
    _r(
        CONTROLPLANE,
        "KubeadmControlPlane",
        "Invalid",
        "spec.machineTemplate.infrastructure.kind",
        "cannot be empty",
        _kcp_infra("kind"),
        "validateKubeadmControlPlaneSpec",
    ),
    _r(
        CONTROLPLANE,
        "KubeadmControlPlane",
        "Invalid",
        "spec.machineTemplate.infrastructure.name",
        "cannot be empty",
        _kcp_infra("name"),
        "validateKubeadmControlPlaneSpec",
    ),
    _r(
        CONTROLPLANE,
        "KubeadmControlPlane",
        "Invalid",
        "spec.version",
        _SEMVER_MSG,
        _kcp_version,
        "validateKubeadmControlPlaneSpec",
    ),
    _r(
        CONTROLPLANE,
        "KubeadmControlPlane",
        "Invalid",
        "spec.kubeadmConfigSpec.files[i]",
        "{detail}",
        _files_conflict(("spec", "kubeadmConfigSpec")),
        "KubeadmConfigSpec.validateFiles (api/bootstrap/kubeadm/v1beta2/kubeadmconfig_types.go)",
    ),
    # KubeadmConfigTemplate: bootstrap/kubeadm/internal/webhooks/kubeadmconfigtemplate.go validate
    _r(
        BOOTSTRAP,
        "KubeadmConfigTemplate",
        "Invalid",
        "spec.template.spec.files[i]",
        "{detail}",
        _files_conflict(("spec", "template", "spec")),
        "KubeadmConfigSpec.validateFiles (api/bootstrap/kubeadm/v1beta2/kubeadmconfig_types.go)",
    ),
    # CAPD DevCluster: test/infrastructure/docker/internal/webhooks/devcluster.go validateDevClusterSpec
    _r(
        INFRA,
        "DevCluster",
        "Invalid",
        "spec.backend.docker.failureDomains",
        "failure domains must be sorted by name",
        _failure_domains_sorted,
        "validateDevClusterSpec",
    ),
    # CAPA AWSManagedControlPlane: controlplane/eks/webhooks/awsmanagedcontrolplane_webhook.go ValidateCreate
    _r(
        CONTROLPLANE,
        "AWSManagedControlPlane",
        "Required",
        "spec.eksClusterName",
        "eksClusterName is required",
        _required_str(("spec", "eksClusterName"), "spec.eksClusterName"),
        "AWSManagedControlPlane.ValidateCreate",
    ),
    _r(
        CONTROLPLANE,
        "AWSManagedControlPlane",
        "Invalid",
        "spec.version",
        "{detail}",
        _eks_version,
        "validateEKSVersion",
    ),
    # CAPA AWSManagedMachinePool: exp/webhooks/awsmanagedmachinepool_webhook.go ValidateCreate
    _r(
        INFRA,
        "AWSManagedMachinePool",
        "Required",
        "spec.eksNodegroupName",
        "eksNodegroupName is required",
        _required_str(("spec", "eksNodegroupName"), "spec.eksNodegroupName"),
        "AWSManagedMachinePool.ValidateCreate",
    ),
    _r(
        INFRA,
        "AWSManagedMachinePool",
        "Invalid",
        "spec.scaling",
        "{detail}",
        _scaling("minSize", "maxSize", True),
        "AWSManagedMachinePool.validateScaling",
    ),
    _r(
        INFRA,
        "AWSManagedMachinePool",
        "Invalid",
        "spec.updateConfig",
        "{detail}",
        _update_config,
        "AWSManagedMachinePool.validateNodegroupUpdateConfig",
    ),
    # CAPZ ASO kinds: internal/webhooks/azureasomanaged*_webhook.go ValidateCreate
    _r(
        INFRA,
        "AzureASOManagedCluster",
        "Forbidden",
        "spec",
        "can be set only if the ASOAPI feature flag is enabled",
        _gate_off("capz", "ASOAPI"),
        "AzureASOManagedClusterWebhook.ValidateCreate",
        plain=True,
    ),
    _r(
        INFRA,
        "AzureASOManagedControlPlane",
        "Forbidden",
        "spec",
        "can be set only if the ASOAPI feature flag is enabled",
        _gate_off("capz", "ASOAPI"),
        "AzureASOManagedControlPlaneWebhook.ValidateCreate",
        plain=True,
    ),
    _r(
        INFRA,
        "AzureASOManagedMachinePool",
        "Forbidden",
        "spec",
        "can be set only if the ASOAPI feature flag is enabled",
        _gate_off("capz", "ASOAPI"),
        "AzureASOManagedMachinePoolWebhook.ValidateCreate",
        plain=True,
    ),
    # CAPG: exp/webhooks/gcpmanaged*_webhook.go
    _r(
        INFRA,
        "GCPManagedCluster",
        "Required",
        "spec.network.subnet",
        "at least one given subnets region should be same as spec.network.region when spec.network.autoCreateSubnetworks is false",
        _gke_custom_subnet,
        "GCPManagedCluster.validateCustomSubnet",
        plain=True,
    ),
    _r(
        INFRA,
        "GCPManagedControlPlane",
        "Invalid",
        "spec.ClusterName",
        "cluster name cannot have more than 40 characters",
        _gke_name_length,
        "GCPManagedControlPlane.ValidateCreate",
    ),
    _r(
        INFRA,
        "GCPManagedControlPlane",
        "Required",
        "spec.ReleaseChannel",
        "Release channel is required for an autopilot enabled cluster",
        _autopilot("releaseChannel", False),
        "GCPManagedControlPlane.ValidateCreate",
    ),
    _r(
        INFRA,
        "GCPManagedControlPlane",
        "Invalid",
        "spec.LoggingService",
        "can't be set when autopilot is enabled",
        _autopilot("loggingService", True),
        "GCPManagedControlPlane.ValidateCreate",
    ),
    _r(
        INFRA,
        "GCPManagedControlPlane",
        "Invalid",
        "spec.MonitoringService",
        "can't be set when autopilot is enabled",
        _autopilot("monitoringService", True),
        "GCPManagedControlPlane.ValidateCreate",
    ),
    _r(
        INFRA,
        "GCPManagedControlPlane",
        "Invalid",
        "spec.ControlPlaneVersion",
        "spec.ControlPlaneVersion and spec.Version cannot be set at the same time: please use spec.Version",
        _gke_both_versions,
        "GCPManagedControlPlane.ValidateCreate",
    ),
    _r(
        INFRA,
        "GCPManagedMachinePool",
        "Invalid",
        "spec.NodePoolName",
        "node pool name cannot have more than 40 characters",
        _node_pool_name,
        "validateNodePoolName",
    ),
    _r(
        INFRA,
        "GCPManagedMachinePool",
        "Forbidden",
        "spec.scaling.{minCount,maxCount,locationPolicy}",
        "{detail}",
        _autoscaling_off,
        "validateScaling",
    ),
    _r(
        INFRA,
        "GCPManagedMachinePool",
        "Invalid",
        "spec.scaling",
        "{detail}",
        _scaling("minCount", "maxCount", False),
        "validateScaling",
    ),
    _r(
        INFRA,
        "GCPManagedMachinePool",
        "Invalid",
        "spec.template.spec.{diskSizeGb,localSsdCount,maxPodsPerNode}",
        "must be non-negative",
        _gke_non_negative,
        "webhookutils.ValidateNonNegative (util/webhook/validator.go)",
    ),
    # CAPT: api/v1beta1/tinkerbellmachinetemplate_webhook.go ValidateCreate
    _r(
        INFRA,
        "TinkerbellMachineTemplate",
        "Forbidden",
        "spec.template.spec.providerID",
        "cannot be set in templates",
        _template_forbidden("providerID"),
        "TinkerbellMachineTemplate.ValidateCreate",
    ),
    _r(
        INFRA,
        "TinkerbellMachineTemplate",
        "Forbidden",
        "spec.template.spec.hardwareName",
        "cannot be set in templates",
        _template_forbidden("hardwareName"),
        "TinkerbellMachineTemplate.ValidateCreate",
    ),
    # CACPPT: api/v1alpha3/taloscontrolplane_webhook.go validate
    _r(
        CONTROLPLANE,
        "TalosControlPlane",
        "Invalid",
        "spec.rolloutStrategy",
        'valid values are: ["RollingUpdate" "OnDelete"]',
        _talos_rollout,
        "TalosControlPlane.validate",
    ),
    # CAAPH: api/v1alpha1/helmchartproxy_webhook.go ValidateCreate / isUrlValid (a plain error: 403)
    _r(
        ADDONS,
        "HelmChartProxy",
        "Plain",
        "spec.repoURL",
        'specified repoURL <url> is not valid: parse "<url>": <net/url error>',
        _repo_url,
        "helmChartProxyWebhook.ValidateCreate / isUrlValid",
        plain=True,
    ),
)

_FILES = {
    "content": "only one of content or contentFrom may be specified for a single file",
    "path": "path property must be unique among all files",
}


def _error(rule, obj, field, found):
    """The field.Error of one violation. A check yields the bad value, or (bad value, detail) when the
    detail depends on the object."""
    if isinstance(found, tuple):
        bad, detail = found
    else:
        bad, detail = found, rule.detail
        if "{selector}" in detail:
            detail = _selector_detail(obj)
        elif "{value}" in detail:
            detail = detail.format(value=found)
    return FieldError(rule.type, field, bad, detail)


def default(obj):
    """The object after its kind's defaulting webhook (a copy; the input is not changed)."""
    obj = copy.deepcopy(obj)
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    hook = WEBHOOKS.get((group, obj.get("kind")))
    if hook and hook[0]:
        hook[0](obj)
    return obj


def review(obj, gates=None):
    """Default, then validate ``obj`` as its kind's webhooks do on create. Returns a Denial or None."""
    gates = dict(gates or {})
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    kind = obj.get("kind")
    hook = WEBHOOKS.get((group, kind))
    if not hook or not hook[1]:
        return None
    obj = default(obj)
    name = _name(obj)
    errors, fired = [], []
    for rule in RULES:
        if (rule.group, rule.kind) != (group, kind):
            continue
        try:
            found_all = list(rule.check(obj, gates))
        except (TypeError, AttributeError, ValueError):
            continue  # a value of the wrong type: the schema refuses it before any webhook runs
        for field, found in found_all:
            if rule.plain:
                err = _error(rule, obj, field, found)
                text = err.detail if rule.type == "Plain" else str(err)
                return Denial(
                    hook[1], 403, "Forbidden", f'admission webhook "{hook[1]}" denied the request: {text}', [], [rule]
                )
            errors.append(_error(rule, obj, field, found))
            fired.append(rule)
    if not errors:
        return None
    texts = []
    for err in errors:
        if str(err) not in texts:
            texts.append(str(err))
    aggregate = texts[0] if len(texts) == 1 else "[{}]".format(", ".join(texts))
    message = f'{kind}.{group} "{name}" is invalid: {aggregate}'
    return Denial(
        hook[1], 422, "Invalid", f'admission webhook "{hook[1]}" denied the request: {message}', errors, fired
    )


def gates_from(objects):
    """Feature gates the tree sets on its operator providers (spec.manager.featureGates), by owner."""
    gates = {}
    for obj in objects:
        owner = GATE_OWNERS.get((obj.get("kind"), _name(obj)))
        if not owner or not str(obj.get("apiVersion", "")).startswith("operator.cluster.x-k8s.io/"):
            continue
        for gate, value in (_get(obj, "spec", "manager", "featureGates") or {}).items():
            gates[(owner, gate)] = bool(value)
    return gates


def registry():
    """The rules as data (docs and tests read this)."""
    return [rule.as_dict() for rule in RULES]
