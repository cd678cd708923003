# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The Zarf package of the air-gapped profile and the pin check: zarf.yaml from the derived inventory, the charts
packed into the bundle, the image lock's resolution on a connected host (--resolve), and the check that the
committed images.txt, zarf.yaml, values files and locks are what the trees derive (also validate's rule
"airgap"). airgap.py derives the inventory; this file turns it into the package and checks it.
"""

from __future__ import annotations

import argparse
import sys
import json
import os
import shutil
import subprocess

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils.airgap_charts import fetch_charts
from ansible_collections.krops.platform.plugins.module_utils.airgap import (
    derive,
    format_inventory,
    read_inventory,
    values_file,
)
from ansible_collections.krops.platform.plugins.module_utils.airgap_artifacts import (
    fetch_providers,
    format_provider_lock,
    load_provider_lock,
    packed_chart_repository,
    push_layouts,
    unconfirmed_provider_files,
)
from ansible_collections.krops.platform.plugins.module_utils.airgap_tables import (
    ARCHITECTURES,
    AirgapError,
    CHART_ARTIFACTS,
    CHART_BUILD,
    CHART_IMAGE_VALUES,
    DIGEST_IN_TAG,
    INVENTORY,
    LOCK_FILE,
    PACKAGE_NAME,
    PACKED_CHARTS,
    PLATFORMS,
    PROVIDER_BUILD,
    PROVIDER_LOCK,
    RESOLVED_SOURCE,
    WORKLOAD_CHARTS,
    ZARF_FILE,
    ZARF_VERSION,
    _DIGEST,
    normalize,
)
from ansible_collections.krops.platform.plugins.module_utils.render import yaml  # None without PyYAML


# --- zarf.yaml ---------------------------------------------------------------------------------

CONFIG_ARCHIVE = "build/krops-config.tar"
HOST_ARCHIVE = "build/host-images.tar"


def config_repository(boot):
    """<registry name>:<container port>/<repository>: where the kind network reaches the local registry."""
    return f"{boot.registry_name}:{boot.registry_container_port}/{boot.oci_repository}"


def _kind_components():
    """One kind component per architecture (the kind binary of the host)."""
    # kind's release assets are kind-linux-<arch>; `only` sits on components (not on files), so one
    # component per architecture, and Zarf keeps the one matching the package architecture.
    return [
        {
            "name": f"kind-{arch}",
            "only": {"cluster": {"architecture": arch}},
            "files": [
                {
                    "source": "https://github.com/kubernetes-sigs/kind/releases/download/"
                    f"###ZARF_PKG_TMPL_KIND_VERSION###/kind-linux-{arch}",
                    "target": "kind",
                    "executable": True,
                }
            ],
        }
        for arch in ARCHITECTURES
    ]


def _health(api, kind, namespace, name):
    return {"apiVersion": api, "kind": kind, "namespace": namespace, "name": name}


def _host_component(inv, images):
    """The files-only component: the host archive and the OCI layouts the deploy pushes to the local registry."""
    return {
        "name": "host",
        "description": "kind and the images the host's Docker daemon runs (kind nodes, CAPD load balancer, "
        "registry); and the OCI layouts the deploy pushes to the local registry (the operator providers' components, "
        "the workload clusters' charts, the configuration); files only, so it deploys before any cluster exists",
        "files": [
            {"source": HOST_ARCHIVE, "target": "host-images.tar"},
            {"source": CONFIG_ARCHIVE, "target": "krops-config.tar"},
        ]
        + [
            {"source": f"{CHART_BUILD}/{chart}.tar", "target": f"charts/{chart}.tar"}
            for chart in sorted(WORKLOAD_CHARTS)
            if chart in inv.charts
        ]
        + [
            {
                "source": "{}/{}-{}.tar".format(PROVIDER_BUILD, e["type"], e["name"]),
                "target": "providers/{}-{}.tar".format(e["type"], e["name"]),
            }
            for e in sorted(inv.providers, key=lambda e: (e["type"], e["name"]))
        ],
        "x-host-images": images("host"),
    }


def _chart_components(inv, boot, images):
    """The components that install the charts Flux adopts, the configuration artifact and the FluxInstance."""
    health = _health
    return [
        {
            "name": "cert-manager",
            "charts": [
                {
                    "name": "cert-manager",
                    "namespace": "cert-manager",
                    "url": "oci://quay.io/jetstack/charts/cert-manager",
                    "version": inv.charts.get("cert-manager", "unpinned"),
                    "valuesFiles": ["values/cert-manager.yaml", values_file("cert-manager")[len("airgap/") :]],
                }
            ],
            "images": images("cert-manager"),
            "healthChecks": [
                health("apps/v1", "Deployment", "cert-manager", n)
                for n in ("cert-manager", "cert-manager-webhook", "cert-manager-cainjector")
            ],
        },
        {
            "name": "capi-operator",
            "charts": [
                {
                    "name": "cluster-api-operator",
                    "releaseName": "capi-operator",
                    "namespace": "capi-operator-system",
                    "url": "https://kubernetes-sigs.github.io/cluster-api-operator",
                    "version": inv.charts.get("cluster-api-operator", "unpinned"),
                    "valuesFiles": [values_file("cluster-api-operator")[len("airgap/") :]],
                }
            ],
            "images": images("capi-operator"),
            "imageArchives": packed_archives(inv, boot, "capi-operator"),
            "healthChecks": [
                health("apps/v1", "Deployment", "capi-operator-system", "capi-operator-cluster-api-operator")
            ],
        },
        {
            "name": "krops-config",
            "description": "the krops configuration (mgmt/ and workload/) as the OCI artifact Flux syncs, and the "
            "images its own manifests run",
            "images": images("krops-config"),
            "imageArchives": [{"path": CONFIG_ARCHIVE, "images": [f"{config_repository(boot)}:{boot.oci_tag}"]}],
        },
        {
            "name": "flux",
            "description": "the Flux Operator and the FluxInstance; the instance is a Zarf manifest so the Zarf "
            "agent rewrites its controllers' images and its OCIRepository to the internal registry",
            "charts": [
                {
                    "name": "flux-operator",
                    "namespace": "flux-system",
                    "url": "oci://ghcr.io/controlplaneio-fluxcd/charts/flux-operator",
                    "version": inv.charts.get("flux-operator", "unpinned"),
                    "valuesFiles": [values_file("flux-operator")[len("airgap/") :]],
                }
            ],
            "manifests": [
                {"name": "flux-instance", "namespace": "flux-system", "files": ["manifests/fluxinstance.yaml"]}
            ],
            "images": images("flux"),
            "healthChecks": [
                health("apps/v1", "Deployment", "flux-system", "flux-operator"),
                health("fluxcd.controlplane.io/v1", "FluxInstance", "flux-system", "flux"),
            ],
        },
    ]


def _provider_components(inv, images):
    """The providers' controller images (health checks on the provider objects Flux applies) and the workload's."""
    health, prov = _health, "operator.cluster.x-k8s.io/v1alpha2"
    return [
        {
            "name": "capi",
            "description": "Cluster API core and the kubeadm providers; Flux applies them from the krops configuration",
            "images": images("capi"),
            "healthChecks": [
                health(prov, "CoreProvider", "capi-system", "cluster-api"),
                health(prov, "BootstrapProvider", "capi-kubeadm-bootstrap-system", "kubeadm"),
                health(prov, "ControlPlaneProvider", "capi-kubeadm-control-plane-system", "kubeadm"),
            ],
        },
        {
            "name": "capd",
            "images": images("capd"),
            "healthChecks": [health(prov, "InfrastructureProvider", "capd-system", "docker")],
        },
        {
            "name": "caaph",
            "images": images("caaph"),
            "healthChecks": [health(prov, "AddonProvider", "caaph-system", "helm")],
        },
        {
            "name": "workload",
            "description": "images the workload clusters pull (CNI, Podinfo); the host archive carries them too and "
            "the deploy imports them into the CAPD nodes, which no Zarf agent reaches",
            "images": images("workload"),
            "x-workload-import": [inv.images[k].ref for k in sorted(inv.images) if inv.images[k].workload],
        },
    ]


def zarf_package(inv, boot):
    """The ZarfPackageConfig (zarf.dev/v1alpha1) of the profile; images come from the inventory.

    Order: the configuration artifact and the charts Flux depends on are in the registry before the
    FluxInstance syncs; the provider components come after it, so their health checks wait for what
    Flux applies (pods that started before their images were pushed retry the pull). No component is
    required: zarf always deploys required components, also in a partial deploy
    (src/pkg/packager/filters/deploy.go @ v0.84.0), and the host components must deploy alone,
    before any cluster exists. The playbook names the components of each of its two deploys.
    """

    def images(component):
        return [inv.images[k].ref for k in sorted(inv.images) if inv.images[k].component == component] + sorted(
            ref for c, ref in chart_artifacts(inv) if c == component
        )

    components = (
        [_host_component(inv, images)]
        + _kind_components()
        + _chart_components(inv, boot, images)
        + _provider_components(inv, images)
    )
    for component in components:
        for field in ("images", "imageArchives"):
            if field in component and not component[field]:
                del component[field]
    return {
        "kind": "ZarfPackageConfig",
        "metadata": {
            "name": PACKAGE_NAME,
            "description": "krops local-host profile for disconnected hosts",
            "version": "###ZARF_PKG_TMPL_VERSION###",
        },
        "constants": [
            {
                "name": "CONFIG_REPOSITORY",
                "value": config_repository(boot),
                "description": "repository of the krops configuration artifact (the local registry's "
                "name on the kind network), rewritten by the Zarf agent",
            },
            {"name": "CONFIG_TAG", "value": boot.oci_tag},
        ],
        "components": components,
    }


ZARF_HEADER = f"""\
# Zarf package of the krops local-host profile (zarf {ZARF_VERSION}, schema airgap/schema/zarf.schema.json).
# Generated by scripts/airgap-inventory --write from the same inventory as airgap/images.txt: do not edit.
# ###ZARF_PKG_TMPL_*### values are set by playbooks/airgap.yml --tags build (zarf package create --set).
"""


def format_zarf(inv, boot):
    return ZARF_HEADER + yaml.safe_dump(zarf_package(inv, boot), sort_keys=False, width=120)


VALUES_HEADER = """\
# Images of the {chart} chart for the air-gapped package, by digest where one is known (see
# CHART_IMAGE_VALUES in plugins/module_utils/airgap.py). Generated by scripts/airgap-inventory --write: do not
# edit. Zarf installs the chart with it (airgap/zarf.yaml valuesFiles) and the air-gapped configuration
# merges it into the chart's HelmRelease, so Flux's upgrade keeps the digests.
"""


def image_values(inv, chart):
    """The chart values naming each of ``chart``'s images: repository, tag and, when known, digest."""
    values = {}
    for k in sorted(inv.images):
        image = inv.images[k]
        where = CHART_IMAGE_VALUES[chart].get(image.repo)
        version = str(inv.charts.get(chart, "")).lstrip("v")
        if where is None or image.tag not in ("v" + version, version):
            continue
        node = values
        for part in where:
            node = node.setdefault(part, {})
        node.update({"repository": image.repo, "tag": image.tag})
        if image.digest and chart in DIGEST_IN_TAG:  # no digest value: tag@digest renders repo:tag@digest
            node["tag"] = f"{image.tag}@{image.digest}"
        elif image.digest:
            node["digest"] = image.digest
    return values


def format_values(inv, chart):
    return VALUES_HEADER.format(chart=chart) + yaml.safe_dump(image_values(inv, chart), sort_keys=True)


def packed_archives(inv, boot, component):
    """imageArchives of ``component``: one OCI layout per packed chart (PACKED_CHARTS) the tree installs."""
    return [
        {
            "path": f"{CHART_BUILD}/{chart}.tar",
            "images": [f"{packed_chart_repository(boot)}/{chart}:{inv.charts[chart]}"],
        }
        for chart, (comp, _index, _archive) in sorted(PACKED_CHARTS.items())
        if comp == component and chart in inv.charts
    ]


def chart_artifacts(inv):
    """(component, repository:version) of the chart artifacts the package carries (CHART_ARTIFACTS)."""
    return [
        (component, f"{repository}:{inv.charts[chart]}")
        for chart, (component, repository) in sorted(CHART_ARTIFACTS.items())
        if chart in inv.charts
    ]


def zarf_images(doc, charts=()):
    """(component, image) of every image a zarf.yaml lists (x-host-images included), but the chart artifacts
    ``charts`` (listed by tag on purpose, see CHART_ARTIFACTS)."""
    for component in doc.get("components") or []:
        if isinstance(component, dict):
            for field in ("images", "x-host-images", "x-workload-import"):
                for image in component.get(field) or []:
                    if isinstance(image, str) and "###" not in image and image not in charts:
                        yield component.get("name", "?"), image


# --- the pin check (also validate's rule "airgap") ----------------------------------------------


def validate_hook(root, renderer=None):
    """validate's rule airgap: [] unless airgap/zarf.yaml exists; (file, object, message) otherwise."""
    if not os.path.isfile(os.path.join(root, ZARF_FILE)):
        return []
    try:
        return check(root, renderer=renderer, pin=False)[0]
    except AirgapError as exc:
        return [(INVENTORY, "-", str(exc))]


def check(root, inv=None, renderer=None, pin=True):
    """(findings, unconfirmed). findings: (file, object, message); unconfirmed: images.txt lines without digest.

    pin=False (validate's rule) leaves out what only the pin check judges: images the tree names by a
    version range, which cannot be pinned at all.
    """
    root = os.path.abspath(root)
    inv = inv or derive(root, renderer)
    findings = list(inv.problems) if pin else []
    listed = read_inventory(os.path.join(root, INVENTORY))
    recorded = load_provider_lock(root)
    findings += _inventory_findings(inv, listed)
    findings += _zarf_findings(root, inv, listed)
    findings += _unused_findings(inv, listed)
    findings += _generated_findings(root, inv, recorded)
    unconfirmed = sorted(k for k, (digest, _n) in listed.items() if digest is None)
    if pin:
        unconfirmed += sorted(unconfirmed_provider_files(inv, recorded))
    return list(dict.fromkeys(findings)), unconfirmed  # an image listed twice in a component is one finding


def _inventory_findings(inv, listed):
    """images.txt against the derived images: each one listed, with the lock's digest."""
    findings = []
    for k, image in sorted(inv.images.items()):
        if k not in listed:
            findings.append(
                (
                    INVENTORY,
                    k,
                    "{} ({}) is not in {}: regenerate it with scripts/airgap-inventory --write".format(
                        k, "; ".join(image.origins), INVENTORY
                    ),
                )
            )
        elif image.digest and listed[k][0] != image.digest:
            findings.append(
                (
                    INVENTORY,
                    k,
                    "line %d: digest %s differs from %s in %s (%s)"
                    % (listed[k][1], listed[k][0] or "(none)", image.digest, LOCK_FILE, image.source),
                )
            )
    return findings


def _zarf_findings(root, inv, listed):
    """zarf.yaml against images.txt: every image a component pulls is listed, with the same digest."""
    findings = []
    zpath = os.path.join(root, ZARF_FILE)
    try:
        with open(zpath, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as exc:
        findings.append((ZARF_FILE, "-", "cannot read: {}".format(" ".join(str(exc).split()))))
        doc = {}
    for component, ref in zarf_images(doc, {ref for _c, ref in chart_artifacts(inv)}):
        repo, tag, digest = normalize(ref)
        k = f"{repo}:{tag}"
        if k not in listed:
            tags = sorted(t.rsplit(":", 1)[1] for t in listed if t.rsplit(":", 1)[0] == repo)
            findings.append(
                (
                    ZARF_FILE,
                    f"component {component}",
                    "image {} is not in {}{}".format(
                        ref, INVENTORY, " (tags there: {})".format(", ".join(tags)) if tags else ""
                    ),
                )
            )
        elif listed[k][0] != digest:
            findings.append(
                (
                    ZARF_FILE,
                    f"component {component}",
                    "image %s: digest %s differs from %s line %d (%s)"
                    % (k, digest or "(none)", INVENTORY, listed[k][1], listed[k][0] or "unconfirmed"),
                )
            )
    return findings


def _unused_findings(inv, listed):
    """The images.txt lines no object of the tree uses."""
    findings = []
    for k, (_digest, number) in sorted(listed.items()):
        if k not in inv.images:
            findings.append(
                (
                    INVENTORY,
                    k,
                    f"line {number}: {k} is used by no object of the tree: regenerate with scripts/airgap-inventory --write",
                )
            )
    return findings


def _generated_findings(root, inv, recorded):
    """The provider lock and the chart values files are what --write would write from the inventory."""
    findings = []
    lpath = os.path.join(root, PROVIDER_LOCK)
    current = None
    if os.path.isfile(lpath):
        with open(lpath, encoding="utf-8") as handle:
            current = handle.read()
    if inv.providers and current != format_provider_lock(inv, recorded):
        findings.append(
            (
                PROVIDER_LOCK,
                "-",
                "does not list the providers of the tree (kind, version, artifact, release files): regenerate it "
                "with scripts/airgap-inventory --write",
            )
        )
    for chart in sorted(CHART_IMAGE_VALUES):
        vpath = os.path.join(root, values_file(chart))
        text = None
        if os.path.isfile(vpath):
            with open(vpath, encoding="utf-8") as handle:
                text = handle.read()
        if chart in inv.charts and text != format_values(inv, chart):
            findings.append(
                (
                    values_file(chart),
                    "-",
                    f"does not name the {chart} chart's images with the digests of {INVENTORY}: regenerate it with "
                    "scripts/airgap-inventory --write",
                )
            )
    return findings


def write(root, inv):
    root = os.path.abspath(root)
    cfg = krops_config.load(path=os.path.join(root, krops_config.DEFAULT_FILE), environ={})
    outputs = (
        (INVENTORY, format_inventory(inv)),
        (ZARF_FILE, format_zarf(inv, cfg.bootstrap)),
        (PROVIDER_LOCK, format_provider_lock(inv, load_provider_lock(root))),
    ) + tuple((values_file(chart), format_values(inv, chart)) for chart in sorted(CHART_IMAGE_VALUES))
    for rel, text in outputs:
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


def _crane_digest(crane, ref, platform=None):
    """(digest, None) or (None, why): crane digest [--platform P] REF (go-containerregistry pkg/crane/digest.go:
    with a platform, an index's child for it; a plain manifest's own digest)."""
    argv = [crane, "digest"] + (["--platform", platform] if platform else []) + [ref]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)  # pylint: disable=ansible-bad-function
    digest = proc.stdout.strip()
    if proc.returncode == 0 and _DIGEST.match(digest):
        return digest, None
    return None, " ".join((proc.stderr or proc.stdout or "no digest printed").split())


def resolve(inv, tool=None):
    """Ask the registries for the unconfirmed digests (connected machine only): the reference's digest and one
    per platform of PLATFORMS. Returns [(ref, digest, {platform: digest})] and [(ref, why not)]: an image is
    resolved only when every platform is."""
    crane = tool or shutil.which("crane")
    if not crane:
        raise AirgapError("--resolve needs crane (github.com/google/go-containerregistry) on PATH")
    resolved, failed = [], []
    for k in inv.unconfirmed:
        digest, why = _crane_digest(crane, k)
        platforms = {}
        for platform in PLATFORMS if digest else ():
            platforms[platform], why = _crane_digest(crane, k, platform)
            if why:
                why = f"{platform}: {why}"
                break
        if why:
            failed.append((k, why))
            continue
        inv.images[k].digest, inv.images[k].source = digest, RESOLVED_SOURCE
        resolved.append((k, digest, platforms))
    return resolved, failed


def record_resolved(root, resolved):
    """Add resolved images to airgap/digests.yaml under ``images:`` (text insertion: the comments stay)."""
    if not resolved:
        return
    path = os.path.join(root, LOCK_FILE)
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines(keepends=True)
    if "images:\n" not in lines:
        raise AirgapError(f"{LOCK_FILE} has no top-level images: mapping to record resolved digests in")
    at = lines.index("images:\n") + 1
    block = []
    for ref, digest, platforms in resolved:
        block += [f"  {ref}:\n", f"    digest: {digest}\n", f"    source: {RESOLVED_SOURCE}\n", "    platforms:\n"]
        block += [f"      {p}: {platforms[p]}\n" for p in PLATFORMS]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("".join(lines[:at] + block + lines[at:]))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="airgap-inventory", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--path", default=os.getcwd(), help="repository root (default: current directory)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write airgap/images.txt and airgap/zarf.yaml")
    mode.add_argument("--check", action="store_true", help="pin check: fail on drift and on unconfirmed digests")
    parser.add_argument("--resolve", action="store_true", help="with --write: fill unconfirmed digests with crane")
    mode.add_argument(
        "--fetch-providers",
        action="store_true",
        help="connected build: download the providers' release files, check their sha256 and write "
        "airgap/build/providers/<type>-<name>.tar (OCI layouts)",
    )
    mode.add_argument(
        "--push-layouts",
        metavar="PATH",
        nargs="+",
        help="disconnected host: push the OCI layouts (files, or folders of them) to the local registry (--registry)",
    )
    parser.add_argument("--registry", help="with --push-layouts: host:port of the local registry (plain HTTP)")
    parser.add_argument(
        "--record", action="store_true", help="with --fetch-providers: record the sha256 of files that have none"
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    try:
        if args.push_layouts:
            if not args.registry:
                raise AirgapError("--push-layouts needs --registry host:port")
            for ref in push_layouts(args.push_layouts, args.registry):
                sys.stdout.write(f"pushed {ref}\n")
            return 0
        inv = derive(args.path)
        if args.fetch_providers:
            written, _recorded = fetch_providers(args.path, inv, record=args.record)
            written += fetch_charts(args.path, inv)
            for path in written:
                sys.stdout.write(f"wrote {path}\n")
            return 0
        if args.resolve:
            if not args.write:
                raise AirgapError(
                    "--resolve records into airgap/digests.yaml and rewrites the inventory: give --write too"
                )
            resolved, failed = resolve(inv)
            record_resolved(args.path, resolved)
            for ref, why in failed:
                sys.stderr.write(f"{ref}: not resolved: {why}\n")
        if args.write:
            write(args.path, inv)
        findings, unconfirmed = check(args.path, inv)
    except AirgapError as exc:
        sys.stderr.write(f"ERROR: {exc}\n")
        return 2
    if args.format == "json":
        sys.stdout.write(
            json.dumps(
                {"images": len(inv.images), "findings": [list(f) for f in findings], "unconfirmed": unconfirmed},
                indent=2,
            )
            + "\n"
        )
    else:
        for file, obj, message in findings:
            sys.stdout.write(f"{file}: {obj}: [airgap] {message}\n")
        for k in unconfirmed:
            if k.startswith("https://"):
                sys.stdout.write(
                    f"{PROVIDER_LOCK}: {k}: [airgap] UNCONFIRMED sha256: run --fetch-providers --record on a "
                    "connected machine and review the diff\n"
                )
                continue
            sys.stdout.write(
                f"{INVENTORY}: {k}: [airgap] UNCONFIRMED digest: read it upstream or run --write --resolve on a "
                "connected machine\n"
            )
        sys.stdout.write(
            "%d images, %d findings, %d unconfirmed digests\n" % (len(inv.images), len(findings), len(unconfirmed))
        )
    if findings:
        return 1
    return 1 if args.check and unconfirmed else 0


if __name__ == "__main__":
    raise SystemExit(main())
