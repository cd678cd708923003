# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Air-gapped bundle of the local-host profile: the image inventory, derived from the tree.

Importable without Ansible; scripts/airgap-inventory (airgap_package.main) runs it.

The inventory (airgap/images.txt) is derived, never typed: the rendered tree (mgmt/local-host,
workload/local-host), bootstrap.toml and the tables of airgap_tables.py name every image the profile pulls;
airgap/digests.yaml holds the digests krops could confirm upstream, each with its source. An image
whose digest is not there is written without one and reported as unconfirmed: krops never writes
a digest it has not read. airgap/zarf.yaml is generated from the same inventory (airgap_package.py).

``derive`` walks the tree's objects: every object's containers, then the rule its kind has in KIND_RULES
(one small function a kind). The concerns beside it have files of their own, and this module offers their
names too (``__all__``):

- airgap_tables.py: the tables (each row cites where its fact was read; see docs/airgap.md), the
  Inventory and Image types and AirgapError;
- airgap_sources.py: the Flux sources and HelmChartProxies the disconnected host cannot reach;
- airgap_artifacts.py: the locks (airgap/digests.yaml, airgap/provider-components.yaml) and the OCI
  artifacts of the operator providers (``spec.fetchConfig.oci``).
"""

from __future__ import annotations

import os
import re

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils.airgap_artifacts import (
    fetch_providers,
    format_provider_lock,
    load_lock,
    load_provider_lock,
    oci_layout,
    packed_chart_repository,
    provider_archive,
    provider_artifact,
    provider_entry,
    push_layouts,
    unconfirmed_provider_files,
    with_fetch_config,
)
from ansible_collections.krops.platform.plugins.module_utils.airgap_sources import offline_source, proxy_problem
from ansible_collections.krops.platform.plugins.module_utils.airgap_tables import (
    _DIGEST,
    _SEMVER,
    ARCHITECTURES,
    BOOTSTRAP_CHARTS,
    CHART_ARTIFACTS,
    CHART_BUILD,
    CHART_IMAGE_VALUES,
    CHARTS,
    COMPONENT_ORDER,
    DIGEST_IN_TAG,
    ENVIRONMENT,
    HOST_IMAGES,
    INVENTORY,
    LOCK_FILE,
    MANIFESTS,
    NODE_VERSIONS,
    OFFLINE_HELM_REPOSITORIES,
    PACKAGE_NAME,
    PACKED_CHARTS,
    PROVIDER_BUILD,
    PROVIDER_LOCK,
    PROVIDER_RELEASES,
    PROVIDERS,
    REGISTRY_DEFAULTS,
    VALUES_DIR,
    WORKLOAD_CHARTS,
    WORKLOAD_KINDS,
    ZARF_FILE,
    ZARF_VERSION,
    AirgapError,
    Image,
    Inventory,
    _ident,
    key,
    normalize,
)
from ansible_collections.krops.platform.plugins.module_utils.render import yaml  # None without PyYAML

# airgap is the package's API: what the split files (airgap_tables, airgap_sources, airgap_artifacts) define
# is offered here too, as it was before the split.
__all__ = [
    "ARCHITECTURES",
    "AirgapError",
    "BOOTSTRAP_CHARTS",
    "CHARTS",
    "CHART_ARTIFACTS",
    "CHART_BUILD",
    "CHART_IMAGE_VALUES",
    "COMPONENT_ORDER",
    "DIGEST_IN_TAG",
    "ENVIRONMENT",
    "HEADER",
    "HOST_IMAGES",
    "INVENTORY",
    "Image",
    "Inventory",
    "KIND_RULES",
    "LOCK_FILE",
    "MANIFESTS",
    "NODE_VERSIONS",
    "OFFLINE_HELM_REPOSITORIES",
    "PACKAGE_NAME",
    "PACKED_CHARTS",
    "PROVIDERS",
    "PROVIDER_BUILD",
    "PROVIDER_LOCK",
    "PROVIDER_RELEASES",
    "REGISTRY_DEFAULTS",
    "VALUES_DIR",
    "WORKLOAD_CHARTS",
    "WORKLOAD_KINDS",
    "ZARF_FILE",
    "ZARF_VERSION",
    "derive",
    "fetch_providers",
    "format_inventory",
    "format_provider_lock",
    "key",
    "load_lock",
    "load_provider_lock",
    "merge_values",
    "normalize",
    "oci_layout",
    "packed_chart_repository",
    "provider_archive",
    "provider_artifact",
    "provider_entry",
    "push_layouts",
    "read_inventory",
    "unconfirmed_provider_files",
    "values_file",
    "with_fetch_config",
]


# --- deriving ----------------------------------------------------------------------------------


def _objects(root, renderer=None):
    """(relative directory, object) of every kustomization under the local-host tops."""
    tops = [os.path.join(root, "mgmt", ENVIRONMENT), os.path.join(root, "workload", ENVIRONMENT)]
    directories = [d for top in tops if os.path.isdir(top) for d in render.find_kustomization_dirs(top)]
    built = render.render_directories(directories, renderer)
    for directory in directories:
        result = built[directory]
        if isinstance(result, render.RenderError):
            raise AirgapError(
                f"kustomize build {os.path.relpath(directory, root)} failed: {result.reason} (run validate for details)"
            )
        for obj in result:
            yield os.path.relpath(directory, root), obj
    extra = os.path.join(root, MANIFESTS)
    if os.path.isdir(extra):
        for name in sorted(os.listdir(extra)):
            if name.endswith((".yaml", ".yml")):
                for obj in render.load_yaml_documents(os.path.join(extra, name)):
                    yield MANIFESTS, obj


def _containers(node):
    """Every container image under a (possibly nested) object."""
    if isinstance(node, dict):
        for field in ("containers", "initContainers", "ephemeralContainers"):
            for container in node.get(field) or []:
                if isinstance(container, dict) and isinstance(container.get("image"), str):
                    yield container["image"]
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def _chart(inv, chart, version, origin, where, obj):
    if chart not in CHARTS:
        return
    component, templates = CHARTS[chart]
    if not version or not _SEMVER.match(str(version)):
        known = _newest_release(inv.lock, chart, version)
        if known:  # the images of the newest known release in the range
            for template in templates:
                bare = known.lstrip("v")
                inv.add(template.format(v="v" + bare, bare=bare), component, f"{origin} ({version} -> {known})")
        if known and chart in WORKLOAD_CHARTS:  # the offline configuration pins the range to that release
            inv.charts.setdefault(chart, known)
            return
        inv.problems.append(
            (
                where,
                _ident(obj),
                f"chart {chart} version {version!r} is not an exact version: its images cannot be "
                "pinned; pin the chart to one release",
            )
        )
        return
    bare = str(version).lstrip("v")
    inv.charts.setdefault(chart, str(version))
    for template in templates:
        inv.add(template.format(v="v" + bare, bare=bare), component, origin)


def _newest_release(lock, chart, version):
    """The newest release of ``chart`` in digests.yaml chart-releases matching the range ``version`` (6.x)."""
    versions = ((lock.get("chart-releases") or {}).get(chart) or {}).get("versions") or []
    wanted = str(version or "").lstrip("v")
    if not re.match(r"^[0-9x.]+$", wanted):
        return None
    pattern = re.compile("^" + re.escape(wanted).replace("x", r"\d+") + r"(\.\d+)*$")
    found = sorted(
        (str(v) for v in versions if _SEMVER.match(str(v)) and pattern.match(str(v).lstrip("v"))),
        key=lambda v: tuple(int(p) for p in v.lstrip("v").split(".")),
    )
    return found[-1] if found else None


def _flux(inv, lock, version, components, registry, origin, where, obj):
    dists = lock.get("flux-distributions") or {}
    wanted = str(version or "2.x").lstrip("v")
    pattern = re.compile("^" + re.escape(wanted).replace(r"\.x", r"\.\d+").replace("x", r"\d+") + "$")
    matches = sorted(
        (v for v in dists if pattern.match(v.lstrip("v"))),
        key=lambda v: tuple(int(p) for p in v.lstrip("v").split(".")),
    )
    if not matches:
        inv.problems.append(
            (
                where,
                _ident(obj),
                "Flux version {} matches no distribution in {} (known: {}): add the "
                "Flux Operator's images for it".format(version, LOCK_FILE, ", ".join(sorted(dists)) or "none"),
            )
        )
        return
    dist = dists[matches[-1]]
    for name in components:
        entry = (dist.get("images") or {}).get(name)
        if entry is None:
            inv.problems.append(
                (
                    where,
                    _ident(obj),
                    f"Flux component {name} is not in distribution {matches[-1]} of {LOCK_FILE}",
                )
            )
            continue
        image = inv.add("{}/{}:{}".format(registry.rstrip("/"), name, entry["tag"]), "flux", origin)
        image.digest, image.source = entry["digest"], dist.get("source")


class _DeriveWalk:
    """What every rule of the walk reads beside its object: the Inventory it fills, bootstrap.toml's [bootstrap],
    airgap/digests.yaml and the tree's OCIRepositories by (namespace, name)."""

    __slots__ = ("boot", "inv", "lock", "sources")

    def __init__(self, inv, boot, objects):
        self.inv, self.boot, self.lock = inv, boot, inv.lock
        self.sources = {
            ((obj.get("metadata") or {}).get("namespace"), (obj.get("metadata") or {}).get("name")): obj
            for _directory, obj in objects
            if obj.get("kind") == "OCIRepository"
        }


class _TreeObject:
    """One object of the tree, where it was rendered, and the parts of it the rules read."""

    __slots__ = ("directory", "kind", "meta", "obj", "origin", "spec")

    def __init__(self, directory, obj):
        self.directory, self.obj, self.kind = directory, obj, obj.get("kind")
        self.spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        self.meta = obj.get("metadata") or {}
        self.origin = f"{directory} {_ident(obj)}"


def _configmap(walk, item):
    """The manifests a ClusterResourceSet applies into the workload clusters (a value that is not YAML holds none)."""
    for value in (item.obj.get("data") or {}).values():
        try:
            docs = [d for d in yaml.safe_load_all(str(value)) if isinstance(d, dict)]
        except yaml.YAMLError:
            continue
        for image in _containers(docs):
            walk.inv.add(image, "workload", item.origin)


def _helm_release(walk, item):
    """The chart of spec.chart.spec, or of the OCIRepository spec.chartRef names (its URL's last part, tag or semver)."""
    chart_spec = (item.spec.get("chart") or {}).get("spec") or {}
    chart, version = chart_spec.get("chart"), chart_spec.get("version")
    ref = item.spec.get("chartRef") or {}
    if ref.get("kind") == "OCIRepository":
        source = walk.sources.get((ref.get("namespace") or item.meta.get("namespace"), ref.get("name"))) or {}
        chart = str((source.get("spec") or {}).get("url", "")).rstrip("/").rsplit("/", 1)[-1]
        sref = (source.get("spec") or {}).get("ref") or {}
        version = sref.get("tag") or sref.get("semver")
    _chart(walk.inv, chart, version, item.origin, item.directory, item.obj)


def _flux_source(walk, item):
    offline_source(walk.inv, walk.boot, item.directory, item.obj, item.spec)


def _chart_proxy(walk, item):
    _chart(walk.inv, item.spec.get("chartName"), item.spec.get("version"), item.origin, item.directory, item.obj)
    proxy_problem(walk.inv, walk.boot, item.directory, item.obj, item.spec)


def _provider(walk, item):
    """An operator provider of PROVIDERS: its controller images and, for PROVIDER_RELEASES, its release files."""
    name, version = item.meta.get("name"), item.spec.get("version")
    if (item.kind, name) not in PROVIDERS:
        return
    component, repos = PROVIDERS[(item.kind, name)]
    for repo in repos:
        walk.inv.add(f"{repo}:{version}", component, item.origin)
    if (item.kind, name) in PROVIDER_RELEASES:
        entry = provider_entry(walk.boot, item.kind, name, version)
        entry["component"] = component
        walk.inv.providers.append(entry)


def _flux_instance(walk, item):
    dist = item.spec.get("distribution") or {}
    components = item.spec.get("components") or []
    registry = dist.get("registry") or "ghcr.io/fluxcd"
    _flux(walk.inv, walk.lock, dist.get("version"), components, registry, item.origin, item.directory, item.obj)


def _node_version(walk, item):
    """CAPD's node image kindest/node:<version> of a machine kind (NODE_VERSIONS: where under spec it is)."""
    node = item.spec
    *parents, field = NODE_VERSIONS[item.kind]
    for part in parents:
        node = node.get(part) or {}
    if node.get(field):
        walk.inv.add(f"docker.io/kindest/node:{node[field]}", "host", item.origin)


def _custom_image(walk, item):
    """A machine template's customImage (DockerMachineTemplate spec, DevMachineTemplate backend.docker)."""
    tspec = (item.spec.get("template") or {}).get("spec") or {}
    custom = tspec.get("customImage") or ((tspec.get("backend") or {}).get("docker") or {}).get("customImage")
    if custom:
        walk.inv.add(custom, "host", item.origin)


# kind -> the rule that reads its images and problems (every object's containers are read first, by derive).
KIND_RULES = {
    "ConfigMap": _configmap,
    "HelmRelease": _helm_release,
    "HelmRepository": _flux_source,
    "OCIRepository": _flux_source,
    "GitRepository": _flux_source,
    "HelmChartProxy": _chart_proxy,
    "FluxInstance": _flux_instance,
    "KubeadmControlPlane": _node_version,
    "MachineDeployment": _node_version,
    "DockerMachineTemplate": _custom_image,
    "DevMachineTemplate": _custom_image,
    **{kind: _provider for kind, _name in PROVIDERS},
}


def _bootstrap_images(inv, cfg, root):
    """What bootstrap.toml and the host add: the charts installed before Flux, the kind node, the host's images."""
    for pin_key, chart in BOOTSTRAP_CHARTS.items():
        where = {"kind": "charts", "metadata": {"name": pin_key}}
        _chart(inv, chart, cfg.charts.pin(pin_key), f"bootstrap.toml [charts] {pin_key}", "bootstrap.toml", where)
    if cfg.bootstrap.kind_node_image:
        inv.add(cfg.bootstrap.kind_node_image, "host", "bootstrap.toml [bootstrap] kind-node-image")
    for image in HOST_IMAGES:
        inv.add(image, "host", "CAPD load balancer")
    inv.add(_registry_image(root), "host", f"{REGISTRY_DEFAULTS} bootstrap_registry_image")


def _pin_from_lock(inv):
    """The digest and source digests.yaml records for every image that has none yet."""
    for image in inv.images.values():
        if image.digest is None and image.key in (inv.lock.get("images") or {}):
            entry = inv.lock["images"][image.key]
            image.digest, image.source = entry["digest"], entry.get("source")


def derive(root, renderer=None, config_file=None):
    """The Inventory of the local-host profile at ``root``: every object's containers, then its kind's rule
    (KIND_RULES), then bootstrap.toml and the host, then the digests of airgap/digests.yaml."""
    if yaml is None:
        raise AirgapError("the PyYAML Python library is required")
    root = os.path.abspath(root)
    try:
        cfg = krops_config.load(path=config_file or os.path.join(root, krops_config.DEFAULT_FILE), environ={})
    except krops_config.ConfigError as exc:
        raise AirgapError(str(exc))
    inv = Inventory()
    inv.lock = load_lock(root)
    objects = list(_objects(root, renderer))
    walk = _DeriveWalk(inv, cfg.bootstrap, objects)
    workload_dirs = _workload_directories(root, objects)
    for directory, obj in objects:
        item = _TreeObject(directory, obj)
        inv.in_workload = directory in workload_dirs or item.kind in WORKLOAD_KINDS
        for image in _containers(obj):
            inv.add(image, "workload" if inv.in_workload else "krops-config", item.origin)
        rule = KIND_RULES.get(item.kind)
        if rule is not None:
            rule(walk, item)
    inv.in_workload = False
    _bootstrap_images(inv, cfg, root)
    _pin_from_lock(inv)
    return inv


def _workload_directories(root, objects):
    """Directories applied into the workload clusters: workload/<env> and every Flux Kustomization path
    with a kubeConfig (also the ones a ResourceSet renders)."""
    found = {f"workload/{ENVIRONMENT}"}
    for _directory, obj in objects:
        candidates = [obj] if obj.get("kind") == "Kustomization" else []
        if obj.get("kind") == "ResourceSet":
            candidates = [r for r in (obj.get("spec") or {}).get("resources") or [] if isinstance(r, dict)]
        for ks in candidates:
            spec = ks.get("spec") or {}
            if ks.get("kind") == "Kustomization" and spec.get("kubeConfig") and spec.get("path"):
                found.add(os.path.normpath(str(spec["path"]).lstrip("/")))
    return found


def _registry_image(root):
    path = os.path.join(root, REGISTRY_DEFAULTS)
    try:
        with open(path, encoding="utf-8") as handle:
            return (yaml.safe_load(handle) or {}).get("bootstrap_registry_image") or "registry:3"
    except (OSError, yaml.YAMLError):
        return "registry:3"


# --- images.txt --------------------------------------------------------------------------------

HEADER = """\
# Images of the krops local-host profile, for the air-gapped bundle (airgap/zarf.yaml).
# Generated by scripts/airgap-inventory --write from mgmt/local-host, workload/local-host, bootstrap.toml
# and airgap/digests.yaml: do not edit. One image a line: repo:tag@sha256:digest  # component: origin
# A line without a digest is UNCONFIRMED: nobody has read its digest upstream yet (airgap-inventory --resolve).
"""


def format_inventory(inv):
    lines = [HEADER.rstrip("\n")]
    for component in COMPONENT_ORDER:
        for k in sorted(k for k, i in inv.images.items() if i.component == component):
            image = inv.images[k]
            note = "UNCONFIRMED " if not image.digest else ""
            lines.append("{}  # {}{}: {}".format(image.ref, note, component, "; ".join(image.origins)))
    return "\n".join(lines) + "\n"


def read_inventory(path):
    """{repo:tag: (digest or None, line number)}; raises AirgapError on a malformed line."""
    entries = {}
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise AirgapError(f"cannot read {path}: {exc.strerror} (generate it with scripts/airgap-inventory --write)")
    for number, line in enumerate(text.splitlines(), 1):
        ref = line.split("#", 1)[0].strip()
        if not ref:
            continue
        if " " in ref:
            raise AirgapError("%s:%d: %r is not one image reference (repo:tag@sha256:digest)" % (path, number, ref))
        repo, tag, digest = normalize(ref)
        if digest is not None and not _DIGEST.match(digest):
            raise AirgapError("%s:%d: digest %s of %s:%s is not sha256:<64 hex>" % (path, number, digest, repo, tag))
        entries[f"{repo}:{tag}"] = (digest, number)
    return entries


# --- chart values the package and the offline tree share ------------------------------------


def values_file(chart):
    return f"{VALUES_DIR}/{chart}-images.yaml"


def merge_values(base, extra):
    """``base`` with ``extra`` merged in (nested mappings merged, everything else replaced)."""
    out = dict(base or {})
    for name, value in extra.items():
        out[name] = (
            merge_values(out.get(name), value) if isinstance(value, dict) and isinstance(out.get(name), dict) else value
        )
    return out
