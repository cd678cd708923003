# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The charts the air-gapped package packs itself (airgap.py PACKED_CHARTS, WORKLOAD_CHARTS): each release archive
downloaded on the connected build host, refused unless its sha256 is the one airgap/digests.yaml chart-archives
records (the chart index's digest), and wrapped as the OCI layout Helm pushes (airgap/build/charts/<chart>.tar).
"""

from __future__ import annotations

import io
import json
import os
import tarfile

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils.airgap_artifacts import (
    _download,
    _sha256,
    load_lock,
    oci_layout,
    packed_chart_repository,
    write_build,
)
from ansible_collections.krops.platform.plugins.module_utils.airgap_tables import (
    CHART_BUILD,
    HELM_CHART_TYPE,
    HELM_CONFIG_TYPE,
    LOCK_FILE,
    PACKED_CHARTS,
    WORKLOAD_CHARTS,
    AirgapError,
)
from ansible_collections.krops.platform.plugins.module_utils.render import yaml  # None without PyYAML


def chart_archive(reference, tgz):
    """(tar bytes, manifest digest): an OCI layout holding the Helm chart archive ``tgz`` as Helm pushes it."""
    try:
        with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
            member = next(m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml"))
            metadata = yaml.safe_load(tar.extractfile(member).read())
    except (tarfile.TarError, StopIteration, yaml.YAMLError, OSError) as exc:
        raise AirgapError(f"{reference}: not a Helm chart archive (no <chart>/Chart.yaml): {exc}")
    config = json.dumps(metadata, sort_keys=True, separators=(",", ":")).encode("utf-8")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": HELM_CONFIG_TYPE, "digest": _sha256(config), "size": len(config)},
        "layers": [{"mediaType": HELM_CHART_TYPE, "digest": _sha256(tgz), "size": len(tgz)}],
    }
    return oci_layout(manifest, {_sha256(b): b for b in (config, tgz)}, reference)


def fetch_charts(root, inv, download=None):
    """Download each packed chart's archive (connected build), check its sha256 against digests.yaml
    chart-archives and write its OCI layout to airgap/build/charts/<chart>.tar. Returns the paths written."""
    download = download or _download
    root = os.path.abspath(root)
    lock = load_lock(root)
    boot = krops_config.load(path=os.path.join(root, krops_config.DEFAULT_FILE), environ={}).bootstrap
    problems, written = [], []
    packed = {c: archive for c, (_component, _index, archive) in PACKED_CHARTS.items()}
    packed.update({c: archive for c, (_source, _index, archive) in WORKLOAD_CHARTS.items()})
    for chart, archive in sorted(packed.items()):
        if chart not in inv.charts:
            continue
        url = archive.format(v=str(inv.charts[chart]).lstrip("v"))
        want = ((lock.get("chart-archives") or {}).get(url) or {}).get("sha256")
        try:
            data = download(url)
        except Exception as exc:  # pylint: disable=broad-except  # any transport error: one message
            problems.append(f"{url}: download failed: {exc}")
            continue
        got = _sha256(data).split(":", 1)[1]
        if want != got:
            problems.append(
                f"{url}: sha256 {got} differs from {want} recorded in {LOCK_FILE} chart-archives"
                if want
                else f"{url}: no sha256 in {LOCK_FILE} chart-archives (UNCONFIRMED); got {got}: read the chart "
                "index's digest and record it"
            )
            continue
        reference = f"{packed_chart_repository(boot)}/{chart}:{inv.charts[chart]}"
        data, _digest = chart_archive(reference, data)
        written.append(write_build(root, CHART_BUILD, f"{chart}.tar", data))
    if problems:
        raise AirgapError("charts not bundled:\n  " + "\n  ".join(problems))
    return written
