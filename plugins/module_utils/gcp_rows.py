# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The rows of a GCP teardown: one ``steps.Row`` per resource type, in the order the APIs allow.

Each row names its stage (``group``: what ``stopped_at`` reports) and runs after the rows of the stage
before it; the engine (steps.py) deletes a stage's items, follows their operations, and stops when a stage
left anything (later stages depend on it: a VPC cannot go while anything uses it). Cloud SQL holds the
private services access connection, which holds its reserved range, and the connection's peering holds the
VPC: so those stages go before the workload Clusters (CAPG deletes their VPCs), phase "before-clusters"; the
rest is the final phase, and phase "all" runs every stage. IAM goes last: CAPG and Config Connector
authenticate through provider mgmt until their cluster is gone, and a grant goes before its service account
(a deleted account's grants turn into deleted:... members).

Ownership (the discovery of each row, read-only): Cloud SQL instances and buckets must carry this
environment's label (ownership.py): sitting in an owned VPC proves nothing. A GKE cluster is owned by that
label, or by an exact cluster name of bootstrap.toml (``clusters``) when it also sits in an owned VPC (CAPG
labels no GKE cluster). A VPC named exactly in bootstrap.toml is owned with its unlabellable parts
(peerings, connections, ranges, firewall rules, routers, subnets); anything labelled for another
environment is never ours, and an owned VPC holding anything krops does not own is left whole
(gcp.gcp_taint). A deletion protection is switched off only for an instance bootstrap.toml names in
teardown.disable-deletion-protection. Service accounts, their project grants and workload identity
providers carry no labels: only the exact account ids and <pool>/<provider> names of bootstrap.toml
(teardown.service-accounts, teardown.workload-identity-providers) are owned (gcp_iam.py).

Each item carries its resource's creation time for the orphan report (``_created``, cloud_report.orphans): Compute
Engine's ``creationTimestamp`` (VPCs and their parts), GKE's and Cloud SQL's ``createTime``, Cloud Storage's
``timeCreated``. Peerings, private services access connections, IAM grants, service accounts and workload
identity providers state none (docs/upstream-facts.md).
"""

from __future__ import annotations

import urllib.parse

from ansible_collections.krops.platform.plugins.module_utils import gcp, ownership, steps
from ansible_collections.krops.platform.plugins.module_utils.cloud_teardown import OWNER_TAG, run_options
from ansible_collections.krops.platform.plugins.module_utils.errors import CloudError
from ansible_collections.krops.platform.plugins.module_utils.gcp import _last
from ansible_collections.krops.platform.plugins.module_utils.gcp_iam import gcp_accounts, gcp_providers

BEFORE_CLUSTERS = ("databases", "private-services-access", "private-services-ranges")  # the rest: phase final
# the rows listed whatever the phase: a VPC holding anything krops does not own is left whole, and that can
# only be known from all of its contents
VPC_ROWS = (
    "cloudsql-instance",
    "private-services-connection",
    "private-services-range",
    "gke-cluster",
    "vpc-peering",
    "firewall-rule",
    "router",
    "subnetwork",
    "network",
)


class GcpScan:
    """One discovery: the owned VPCs (looked up first), what was left alone (``not_owned``), the calls' roots."""

    def __init__(self, ops, environment, networks, clusters, unprotect, service_accounts, providers):
        self.http, self.roots, self.p = ops.http, ops.roots, ops.p
        self.project = ops.project
        self.compute = "{}/projects/{}".format(self.roots["compute"], self.p)
        self.environment, self.clusters, self.unprotect = environment, clusters, unprotect
        self.service_accounts, self.providers = service_accounts, providers
        self.not_owned, self.held, self._once = [], [], {}
        self.owned_networks = [n for n in (self._network(name) for name in networks) if n]
        self.owned_names = {n["name"] for n in self.owned_networks}

    def _network(self, name):
        if name == "default":
            self.not_owned.append({"type": "network", "name": name, "reason": "the default VPC is never deleted"})
            return None
        status, net = self.http.get(f"{self.compute}/global/networks/{urllib.parse.quote(name)}")
        if status == 404:
            return None
        if gcp.gcp_network_owned(net, self.environment, self.clusters):
            return net
        self.not_owned.append(
            {
                "type": "network",
                "name": name,
                "reason": f"named in bootstrap.toml but carries neither the label {OWNER_TAG}={self.environment} nor "
                f"CAPG's description {gcp.CAPG_NETWORK_DESCRIPTION}<cluster> for a cluster of the environment: a name "
                "alone proves nothing",
            }
        )
        return None

    def once(self, key, func):
        if key not in self._once:
            self._once[key] = func()
        return self._once[key]

    def in_owned(self, network_url):
        return bool(network_url) and _last(network_url) in self.owned_names

    def verdict(self, labels):
        return ownership.cloud_label_verdict(labels, self.environment)

    def refuse(self, rtype, name, labels, network):
        if self.verdict(labels) == "other":
            reason = f"labelled {OWNER_TAG}={(labels or {}).get(OWNER_TAG)} (another environment)"
        elif self.in_owned(network):
            reason = (
                f"in owned VPC {_last(network)} but without the label {OWNER_TAG}={self.environment}: not proven krops'"
            )
        else:
            return
        entry = {"type": rtype, "name": name, "reason": reason}
        if self.in_owned(network):
            entry["network"] = _last(network)  # gcp_taint: the owned VPC holding it stays whole
        self.not_owned.append(entry)

    def labelled(self):
        return f"label {OWNER_TAG}={self.environment}"

    def vpc_parts(self, collection, rtype, what, regional=False, keep=None):
        return gcp.vpc_parts(self, collection, rtype, what, regional, keep)


def item(rtype, name, url, reason, **private):
    return dict({"type": rtype, "name": name, "url": url, "reason": reason}, **private)


def _databases(s):
    found = []
    for inst in s.http.pages("{}/projects/{}/instances".format(s.roots["sqladmin"], s.p), "items", "nextPageToken"):
        settings = inst.get("settings") or {}
        private = (settings.get("ipConfiguration") or {}).get("privateNetwork")
        if s.verdict(settings.get("userLabels")) != "owned":
            s.refuse("cloudsql-instance", inst["name"], settings.get("userLabels"), private)
            continue
        url = "{}/projects/{}/instances/{}".format(s.roots["sqladmin"], s.p, urllib.parse.quote(inst["name"]))
        found.append(
            item(
                "cloudsql-instance",
                inst["name"],
                url,
                s.labelled(),
                deletion_protection=bool(settings.get("deletionProtectionEnabled")),
                unprotect=inst["name"] in s.unprotect,
                network=_last(private) or None,
                _created=inst.get("createTime"),
            )
        )
    return found


def _connections(s):
    if not s.owned_networks:
        return []
    number = gcp.project_number(s.http, s.roots, s.project)
    connections = "{}/services/servicenetworking.googleapis.com/connections".format(s.roots["servicenetworking"])
    found = []
    for net in s.owned_networks:
        consumer = f"projects/{number}/global/networks/{net['name']}"
        listed = s.http.get("{}?{}".format(connections, urllib.parse.urlencode({"network": consumer})))[1]
        for conn in listed.get("connections") or []:
            peering = conn.get("peering") or gcp.PSA_PEERING
            found.append(
                item(
                    "private-services-connection",
                    peering,
                    f"{connections}/{peering}:deleteConnection",
                    "private services access of owned VPC {}".format(net["name"]),
                    _body={"consumerNetwork": consumer},
                    network=net["name"],
                )
            )
    return found


def _gke_clusters(s):
    found = []
    for c in s.http.pages(
        "{}/projects/{}/locations/-/clusters".format(s.roots["container"], s.p), "clusters", "nextPageToken"
    ):
        labels = c.get("resourceLabels")
        if s.verdict(labels) == "owned":
            why = s.labelled()
        elif s.verdict(labels) == "unlabelled" and c["name"] in s.clusters and s.in_owned(c.get("network")):
            why = "named in bootstrap.toml, in owned VPC {}".format(_last(c.get("network")))
        else:
            s.refuse("gke-cluster", c["name"], labels, c.get("network"))
            continue
        url = "{}/projects/{}/locations/{}/clusters/{}".format(s.roots["container"], s.p, c["location"], c["name"])
        network = _last(c.get("network")) or None
        found.append(
            item(
                "gke-cluster",
                c["name"],
                url,
                why,
                _location=c["location"],
                network=network,
                _created=c.get("createTime"),
            )
        )
    return found


def _buckets(s):
    return [
        item(
            "bucket",
            b["name"],
            "{}/b/{}".format(s.roots["storage"], urllib.parse.quote(b["name"])),
            s.labelled(),
            _created=b.get("timeCreated"),
        )
        for b in s.http.pages("{}/b?project={}".format(s.roots["storage"], s.p), "items", "nextPageToken")
        if s.verdict(b.get("labels")) == "owned"
    ]


def _peerings(s):
    # the private services access peering goes with its connection (row private-services-connection)
    return [
        item(
            "vpc-peering",
            peer["name"],
            "{}/global/networks/{}/removePeering".format(s.compute, urllib.parse.quote(net["name"])),
            "peering of owned VPC {}".format(net["name"]),
            _body={"name": peer["name"]},
            network=net["name"],
        )
        for net in s.owned_networks
        for peer in net.get("peerings") or []
        if peer.get("name") != gcp.PSA_PEERING
    ]


def _networks(s):
    return [
        item(
            "network",
            n["name"],
            "{}/global/networks/{}".format(s.compute, urllib.parse.quote(n["name"])),
            "named in bootstrap.toml (teardown.networks)",
            _created=n.get("creationTimestamp"),
        )
        for n in s.owned_networks
    ]


def _accounts(s):
    return s.once("accounts", lambda: gcp_accounts(s.http, s.roots, s.project, s.service_accounts))


def _row(name, stage, discover, after=(), verb="delete"):
    """A GCP row: every deletion follows its operation (gcp.poll), started by gcp.delete."""
    return steps.Row(
        name, discover, gcp.delete, plan=verb + " {type} {name} ({reason})", poll=gcp.poll, after=after, group=stage
    )


ROWS = (
    _row("cloudsql-instance", "databases", _databases),
    _row("private-services-connection", "private-services-access", _connections, ["cloudsql-instance"], "remove"),
    _row(
        "private-services-range",
        "private-services-ranges",
        lambda s: s.vpc_parts(
            "addresses", "private-services-range", "VPC_PEERING range", keep=lambda a: a.get("purpose") == "VPC_PEERING"
        ),
        ["private-services-connection"],
    ),
    _row("gke-cluster", "gke-clusters", _gke_clusters, ["private-services-range"]),
    _row("bucket", "buckets", _buckets, ["gke-cluster"]),
    _row("vpc-peering", "firewalls-routers-peerings", _peerings, ["bucket"], "remove"),
    _row(
        "firewall-rule",
        "firewalls-routers-peerings",
        lambda s: s.vpc_parts("firewalls", "firewall-rule", "rule"),
        ["bucket"],
    ),
    _row(
        "router",
        "firewalls-routers-peerings",
        lambda s: s.vpc_parts("routers", "router", "router", regional=True),
        ["bucket"],
    ),
    _row(
        "subnetwork",
        "subnetworks",
        lambda s: s.vpc_parts("subnetworks", "subnetwork", "subnet", regional=True),
        ["vpc-peering", "firewall-rule", "router"],
    ),
    _row("network", "networks", _networks, ["subnetwork"]),
    _row("iam-grant", "iam-grants", lambda s: _accounts(s)[0], ["network"], "remove"),
    _row("service-account", "service-accounts", lambda s: _accounts(s)[1], ["iam-grant"]),
    _row(
        "workload-identity-provider",
        "workload-identity-providers",
        lambda s: gcp_providers(s.http, s.roots, s.project, s.providers),
        ["service-account"],
    ),
)
GCP_STAGES = tuple(dict.fromkeys(r.group for r in ROWS))  # the stages, in order


def gcp_teardown(*args, **options):
    """Delete stage by stage, waiting for each stage's operations; a stage that leaves anything stops the run.

    After the last stage, discovery runs again: whatever it still finds is a leftover (rc=0 means
    nothing owned is left). The arguments are gcp_run's.
    """
    return gcp_run(*args, **options).execute()


def gcp_run(
    http,
    roots,
    project,
    environment,
    networks,
    unprotect=(),
    clusters=(),
    phase="all",
    service_accounts=(),
    providers=(),
    **options,
):
    """The steps.Run of a GCP teardown (gcp_teardown runs it; in check mode it is the orphan report's); ``options``
    are cloud_teardown.run_options'."""
    if phase not in gcp.GCP_PHASES:
        raise CloudError("phase must be one of {}, got {!r}".format(", ".join(gcp.GCP_PHASES), phase))
    stages = [s for s in GCP_STAGES if phase == "all" or s in BEFORE_CLUSTERS]
    ops = gcp.GcpOperations(http, roots, project)
    whole = "networks" in stages  # an owned VPC left whole is left behind: a run of the networks stage fails

    def settle(scan, plan):
        scan.held = gcp.gcp_taint(plan, scan.not_owned, scan.owned_names)
        return [("network", f"network/{name}") for name in scan.held] if whole else []

    return steps.Run(
        ROWS,
        ops,
        lambda: GcpScan(ops, environment, networks, clusters, unprotect, service_accounts, providers),
        listed=[r.name for r in ROWS if r.group in stages or r.name in VPC_ROWS],
        only=[r.name for r in ROWS if r.group in stages],
        settle=settle,
        facts=lambda scan: {"phase": phase, "not_owned": scan.not_owned, "held_networks": scan.held if whole else []},
        public=gcp.public,
        **run_options(**options),
    )
