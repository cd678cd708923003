# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A `crane` stand-in (go-containerregistry v0.21.9) for the connected build's dry run:
``crane digest [--platform os/arch] REF``.

The internet is the registry at $CRANE_STANDIN_REGISTRY (host:port, plain HTTP), which holds every
upstream image under ``<registry host>/<path>`` (docker.io/library/registry:3 is
``docker.io/library/registry`` there): the stand-in asks it for the manifest as crane does (HEAD, the
index and manifest media types) and prints the Docker-Content-Digest it answers, or fails as crane does
(``Error: ...: MANIFEST_UNKNOWN``). With ``--platform`` (a root flag of crane), an index answers the digest of
its child for that platform, a plain manifest its own digest (pkg/crane/digest.go @ v0.21.9). Any other
command is refused. Calls are appended to
$CRANE_STANDIN_LOG when set.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


def _split(ref):
    """(repository in the stand-in, tag or digest) of the full references krops resolves (host/path:tag)."""
    name, digest = ref.split("@", 1) if "@" in ref else (ref, "")
    repo, tag = name.rsplit(":", 1) if ":" in name.rsplit("/", 1)[-1] else (name, "latest")
    return repo, digest or tag


def _get(url, method="GET"):
    request = urllib.request.Request(url, method=method, headers={"Accept": ACCEPT})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers, response.read()


def main(argv):
    log = os.environ.get("CRANE_STANDIN_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(argv) + "\n")
    platform = None
    if len(argv) == 4 and argv[0] == "digest" and argv[1] == "--platform":
        platform, argv = argv[2], ["digest", argv[3]]
    if len(argv) != 2 or argv[0] != "digest":
        sys.stderr.write("Error: the stand-in emulates only `crane digest [--platform os/arch] REF`\n")
        return 1
    repo, reference = _split(argv[1])
    url = "http://{}/v2/{}/manifests/{}".format(os.environ["CRANE_STANDIN_REGISTRY"], repo, reference)
    try:
        headers, body = _get(url, "GET" if platform else "HEAD")
    except urllib.error.HTTPError as exc:
        sys.stderr.write(f"Error: GET {url}: unexpected status code {exc.code}: MANIFEST_UNKNOWN\n")
        return 1
    if platform and headers["Content-Type"] in ACCEPT.split(", ")[:2]:
        # pkg/crane/digest.go: the index's child for the platform (pkg/v1/remote/index.go childByPlatform)
        os_, arch = platform.split("/", 1)
        for child in json.loads(body)["manifests"]:
            if (child.get("platform") or {}).get("os") == os_ and child["platform"].get("architecture") == arch:
                sys.stdout.write(child["digest"] + "\n")
                return 0
        sys.stderr.write(
            f"Error: no child with platform {{Architecture:{arch} OS:{os_} OSVersion: OSFeatures:[] Variant: Features:[]}} "
            f"in index {argv[1]}\n"
        )
        return 1
    sys.stdout.write(headers["Docker-Content-Digest"] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
