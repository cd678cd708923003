# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A strict stand-in for the zarf CLI v0.84.0, for tests on machines where zarf cannot be installed.

The command tree, flags, shorthands, argument counts and the flags that take no value are those
of zarf-dev/zarf at tag v0.84.0 (commit f5f193de): src/cmd/root.go (persistent flags),
src/cmd/initialize.go (init), src/cmd/package.go (package create/deploy/verify/sign/inspect, the
verify flag set of newVerifyFlagSet/newKeylessVerifyFlagSet), src/cmd/zarf_tools.go
(tools download-init), src/cmd/version.go. Anything else is refused the way cobra/pflag refuse it
(``unknown flag: --x``, ``unknown shorthand flag: 'x' in -x``, ``flag needs an argument: --x``,
``unknown command "x" for "zarf package"``); an unknown subcommand is refused here even where
zarf itself would only print help, which does not do the work either.

A "package" is a JSON file standing in for the .tar.zst: it records the architecture, the
components kept, their images, the SBOMs and the signing key's id, so verify and inspect sbom can
answer as zarf would, and the content zarf carries: each component's files (local ones read at create,
remote ones from $ZARF_STANDIN_DOWNLOADS, the connected host's "internet": a JSON file
``{"files": {url: path}, "artifacts": {ref: OCI layout path}}``), its manifests, and the OCI layouts of
its imageArchives and of the artifacts it lists. Key files are text: ``PRIVATE <id>`` / ``PUBLIC <id>``.
Every call is appended to $ZARF_STANDIN_LOG (JSON lines) when set.

With $ZARF_STANDIN_WORLD (the control URL of tests/substrate/airgap_host.py) the stand-in does the work:
``package deploy`` writes the files of files-only components under the current folder (zarf's
``files[].target``) and hands the cluster components to the emulated host with the cluster of
$KUBECONFIG, which pushes the images, installs the charts and manifests and waits for the health checks
(airgap_world.zarf_deploy); ``init`` starts the Zarf registry and agent in that cluster. Without it,
deploy and init only check what they were given.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import tarfile
import urllib.error
import urllib.request

VERSION = "v0.84.0"

# flag -> (shorthand or None, kind): "value" takes an argument, "bool" does not, "noopt" takes one
# only as --flag=value (pflag NoOptDefVal).
ROOT = {
    "features": (None, "value"),
    "log-level": ("l", "value"),
    "log-format": (None, "value"),
    "no-color": (None, "bool"),
    "no-progress": (None, "bool"),
    "architecture": ("a", "value"),
    "zarf-cache": (None, "value"),
    "cache": (None, "value"),
    "tmpdir": (None, "value"),
    "plain-http": (None, "bool"),
    "insecure-skip-tls-verify": (None, "bool"),
    "help": ("h", "bool"),
}
KEYLESS = {
    "certificate-identity": (None, "value"),
    "certificate-identity-regexp": (None, "value"),
    "certificate-oidc-issuer": (None, "value"),
    "certificate-oidc-issuer-regexp": (None, "value"),
    "trusted-root": (None, "value"),
    "insecure-ignore-tlog": (None, "bool"),
    "use-signed-timestamps": (None, "bool"),
}
VERIFY = dict(
    KEYLESS, **{"key": ("k", "value"), "verify": (None, "noopt"), "skip-signature-validation": (None, "bool")}
)
CONCURRENCY = {"oci-concurrency": (None, "value")}


def _v(*names):
    return {n: (None, "value") for n in names}


def _b(*names):
    return {n: (None, "bool") for n in names}


COMMANDS = {
    ("version",): ({"output-format": ("o", "value"), "output": (None, "value")}, 0, 0),
    ("init",): (
        dict(
            VERIFY,
            **CONCURRENCY,
            **_v(
                "set",
                "set-variables",
                "set-values",
                "components",
                "storage-class",
                "registry-mode",
                "injector-port",
                "injector-image",
                "git-url",
                "git-push-username",
                "git-push-password",
                "git-pull-username",
                "git-pull-password",
                "registry-url",
                "registry-port",
                "nodeport",
                "registry-push-username",
                "registry-push-password",
                "registry-pull-username",
                "registry-pull-password",
                "registry-secret",
                "artifact-url",
                "artifact-push-username",
                "artifact-push-token",
                "agent-tls-ca",
                "agent-tls-cert",
                "agent-tls-key",
                "agent-mutation-policy",
                "timeout",
                "retries",
            ),
            **{"values": ("v", "value"), "confirm": ("c", "bool")},
            **_b("take-ownership", "adopt-existing-resources", "force-conflicts", "skip-values-schema-validation"),
        ),
        0,
        1,
    ),
    ("package", "create"): (
        dict(
            CONCURRENCY,
            **_v(
                "output-directory",
                "differential",
                "set",
                "sbom-out",
                "registry-override",
                "signing-key",
                "signing-key-pass",
                "key-pass",
            ),
            **{
                "confirm": ("c", "bool"),
                "output": ("o", "value"),
                "sbom": ("s", "bool"),
                "max-package-size": ("m", "value"),
                "flavor": ("f", "value"),
                "key": ("k", "value"),
            },
            **_b("skip-sbom", "skip-version-check", "with-build-machine-info"),
        ),
        0,
        1,
    ),
    ("package", "deploy"): (
        dict(
            VERIFY,
            **CONCURRENCY,
            **_v("timeout", "retries", "set", "set-variables", "set-values", "components", "shasum"),
            **{"confirm": ("c", "bool"), "values": ("v", "value"), "namespace": ("n", "value")},
            **_b(
                "take-ownership",
                "adopt-existing-resources",
                "connected",
                "force-conflicts",
                "skip-values-schema-validation",
                "skip-version-check",
            ),
        ),
        0,
        1,
    ),
    ("package", "verify"): (dict(KEYLESS, **CONCURRENCY, key=("k", "value")), 1, 1),
    ("package", "sign"): (
        dict(
            CONCURRENCY,
            **_v(
                "signing-key",
                "signing-key-pass",
                "retries",
                "identity-token",
                "fulcio-url",
                "fulcio-auth-flow",
                "oidc-issuer",
                "oidc-client-id",
                "rekor-url",
                "tsa-server-url",
            ),
            **{"output": ("o", "value"), "key": ("k", "value"), "verify": (None, "noopt")},
            **_b("overwrite", "keyless", "tlog-upload", "confirm"),
        ),
        1,
        1,
    ),
    ("package", "inspect", "sbom"): (dict(VERIFY, **CONCURRENCY, output=(None, "value")), 0, 1),
    ("package", "inspect", "images"): (dict(VERIFY, **CONCURRENCY, namespace=("n", "value")), 0, 1),
    ("package", "inspect", "definition"): (dict(VERIFY, **CONCURRENCY, namespace=("n", "value")), 0, 1),
    ("tools", "download-init"): ({"output-directory": ("o", "value"), "version": ("v", "value")}, 0, 0),
}
ALIASES = {"p": "package", "d": "deploy", "v": "verify", "s": "sign", "i": None}  # "i": init or inspect
GROUPS = {
    (): ("init", "package", "tools", "version"),
    ("package",): ("create", "deploy", "verify", "sign", "inspect"),
    ("package", "inspect"): ("sbom", "images", "definition"),
    ("tools",): ("download-init",),
}
VERIFY_MODES = ("never", "if-possible", "always", "true", "false")


class Refused(Exception):
    pass


def _resolve(words):
    path = ()
    rest = list(words)
    while rest and path in GROUPS:
        word = rest[0]
        choices = GROUPS[path]
        if word.startswith("-"):
            break
        name = word if word in choices else ALIASES.get(word)
        if word == "i":
            name = "init" if path == () else "inspect" if path == ("package",) else None
        if name not in choices:
            raise Refused('unknown command "{}" for "{}"'.format(word, " ".join(("zarf",) + path)))
        path += (name,)
        rest.pop(0)
    if path not in COMMANDS:
        raise Refused(
            '"{}" needs a subcommand (one of: {})'.format(" ".join(("zarf",) + path), ", ".join(GROUPS.get(path, ())))
        )
    return path, rest


def parse(argv):
    """(command path, {flag: [values]}, positional args) or Refused with pflag's message."""
    path, _rest = _resolve(_leading_words(argv))
    flags_spec, low, high = COMMANDS[path]
    spec = dict(ROOT, **flags_spec)
    shorts = {s: name for name, (s, _k) in spec.items() if s}
    flags, args, index, consumed = {}, [], 0, 0
    items = list(argv)
    while index < len(items):
        arg = items[index]
        index += 1
        if arg == "--":
            args.extend(items[index:])
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name not in spec:
                raise Refused(f"unknown flag: --{name}")
            kind = spec[name][1]
            if kind == "value" and not eq:
                if index >= len(items):
                    raise Refused(f"flag needs an argument: --{name}")
                value = items[index]
                index += 1
            elif kind == "bool" and not eq:
                value = "true"
            elif kind == "noopt" and not eq:
                value = "always"
            flags.setdefault(name, []).append(value)
        elif arg.startswith("-") and len(arg) > 1:
            letters = arg[1:]
            while letters:
                letter, letters = letters[0], letters[1:]
                if letter not in shorts:
                    raise Refused(f"unknown shorthand flag: '{letter}' in -{arg[1:]}")
                name = shorts[letter]
                if spec[name][1] == "bool":
                    flags.setdefault(name, []).append("true")
                    continue
                value = letters[1:] if letters.startswith("=") else letters
                if not value:
                    if index >= len(items):
                        raise Refused(f"flag needs an argument: '{letter}' in -{arg[1:]}")
                    value = items[index]
                    index += 1
                flags.setdefault(name, []).append(value)
                letters = ""
        else:
            if consumed < len(path):
                consumed += 1  # a word of the command path
                continue
            args.append(arg)
    for name, values in flags.items():
        if spec[name][1] == "bool" and any(v not in ("true", "false") for v in values):
            raise Refused(
                f'invalid argument "{values[-1]}" for "--{name}" flag: strconv.ParseBool: parsing "{values[-1]}": invalid syntax'
            )
    for value in flags.get("verify", []):
        if value not in VERIFY_MODES:
            raise Refused(
                f'invalid argument "{value}" for "--verify" flag: invalid --verify value "{value}" (must be never, '
                "if-possible, or always)"
            )
    if "help" not in flags and not low <= len(args) <= high:
        raise Refused(
            "accepts %s, received %d" % ("%d arg(s)" % low if low == high else "at most %d arg(s)" % high, len(args))
        )
    return path, flags, args


def _leading_words(argv):
    """The words that are not flags, skipping the values of root flags given before the command."""
    words, index = [], 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, _value = arg[2:].partition("=")
            if ROOT.get(name, (None, "bool"))[1] == "value" and not eq and not words:
                index += 1
        elif arg.startswith("-") and len(arg) > 1:
            if arg in ("-l", "-a") and not words:
                index += 1
        else:
            words.append(arg)
    return words


# --- behaviour -----------------------------------------------------------------------------------


def _last(flags, name, default=None):
    return (flags.get(name) or [default])[-1]


def _key_id(path, kind):
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read().split()
    except OSError as exc:
        raise Refused(f"unable to read key {path}: {exc.strerror}")
    if len(text) != 2 or text[0] != kind:
        raise Refused(f"{path} is not a {kind.lower()} key")
    return text[1]


def _load(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        raise Refused(f"unable to load package {path}: not a Zarf package")


def _normalized(identifier):
    return re.sub(r"[/:@]", "_", identifier)


def _merge(base, extra):
    """Helm's values merge of valuesFiles: later files win, nested mappings are merged."""
    out = dict(base)
    for name, value in extra.items():
        out[name] = _merge(out[name], value) if isinstance(value, dict) and isinstance(out.get(name), dict) else value
    return out


def _pulled_digest(ref):
    """The digest the build pulled: the reference's own, else what the connected registry answered (stand-in:
    a digest derived from the reference, the same at every build)."""
    if "@sha256:" in ref:
        return ref.rsplit("@", 1)[1]
    import hashlib

    return "sha256:" + hashlib.sha256(ref.encode()).hexdigest()


def _layout_digests(path):
    """{reference: manifest digest} of an OCI layout tarball (what zarf reads from an imageArchive)."""
    with tarfile.open(path) as tar:
        index = json.load(tar.extractfile("index.json"))
    return {
        m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"]
        for m in index["manifests"]
        if "org.opencontainers.image.ref.name" in (m.get("annotations") or {})
    }


def _downloads():
    """The connected host's "internet" for create: {"files": {url: path}, "artifacts": {ref: layout path}}."""
    path = os.environ.get("ZARF_STANDIN_DOWNLOADS")
    if not path:
        return {"files": {}, "artifacts": {}}
    with open(path, encoding="utf-8") as handle:
        found = json.load(handle)
    return {"files": found.get("files") or {}, "artifacts": found.get("artifacts") or {}}


def _b64(path):
    with open(path, "rb") as handle:
        return base64.b64encode(handle.read()).decode()


def _carry(component, directory, downloads):
    """What zarf copies into the package for ``component``: files (by target), manifests, layouts (by reference)."""
    files, manifests, layouts = {}, {}, {}
    for entry in component.get("files") or []:
        source = str(entry.get("source", ""))
        local = downloads["files"].get(source) if "://" in source else os.path.join(directory, source)
        if local:
            files[entry["target"]] = {"data": _b64(local), "executable": bool(entry.get("executable"))}
    for manifest in component.get("manifests") or []:
        for rel in manifest.get("files") or []:
            with open(os.path.join(directory, rel), encoding="utf-8") as handle:
                manifests[rel] = handle.read()
    for archive in component.get("imageArchives") or []:
        for ref in archive["images"]:
            layouts[ref] = _b64(os.path.join(directory, archive["path"]))
    for ref in component.get("images") or []:
        if ref in downloads["artifacts"]:
            layouts[ref] = _b64(downloads["artifacts"][ref])
    return {"files": files, "manifests": manifests, "layouts": layouts}


def create(flags, args):
    import yaml  # the stand-in runs with the test venv's Python

    directory = args[0] if args else "."
    try:
        with open(os.path.join(directory, "zarf.yaml"), encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        raise Refused(f"unable to find zarf.yaml in {directory}")
    sets = dict(v.split("=", 1) for v in flags.get("set", []) if "=" in v)
    missing = sorted(set(re.findall(r"###ZARF_PKG_TMPL_([A-Z0-9_]+)###", text)) - set(sets))
    if missing:
        raise Refused("package template variables not set: {} (use --set)".format(", ".join(missing)))
    text = re.sub(r"###ZARF_PKG_TMPL_([A-Z0-9_]+)###", lambda m: sets[m.group(1)], text)
    doc = yaml.safe_load(text)
    arch = _last(flags, "architecture") or "amd64"
    kept, images, definition, digests, values, content = [], [], [], {}, {}, {}
    downloads = _downloads()
    for component in doc.get("components") or []:
        only = ((component.get("only") or {}).get("cluster") or {}).get("architecture")
        if only and only != arch:
            continue
        for entry in component.get("files") or []:
            source = str(entry.get("source", ""))
            if "://" not in source and not os.path.exists(os.path.join(directory, source)):
                raise Refused(
                    "unable to create package: component {}: file {} does not exist".format(component["name"], source)
                )
        for chart in component.get("charts") or []:
            merged = {}
            for rel in chart.get("valuesFiles") or []:  # zarf copies them into the package at create
                try:
                    with open(os.path.join(directory, rel), encoding="utf-8") as handle:
                        merged = _merge(merged, yaml.safe_load(handle) or {})
                except OSError:
                    raise Refused(
                        "unable to create package: component {}: chart {}: values file {} does not exist".format(
                            component["name"], chart["name"], rel
                        )
                    )
            values["{}/{}".format(component["name"], chart["name"])] = merged
        for archive in component.get("imageArchives") or []:
            if not os.path.exists(os.path.join(directory, archive["path"])):
                raise Refused(
                    "unable to create package: component {}: image archive {} does not exist".format(
                        component["name"], archive["path"]
                    )
                )
            images.extend(archive["images"])
            try:
                digests.update(_layout_digests(os.path.join(directory, archive["path"])))
            except (OSError, ValueError, KeyError, tarfile.TarError):  # zarf reads index.json (images/unpack.go)
                raise Refused(
                    "unable to create package: component {}: image archive {} is not an OCI image layout".format(
                        component["name"], archive["path"]
                    )
                )
        images.extend(component.get("images") or [])
        content[component["name"]] = _carry(component, directory, downloads)
        digests.update({ref: _pulled_digest(ref) for ref in component.get("images") or []})
        for ref in content[component["name"]]["layouts"]:  # an artifact's digest is its layout's manifest digest
            if ref in downloads["artifacts"]:
                digests[ref] = next(iter(_layout_digests(downloads["artifacts"][ref]).values()))
        kept.append(component["name"])
        definition.append(component)
    signed = (
        _key_id(_last(flags, "signing-key") or _last(flags, "key"), "PRIVATE")
        if (_last(flags, "signing-key") or _last(flags, "key"))
        else None
    )
    sboms = [] if _last(flags, "skip-sbom") == "true" else [f"{i}-linux-{arch}" for i in images]
    package = {
        "name": doc["metadata"]["name"],
        "version": doc["metadata"].get("version"),
        "architecture": arch,
        "components": kept,
        "definition": definition,
        "images": images,
        "digests": digests,
        "values": values,
        "constants": {c["name"]: c["value"] for c in doc.get("constants") or []},
        "content": content,
        "sboms": sboms,
        "signed_with": signed,
    }
    out = _last(flags, "output") or _last(flags, "output-directory") or "."
    os.makedirs(out, exist_ok=True)
    name = "zarf-package-{}-{}-{}.tar.zst".format(package["name"], arch, package["version"])
    with open(os.path.join(out, name), "w", encoding="utf-8") as handle:
        json.dump(package, handle)
    if _last(flags, "sbom-out") and sboms:
        folder = os.path.join(_last(flags, "sbom-out"), package["name"])
        os.makedirs(folder, exist_ok=True)
        for identifier in sboms:
            with open(os.path.join(folder, _normalized(identifier) + ".json"), "w", encoding="utf-8") as handle:
                json.dump({"source": identifier}, handle)
    print(f"Package created: {os.path.join(out, name)}")


def _check_signature(package, flags, always):
    key = _last(flags, "key")
    mode = _last(flags, "verify", "if-possible")
    if mode == "never":
        return
    if key is None:
        if always or mode in ("always", "true"):
            raise Refused("package verification failed: no public key given (--key)")
        return
    if package["signed_with"] is None:
        raise Refused("package verification failed: the package is not signed")
    if _key_id(key, "PUBLIC") != package["signed_with"]:
        raise Refused(f"package verification failed: signature does not match the public key {key}")


def verify(flags, args):
    package = _load(args[0])
    _check_signature(package, flags, always=True)
    print("Package signature verified")


def inspect_sbom(flags, args):
    package = _load(args[0])
    _check_signature(package, flags, always=False)
    if not package["sboms"]:
        raise Refused("unable to get SBOMs: this package does not contain SBOMs (created with --skip-sbom)")
    folder = os.path.join(_last(flags, "output", "."), package["name"])
    os.makedirs(folder, exist_ok=True)
    for identifier in package["sboms"]:
        with open(os.path.join(folder, _normalized(identifier) + ".json"), "w", encoding="utf-8") as handle:
            json.dump({"source": identifier}, handle)
    print(folder)


def download_init(flags, _args):
    out = _last(flags, "output-directory") or "."
    os.makedirs(out, exist_ok=True)
    arch = _last(flags, "architecture") or "amd64"
    path = os.path.join(out, "zarf-init-{}-{}.tar.zst".format(arch, _last(flags, "version", VERSION)))
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(
            {"name": "init", "architecture": arch, "components": [], "images": [], "sboms": [], "signed_with": None},
            handle,
        )
    print(path)


def select(components, requested):
    """Names zarf deploys (src/pkg/packager/filters/deploy.go @ v0.84.0, ungrouped components): required ones
    always; with --components, the named ones and optional defaults not excluded (-name); else the defaults."""
    names = [r for r in requested if r and not r.startswith("-")]
    excluded = [r[1:] for r in requested if r.startswith("-")]
    known = [c["name"] for c in components]
    for name in names + excluded:
        if name not in known:
            raise Refused(f"no compatible components found that match {name}")
    return [
        c["name"]
        for c in components
        if c.get("required") or c["name"] in names or (c.get("default") and c["name"] not in excluded)
    ]


def deploy(flags, args):
    if _last(flags, "confirm") != "true":
        raise Refused("deploy needs --confirm when not interactive")
    package = _load(args[0]) if args else None
    if package is None:
        raise Refused("no package given")
    _check_signature(package, flags, always=False)
    requested = [r.strip() for r in (_last(flags, "components") or "").split(",") if r.strip()]
    chosen = select(package.get("definition") or [], requested)
    needs_cluster = [
        c["name"]
        for c in package.get("definition") or []
        if c["name"] in chosen and any(c.get(k) for k in CLUSTER_FIELDS)
    ]
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if needs_cluster and not os.path.isfile(kubeconfig):
        raise Refused(
            "unable to connect to the Kubernetes cluster: components {} need one".format(", ".join(needs_cluster))
        )
    if os.environ.get("ZARF_STANDIN_WORLD"):
        for name in chosen:
            for target, entry in (package.get("content", {}).get(name) or {}).get("files", {}).items():
                path = os.path.abspath(target)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as handle:
                    handle.write(base64.b64decode(entry["data"]))
                if entry["executable"]:
                    os.chmod(path, 0o755)
        if needs_cluster:
            _world(
                "/zarf/deploy",
                {
                    "package": os.path.abspath(args[0]),
                    "components": needs_cluster,
                    "kubeconfig": kubeconfig,
                    "timeout": _seconds(_last(flags, "timeout", "15m")),
                },
            )
    print("Deployed {}: {}".format(package["name"], ", ".join(chosen)))


def _seconds(duration):
    """A Go duration as zarf's --timeout takes it (1h2m3s), in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise Refused(f'invalid argument "{duration}" for "--timeout" flag: time: invalid duration "{duration}"')
    return sum(float(n) * (0.001 if u == "ms" else units[u]) for n, u in parts)


def _world(path, body):
    """Hand a cluster step to the emulated host (tests/substrate/airgap_host.py); its refusal is zarf's error."""
    request = urllib.request.Request(
        os.environ["ZARF_STANDIN_WORLD"] + path, data=json.dumps(body).encode(), method="POST"
    )
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=body.get("timeout", 60) + 60) as reply:
            return json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise Refused(json.loads(exc.read() or b"{}").get("error", f"HTTP {exc.code}"))


def init(flags, args):
    if _last(flags, "confirm") != "true":
        raise Refused("init needs --confirm when not interactive")
    if args:
        init_package = _load(args[0])
        if init_package.get("name") != "init":
            raise Refused(f"{args[0]} is not a zarf init package")
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if not os.path.isfile(kubeconfig):
        raise Refused("unable to connect to the Kubernetes cluster: zarf init needs one")
    if os.environ.get("ZARF_STANDIN_WORLD"):
        _world("/zarf/init", {"kubeconfig": kubeconfig, "timeout": 60})
    print("Initialised")


# ZarfComponent.RequiresCluster (src/api/v1alpha1/component.go @ v0.84.0)
CLUSTER_FIELDS = ("images", "imageArchives", "charts", "manifests", "repos", "dataInjections", "healthChecks")

ACTIONS = {
    ("version",): lambda f, a: print(VERSION),
    ("package", "create"): create,
    ("package", "verify"): verify,
    ("package", "inspect", "sbom"): inspect_sbom,
    ("tools", "download-init"): download_init,
    ("package", "deploy"): deploy,
    ("init",): init,
}


def main(argv):
    log = os.environ.get("ZARF_STANDIN_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"argv": argv, "cwd": os.getcwd()}) + "\n")
    try:
        path, flags, args = parse(argv)
        if "help" in flags:
            print("Usage:\n  zarf {} [flags]".format(" ".join(path)))
            return 0
        action = ACTIONS.get(path)
        if action is None:
            raise Refused("the stand-in does not emulate zarf {}".format(" ".join(path)))
        action(flags, args)
    except Refused as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
