# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The cloud side of the emulated world for gcp: CAPG with GKE, the Config Connector operator and Config
Connector, over the Google double (tests/substrate/google_double.GoogleDouble).

``GcpOperators(world, google, capi)`` joins a flux_world.World next to the Flux and CAPI controllers and
plugs into capi_world for infrastructureRef kind GCPManagedCluster:

- Credentials: CAPG and Config Connector authenticate as upstream's external_account files make them:
  the Secret's file (capg-system/capg-wif-credentials ``credentials.json``, cnrm-system/
  kcc-wif-credentials ``key.json``) names the pool provider (``audience``) and the service account to
  impersonate; the pod's token (issuer: its API server's service-account issuer, audience: that issuer,
  subject ``system:serviceaccount:<namespace>:<name>``, signed with the API server's key) goes through
  the double's STS and generateAccessToken. A refusal (no provider, wrong keys, no
  roles/iam.workloadIdentityUser grant) stops that controller with Google's message.
- CAPG (InfrastructureProvider ``gcp``, an ``installers`` entry): needs its configSecret, installs the
  GCP* CRDs of infrastructure.cluster.x-k8s.io from schemas/crds. Its GKE controllers run only with
  feature gate GKE on (spec.manager.featureGates). A GCPManagedCluster gets, as CAPG v1.12.0 makes them
  (cloud/scope/managedcluster.go, cloud/services/compute/networks): the VPC ``spec.network.name``
  (description ``capg-cluster-<cluster>``), the Cloud NAT router ``<network>-router`` and the subnets;
  a GCPManagedControlPlane the GKE cluster ``spec.clusterName`` in ``spec.location`` (no resource
  labels: CAPG sets none), with a node pool per GCPManagedMachinePool (``additionalLabels`` as its
  resource labels). The Cluster's API server then has the GKE issuer
  ``https://container.googleapis.com/v1/projects/<project>/locations/<location>/clusters/<name>``, whose
  keys Google can read (the double's ``issuers``). Deleting the Cluster deletes the GKE cluster, the
  subnets, the router and the VPC it made through the Google API (a refusal, e.g. a peering still using
  the VPC, keeps the finalizer); a GKE cluster deleted by someone else stops its API server.
- The Config Connector operator: runs once its StatefulSet configconnector-operator-system/
  configconnector-operator exists (the mirrored artifact, ``operator_artifact``); reports it ready.
  The ConfigConnector object (cluster mode, ``credentialSecretName`` in cnrm-system) then installs the
  Config Connector CRDs of the kinds emulated here (``KCC_KINDS``, from schemas/crds) and turns healthy.
- Config Connector: every object of those kinds gets the finalizers cnrm.cloud.google.com/finalizer and
  cnrm.cloud.google.com/deletion-defender, waits for the objects it references (DependencyNotReady),
  then is created in (or acquired from) the double with the labels Config Connector sets: metadata.labels
  without ``/``-prefixed keys, plus ``managed-by-cnrm: "true"`` (pkg/label/label.go at v1.155.1); then
  Ready (reason UpToDate, "The resource is up to date"). Google's refusals show as UpdateFailed.
  Deleting an object deletes the resource unless cnrm.cloud.google.com/deletion-policy is abandon.
  A Ready object is reconciled again on every pass (Config Connector re-reconciles about every 10
  minutes, pkg/k8s/constants.go MeanReconcileReenqueuePeriod; the emulation shrinks that period to one
  pass, so a resource deleted behind Config Connector's back comes back at once, as it would within
  minutes). With the ConfigConnector's ``spec.actuationMode: Paused`` (k8s-config-connector v1.114+,
  the CRD in schemas/crds) nothing is actuated onto Google: no create, update or delete.

Not emulated: CAPG's GCE (non-managed) clusters, firewall rules, node pool upgrades; Config Connector
kinds outside ``KCC_KINDS`` (their CRDs are not served, so a tree using one fails at Flux's dry-run).
"""

from __future__ import annotations

import base64
import copy
import json
import re
import time

import yaml

from tests.substrate import flux_world
from tests.substrate.kube_emulator import ApiError, _now
from tests.substrate.strict_api import catalog, plural_of

OPERATOR = "operator.cluster.x-k8s.io/v1alpha2"
CAPG_GROUP = "infrastructure.cluster.x-k8s.io"
CAPG_OWNED = "capg-cluster-"  # api/v1beta1/labels.go NameGCPProviderOwned
KCC_FINALIZERS = ("cnrm.cloud.google.com/finalizer", "cnrm.cloud.google.com/deletion-defender")
DELETION_POLICY = "cnrm.cloud.google.com/deletion-policy"
PROJECT_ANNOTATION = "cnrm.cloud.google.com/project-id"
MANAGED_BY_CNRM = "managed-by-cnrm"
KCC_MANAGER = "cnrm-controller-manager"
OPERATOR_NAMESPACE = "configconnector-operator-system"
OPERATOR_NAME = "configconnector-operator"
CONFIG_CONNECTOR = ("core.cnrm.cloud.google.com", "ConfigConnector")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


class NotYet(Exception):
    """A Config Connector object cannot be acted on yet: (reason, message) for its Ready condition."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason, self.message = reason, message


def gcp_labels(obj):
    labels = {k: v for k, v in (obj["metadata"].get("labels") or {}).items() if "/" not in k}
    labels[MANAGED_BY_CNRM] = "true"
    for key, value in labels.items():
        if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(str(value)):
            raise NotYet(
                "UpdateFailed",
                f"Update call failed: error applying desired state: googleapi: Error 400: Invalid label "
                f"{key}={value!r}: keys match [a-z][a-z0-9_-]{{0,62}}, values [a-z0-9_-]{{0,63}}., invalid",
            )
    return labels


def operator_artifact(folder):
    """The mirrored Config Connector operator (docs/environments/gcp.md, "Mirroring"): the operator-system
    folder's manifest, with the operator's two CRDs built from the vendored schemas. Returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    crds = []
    for kind, scope in (("ConfigConnector", "Cluster"), ("ConfigConnectorContext", "Namespaced")):
        crd = catalog().crd("core.cnrm.cloud.google.com", kind)
        crd["spec"]["scope"] = scope  # operator/config/crd/bases at v1.155.1
        crds.append(crd)
    ns = {"metadata": {"namespace": OPERATOR_NAMESPACE}}
    labels = {"cnrm.cloud.google.com/component": "configconnector-operator"}
    docs = crds + [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(ns["metadata"], name=OPERATOR_NAME)},
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": dict(ns["metadata"], name=OPERATOR_NAME, labels=labels),
            "spec": {
                "replicas": 1,
                "serviceName": "configconnector-operator-service",
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": OPERATOR_NAME,
                        "containers": [{"name": "manager", "image": "gcr.io/gke-release/cnrm/operator:1.155.1"}],
                    },
                },
            },
        },
    ]
    (folder / "configconnector-operator.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return folder


class GcpOperators:
    """CAPG with GKE, the Config Connector operator and Config Connector; see the module docstring."""

    def __init__(self, world, google, capi):
        self.world, self.google, self.capi = world, google, capi
        self.gke = {}  # "locations/l/clusters/n" -> the cluster's API server (an emulator of the world)
        self.tokens = {}  # (api url, secret namespace/name, resourceVersion) -> (token or None, error)
        self.errors = {}  # (api url, controller) -> the last credential error (for assertions)
        self.installers = {("InfrastructureProvider", "gcp"): self.install_capg}
        self.resync = True  # re-reconcile Ready objects every pass (drift correction, see the docstring)
        self.paused_seen = {}  # api url -> number of Google calls when the pause was first observed
        capi.plug_in("GCPManagedCluster", self)
        world.controllers.append(self)

    # ---- Google, as the controllers call it ---------------------------------------------------
    def call(self, method, path, body=None, query=None):
        with self.google.lock:
            self.google.calls.append((method, path, "Bearer emulated-controller"))
            return self.google.handle(method, path, query or {}, body)

    def finish(self, scope_path, reply):
        """Poll a long-running operation until done, as the Google client libraries do."""
        for dummy in range(self.google.polls + 2):
            if reply.get("status") == "DONE" or reply.get("done") is True:
                return None
            status, reply = self.call("GET", scope_path.format(name=reply["name"]))
            if status != 200:
                return reply.get("error", {}).get("message")
        return "operation did not finish"

    def credential(self, api, namespace, secret_name, key, service_account):
        """An access token for what the Secret's external_account file names, or (None, Google's refusal)."""
        res = api.resource_for("v1", "Secret")
        secret = api.objects.get(api._key(res, namespace, secret_name))
        if secret is None:
            return None, f'secrets "{secret_name}" not found'
        cache = (api.url, namespace, secret_name, secret["metadata"].get("resourceVersion"))
        if cache in self.tokens:
            return self.tokens[cache]
        data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
        data.update(secret.get("stringData") or {})
        try:
            config = json.loads(data[key])
            email = re.search(
                r"serviceAccounts/([^/:]+):generateAccessToken$", config["service_account_impersonation_url"]
            )
            audience = config["audience"]
        except (KeyError, ValueError, TypeError) as exc:
            self.tokens[cache] = (None, f"the credential file {namespace}/{secret_name} {key} is not usable: {exc!r}")
            return self.tokens[cache]
        import jwt  # pylint: disable=import-outside-toplevel

        private, kid = api.signing_key()
        now = int(time.time())
        pod_token = jwt.encode(
            {
                "iss": api.service_account_issuer,
                "aud": [api.service_account_issuer],
                "sub": f"system:serviceaccount:{namespace}:{service_account}",
                "iat": now,
                "exp": now + 3600,
            },
            private,
            algorithm="RS256",
            headers={"kid": kid},
        )
        form = {
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "audience": audience,
            "scope": "https://www.googleapis.com/auth/cloud-platform",
            "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "subject_token": pod_token,
            "subject_token_type": config.get("subject_token_type"),
        }
        with self.google.lock:
            status, answer = self.google._sts(form)
            if status == 200:
                status, answer = self.google._generate_access_token(
                    email.group(1) if email else "", {}, "Bearer " + answer["access_token"]
                )
        if status != 200:
            message = answer.get("error_description") or answer.get("error", {}).get("message")
            result = (None, f"{audience}: {message}")
        else:
            result = (answer["accessToken"], None)
        self.tokens[cache] = result
        return result

    # ---- CAPG ---------------------------------------------------------------------------------------
    def install_capg(self, api, provider):
        ref = (provider.get("spec") or {}).get("configSecret") or {}
        if ref:
            ns = ref.get("namespace") or provider["metadata"]["namespace"]
            if not api.exists("v1", "Secret", ref["name"], ns):
                return f'failed to get configSecret {ns}/{ref["name"]}: secrets "{ref["name"]}" not found'
        for kind in catalog().kinds(CAPG_GROUP):
            if kind.startswith("GCP"):
                name = f"{plural_of(CAPG_GROUP, kind)}.{CAPG_GROUP}"
                if ("apiextensions.k8s.io", "customresourcedefinitions", "", name) not in api.objects:
                    api.create(catalog().crd(CAPG_GROUP, kind))
        return None

    @staticmethod
    def _capg(api):
        if ("operator.cluster.x-k8s.io", "infrastructureproviders") not in api._served:
            return None
        for p in api.list(OPERATOR, "InfrastructureProvider"):
            if p["metadata"]["name"] == "gcp" and not p["metadata"].get("deletionTimestamp") and flux_world.is_ready(p):
                return p
        return None

    def _capg_token(self, api, provider):
        ns = provider["metadata"]["namespace"]
        secret = ((provider.get("spec") or {}).get("configSecret") or {}).get(
            "name", "capg-manager-bootstrap-credentials"
        )
        token, error = self.credential(api, ns, secret, "credentials.json", "capg-manager")
        self.errors[(api.url, "capg")] = error
        return error and f"CAPG cannot authenticate to Google: {error}"

    def provision(self, api, cluster, infra, control_plane):
        provider = self._capg(api)
        if provider is None:
            return "CAPG (InfrastructureProvider gcp) is not running on this cluster"
        gates = ((provider.get("spec") or {}).get("manager") or {}).get("featureGates") or {}
        if not gates.get("GKE"):
            return "CAPG runs no GKE controllers: feature gate GKE is off (InfrastructureProvider gcp spec.manager.featureGates)"
        problem = self._capg_token(api, provider)
        if problem:
            return problem
        ispec, cspec = infra.get("spec") or {}, control_plane.get("spec") or {}
        name, ns = cluster["metadata"]["name"], cluster["metadata"]["namespace"]
        network = (ispec.get("network") or {}).get("name") or name
        region = ispec.get("region")
        base = f"/compute/projects/{ispec.get('project')}"
        owned = CAPG_OWNED + name
        if f"global/networks/{network}" not in self.google.compute:
            status, reply = self.call(
                "POST",
                f"{base}/global/networks",
                {
                    "name": network,
                    "description": owned,
                    "autoCreateSubnetworks": bool((ispec.get("network") or {}).get("autoCreateSubnetworks", True)),
                    "peerings": [],
                },
            )
            if status != 200:
                return "networks: " + reply["error"]["message"]
        link = self.google.link(f"global/networks/{network}")
        wanted = [
            (
                "routers",
                region,
                {
                    "name": f"{network}-router",
                    "description": owned,
                    "network": link,
                    "region": self.google.link(f"regions/{region}"),
                    "nats": [{"name": f"{network}-nat", "natIpAllocateOption": "AUTO_ONLY"}],
                },
            )
        ]
        for subnet in (ispec.get("network") or {}).get("subnets") or []:
            wanted.append(
                (
                    "subnetworks",
                    subnet.get("region") or region,
                    {
                        "name": subnet["name"],
                        "description": subnet.get("description") or owned,
                        "network": link,
                        "ipCidrRange": subnet.get("cidrBlock"),
                        "region": self.google.link(f"regions/{subnet.get('region') or region}"),
                        "privateIpGoogleAccess": bool(subnet.get("privateGoogleAccess")),
                    },
                )
            )
        for collection, where, body in wanted:
            if f"regions/{where}/{collection}/{body['name']}" not in self.google.compute:
                status, reply = self.call("POST", f"{base}/regions/{where}/{collection}", body)
                if status != 200:
                    return f"{collection}: " + reply["error"]["message"]
        location, gke_name = cspec.get("location"), cspec.get("clusterName") or name
        key = f"locations/{location}/clusters/{gke_name}"
        subnets = [b["name"] for c, w, b in wanted if c == "subnetworks" and w == location] or [None]
        pools = []
        if ("infrastructure.cluster.x-k8s.io", "gcpmanagedmachinepools") in api._served:
            refs = set()
            if ("cluster.x-k8s.io", "machinepools") in api._served:
                for mp in api.list("cluster.x-k8s.io/v1beta2", "MachinePool", ns):
                    if (mp.get("spec") or {}).get("clusterName") == name:
                        refs.add(
                            ((mp["spec"].get("template") or {}).get("spec") or {})
                            .get("infrastructureRef", {})
                            .get("name")
                        )
            for pool in api.list("infrastructure.cluster.x-k8s.io/v1beta1", "GCPManagedMachinePool", ns):
                if pool["metadata"]["name"] in refs:
                    pspec = pool.get("spec") or {}
                    pools.append(
                        {
                            "name": pspec.get("nodePoolName") or pool["metadata"]["name"],
                            "config": {
                                "machineType": pspec.get("machineType"),
                                "resourceLabels": dict(pspec.get("additionalLabels") or {}),
                            },
                            "status": "RUNNING",
                        }
                    )
        with self.google.lock:
            live = self.google.gke.get(key)
            if live is None:
                self.google.add_gke(gke_name, location, network)
                live = self.google.gke[key]
                live["subnetwork"] = subnets[0]
            if pools and live.get("nodePools") != pools:
                live["nodePools"] = pools
        workload = self.capi.workloads.get((api.url, ns, name))
        if workload is not None and self.gke.get(key) is not workload:
            self.gke[key] = workload
            workload.service_account_issuer = (
                f"https://container.googleapis.com/v1/projects/{cspec.get('project')}/{key}"
            )
            self.google.issuers[workload.service_account_issuer] = json.dumps(
                workload.openid_document("/openid/v1/jwks")
            )
        return None

    def delete(self, api, cluster, infra, control_plane):
        provider = self._capg(api)
        if provider is None:
            return "CAPG (InfrastructureProvider gcp) is not running on this cluster"
        problem = self._capg_token(api, provider)
        if problem:
            return problem
        name = cluster["metadata"]["name"]
        ispec = (infra or {}).get("spec") or {}
        cspec = (control_plane or {}).get("spec") or {}
        project = ispec.get("project") or cspec.get("project")
        if control_plane is not None:
            rel = f"locations/{cspec.get('location')}/clusters/{cspec.get('clusterName') or name}"
            if rel in self.google.gke:
                status, reply = self.call("DELETE", f"/container/projects/{project}/{rel}")
                if status == 200:
                    self.finish(
                        f"/container/projects/{project}/locations/{cspec.get('location')}/operations/{{name}}", reply
                    )
                if rel in self.google.gke:
                    return f"GKE cluster {rel} is being deleted"
        if infra is None:
            return None
        network = (ispec.get("network") or {}).get("name") or name
        owned = CAPG_OWNED + name
        region = ispec.get("region")
        steps = [
            f"regions/{s.get('region') or region}/subnetworks/{s['name']}"
            for s in (ispec.get("network") or {}).get("subnets") or []
        ]
        steps += [f"regions/{region}/routers/{network}-router", f"global/networks/{network}"]
        for rel in steps:
            obj = self.google.compute.get(rel)
            if obj is None or obj.get("description") != owned:
                continue  # CAPG deletes only what it made (its description)
            status, reply = self.call("DELETE", f"/compute/projects/{project}/{rel}")
            if status != 200:
                return f"{rel}: " + reply["error"]["message"]
            self.finish(f"/compute/projects/{project}/{rel.rsplit('/', 2)[0]}/operations/{{name}}", reply)
        return None

    @staticmethod
    def status(role):
        return {"ready": True} if role == "infrastructure" else {"ready": True, "initialized": True}

    def _stop_deleted_gke(self):
        """A GKE cluster gone from Google loses its API server (and everything that ran in it)."""
        for key, api in list(self.gke.items()):
            if key not in self.google.gke:
                del self.gke[key]
                self.world.clusters.pop(api.url, None)
                api.stop()

    # ---- one pass -----------------------------------------------------------------------------
    def reconcile(self, api):
        self._stop_deleted_gke()
        self._operator(api)
        if not self._kcc_running(api):
            return
        if self._kcc_paused(api):
            self.paused_seen.setdefault(api.url, len(self.google.calls))
            return  # actuationMode Paused: Kubernetes objects stay, nothing reaches Google
        for (group, kind), handler in KCC_KINDS.items():
            if (group, plural_of(group, kind)) in api._served:
                res = api.resources[(group, plural_of(group, kind))]
                for obj in api.list(res.api_version, kind):
                    self.kcc_object(api, obj, handler)

    # ---- the Config Connector operator ----------------------------------------------------------
    def _operator(self, api):
        res = api.resource_for("apps/v1", "StatefulSet")
        sts = api.objects.get(api._key(res, OPERATOR_NAMESPACE, OPERATOR_NAME))
        if sts is None or sts["metadata"].get("deletionTimestamp"):
            return
        replicas = (sts.get("spec") or {}).get("replicas", 1)
        status = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": replicas,
            "readyReplicas": replicas,
            "currentReplicas": replicas,
            "updatedReplicas": replicas,
            "availableReplicas": replicas,
        }
        if (sts.get("status") or {}) != status:
            api.patch(
                res, OPERATOR_NAMESPACE, OPERATOR_NAME, "merge", {"status": status}, "status", "kube-controller-manager"
            )
        group, kind = CONFIG_CONNECTOR
        if (group, plural_of(group, kind)) not in api._served:
            return
        for cc in api.list(f"{group}/v1beta1", kind):
            self._config_connector(api, cc)

    def _config_connector(self, api, cc):
        res = api.resource_for(cc["apiVersion"], cc["kind"])
        errors = []
        spec = cc.get("spec") or {}
        if cc["metadata"]["name"] != "configconnector.core.cnrm.cloud.google.com":
            errors.append("the ConfigConnector object must be named configconnector.core.cnrm.cloud.google.com")
        if spec.get("mode", "namespaced") == "cluster":
            secret = spec.get("credentialSecretName")
            if not secret and not spec.get("googleServiceAccount"):
                errors.append("cluster mode needs credentialSecretName or googleServiceAccount")
            elif secret and not api.exists("v1", "Secret", secret, "cnrm-system"):
                errors.append(f"Secret cnrm-system/{secret} (credentialSecretName) not found")
        if not errors and not cc["metadata"].get("deletionTimestamp"):
            for group, kind in KCC_KINDS:
                name = f"{plural_of(group, kind)}.{group}"
                if ("apiextensions.k8s.io", "customresourcedefinitions", "", name) not in api.objects:
                    api.create(catalog().crd(group, kind))
        status = {"healthy": not errors, "errors": errors, "observedGeneration": cc["metadata"].get("generation", 1)}
        if (cc.get("status") or {}) != status:
            api.patch(res, None, cc["metadata"]["name"], "merge", {"status": status}, "status", OPERATOR_NAME)

    @staticmethod
    def _kcc_running(api):
        group, kind = CONFIG_CONNECTOR
        if (group, plural_of(group, kind)) not in api._served:
            return False
        return any(
            (cc.get("status") or {}).get("healthy") and not cc["metadata"].get("deletionTimestamp")
            for cc in api.list(f"{group}/v1beta1", kind)
        )

    @staticmethod
    def _kcc_paused(api):
        group, kind = CONFIG_CONNECTOR
        return any((cc.get("spec") or {}).get("actuationMode") == "Paused" for cc in api.list(f"{group}/v1beta1", kind))

    # ---- Config Connector -----------------------------------------------------------------------
    def kcc_object(self, api, obj, handler):
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        res = api.resource_for(obj["apiVersion"], obj["kind"])
        if meta.get("deletionTimestamp"):
            if (meta.get("annotations") or {}).get(DELETION_POLICY) != "abandon" and (obj.get("status") or {}).get(
                "conditions"
            ):
                try:
                    handler(self, api, obj, delete=True)
                except NotYet as exc:
                    return self._status(api, obj, False, "DeleteFailed", exc.message)
            left = [f for f in meta.get("finalizers") or [] if f not in KCC_FINALIZERS] or None
            api.patch(res, ns, name, "merge", {"metadata": {"finalizers": left}}, None, KCC_MANAGER)
            return
        if flux_world.is_ready(obj) and (obj.get("status") or {}).get("observedGeneration") == meta.get(
            "generation", 1
        ):
            if self.resync:  # drift correction: what was deleted behind Config Connector's back comes back
                try:
                    handler(self, api, obj, delete=False)
                except NotYet as exc:
                    self._status(api, obj, False, exc.reason, exc.message)
            return
        missing = [f for f in KCC_FINALIZERS if f not in (meta.get("finalizers") or [])]
        if missing:
            api.patch(
                res,
                ns,
                name,
                "merge",
                {"metadata": {"finalizers": (meta.get("finalizers") or []) + missing}},
                None,
                KCC_MANAGER,
            )
        token, error = self.credential(api, "cnrm-system", self._kcc_secret(api), "key.json", "cnrm-controller-manager")
        self.errors[(api.url, "kcc")] = error
        if error:
            return self._status(
                api, obj, False, "UpdateFailed", f"Update call failed: error fetching credentials: {error}"
            )
        try:
            handler(self, api, obj, delete=False)
        except NotYet as exc:
            return self._status(api, obj, False, exc.reason, exc.message)
        self._status(api, obj, True, "UpToDate", "The resource is up to date")

    @staticmethod
    def _kcc_secret(api):
        group, kind = CONFIG_CONNECTOR
        for cc in api.list(f"{group}/v1beta1", kind):
            return (cc.get("spec") or {}).get("credentialSecretName") or ""
        return ""

    def _status(self, api, obj, ready, reason, message):
        live = api.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"])
        old = next((c for c in (live.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
        value = "True" if ready else "False"
        cond = {"type": "Ready", "status": value, "reason": reason, "message": message}
        status = copy.deepcopy(live.get("status") or {})
        generation = live["metadata"].get("generation", 1)
        if all(old.get(k) == v for k, v in cond.items()) and status.get("observedGeneration") == generation:
            return
        cond["lastTransitionTime"] = old.get("lastTransitionTime") if old.get("status") == value else _now()
        status.update(conditions=[cond], observedGeneration=generation)
        res = api.resource_for(obj["apiVersion"], obj["kind"])
        api.patch(
            res,
            obj["metadata"]["namespace"],
            obj["metadata"]["name"],
            "merge",
            {"status": status},
            "status",
            KCC_MANAGER,
        )

    # ---- references ---------------------------------------------------------------------------
    def project(self, api, obj):
        external = ((obj.get("spec") or {}).get("projectRef") or {}).get("external")
        if external:
            return external.rpartition("/")[2]
        ns = api.get("v1", "Namespace", obj["metadata"]["namespace"])
        project = (ns["metadata"].get("annotations") or {}).get(PROJECT_ANNOTATION)
        if not project:
            raise NotYet(
                "UpdateFailed", f"no project: namespace {ns['metadata']['name']} has no {PROJECT_ANNOTATION} annotation"
            )
        if project != self.google.project:
            raise NotYet("UpdateFailed", f"googleapi: Error 403: Permission denied on project {project}, forbidden")
        return project

    def ref(self, api, obj, ref, kind, group):
        """The Ready object a resource reference names (``name``), else DependencyNotFound/NotReady."""
        ns = ref.get("namespace") or obj["metadata"]["namespace"]
        served = api.resources.get((group, plural_of(group, kind)))
        found = None
        if served is not None:
            try:
                found = api.get(served.api_version, kind, ref.get("name"), ns)
            except ApiError:
                found = None
        if found is None:
            raise NotYet("DependencyNotFound", f"reference {kind} {ns}/{ref.get('name')} is not found")
        if not flux_world.is_ready(found):
            raise NotYet("DependencyNotReady", f"reference {kind} {ns}/{ref.get('name')} is not ready")
        return found

    def network(self, ref):
        m = re.match(
            r"^(?:https://www\.googleapis\.com/compute/v1/)?projects/([^/]+)/global/networks/([^/]+)$",
            (ref or {}).get("external") or "",
        )
        if not m:
            raise NotYet("UpdateFailed", f"networkRef {ref!r}: only external references to a network are emulated")
        net = self.google.compute.get(f"global/networks/{m.group(2)}")
        if net is None:
            raise NotYet(
                "UpdateFailed",
                f"Update call failed: googleapi: Error 404: The resource 'projects/{m.group(1)}/global/networks/{m.group(2)}' was not found, notFound",
            )
        return net


def _resource_id(obj):
    return (obj.get("spec") or {}).get("resourceID") or obj["metadata"]["name"]


# ---- what each Config Connector kind does in the double (state under google.lock) --------------------


def _pool(ops, api, obj, delete):
    g, pool = ops.google, _resource_id(obj)
    with g.lock:
        if delete:
            if pool in g.pools:
                g.pools[pool]["state"] = "DELETED"
            return
        live = g.pools.get(pool)
        if live is None or live["state"] == "DELETED":
            g.pools[pool] = {
                "name": g._pool_name(pool),
                "state": "ACTIVE",
                "displayName": obj["spec"].get("displayName"),
            }


def _provider(ops, api, obj, delete):
    g, spec = ops.google, obj["spec"]
    pool = _resource_id(
        ops.ref(api, obj, spec["workloadIdentityPoolRef"], "IAMWorkloadIdentityPool", "iam.cnrm.cloud.google.com")
    )
    key = (pool, _resource_id(obj))
    with g.lock:
        if delete:
            if key in g.providers:
                g.providers[key]["state"] = "DELETED"
            return
        body = {
            "displayName": spec.get("displayName"),
            "attributeMapping": spec.get("attributeMapping") or {},
            "attributeCondition": spec.get("attributeCondition"),
            "oidc": {
                k: v for k, v in (spec.get("oidc") or {}).items() if k in ("issuerUri", "allowedAudiences", "jwksJson")
            },
        }
        problem = g._check_provider(body)
        if problem:
            raise NotYet("UpdateFailed", f"Update call failed: googleapi: Error 400: {problem}, badRequest")
        g.providers[key] = dict(body, name=f"{g._pool_name(pool)}/providers/{key[1]}", state="ACTIVE")


def _sa_email(ops, api, obj):
    return f"{_resource_id(obj)}@{ops.project(api, obj)}.iam.gserviceaccount.com"


def _service_account(ops, api, obj, delete):
    g, email = ops.google, _sa_email(ops, api, obj)
    with g.lock:
        if delete:
            g.service_accounts.pop(email, None)
            g.sa_policies.pop(email, None)
            return
        g.service_accounts.setdefault(email, {"email": email, "displayName": obj["spec"].get("displayName")})


def _policy_member(ops, api, obj, delete):
    g, spec = ops.google, obj["spec"]
    member = spec.get("member")
    if not member:
        ref = (spec.get("memberFrom") or {}).get("serviceAccountRef") or {}
        sa = ops.ref(api, obj, ref, "IAMServiceAccount", "iam.cnrm.cloud.google.com")
        member = "serviceAccount:" + _sa_email(ops, api, sa)
    target = spec["resourceRef"]
    if target.get("kind") == "Project":
        policy = g.project_policy
    elif target.get("kind") == "IAMServiceAccount":
        sa = ops.ref(api, obj, target, "IAMServiceAccount", "iam.cnrm.cloud.google.com")
        policy = g.sa_policies.setdefault(_sa_email(ops, api, sa), {"version": 1, "etag": "BwAAAA==", "bindings": []})
    elif target.get("kind") == "StorageBucket":
        bucket = _resource_id(ops.ref(api, obj, target, "StorageBucket", "storage.cnrm.cloud.google.com"))
        if bucket not in g.buckets:
            if delete:
                return  # the grant went with its bucket
            raise NotYet(
                "UpdateFailed", f"Update call failed: googleapi: Error 404: bucket {bucket} not found, notFound"
            )
        policy = g.buckets[bucket].setdefault("_iam", {"bindings": []})
    else:
        raise NotYet("UpdateFailed", f"resourceRef kind {target.get('kind')} is not emulated")
    with g.lock:
        bindings = policy.setdefault("bindings", [])
        binding = next((b for b in bindings if b["role"] == spec["role"]), None)
        if delete:
            if binding and member in binding["members"]:
                binding["members"].remove(member)
                if policy is g.project_policy:
                    g.bump_project_policy()
            return
        if binding is None:
            binding = {"role": spec["role"], "members": []}
            bindings.append(binding)
        if member not in binding["members"]:
            binding["members"].append(member)
            if policy is g.project_policy:
                g.bump_project_policy()  # a change is a new etag (a stale read-modify-write is refused)


def _address(ops, api, obj, delete):
    g, spec, name = ops.google, obj["spec"], _resource_id(obj)
    rel = f"global/addresses/{name}"
    if delete:
        return _compute_delete(ops, rel)
    labels = gcp_labels(obj)
    net = ops.network(spec.get("networkRef"))
    with g.lock:
        if rel not in g.compute:
            g.add_compute(
                "addresses",
                name,
                net["name"],
                purpose=spec.get("purpose"),
                addressType=spec.get("addressType"),
                prefixLength=spec.get("prefixLength"),
                labels=labels,
            )
        g.compute[rel]["labels"] = labels


def _compute_delete(ops, rel):
    obj = ops.google.compute.get(rel)
    if obj is None:
        return
    status, reply = ops.call("DELETE", f"/compute/projects/{ops.google.project}/{rel}")
    if status != 200:
        raise NotYet("DeleteFailed", "Delete call failed: " + reply["error"]["message"])
    ops.finish(f"/compute/projects/{ops.google.project}/{rel.rsplit('/', 2)[0]}/operations/{{name}}", reply)


def _connection(ops, api, obj, delete):
    g, spec = ops.google, obj["spec"]
    net = ops.network(spec.get("networkRef"))
    ranges = [r.get("name") or r.get("external") for r in spec.get("reservedPeeringRanges") or []]
    with g.lock:
        if delete:
            net["_psa"] = []
            net["peerings"] = [p for p in net["peerings"] if p["name"] != "servicenetworking-googleapis-com"]
            return
        missing = [r for r in ranges if f"global/addresses/{r}" not in g.compute]
        if missing:
            raise NotYet("DependencyNotReady", f"reserved peering ranges not found: {', '.join(missing)}")
        if not net.get("_psa"):
            g.add_connection(net["name"], ranges=ranges)


def _bucket(ops, api, obj, delete):
    g, spec, name = ops.google, obj["spec"], _resource_id(obj)
    with g.lock:
        if delete:
            if g.objects.get(name):
                raise NotYet(
                    "DeleteFailed",
                    "Delete call failed: googleapi: Error 409: The bucket you tried to delete is not empty., conflict",
                )
            g.buckets.pop(name, None)
            g.objects.pop(name, None)
            return
    labels = gcp_labels(obj)
    with g.lock:
        if name not in g.buckets:
            g.add_bucket(name, labels=labels)
        g.buckets[name].update(labels=labels, location=spec.get("location"), storageClass=spec.get("storageClass"))


def _sql_instance(ops, api, obj, delete):
    g, spec, name = ops.google, obj["spec"], _resource_id(obj)
    if delete:
        with g.lock:
            inst = g.sql.get(name)
            if inst and inst["settings"].get("deletionProtectionEnabled"):
                raise NotYet(
                    "DeleteFailed",
                    "Delete call failed: The instance is protected. Please disable the deletion protection and try again.",
                )
            g.sql.pop(name, None)
        return
    labels = gcp_labels(obj)
    settings = spec.get("settings") or {}
    ip = settings.get("ipConfiguration") or {}
    network = None
    if ip.get("privateNetworkRef"):
        net = ops.network(ip["privateNetworkRef"])
        if not net.get("_psa"):
            raise NotYet(
                "UpdateFailed",
                "Update call failed: googleapi: Error 400: Invalid request: Incorrect Service Networking config for "
                f"instance: {name}:SERVICE_NETWORKING_NOT_ENABLED., invalid",
            )
        network = net["name"]
    with g.lock:
        if name not in g.sql:
            g.add_sql(name, network, labels=labels, protected=bool(settings.get("deletionProtectionEnabled")))
            g.sql[name].update(databaseVersion=spec.get("databaseVersion"), region=spec.get("region"))
        g.sql[name]["settings"]["userLabels"] = labels


def _sql_child(ops, api, obj, delete):
    """SQLDatabase, SQLUser: kept on their instance (they go with it)."""
    g, entry = ops.google, (obj["kind"], _resource_id(obj))
    if delete:
        with g.lock:
            for inst in g.sql.values():
                if entry in inst.get("_children", []):
                    inst["_children"].remove(entry)
        return
    ref = ops.ref(api, obj, obj["spec"]["instanceRef"], "SQLInstance", "sql.cnrm.cloud.google.com")
    with g.lock:
        inst = g.sql.get(_resource_id(ref))
        if inst is None:
            raise NotYet(
                "UpdateFailed", "Update call failed: googleapi: Error 404: The Cloud SQL instance does not exist."
            )
        if entry not in inst.setdefault("_children", []):
            inst["_children"].append(entry)


KCC_KINDS = {
    ("iam.cnrm.cloud.google.com", "IAMWorkloadIdentityPool"): _pool,
    ("iam.cnrm.cloud.google.com", "IAMWorkloadIdentityPoolProvider"): _provider,
    ("iam.cnrm.cloud.google.com", "IAMServiceAccount"): _service_account,
    ("iam.cnrm.cloud.google.com", "IAMPolicyMember"): _policy_member,
    ("compute.cnrm.cloud.google.com", "ComputeAddress"): _address,
    ("servicenetworking.cnrm.cloud.google.com", "ServiceNetworkingConnection"): _connection,
    ("storage.cnrm.cloud.google.com", "StorageBucket"): _bucket,
    ("sql.cnrm.cloud.google.com", "SQLInstance"): _sql_instance,
    ("sql.cnrm.cloud.google.com", "SQLDatabase"): _sql_child,
    ("sql.cnrm.cloud.google.com", "SQLUser"): _sql_child,
}
