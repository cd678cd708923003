# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The admission webhooks' checks (module_utils/admission.py is the engine): the providers' sources and
groups, the upstream feature-gate defaults, object access, and one function per upstream check, each a port of
the Go helper it names. admission_rules.py ties each check to its field, message and source.
"""

from __future__ import annotations

import ipaddress
import re
import json

from ansible_collections.krops.platform.plugins.module_utils import paths

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
BOOTSTRAP_MSG = (
    "expected either spec.template.spec.bootstrap.dataSecretName or spec.template.spec.bootstrap.configRef "
    "to be populated"
)
CLUSTER_NAME_MSG = "spec.clusterName and spec.template.spec.clusterName must be set to the same value"


def label_value_errors(value):
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        errs.append(_LABEL_VALUE_MSG)
    return errs


# --- object access -----------------------------------------------------------------------------


get_path = paths.dig


def set_default(obj, path, value):
    """Set obj[path] when absent (creating the parents), the way Go fills a zero field."""
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    if obj.get(path[-1]) in (None, ""):
        obj[path[-1]] = value


def object_name(obj):
    return get_path(obj, "metadata", "name") or ""


# --- shared checks (each a port of one upstream helper) -----------------------------------------


def _ref_defined(ref):
    return isinstance(ref, dict) and any(ref.get(k) for k in ("apiGroup", "kind", "name"))


def no_bootstrap(obj, _gates):
    boot = get_path(obj, "spec", "template", "spec", "bootstrap") or {}
    if not _ref_defined(boot.get("configRef")) and boot.get("dataSecretName") is None:
        yield "spec.template.spec.bootstrap", None


def cluster_name_differs(obj, _gates):
    name = get_path(obj, "spec", "clusterName") or ""
    if name != (get_path(obj, "spec", "template", "spec", "clusterName") or ""):
        yield "spec.clusterName", name


def template_version(obj, _gates):
    version = get_path(obj, "spec", "template", "spec", "version") or ""
    if version and not KUBE_SEMVER.match(version):
        yield "spec.template.spec.version", version


def name_label_value(sep):
    # Cluster.validate writes "must be a valid label value %s", MachineDeployment.validate "...value: %s".
    def check(obj, _gates):
        for err in label_value_errors(object_name(obj)):
            yield "metadata.name", (object_name(obj), f"must be a valid label value{sep} {err}")

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


def template_matches_selector(field_type):
    def check(obj, _gates):
        selector = get_path(obj, "spec", "selector") or {}
        labels = get_path(obj, "spec", "template", "metadata", "labels") or {}
        if not _selector_matches(selector, labels):
            yield "spec.template.metadata.labels", labels

    return check


def selector_detail(obj):
    return "must match spec.selector %s" % json.dumps(_selector_string(get_path(obj, "spec", "selector") or {}))


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


def int_or_percent(path):
    def check(obj, _gates):
        value = get_path(obj, *path)
        err = _scaled_error(value)
        if err:
            yield ".".join(path), (str(value), f"must be either an int or a percentage: {err}")

    return check


def both_zero(obj, _gates):
    rolling = get_path(obj, "spec", "rollout", "strategy", "rollingUpdate") or {}
    if rolling.get("maxUnavailable") == 0 and rolling.get("maxSurge") == 0:
        yield "spec.rollout.strategy.rollingUpdate", str(rolling.get("maxSurge"))


def cidr_blocks(which):
    def check(obj, _gates):
        for i, cidr in enumerate(get_path(obj, "spec", "clusterNetwork", which, "cidrBlocks") or []):
            try:
                ipaddress.ip_network(cidr, strict=False)
                if "/" not in cidr:
                    raise ValueError
            except ValueError:
                yield f"spec.clusterNetwork.{which}.cidrBlocks[{i}]", (cidr, f"invalid CIDR address: {cidr}")

    return check


def gate_off(owner, gate):
    def check(obj, gates):
        if not gates.get((owner, gate), GATE_DEFAULTS[(owner, gate)]):
            yield "spec", None

    return check


def files_conflict(prefix):
    def check(obj, _gates):
        seen = set()
        for i, item in enumerate(get_path(obj, *prefix, "files") or []):
            if item.get("content") and item.get("contentFrom") is not None:
                yield "{}.files[{}]".format(".".join(prefix), i), (item, _FILES["content"])
            if item.get("path") in seen:
                yield "{}.files[{}].path".format(".".join(prefix), i), (item, _FILES["path"])
            seen.add(item.get("path"))

    return check


# --- per-kind checks -------------------------------------------------------------------------------


def kcp_replicas(obj, _gates):
    replicas = get_path(obj, "spec", "replicas")
    if replicas is not None and replicas <= 0:
        yield "spec.replicas", (None, "cannot be less than or equal to 0")
    external = get_path(obj, "spec", "kubeadmConfigSpec", "clusterConfiguration", "etcd", "external")
    if replicas is not None and replicas % 2 == 0 and not external:
        yield "spec.replicas", (None, "cannot be an even number when etcd is stacked")


def kcp_infra(part):
    def check(obj, _gates):
        value = get_path(obj, "spec", "machineTemplate", "spec", "infrastructureRef", part) or ""
        if not value:
            yield f"spec.machineTemplate.infrastructure.{part}", value

    return check


def kcp_version(obj, _gates):
    version = get_path(obj, "spec", "version") or ""
    if not KUBE_SEMVER.match(version):
        yield "spec.version", version


def eks_version(obj, _gates):
    # k8s.io/apimachinery pkg/util/version ParseGeneric (v0.35.4): at least major.minor.
    version = get_path(obj, "spec", "version")
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


def required_str(path, display):
    def check(obj, _gates):
        if not get_path(obj, *path):
            yield display, None

    return check


def scaling_check(min_key, max_key, max_zero):
    def check(obj, _gates):
        scaling = get_path(obj, "spec", "scaling") or {}
        low, high = scaling.get(min_key), scaling.get(max_key)
        if low is not None and low < 0:
            yield f"spec.scaling.{min_key}", (low, "must be greater or equal zero")
        if low is not None and high is not None and high < low:
            yield f"spec.scaling.{max_key}", (high, f"must be greater than field spec.scaling.{min_key}")
        if max_zero and high is not None and high < 0:
            yield f"spec.scaling.{max_key}", (high, "must be greater than zero")

    return check


def gke_both_versions(obj, _gates):
    if get_path(obj, "spec", "controlPlaneVersion") is not None and get_path(obj, "spec", "version") is not None:
        yield "spec.ControlPlaneVersion", get_path(obj, "spec", "loggingService")


def _name_over_40(field, reported):
    """A check that spec.<field> is at most 40 characters (upstream reports it as ``reported``)."""

    def check(obj, _gates):
        name = get_path(obj, "spec", field) or ""
        if len(name) > 40:
            yield reported, name

    return check


gke_name_length = _name_over_40("clusterName", "spec.ClusterName")


def gke_custom_subnet(obj, _gates):
    network = get_path(obj, "spec", "network") or {}
    if network.get("autoCreateSubnetworks") is False:
        region = get_path(obj, "spec", "region")
        if not any(s.get("region") == region for s in network.get("subnets") or []):
            yield "spec.network.subnet", None


def autopilot_check(key, when_set):
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


node_pool_name = _name_over_40("nodePoolName", "spec.NodePoolName")


def autoscaling_off(obj, _gates):
    scaling = get_path(obj, "spec", "scaling") or {}
    if scaling.get("enableAutoscaling") is False:
        for key in ("minCount", "maxCount", "locationPolicy"):
            if scaling.get(key) is not None:
                yield f"spec.scaling.{key}", (None, f"{key} cannot be specified when autoscaling is disabled")


def gke_non_negative(obj, _gates):
    for key in ("diskSizeGb", "localSsdCount", "maxPodsPerNode"):
        value = get_path(obj, "spec", key)
        if value is not None and value < 0:
            yield f"spec.template.spec.{key}", value


def update_config(obj, _gates):
    config = get_path(obj, "spec", "updateConfig")
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


def template_forbidden(key):
    def check(obj, _gates):
        if get_path(obj, "spec", "template", "spec", key):
            yield f"spec.template.spec.{key}", None

    return check


def talos_rollout(obj, _gates):
    kind = get_path(obj, "spec", "rolloutStrategy", "type") or ""
    if kind not in ("", "RollingUpdate", "OnDelete"):
        yield "spec.rolloutStrategy", kind


def repo_url(obj, _gates):
    url = get_path(obj, "spec", "repoURL") or ""
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


def failure_domains_sorted(obj, _gates):
    domains = get_path(obj, "spec", "backend", "docker", "failureDomains") or []
    names = [d.get("name") or "" for d in domains]
    if names != sorted(names):
        yield "spec.backend.docker.failureDomains", domains


def mhc_selector_empty(obj, _gates):
    selector = get_path(obj, "spec", "selector") or {}
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        yield "spec.selector", None


def mhc_selector_cluster(obj, _gates):
    selector = get_path(obj, "spec", "selector") or {}
    labels = selector.get("matchLabels") or {}
    if "cluster.x-k8s.io/cluster-name" in labels and labels["cluster.x-k8s.io/cluster-name"] != (
        get_path(obj, "spec", "clusterName") or ""
    ):
        yield "spec.selector", selector


def mhc_startup(obj, _gates):
    value = get_path(obj, "spec", "checks", "nodeStartupTimeoutSeconds")
    if value is not None and value != 0 and value < 30:
        yield "spec.checks.nodeStartupTimeoutSeconds", value


def cluster_refs(obj, _gates):
    spec = obj.get("spec") or {}
    if not any(_ref_defined(spec.get(k)) for k in ("controlPlaneRef", "infrastructureRef")) and not spec.get(
        "topology"
    ):
        yield "spec", None


def cluster_topology_gate(obj, gates):
    if get_path(obj, "spec", "topology") and not gates.get(("cluster-api", "ClusterTopology"), False):
        yield "spec.topology", None


def taints_on_pool(obj, _gates):
    if get_path(obj, "spec", "template", "spec", "taints"):
        yield "spec.taints", None


def taints_gate(obj, gates):
    if get_path(obj, "spec", "template", "spec", "taints") and not gates.get(
        ("cluster-api", "MachineTaintPropagation"), False
    ):
        yield "spec.taints", None


_FILES = {
    "content": "only one of content or contentFrom may be specified for a single file",
    "path": "path property must be unique among all files",
}
