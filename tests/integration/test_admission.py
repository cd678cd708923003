# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Admission conformance: cases ported from the providers' webhook unit-test tables.

Each case names the upstream test (repository @ tag, file, test function and case name) and states
what the API server answers on create: allowed, or the full denial (code and message) written out here
from the Go source. The same table is run through the product's registry (module_utils/admission.py,
what ``validate`` uses) and through the emulator's separate port (tests/substrate/webhooks.py): both
must give the stated answer, so the two also agree with each other (the differential check).

``DIFFERS``: the unit tests call ``validate`` directly, the API server runs the defaulting webhook first.
Where that changes the outcome the case states the admission answer and says why.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import admission
from ansible_collections.krops.platform.plugins.module_utils import validate
from tests.substrate import webhooks
from tests.substrate.fixtures import REPO
from tests.substrate.trees import copy_repo, edit, findings as found

CAPI = "cluster-api@v1.13.5 "
CAPA = "cluster-api-provider-aws@v2.11.1 "
CAPZ = "cluster-api-provider-azure@v1.25.1 "
CAPG = "cluster-api-provider-gcp@v1.12.0 "
CAPT = "cluster-api-provider-tinkerbell@v0.7.0 "
CACPPT = "cluster-api-control-plane-provider-talos@v0.5.12 "
CAAPH = "cluster-api-addon-provider-helm@v0.6.4 "
OPERATOR = "cluster-api-operator@v0.28.0 "

MP_HOOK = "validation.machinepool.cluster.x-k8s.io"
MD_HOOK = "validation.machinedeployment.cluster.x-k8s.io"
MS_HOOK = "validation.machineset.cluster.x-k8s.io"
MHC_HOOK = "validation.machinehealthcheck.cluster.x-k8s.io"
CLUSTER_HOOK = "validation.cluster.cluster.x-k8s.io"
KCP_HOOK = "validation.kubeadmcontrolplane.controlplane.cluster.x-k8s.io"
KCT_HOOK = "validation.kubeadmconfigtemplate.bootstrap.cluster.x-k8s.io"
DEV_HOOK = "validation.devcluster.infrastructure.cluster.x-k8s.io"
AMCP_HOOK = "validation.awsmanagedcontrolplanes.controlplane.cluster.x-k8s.io"
AMMP_HOOK = "validation.awsmanagedmachinepool.infrastructure.cluster.x-k8s.io"
GCP_CLUSTER_HOOK = "vgcpmanagedcluster.kb.io"
GCP_CP_HOOK = "vgcpmanagedcontrolplane.kb.io"
GCP_MP_HOOK = "vgcpmanagedmachinepool.kb.io"
TMT_HOOK = "validation.tinkerbellmachinetemplate.infrastructure.x-k8s.io"
TCP_HOOK = "validate.taloscontrolplane.controlplane.cluster.x-k8s.io"
HCP_HOOK = "vhelmchartproxy.kb.io"

BOOT = "expected either spec.template.spec.bootstrap.dataSecretName or spec.template.spec.bootstrap.configRef to be populated"
SAME = "spec.clusterName and spec.template.spec.clusterName must be set to the same value"
LABEL_RE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation "
    "is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NOT_PERCENT = "must be either an int or a percentage: invalid type: string is not a percentage"


def invalid(hook, qualified, name, *errors):
    """The apiserver's text for a webhook's apierrors.NewInvalid (422)."""
    agg = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return 422, f'admission webhook "{hook}" denied the request: {qualified} "{name}" is invalid: {agg}'


def forbidden(hook, text):
    """The apiserver's text for a webhook's plain error (Denied, 403)."""
    return 403, f'admission webhook "{hook}" denied the request: {text}'


def contains(hook, code, text):
    """A denial whose bad value is a Go struct (json.Marshal keeps field order): code, hook and detail only."""
    return ("contains", code, f'admission webhook "{hook}" denied the request: ', text)


def _set(obj, path, value):
    cur = obj
    keys = path.split(".")
    for key in keys[:-1]:
        cur = cur.setdefault(key, {})
    if value is _DELETE:
        cur.pop(keys[-1], None)
    else:
        cur[keys[-1]] = value


_DELETE = object()


def make(api_version, kind, name, spec, **changes):
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "default"}, "spec": spec}
    obj = copy.deepcopy(obj)
    for path, value in changes.items():
        _set(obj, path.replace("__", "."), value)
    return obj


def mp(**changes):
    spec = {
        "clusterName": "c",
        "template": {"spec": {"clusterName": "c", "version": "v1.35.5", "bootstrap": {"dataSecretName": ""}}},
    }
    return make("cluster.x-k8s.io/v1beta2", "MachinePool", "p", spec, **changes)


def md(name="d", **changes):
    spec = {
        "clusterName": "c",
        "template": {"spec": {"clusterName": "c", "version": "v1.35.5", "bootstrap": {"dataSecretName": "s"}}},
    }
    return make("cluster.x-k8s.io/v1beta2", "MachineDeployment", name, spec, **changes)


def ms(**changes):
    spec = {
        "clusterName": "c",
        "template": {"spec": {"clusterName": "c", "version": "v1.35.5", "bootstrap": {"dataSecretName": "s"}}},
    }
    return make("cluster.x-k8s.io/v1beta2", "MachineSet", "s", spec, **changes)


def mhc(**changes):
    spec = {"clusterName": "c", "selector": {"matchLabels": {"foo": "bar"}}}
    return make("cluster.x-k8s.io/v1beta2", "MachineHealthCheck", "h", spec, **changes)


def cluster(name="c", **changes):
    spec = {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DevCluster", "name": "c"}}
    return make("cluster.x-k8s.io/v1beta2", "Cluster", name, spec, **changes)


def kcp(**changes):
    spec = {
        "replicas": 1,
        "version": "v1.35.5",
        "machineTemplate": {
            "spec": {
                "infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io",
                    "kind": "DevMachineTemplate",
                    "name": "m",
                }
            }
        },
    }
    return make("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane", "cp", spec, **changes)


def kct(**changes):
    return make(
        "bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfigTemplate", "t", {"template": {"spec": {}}}, **changes
    )


def devcluster(**changes):
    return make("infrastructure.cluster.x-k8s.io/v1beta2", "DevCluster", "dc", {"backend": {"docker": {}}}, **changes)


def amcp(**changes):
    spec = {"eksClusterName": "default_cp", "region": "eu-north-1", "version": "v1.35"}
    return make("controlplane.cluster.x-k8s.io/v1beta2", "AWSManagedControlPlane", "cp", spec, **changes)


def ammp(**changes):
    return make(
        "infrastructure.cluster.x-k8s.io/v1beta2", "AWSManagedMachinePool", "np", {"eksNodegroupName": "ng"}, **changes
    )


def aso(kind):
    return make("infrastructure.cluster.x-k8s.io/v1beta1", kind, "a", {"resources": []})


def gcp_cluster(**changes):
    spec = {"project": "p", "region": "europe-north1", "network": {"name": "n"}}
    return make("infrastructure.cluster.x-k8s.io/v1beta1", "GCPManagedCluster", "g", spec, **changes)


def gcp_cp(**changes):
    spec = {"project": "p", "location": "europe-north1", "clusterName": "gke"}
    return make("infrastructure.cluster.x-k8s.io/v1beta1", "GCPManagedControlPlane", "gcp", spec, **changes)


def gcp_mp(**changes):
    return make(
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "GCPManagedMachinePool",
        "gmp",
        {"nodePoolName": "nodepool1"},
        **changes,
    )


def tmt(**changes):
    return make(
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "TinkerbellMachineTemplate",
        "tmt",
        {"template": {"spec": {}}},
        **changes,
    )


def tcp(**changes):
    spec = {
        "version": "v1.35.5",
        "replicas": 1,
        "infrastructureTemplate": {"kind": "TinkerbellMachineTemplate", "name": "t"},
    }
    return make("controlplane.cluster.x-k8s.io/v1alpha3", "TalosControlPlane", "tcp", spec, **changes)


def hcp(url):
    spec = {"clusterSelector": {}, "repoURL": url, "chartName": "c"}
    return make("addons.cluster.x-k8s.io/v1alpha1", "HelmChartProxy", "h", spec)


MD_SEL = 'must match spec.selector "cluster.x-k8s.io/cluster-name=c,foo=bar"'
_MP = "MachinePool.cluster.x-k8s.io"
_MD = "MachineDeployment.cluster.x-k8s.io"
_MS = "MachineSet.cluster.x-k8s.io"
_MHC = "MachineHealthCheck.cluster.x-k8s.io"
_LONG = "thisNameIsReallyMuchLongerThanTheMaximumLengthOfSixtyThreeCharacters"
_REF = {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "t"}

# (id, upstream source, object, gates, expected answer: None = allowed)
CASES = [
    # ---- MachinePool: internal/webhooks/machinepool_test.go
    (
        "mp-no-bootstrap",
        CAPI
        + "machinepool_test.go TestMachinePoolBootstrapValidation: should return error if configref and data are nil",
        mp(spec__template__spec__bootstrap={}),
        None,
        invalid(MP_HOOK, _MP, "p", f"spec.template.spec.bootstrap: Required value: {BOOT}"),
    ),
    (
        "mp-data-secret",
        CAPI + "TestMachinePoolBootstrapValidation: should not return error if dataSecretName is set",
        mp(),
        None,
        None,
    ),
    (
        "mp-config-ref",
        CAPI + "TestMachinePoolBootstrapValidation: should not return error if config ref is set",
        mp(spec__template__spec__bootstrap={"configRef": _REF}),
        None,
        None,
    ),
    (
        "mp-names-equal",
        CAPI + "TestMachinePoolClusterNamesEqual: clusterName fields are set to the same value",
        mp(),
        None,
        None,
    ),
    (
        "mp-names-differ",
        CAPI + "TestMachinePoolClusterNamesEqual: clusterName fields are set to different values",
        mp(spec__template__spec__clusterName="other"),
        None,
        invalid(MP_HOOK, _MP, "p", f'spec.clusterName: Invalid value: "c": {SAME}'),
    ),
    (
        "mp-version-semver",
        CAPI + "TestMachinePoolVersionValidation: valid kube semver",
        mp(spec__template__spec__version="v1.23.3"),
        None,
        None,
    ),
    (
        "mp-version-prerelease",
        CAPI + "TestMachinePoolVersionValidation: valid pre-release",
        mp(spec__template__spec__version="v1.19.0-alpha.1"),
        None,
        None,
    ),
    (
        "mp-version-two-part",
        CAPI + "TestMachinePoolVersionValidation: should fail if version is not a valid semver",
        mp(spec__template__spec__version="v1.1"),
        None,
        invalid(
            MP_HOOK, _MP, "p", 'spec.template.spec.version: Invalid value: "v1.1": must be a valid semantic version'
        ),
    ),
    (
        "mp-version-no-v",
        # DIFFERS: the unit test expects an error; MachinePool.Default prefixes the "v" first.
        CAPI + "TestMachinePoolVersionValidation: should fail if version is missing a v prefix",
        mp(spec__template__spec__version="1.20.0"),
        None,
        None,
    ),
    (
        "mp-version-krops-v1.35",
        "krops issue 31: the aws tree's MachinePools (KubeSemver, util/version/version.go)",
        mp(spec__template__spec__version="v1.35"),
        None,
        invalid(
            MP_HOOK, _MP, "p", 'spec.template.spec.version: Invalid value: "v1.35": must be a valid semantic version'
        ),
    ),
    (
        "mp-gate-off",
        CAPI + "machinepool.go validate: MachinePool feature gate disabled (feature.go default true)",
        mp(),
        {("cluster-api", "MachinePool"): False},
        forbidden(MP_HOOK, "spec: Forbidden: can be set only if the MachinePool feature flag is enabled"),
    ),
    # ---- MachineDeployment: internal/webhooks/machinedeployment_test.go
    (
        "md-no-bootstrap",
        CAPI + "machinedeployment_test.go TestMachineDeploymentBootstrapValidation: configref and data are nil",
        md(spec__template__spec__bootstrap={}),
        None,
        invalid(MD_HOOK, _MD, "d", f"spec.template.spec.bootstrap: Required value: {BOOT}"),
    ),
    ("md-data-secret", CAPI + "TestMachineDeploymentBootstrapValidation: dataSecretName is set", md(), None, None),
    (
        "md-config-ref",
        CAPI + "TestMachineDeploymentBootstrapValidation: config ref is set",
        md(spec__template__spec__bootstrap={"configRef": _REF}),
        None,
        None,
    ),
    (
        "md-name-short",
        CAPI + "TestMachineDeploymentValidation: pass with name of under 63 characters",
        md("short-name"),
        None,
        None,
    ),
    (
        "md-name-chars",
        CAPI + "TestMachineDeploymentValidation: pass with _, -, . characters in name",
        md("thisNameContains.A_Non-Alphanumeric"),
        None,
        None,
    ),
    (
        "md-name-long",
        CAPI + "TestMachineDeploymentValidation: error with name of more than 63 characters",
        md(_LONG),
        None,
        invalid(
            MD_HOOK,
            _MD,
            _LONG,
            f'metadata.name: Invalid value: "{_LONG}": must be a valid label value: must be no more than 63 characters',
        ),
    ),
    (
        "md-name-starts",
        CAPI + "TestMachineDeploymentValidation: error when name starts with NonAlphanumeric character",
        md("-thisNameStartsWithANonAlphanumeric"),
        None,
        invalid(
            MD_HOOK,
            _MD,
            "-thisNameStartsWithANonAlphanumeric",
            f'metadata.name: Invalid value: "-thisNameStartsWithANonAlphanumeric": must be a valid label value: {LABEL_RE}',
        ),
    ),
    (
        "md-name-ends",
        CAPI + "TestMachineDeploymentValidation: error when name ends with NonAlphanumeric character",
        md("thisNameEndsWithANonAlphanumeric."),
        None,
        invalid(
            MD_HOOK,
            _MD,
            "thisNameEndsWithANonAlphanumeric.",
            f'metadata.name: Invalid value: "thisNameEndsWithANonAlphanumeric.": must be a valid label value: {LABEL_RE}',
        ),
    ),
    (
        "md-name-invalid-chars",
        CAPI + "TestMachineDeploymentValidation: error when name contains invalid NonAlphanumeric character",
        md("thisNameContainsInvalid!@NonAlphanumerics"),
        None,
        invalid(
            MD_HOOK,
            _MD,
            "thisNameContainsInvalid!@NonAlphanumerics",
            f'metadata.name: Invalid value: "thisNameContainsInvalid!@NonAlphanumerics": must be a valid label value: {LABEL_RE}',
        ),
    ),
    (
        "md-selector-mismatch",
        # Default adds cluster.x-k8s.io/cluster-name to the selector and the template labels (both sides).
        CAPI + "TestMachineDeploymentValidation: should return error on mismatch",
        md(spec__selector={"matchLabels": {"foo": "bar"}}, spec__template__metadata={"labels": {"foo": "baz"}}),
        None,
        invalid(MD_HOOK, _MD, "d", f"spec.template.metadata.labels: Forbidden: {MD_SEL}"),
    ),
    (
        "md-selector-missing-labels",
        CAPI + "TestMachineDeploymentValidation: should return error on missing labels",
        md(spec__selector={"matchLabels": {"foo": "bar"}}, spec__template__metadata={"labels": {"": ""}}),
        None,
        invalid(MD_HOOK, _MD, "d", f"spec.template.metadata.labels: Forbidden: {MD_SEL}"),
    ),
    (
        "md-selector-partial",
        CAPI + "TestMachineDeploymentValidation: should return error if all selectors don't match",
        md(
            spec__selector={"matchLabels": {"foo": "bar", "hello": "world"}},
            spec__template__metadata={"labels": {"foo": "bar"}},
        ),
        None,
        invalid(
            MD_HOOK,
            _MD,
            "d",
            'spec.template.metadata.labels: Forbidden: must match spec.selector "cluster.x-k8s.io/cluster-name=c,foo=bar,hello=world"',
        ),
    ),
    (
        "md-selector-match",
        CAPI + "TestMachineDeploymentValidation: should not return error on match",
        md(spec__selector={"matchLabels": {"foo": "bar"}}, spec__template__metadata={"labels": {"foo": "bar"}}),
        None,
        None,
    ),
    (
        "md-bad-max-surge",
        CAPI + "TestMachineDeploymentValidation: should return error for invalid maxSurge",
        md(
            spec__rollout={
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "1"}}
            }
        ),
        None,
        invalid(MD_HOOK, _MD, "d", f'spec.rollout.strategy.rollingUpdate.maxSurge: Invalid value: "1": {NOT_PERCENT}'),
    ),
    (
        "md-bad-max-unavailable",
        CAPI + "TestMachineDeploymentValidation: should return error for invalid maxUnavailable",
        md(
            spec__rollout={
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "0", "maxSurge": 1}}
            }
        ),
        None,
        invalid(
            MD_HOOK, _MD, "d", f'spec.rollout.strategy.rollingUpdate.maxUnavailable: Invalid value: "0": {NOT_PERCENT}'
        ),
    ),
    (
        "md-bad-max-in-flight",
        CAPI + "TestMachineDeploymentValidation: should return error for invalid remediation maxInFlight",
        md(spec__remediation={"maxInFlight": "1"}),
        None,
        invalid(MD_HOOK, _MD, "d", f'spec.remediation.maxInFlight: Invalid value: "1": {NOT_PERCENT}'),
    ),
    (
        "md-max-in-flight-percent",
        CAPI + "TestMachineDeploymentValidation: valid percentage remediation maxInFlight",
        md(spec__remediation={"maxInFlight": "20%"}),
        None,
        None,
    ),
    (
        "md-max-in-flight-int",
        CAPI + "TestMachineDeploymentValidation: valid int remediation maxInFlight",
        md(spec__remediation={"maxInFlight": 5}),
        None,
        None,
    ),
    (
        "md-rollout-ints",
        CAPI + "TestMachineDeploymentValidation: valid int maxSurge and maxUnavailable",
        md(
            spec__rollout={"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}}
        ),
        None,
        None,
    ),
    (
        "md-rollout-percent",
        CAPI + "TestMachineDeploymentValidation: valid percentage string maxSurge and maxUnavailable",
        md(
            spec__rollout={
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "0%", "maxSurge": "1%"}}
            }
        ),
        None,
        None,
    ),
    (
        "md-rollout-both-zero",
        CAPI + "machinedeployment.go validateRolloutStrategy: maxUnavailable and maxSurge both 0",
        md(
            spec__rollout={"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}}
        ),
        None,
        invalid(
            MD_HOOK,
            _MD,
            "d",
            'spec.rollout.strategy.rollingUpdate: Invalid value: "0": maxUnavailable and maxSurge cannot both be 0',
        ),
    ),
    (
        "md-rollout-defaults",
        # Default fills maxSurge 1 and maxUnavailable 0 when absent, so an empty rollout passes.
        CAPI + "TestMachineDeploymentDefault",
        md(),
        None,
        None,
    ),
    # ---- MachineSet: internal/webhooks/machineset_test.go
    (
        "ms-no-bootstrap",
        CAPI + "machineset_test.go TestMachineSetBootstrapValidation: configref and data are nil",
        ms(spec__template__spec__bootstrap={}),
        None,
        invalid(MS_HOOK, _MS, "s", f"spec.template.spec.bootstrap: Required value: {BOOT}"),
    ),
    ("ms-data-secret", CAPI + "TestMachineSetBootstrapValidation: dataSecretName is set", ms(), None, None),
    (
        "ms-config-ref",
        CAPI + "TestMachineSetBootstrapValidation: config ref is set",
        ms(spec__template__spec__bootstrap={"configRef": _REF}),
        None,
        None,
    ),
    (
        "ms-selector-mismatch",
        CAPI + "TestMachineSetLabelSelectorMatchValidation: should return error on mismatch",
        ms(spec__selector={"matchLabels": {"foo": "bar"}}, spec__template__metadata={"labels": {"foo": "baz"}}),
        None,
        invalid(
            MS_HOOK,
            _MS,
            "s",
            'spec.template.metadata.labels: Invalid value: {"cluster.x-k8s.io/cluster-name":"c","foo":"baz"}: '
            + MD_SEL,
        ),
    ),
    (
        "ms-selector-match",
        CAPI + "TestMachineSetLabelSelectorMatchValidation: should not return error on match",
        ms(spec__selector={"matchLabels": {"foo": "bar"}}, spec__template__metadata={"labels": {"foo": "bar"}}),
        None,
        None,
    ),
    (
        "ms-names-differ",
        CAPI + "TestMachineSetClusterNamesEqual: clusterName fields are set to different values",
        ms(spec__template__spec__clusterName="other"),
        None,
        invalid(MS_HOOK, _MS, "s", f'spec.clusterName: Invalid value: "c": {SAME}'),
    ),
    (
        "ms-version-v",
        CAPI + "TestMachineSetVersionValidation: valid semantic version with prepended 'v'",
        ms(spec__template__spec__version="v1.19.2"),
        None,
        None,
    ),
    (
        "ms-version-no-v",
        # DIFFERS: the unit test expects an error; MachineSet.Default prefixes the "v".
        CAPI + "TestMachineSetVersionValidation: valid semantic version without 'v'",
        ms(spec__template__spec__version="1.19.2"),
        None,
        None,
    ),
    (
        "ms-version-one",
        # DIFFERS in the message: the value is reported after defaulting, "v1".
        CAPI + "TestMachineSetVersionValidation: invalid semantic version (1)",
        ms(spec__template__spec__version="1"),
        None,
        invalid(MS_HOOK, _MS, "s", 'spec.template.spec.version: Invalid value: "v1": must be a valid semantic version'),
    ),
    (
        "ms-version-v1",
        CAPI + "TestMachineSetVersionValidation: invalid semantic version (v1)",
        ms(spec__template__spec__version="v1"),
        None,
        invalid(MS_HOOK, _MS, "s", 'spec.template.spec.version: Invalid value: "v1": must be a valid semantic version'),
    ),
    (
        "ms-version-wrong",
        CAPI + "TestMachineSetVersionValidation: invalid semantic version (wrong_version)",
        ms(spec__template__spec__version="wrong_version"),
        None,
        invalid(
            MS_HOOK,
            _MS,
            "s",
            'spec.template.spec.version: Invalid value: "vwrong_version": must be a valid semantic version',
        ),
    ),
    # ---- MachineHealthCheck: internal/webhooks/machinehealthcheck_test.go
    (
        "mhc-startup-unset",
        # Default sets 600 (DefaultNodeStartupTimeoutSeconds).
        CAPI + "machinehealthcheck_test.go TestMachineHealthCheckNodeStartupTimeout: not given",
        mhc(),
        None,
        None,
    ),
    (
        "mhc-startup-60",
        CAPI + "TestMachineHealthCheckNodeStartupTimeout: greater than 30s",
        mhc(spec__checks={"nodeStartupTimeoutSeconds": 60}),
        None,
        None,
    ),
    (
        "mhc-startup-30",
        CAPI + "TestMachineHealthCheckNodeStartupTimeout: 30s",
        mhc(spec__checks={"nodeStartupTimeoutSeconds": 30}),
        None,
        None,
    ),
    (
        "mhc-startup-29",
        CAPI + "TestMachineHealthCheckNodeStartupTimeout: 29s",
        mhc(spec__checks={"nodeStartupTimeoutSeconds": 29}),
        None,
        invalid(MHC_HOOK, _MHC, "h", "spec.checks.nodeStartupTimeoutSeconds: Invalid value: 29: must be at least 30s"),
    ),
    (
        "mhc-startup-negative",
        CAPI + "TestMachineHealthCheckNodeStartupTimeout: less than 0",
        mhc(spec__checks={"nodeStartupTimeoutSeconds": -60}),
        None,
        invalid(MHC_HOOK, _MHC, "h", "spec.checks.nodeStartupTimeoutSeconds: Invalid value: -60: must be at least 30s"),
    ),
    (
        "mhc-startup-0",
        CAPI + "TestMachineHealthCheckNodeStartupTimeout: 0 (disabled)",
        mhc(spec__checks={"nodeStartupTimeoutSeconds": 0}),
        None,
        None,
    ),
    (
        "mhc-unhealthy-int",
        CAPI + "TestMachineHealthCheckMaxUnhealthy: an integer",
        mhc(spec__remediation={"triggerIf": {"unhealthyLessThanOrEqualTo": 10}}),
        None,
        None,
    ),
    (
        "mhc-unhealthy-percent",
        CAPI + "TestMachineHealthCheckMaxUnhealthy: a percentage",
        mhc(spec__remediation={"triggerIf": {"unhealthyLessThanOrEqualTo": "10%"}}),
        None,
        None,
    ),
    (
        "mhc-unhealthy-string",
        CAPI + "TestMachineHealthCheckMaxUnhealthy: a random string",
        mhc(spec__remediation={"triggerIf": {"unhealthyLessThanOrEqualTo": "abcdef"}}),
        None,
        invalid(
            MHC_HOOK,
            _MHC,
            "h",
            f'spec.remediation.triggerIf.unhealthyLessThanOrEqualTo: Invalid value: "abcdef": {NOT_PERCENT}',
        ),
    ),
    (
        "mhc-unhealthy-stringified-int",
        CAPI + "TestMachineHealthCheckMaxUnhealthy: stringified integer",
        mhc(spec__remediation={"triggerIf": {"unhealthyLessThanOrEqualTo": "10"}}),
        None,
        invalid(
            MHC_HOOK,
            _MHC,
            "h",
            f'spec.remediation.triggerIf.unhealthyLessThanOrEqualTo: Invalid value: "10": {NOT_PERCENT}',
        ),
    ),
    (
        "mhc-empty-selector",
        CAPI + "TestMachineHealthCheckSelectorValidation",
        mhc(spec__selector={}),
        None,
        invalid(MHC_HOOK, _MHC, "h", "spec.selector: Required value: selector must not be empty"),
    ),
    (
        "mhc-other-cluster",
        CAPI + "TestMachineHealthCheckClusterNameSelectorValidation: other cluster",
        mhc(
            spec__clusterName="foo",
            spec__selector={"matchLabels": {"cluster.x-k8s.io/cluster-name": "bar", "baz": "qux"}},
        ),
        None,
        invalid(
            MHC_HOOK,
            _MHC,
            "h",
            'spec.selector: Invalid value: {"matchLabels":{"baz":"qux","cluster.x-k8s.io/cluster-name":"bar"}}: '
            "cannot specify a cluster selector other than the one specified by ClusterName",
        ),
    ),
    (
        "mhc-same-cluster",
        CAPI + "TestMachineHealthCheckClusterNameSelectorValidation: same cluster",
        mhc(
            spec__clusterName="foo",
            spec__selector={"matchLabels": {"cluster.x-k8s.io/cluster-name": "foo", "baz": "qux"}},
        ),
        None,
        None,
    ),
    # ---- Cluster: internal/webhooks/cluster.go (cluster_test.go TestClusterValidation)
    ("cluster-infra-ref", CAPI + "cluster_test.go TestClusterValidation: infrastructureRef set", cluster(), None, None),
    (
        "cluster-no-refs",
        CAPI + "cluster_test.go TestClusterValidation: no controlPlaneRef, infrastructureRef or topology",
        cluster(spec__infrastructureRef=_DELETE),
        None,
        invalid(
            CLUSTER_HOOK,
            "Cluster.cluster.x-k8s.io",
            "c",
            "spec: Forbidden: one of spec.controlPlaneRef, spec.infrastructureRef or spec.topology must be set",
        ),
    ),
    (
        "cluster-bad-pod-cidr",
        CAPI + "cluster_test.go TestClusterValidation: invalid pods CIDR (validateCIDRBlocks)",
        cluster(spec__clusterNetwork={"pods": {"cidrBlocks": ["10.0.0/16"]}}),
        None,
        invalid(
            CLUSTER_HOOK,
            "Cluster.cluster.x-k8s.io",
            "c",
            'spec.clusterNetwork.pods.cidrBlocks[0]: Invalid value: "10.0.0/16": invalid CIDR address: 10.0.0/16',
        ),
    ),
    (
        "cluster-topology-gate-off",
        CAPI + "cluster.go validateTopology: ClusterTopology gate default false (feature.go)",
        cluster(spec__topology={"classRef": {"name": "cc"}, "version": "v1.35.5"}),
        None,
        invalid(
            CLUSTER_HOOK,
            "Cluster.cluster.x-k8s.io",
            "c",
            "spec.topology: Forbidden: can be set only if the ClusterTopology feature flag is enabled",
        ),
    ),
    (
        "cluster-name-long",
        CAPI + "cluster_test.go: Cluster name must be a valid label value",
        cluster(_LONG),
        None,
        invalid(
            CLUSTER_HOOK,
            "Cluster.cluster.x-k8s.io",
            _LONG,
            f'metadata.name: Invalid value: "{_LONG}": must be a valid label value must be no more than 63 characters',
        ),
    ),
    # ---- KubeadmControlPlane: controlplane/kubeadm/internal/webhooks/kubeadmcontrolplane_test.go TestKubeadmControlPlaneValidateCreate
    ("kcp-valid", CAPI + "kubeadmcontrolplane_test.go TestKubeadmControlPlaneValidateCreate: valid", kcp(), None, None),
    (
        "kcp-no-replicas",
        # DIFFERS: the unit test expects "is required"; Default sets replicas 1.
        CAPI + "TestKubeadmControlPlaneValidateCreate: replicas nil",
        kcp(spec__replicas=_DELETE),
        None,
        None,
    ),
    (
        "kcp-zero-replicas",
        CAPI + "TestKubeadmControlPlaneValidateCreate: replicas 0",
        kcp(spec__replicas=0),
        None,
        invalid(
            KCP_HOOK,
            "KubeadmControlPlane.controlplane.cluster.x-k8s.io",
            "cp",
            "spec.replicas: Forbidden: cannot be less than or equal to 0",
            "spec.replicas: Forbidden: cannot be an even number when etcd is stacked",
        ),
    ),
    (
        "kcp-even-replicas",
        CAPI + "TestKubeadmControlPlaneValidateCreate: even replicas with stacked etcd",
        kcp(spec__replicas=2),
        None,
        invalid(
            KCP_HOOK,
            "KubeadmControlPlane.controlplane.cluster.x-k8s.io",
            "cp",
            "spec.replicas: Forbidden: cannot be an even number when etcd is stacked",
        ),
    ),
    (
        "kcp-even-external-etcd",
        CAPI + "TestKubeadmControlPlaneValidateCreate: even replicas with external etcd",
        kcp(
            spec__replicas=2,
            spec__kubeadmConfigSpec={"clusterConfiguration": {"etcd": {"external": {"endpoints": ["https://e:2379"]}}}},
        ),
        None,
        None,
    ),
    (
        "kcp-no-infra-kind",
        CAPI + "TestKubeadmControlPlaneValidateCreate: missing infrastructure kind",
        kcp(spec__machineTemplate__spec__infrastructureRef__kind=""),
        None,
        invalid(
            KCP_HOOK,
            "KubeadmControlPlane.controlplane.cluster.x-k8s.io",
            "cp",
            'spec.machineTemplate.infrastructure.kind: Invalid value: "": cannot be empty',
        ),
    ),
    (
        "kcp-version-no-v",
        # DIFFERS: Default prefixes the "v".
        CAPI + "TestKubeadmControlPlaneValidateCreate: version without v",
        kcp(spec__version="1.35.5"),
        None,
        None,
    ),
    (
        "kcp-version-two-part",
        CAPI + "TestKubeadmControlPlaneValidateCreate: invalid version",
        kcp(spec__version="v1.35"),
        None,
        invalid(
            KCP_HOOK,
            "KubeadmControlPlane.controlplane.cluster.x-k8s.io",
            "cp",
            'spec.version: Invalid value: "v1.35": must be a valid semantic version',
        ),
    ),
    (
        "kcp-file-content-and-from",
        CAPI + "TestKubeadmControlPlaneValidateCreate: file with content and contentFrom (validateFiles)",
        kcp(
            spec__kubeadmConfigSpec={
                "files": [{"path": "/a", "content": "x", "contentFrom": {"secret": {"name": "s", "key": "k"}}}]
            }
        ),
        None,
        contains(KCP_HOOK, 422, "only one of content or contentFrom may be specified for a single file"),
    ),
    # ---- KubeadmConfigTemplate: bootstrap/kubeadm/internal/webhooks
    ("kct-valid", CAPI + "kubeadmconfigtemplate_test.go: valid", kct(), None, None),
    (
        "kct-duplicate-path",
        CAPI + "kubeadmconfig_test.go TestKubeadmConfigValidate: duplicate file paths (validateFiles)",
        kct(spec__template__spec={"files": [{"path": "/a", "content": "x"}, {"path": "/a", "content": "y"}]}),
        None,
        contains(KCT_HOOK, 422, "spec.template.spec.files[1].path: Invalid value: "),
    ),
    # ---- CAPD DevCluster
    (
        "devcluster-sorted",
        CAPI + "test/infrastructure/docker devcluster.go validateDevClusterSpec: sorted failure domains",
        devcluster(spec__backend={"docker": {"failureDomains": [{"name": "a"}, {"name": "b"}]}}),
        None,
        None,
    ),
    (
        "devcluster-unsorted",
        CAPI + "devcluster.go validateDevClusterSpec: unsorted failure domains",
        devcluster(spec__backend={"docker": {"failureDomains": [{"name": "b"}, {"name": "a"}]}}),
        None,
        contains(DEV_HOOK, 422, "failure domains must be sorted by name"),
    ),
    # ---- CAPA AWSManagedControlPlane: controlplane/eks/webhooks/awsmanagedcontrolplane_webhook_test.go TestWebhookCreate
    (
        "amcp-ekscluster",
        CAPA + "awsmanagedcontrolplane_webhook_test.go TestWebhookCreate: ekscluster specified",
        amcp(),
        None,
        None,
    ),
    (
        "amcp-ekscluster-unset",
        CAPA + "TestWebhookCreate: ekscluster NOT specified (Default generates it)",
        amcp(spec__eksClusterName=_DELETE),
        None,
        None,
    ),
    (
        "amcp-invalid-version",
        CAPA + "TestWebhookCreate: invalid version (v1.x17)",
        amcp(spec__version="v1.x17"),
        None,
        invalid(
            AMCP_HOOK,
            "AWSManagedControlPlane.controlplane.cluster.x-k8s.io",
            "cp",
            'spec.version: Invalid value: "v1.x17": illegal version string "v1.x17"',
        ),
    ),
    (
        "amcp-unparsable-version",
        CAPA + "awsmanagedcontrolplane_webhook.go validateEKSVersion (ParseGeneric: could not parse)",
        amcp(spec__version="latest"),
        None,
        invalid(
            AMCP_HOOK,
            "AWSManagedControlPlane.controlplane.cluster.x-k8s.io",
            "cp",
            'spec.version: Invalid value: "latest": could not parse "latest" as version',
        ),
    ),
    ("amcp-full-version", CAPA + "TestWebhookCreate: with patch (v1.17.8)", amcp(spec__version="v1.17.8"), None, None),
    # ---- CAPA AWSManagedMachinePool: exp/webhooks/awsmanagedmachinepool_webhook_test.go TestAWSManagedMachinePoolValidateCreate
    (
        "ammp-no-name",
        # DIFFERS: the unit test expects "eksNodegroupName is required"; Default generates the name.
        CAPA + "TestAWSManagedMachinePoolValidateCreate: pool requires a EKS Node group name",
        ammp(spec__eksNodegroupName=_DELETE),
        None,
        None,
    ),
    (
        "ammp-valid",
        CAPA + "TestAWSManagedMachinePoolValidateCreate: pool with valid EKS Node group name",
        ammp(),
        None,
        None,
    ),
    (
        "ammp-update-config",
        CAPA + "TestAWSManagedMachinePoolValidateCreate: valid update config",
        ammp(spec__updateConfig={"maxUnavailable": 1}),
        None,
        None,
    ),
    (
        "ammp-update-config-empty",
        CAPA + "TestAWSManagedMachinePoolValidateCreate: update config with no values",
        ammp(spec__updateConfig={}),
        None,
        invalid(
            AMMP_HOOK,
            "AWSManagedMachinePool.infrastructure.cluster.x-k8s.io",
            "np",
            "spec.updateConfig: Invalid value: {}: must specify one of maxUnavailable or maxUnavailablePercentage when using nodegroup updateconfig",
        ),
    ),
    (
        "ammp-update-config-both",
        CAPA + "TestAWSManagedMachinePoolValidateCreate: update config with both values",
        ammp(spec__updateConfig={"maxUnavailable": 1, "maxUnavailablePercentage": 10}),
        None,
        invalid(
            AMMP_HOOK,
            "AWSManagedMachinePool.infrastructure.cluster.x-k8s.io",
            "np",
            'spec.updateConfig: Invalid value: {"maxUnavailable":1,"maxUnavailablePercentage":10}: '
            "cannot specify both maxUnavailable and maxUnavailablePercentage",
        ),
    ),
    (
        "ammp-min-zero",
        CAPA + "TestAWSManagedMachinePoolValidateCreate: minSize 0 is accepted",
        ammp(spec__scaling={"minSize": 0, "maxSize": 3}),
        None,
        None,
    ),
    (
        "ammp-max-below-min",
        CAPA + "awsmanagedmachinepool_webhook.go validateScaling: maxSize below minSize",
        ammp(spec__scaling={"minSize": 3, "maxSize": 1}),
        None,
        invalid(
            AMMP_HOOK,
            "AWSManagedMachinePool.infrastructure.cluster.x-k8s.io",
            "np",
            "spec.scaling.maxSize: Invalid value: 1: must be greater than field spec.scaling.minSize",
        ),
    ),
    # ---- CAPZ ASO kinds: internal/webhooks/azureasomanaged*_webhook_test.go
    *[
        (
            f"aso-{kind}-enabled",
            CAPZ + f"{kind.lower()}_webhook_test.go TestValidateCreate: ASOAPI enabled (default true, feature.go)",
            aso(kind),
            None,
            None,
        )
        for kind in ("AzureASOManagedCluster", "AzureASOManagedControlPlane", "AzureASOManagedMachinePool")
    ],
    *[
        (
            f"aso-{kind}-disabled",
            CAPZ + f"{kind.lower()}_webhook_test.go TestValidateCreate: ASOAPI disabled",
            aso(kind),
            {("capz", "ASOAPI"): False},
            forbidden(
                f"validation.{kind.lower()}.infrastructure.cluster.x-k8s.io",
                "spec: Forbidden: can be set only if the ASOAPI feature flag is enabled",
            ),
        )
        for kind in ("AzureASOManagedCluster", "AzureASOManagedControlPlane", "AzureASOManagedMachinePool")
    ],
    # ---- CAPG: exp/webhooks/gcpmanaged*_webhook_test.go
    (
        "gcp-cluster-auto-subnets",
        CAPG + "gcpmanagedcluster_webhook.go validateCustomSubnet: auto-created subnetworks",
        gcp_cluster(),
        None,
        None,
    ),
    (
        "gcp-cluster-custom-subnet-elsewhere",
        CAPG + "gcpmanagedcluster_webhook.go validateCustomSubnet: no subnet in the cluster region",
        gcp_cluster(
            spec__network={
                "name": "n",
                "autoCreateSubnetworks": False,
                "subnets": [{"name": "s", "region": "us-east1"}],
            }
        ),
        None,
        forbidden(
            GCP_CLUSTER_HOOK,
            "spec.network.subnet: Required value: at least one given subnets region should be same as spec.network.region "
            "when spec.network.autoCreateSubnetworks is false",
        ),
    ),
    (
        "gcp-cluster-custom-subnet-here",
        CAPG + "gcpmanagedcluster_webhook.go validateCustomSubnet: a subnet in the cluster region",
        gcp_cluster(
            spec__network={
                "name": "n",
                "autoCreateSubnetworks": False,
                "subnets": [{"name": "s", "region": "europe-north1"}],
            }
        ),
        None,
        None,
    ),
    (
        "gcp-cp-name-too-long",
        CAPG
        + "gcpmanagedcontrolplane_webhook_test.go TestGCPManagedControlPlaneValidatingWebhookCreate: cluster name too long",
        gcp_cp(spec__clusterName="A" * 41),
        None,
        invalid(
            GCP_CP_HOOK,
            "GCPManagedControlPlane.infrastructure.cluster.x-k8s.io",
            "gcp",
            'spec.ClusterName: Invalid value: "%s": cluster name cannot have more than 40 characters' % ("A" * 41),
        ),
    ),
    (
        "gcp-cp-autopilot-no-channel",
        CAPG + "TestGCPManagedControlPlaneValidatingWebhookCreate: autopilot enabled without release channel",
        gcp_cp(spec__enableAutopilot=True),
        None,
        invalid(
            GCP_CP_HOOK,
            "GCPManagedControlPlane.infrastructure.cluster.x-k8s.io",
            "gcp",
            "spec.ReleaseChannel: Required value: Release channel is required for an autopilot enabled cluster",
        ),
    ),
    (
        "gcp-cp-autopilot-channel",
        CAPG + "TestGCPManagedControlPlaneValidatingWebhookCreate: autopilot enabled with release channel",
        gcp_cp(spec__enableAutopilot=True, spec__releaseChannel="stable"),
        None,
        None,
    ),
    (
        "gcp-cp-deprecated-version",
        CAPG + "TestGCPManagedControlPlaneValidatingWebhookCreate: deprecated ControlPlaneVersion (a warning only)",
        gcp_cp(spec__controlPlaneVersion="1.32.5"),
        None,
        None,
    ),
    (
        "gcp-cp-both-versions",
        CAPG + "TestGCPManagedControlPlaneValidatingWebhookCreate: both ControlPlaneVersion and Version",
        gcp_cp(spec__controlPlaneVersion="1.32.5", spec__version="1.32.5"),
        None,
        invalid(
            GCP_CP_HOOK,
            "GCPManagedControlPlane.infrastructure.cluster.x-k8s.io",
            "gcp",
            "spec.ControlPlaneVersion: Invalid value: null: spec.ControlPlaneVersion and spec.Version cannot be set at "
            "the same time: please use spec.Version",
        ),
    ),
    (
        "gcp-cp-version",
        CAPG + "TestGCPManagedControlPlaneDefaultingWebhook: with kubernetes version",
        gcp_cp(spec__version="1.35"),
        None,
        None,
    ),
    ("gcp-mp-valid", CAPG + "gcpmanagedmachinepool_webhook_test.go: valid node pool name", gcp_mp(), None, None),
    (
        "gcp-mp-name-too-long",
        CAPG + "gcpmanagedmachinepool_webhook_test.go: node pool name is too long",
        gcp_mp(spec__nodePoolName="A" * 41),
        None,
        invalid(
            GCP_MP_HOOK,
            "GCPManagedMachinePool.infrastructure.cluster.x-k8s.io",
            "gmp",
            'spec.NodePoolName: Invalid value: "%s": node pool name cannot have more than 40 characters' % ("A" * 41),
        ),
    ),
    (
        "gcp-mp-scaling",
        CAPG + "gcpmanagedmachinepool_webhook_test.go: scaling with valid min/max",
        gcp_mp(spec__scaling={"minCount": 1, "maxCount": 3}),
        None,
        None,
    ),
    (
        "gcp-mp-min-negative",
        CAPG + "gcpmanagedmachinepool_webhook_test.go: scaling with invalid min",
        gcp_mp(spec__scaling={"minCount": -1, "maxCount": 3}),
        None,
        invalid(
            GCP_MP_HOOK,
            "GCPManagedMachinePool.infrastructure.cluster.x-k8s.io",
            "gmp",
            "spec.scaling.minCount: Invalid value: -1: must be greater or equal zero",
        ),
    ),
    (
        "gcp-mp-max-below-min",
        CAPG + "gcpmanagedmachinepool_webhook_test.go: scaling with max < min",
        gcp_mp(spec__scaling={"minCount": 3, "maxCount": 1}),
        None,
        invalid(
            GCP_MP_HOOK,
            "GCPManagedMachinePool.infrastructure.cluster.x-k8s.io",
            "gmp",
            "spec.scaling.maxCount: Invalid value: 1: must be greater than field spec.scaling.minCount",
        ),
    ),
    (
        "gcp-mp-autoscaling-off",
        CAPG + "gcpmanagedmachinepool_webhook_test.go: autoscaling disabled and min/max provided",
        gcp_mp(spec__scaling={"enableAutoscaling": False, "minCount": 1, "maxCount": 3}),
        None,
        invalid(
            GCP_MP_HOOK,
            "GCPManagedMachinePool.infrastructure.cluster.x-k8s.io",
            "gmp",
            "spec.scaling.minCount: Forbidden: minCount cannot be specified when autoscaling is disabled",
            "spec.scaling.maxCount: Forbidden: maxCount cannot be specified when autoscaling is disabled",
        ),
    ),
    (
        "gcp-mp-non-negative",
        CAPG + "gcpmanagedmachinepool_webhook_test.go: valid non-negative values",
        gcp_mp(spec__diskSizeGb=100, spec__maxPodsPerNode=10, spec__localSsdCount=0),
        None,
        None,
    ),
    (
        "gcp-mp-negative",
        CAPG + "gcpmanagedmachinepool_webhook_test.go: invalid negative values",
        gcp_mp(spec__diskSizeGb=-1, spec__maxPodsPerNode=-1, spec__localSsdCount=-1),
        None,
        invalid(
            GCP_MP_HOOK,
            "GCPManagedMachinePool.infrastructure.cluster.x-k8s.io",
            "gmp",
            "spec.template.spec.diskSizeGb: Invalid value: -1: must be non-negative",
            "spec.template.spec.localSsdCount: Invalid value: -1: must be non-negative",
            "spec.template.spec.maxPodsPerNode: Invalid value: -1: must be non-negative",
        ),
    ),
    # ---- CAPT TinkerbellMachineTemplate: api/v1beta1/tinkerbellmachinetemplate_webhook_test.go
    ("tmt-valid", CAPT + "tinkerbellmachinetemplate_webhook_test.go: valid template", tmt(), None, None),
    (
        "tmt-provider-id",
        CAPT + "tinkerbellmachinetemplate_webhook_test.go: providerID set",
        tmt(spec__template__spec={"providerID": "tinkerbell://x"}),
        None,
        invalid(
            TMT_HOOK,
            "TinkerbellMachineTemplate.infrastructure.cluster.x-k8s.io",
            "tmt",
            "spec.template.spec.providerID: Forbidden: cannot be set in templates",
        ),
    ),
    (
        "tmt-hardware-name",
        CAPT + "tinkerbellmachinetemplate_webhook_test.go: hardwareName set",
        tmt(spec__template__spec={"hardwareName": "h"}),
        None,
        invalid(
            TMT_HOOK,
            "TinkerbellMachineTemplate.infrastructure.cluster.x-k8s.io",
            "tmt",
            "spec.template.spec.hardwareName: Forbidden: cannot be set in templates",
        ),
    ),
    # ---- CACPPT TalosControlPlane: api/v1alpha3/taloscontrolplane_webhook.go
    (
        "tcp-default-rollout",
        CACPPT + "taloscontrolplane_webhook.go defaultRolloutStrategy: no strategy",
        tcp(),
        None,
        None,
    ),
    (
        "tcp-on-delete",
        CACPPT + "taloscontrolplane_webhook.go validate: OnDelete",
        tcp(spec__rolloutStrategy={"type": "OnDelete"}),
        None,
        None,
    ),
    (
        "tcp-bad-rollout",
        CACPPT + "taloscontrolplane_webhook.go validate: unknown strategy",
        tcp(spec__rolloutStrategy={"type": "Recreate"}),
        None,
        invalid(
            TCP_HOOK,
            "TalosControlPlane.controlplane.cluster.x-k8s.io",
            "tcp",
            'spec.rolloutStrategy: Invalid value: "Recreate": valid values are: ["RollingUpdate" "OnDelete"]',
        ),
    ),
    # ---- CAAPH HelmChartProxy: api/v1alpha1/helmchartproxy_webhook.go
    (
        "hcp-oci",
        CAAPH + "helmchartproxy_webhook.go isUrlValid: oci:// repository",
        hcp("oci://ghcr.io/controlplaneio-fluxcd/charts"),
        None,
        None,
    ),
    (
        "hcp-https",
        CAAPH + "helmchartproxy_webhook.go isUrlValid: https repository",
        hcp("https://charts.jetstack.io"),
        None,
        None,
    ),
    (
        "hcp-not-a-url",
        CAAPH + "helmchartproxy_webhook.go isUrlValid: a relative reference",
        hcp("charts.jetstack.io"),
        None,
        forbidden(
            HCP_HOOK,
            'specified repoURL charts.jetstack.io is not valid: parse "charts.jetstack.io": invalid URI for request',
        ),
    ),
    (
        "hcp-empty",
        CAAPH + "helmchartproxy_webhook.go isUrlValid: empty",
        hcp(""),
        None,
        forbidden(HCP_HOOK, 'specified repoURL  is not valid: parse "": empty url'),
    ),
    # ---- cluster-api-operator providers: defaulting only (internal/webhook/*provider_webhook.go ValidateCreate returns nil)
    (
        "operator-core-provider",
        OPERATOR + "coreprovider_webhook.go ValidateCreate (no validation)",
        make("operator.cluster.x-k8s.io/v1alpha2", "CoreProvider", "cluster-api", {"version": "not-a-version"}),
        None,
        None,
    ),
]


def _answer_of_registry(obj, gates):
    denial = admission.review(obj, gates)
    return None if denial is None else (denial.code, denial.message)


def _answer_of_emulator(obj, gates):
    group = obj["apiVersion"].rpartition("/")[0]
    emulated = {f"{owner}/{gate}": on for (owner, gate), on in (gates or {}).items()}
    answer = webhooks.denial(group, obj["kind"], obj, "CREATE", emulated)
    return None if answer is None else (answer[0], answer[2])


def _check(answer, expected):
    if expected is None or expected[0] != "contains":
        assert answer == expected
    else:
        _tag, code, prefix, text = expected
        assert answer is not None and answer[0] == code and answer[1].startswith(prefix) and text in answer[1], answer


def test_the_table_is_large_and_covers_every_kind_with_a_create_rule():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)
    kinds = {c[2]["kind"] for c in CASES}
    create_rules = {rule.kind for rule in admission.RULES}
    assert create_rules <= kinds
    for kind in create_rules:  # valid and invalid cases for each kind that has a create rule
        answers = [c[4] for c in CASES if c[2]["kind"] == kind]
        assert None in answers and any(a is not None for a in answers), kind


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_registry_answers_as_upstream(case):
    _id, _source, obj, gates, expected = case
    before = copy.deepcopy(obj)
    _check(_answer_of_registry(obj, gates), expected)
    assert obj == before  # defaulting works on a copy


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_emulator_answers_as_upstream(case):
    _id, _source, obj, gates, expected = case
    _check(_answer_of_emulator(obj, gates), expected)


def test_registry_entries_name_their_source():
    for entry in admission.registry():
        src = entry["source"]
        assert (
            src["repo"].count("/") == 1
            and src["tag"].startswith("v")
            and src["file"].endswith(".go")
            and src["function"]
        )
        assert entry["message"] and entry["type"] in ("Invalid", "Required", "Forbidden", "Plain")


def test_the_emulator_does_not_import_the_product_registry():
    text = (REPO / "tests" / "substrate" / "webhooks.py").read_text()
    assert "module_utils" not in text.replace("module_utils/admission.py", "") and "import admission" not in text


# ---- over HTTP: the strict emulator refuses with the apiserver's Status --------------------------


def _post(api, path, body):
    request = urllib.request.Request(
        api.url + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def api(strict_cluster):
    return strict_cluster("admission", bundles=("cluster-api", "helm-addon"))


def _aws_pool():
    text = (REPO / "mgmt/aws/aws-managed-clusters/eu-north-1/eu-north-1-management.yaml").read_text()
    return next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "MachinePool")


def test_strict_emulator_denies_a_two_part_machine_pool_version(api):
    pool = _aws_pool()
    pool["spec"]["template"]["spec"]["version"] = "v1.35"
    code, body = _post(api, "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machinepools", pool)
    assert code == 422
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'admission webhook "validation.machinepool.cluster.x-k8s.io" denied the request: '
        'MachinePool.cluster.x-k8s.io "eu-north-1-management-system" is invalid: '
        'spec.template.spec.version: Invalid value: "v1.35": must be a valid semantic version',
        "reason": "Invalid",
        "code": 422,
        "details": {
            "name": "eu-north-1-management-system",
            "group": "cluster.x-k8s.io",
            "kind": "MachinePool",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": 'Invalid value: "v1.35": must be a valid semantic version',
                    "field": "spec.template.spec.version",
                }
            ],
        },
    }
    assert not [k for k in api.objects if k[1] == "machinepools"]
    # the tree's own pool (a full vX.Y.Z) is admitted
    code, body = _post(api, "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machinepools", _aws_pool())
    assert code == 201, body
    assert body["spec"]["template"]["spec"]["version"] == "v1.35.0"


def test_strict_emulator_denies_a_bad_repo_url_with_403(api):
    proxy = {
        "apiVersion": "addons.cluster.x-k8s.io/v1alpha1",
        "kind": "HelmChartProxy",
        "metadata": {"name": "flux", "namespace": "default"},
        "spec": {"clusterSelector": {}, "repoURL": "charts.example", "chartName": "flux"},
    }
    code, body = _post(api, "/apis/addons.cluster.x-k8s.io/v1alpha1/namespaces/default/helmchartproxies", proxy)
    assert (code, body["reason"], body["code"]) == (403, "Forbidden", 403)
    assert body["message"] == (
        'admission webhook "vhelmchartproxy.kb.io" denied the request: '
        'specified repoURL charts.example is not valid: parse "charts.example": invalid URI for request'
    )
    assert "details" not in body


def test_strict_emulator_checks_updates_of_machine_pools(api):
    code, _body = _post(api, "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machinepools", _aws_pool())
    assert code == 201
    res = api.resource_for("cluster.x-k8s.io/v1beta2", "MachinePool")
    with pytest.raises(Exception) as err:
        api.patch(
            res,
            "default",
            "eu-north-1-management-system",
            "merge",
            {"spec": {"template": {"spec": {"version": "v1.35"}}}},
        )
    assert err.value.code == 422 and "must be a valid semantic version" in err.value.message


# ---- validate: the admission rule group -----------------------------------------------------------

AWS = "mgmt/aws"


def test_validate_reports_a_two_part_machine_pool_version(tmp_path):
    root = copy_repo(tmp_path, (AWS, "workload/aws"))
    rel = AWS + "/aws-managed-clusters/eu-north-1/eu-north-1-management.yaml"
    edit(root, rel, "      version: v1.35.0", "      version: v1.35")
    result = validate.run(path=str(root), environments=["aws"])
    admission_findings = [f for f in found(result) if f[2] == "admission"]
    assert admission_findings == [
        (
            rel,
            "MachinePool/default/eu-north-1-management-system",
            "admission",
            'admission webhook "validation.machinepool.cluster.x-k8s.io" denied the request: '
            'MachinePool.cluster.x-k8s.io "eu-north-1-management-system" is invalid: '
            'spec.template.spec.version: Invalid value: "v1.35": must be a valid semantic version',
        )
    ]
    assert result["summary"]["aws"]["by_rule"]["admission"] == 1


def test_validate_honours_the_tree_feature_gates(tmp_path):
    root = copy_repo(tmp_path, ("mgmt/azure", "workload/azure-base", "workload/swedencentral-01"))
    rel = "mgmt/azure/capz-system/infrastructure-provider.yaml"
    text = (root / rel).read_text()
    assert "featureGates" not in text
    edit(root, rel, "spec:\n", "spec:\n  manager:\n    featureGates:\n      ASOAPI: false\n")
    result = validate.run(path=str(root), environments=["azure"])
    denied = sorted(f[1] for f in found(result) if f[2] == "admission")
    assert denied and all(o.split("/")[0].startswith("AzureASOManaged") for o in denied)
    assert all(
        "can be set only if the ASOAPI feature flag is enabled" in f[3] for f in found(result) if f[2] == "admission"
    )


# ---- validate: provider contracts and support windows ---------------------------------------------


def _contract_lines(result, kind):
    return sorted((w["environment"], w["object"], w["message"]) for w in result[kind])


def test_contracts_warn_about_the_v1beta1_bridge_by_provider(tmp_path):
    result = validate.run(path=str(REPO), environments=["aws", "azure", "gcp", "local-host"])
    assert [f for f in found(result) if f[2] == "contracts"] == []
    bridge = [
        (w["environment"], w["object"])
        for w in result["warnings"]
        if "runs only through Cluster API's temporary v1beta1 compatibility" in w["message"]
    ]
    assert bridge == [
        ("aws", "InfrastructureProvider/capa-system/aws"),
        ("azure", "InfrastructureProvider/capz-system/azure"),
        ("gcp", "InfrastructureProvider/capg-system/gcp"),
    ]
    azure = next(w for w in result["warnings"] if w["environment"] == "azure")
    assert azure["message"] == (
        "InfrastructureProvider azure v1.25.1 (kubernetes-sigs/cluster-api-provider-azure) implements contract v1beta1, "
        "the core v1.13.5 contract v1beta2: it runs only through Cluster API's temporary v1beta1 compatibility "
        "(deprecated since v1.11, EOL with v1.16)"
    )
    assert result["summary"]["local-host"]["warnings"] == 0


def test_an_end_of_life_base_is_a_finding_unless_accepted(tmp_path):
    root = copy_repo(tmp_path, ("mgmt/local-talos",))
    result = validate.run(path=str(root), environments=["local-talos"])
    assert [f for f in found(result) if f[2] == "contracts"] == []
    eol = [w["message"] for w in result["warnings"] if "end-of-life" in w["message"]]
    assert eol == [
        "BootstrapProvider talos v0.6.12 (siderolabs/cluster-api-bootstrap-provider-talos) is built on Cluster API "
        "v1.10 (EOL since 2026-04-21 in Cluster API's versions.md); accepted by accepted-end-of-life in bootstrap.toml",
        "ControlPlaneProvider talos v0.5.12 (siderolabs/cluster-api-control-plane-provider-talos) is built on Cluster "
        "API v1.10 (EOL since 2026-04-21 in Cluster API's versions.md); accepted by accepted-end-of-life in bootstrap.toml",
    ]
    edit(
        root,
        "bootstrap.toml",
        '["BootstrapProvider/talos", "ControlPlaneProvider/talos"]',
        '["ControlPlaneProvider/talos"]',
    )
    result = validate.run(path=str(root), environments=["local-talos"])
    assert [f for f in found(result) if f[2] == "contracts"] == [
        (
            "mgmt/local-talos/cabpt-system/bootstrap-provider.yaml",
            "BootstrapProvider/cabpt-system/talos",
            "contracts",
            "BootstrapProvider talos v0.6.12 (siderolabs/cluster-api-bootstrap-provider-talos) is built on Cluster API "
            "v1.10 (EOL since 2026-04-21 in Cluster API's versions.md): pin a release built on a supported line, or list "
            "BootstrapProvider/talos in the environment's accepted-end-of-life in bootstrap.toml",
        )
    ]


def test_a_stale_end_of_life_acceptance_is_a_finding(tmp_path):
    root = copy_repo(tmp_path, ("mgmt/local-talos",))
    edit(root, "bootstrap.toml", '"ControlPlaneProvider/talos"]', '"ControlPlaneProvider/talos", "AddonProvider/helm"]')
    result = validate.run(path=str(root), environments=["local-talos"])
    assert [f for f in found(result) if f[2] == "contracts"] == [
        (
            "bootstrap.toml",
            "environments.local-talos.accepted-end-of-life",
            "contracts",
            "accepted-end-of-life lists AddonProvider/helm, which is not an end-of-life provider of this environment: remove it",
        )
    ]


def test_a_provider_of_another_contract_is_a_finding(tmp_path):
    root = copy_repo(tmp_path, ("mgmt/local-host", "workload/local-host"))
    # CAAPH 0.4 implements v1beta1 (its metadata.yaml) - bridged; the core on v1.10 (v1beta1) cannot host CAAPH 0.6 (v1beta2)
    edit(root, "mgmt/local-host/capi-system/core-provider.yaml", "version: v1.13.5", "version: v1.10.0")
    result = validate.run(path=str(root), environments=["local-host"])
    contract = [f for f in found(result) if f[2] == "contracts" and f[1].startswith("AddonProvider")]
    assert contract == [
        (
            "mgmt/local-host/caaph-system/addon-provider.yaml",
            "AddonProvider/caaph-system/helm",
            "contracts",
            "AddonProvider helm v0.6.4 (kubernetes-sigs/cluster-api-addon-provider-helm) implements contract v1beta2, "
            "the core v1.10.0 contract v1beta1: not compatible; pin a release of the core's contract",
        )
    ]


def test_accepted_end_of_life_entries_are_checked_by_the_loader(tmp_path):
    from ansible_collections.krops.platform.plugins.module_utils import config as krops_config

    path = tmp_path / "bootstrap.toml"
    text = (REPO / "bootstrap.toml").read_text().replace('["InfrastructureProvider/aws"]', '["capa"]')
    path.write_text(text)
    with pytest.raises(krops_config.ConfigError) as err:
        krops_config.load(path=str(path), environ={})
    assert "accepted-end-of-life" in str(err.value) and "<Kind>Provider/<name>" in str(err.value)


def test_the_module_returns_contract_warnings_and_fails_on_an_admission_finding(run_module, tmp_path):
    from ansible_collections.krops.platform.plugins.modules import validate as validate_module

    root = copy_repo(tmp_path, ("mgmt/azure", "workload/azure-base", "workload/swedencentral-01"))
    result = run_module(validate_module, {"path": str(root), "environments": ["azure"]})
    assert not result.failed, result.get("msg")
    assert [(w["object"], w["environment"]) for w in result["contract_warnings"]] == [
        ("InfrastructureProvider/capz-system/azure", "azure")
    ]
    assert "[contracts] WARNING InfrastructureProvider azure v1.25.1" in result["output"]
    rel = "mgmt/azure/clusters/swedencentral-management/machinepool.yaml"
    edit(root, rel, "version: v1.35.5", "version: v1.35")
    result = run_module(validate_module, {"path": str(root), "environments": ["azure"]})
    assert result.failed
    assert result["msg"].splitlines()[1] == (
        f"{rel}: MachinePool/default/swedencentral-management-pool0: [admission] admission webhook "
        '"validation.machinepool.cluster.x-k8s.io" denied the request: MachinePool.cluster.x-k8s.io '
        '"swedencentral-management-pool0" is invalid: spec.template.spec.version: Invalid value: "v1.35": must be '
        "a valid semantic version"
    )


def test_registry_and_emulator_agree_on_every_object_of_the_trees():
    """The differential check on real objects: every rendered object of the five trees, through both ports."""
    objects = []
    validate.run(
        path=str(REPO), cel=False, collect=lambda env: objects.extend(i.obj for i in env.items if not i.fallback)
    )
    reviewed = 0
    for obj in objects:
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        if (group, obj.get("kind")) not in webhooks.WEBHOOKS:
            continue
        reviewed += 1
        assert _answer_of_registry(obj, None) == _answer_of_emulator(obj, None) == None, obj["metadata"]  # noqa: E711
    assert reviewed >= 40
