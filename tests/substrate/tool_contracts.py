"""The input contracts of the real tools, for the stand-ins (kind, docker, helm, clusterctl, kubectl).

Each rule names the upstream source it was read from (repository, path, tag); docs/upstream-facts.md
lists the same facts. A stand-in that accepts what the real tool refuses hides defects, so every
stand-in routes its argv and input through these functions and exits like the tool when they raise.
"""

import yaml


class Refused(Exception):
    """The real tool would refuse this input; str() is close to what it prints, rc what it exits with."""

    def __init__(self, message, rc=1):
        super().__init__(message)
        self.rc = rc


# --- docker ---------------------------------------------------------------------------
# moby/moby volume/mounts/linux_parser.go (ParseMountRaw, linuxValidMountMode): the spec is split
# with strings.SplitN(raw, ":", 4); 1 part = container path, 2 = source:target (target may not be
# a mode), 3 = source:target:mode, 4 or more = "invalid volume specification: '<raw>'". The mode
# is a comma list with at most one of each group.
_MODE_GROUPS = (
    frozenset(("rw", "ro")),
    frozenset(("z", "Z")),
    frozenset(("private", "rprivate", "shared", "rshared", "slave", "rslave")),
    frozenset(("nocopy",)),
    frozenset(("consistent", "cached", "delegated")),
)


def docker_valid_mode(mode):
    if mode == "":
        return True
    counts = [0] * len(_MODE_GROUPS)
    for option in mode.split(","):
        for index, group in enumerate(_MODE_GROUPS):
            if option in group:
                counts[index] += 1
                break
        else:
            return False
    return max(counts) <= 1


def docker_volume(raw):
    """(source, target, mode) of a `--volume` spec, or Refused as the Docker daemon answers it."""
    parts = raw.split(":", 3)
    if parts[0] == "":
        raise Refused(f"docker: Error response from daemon: invalid volume specification: '{raw}'", rc=125)
    if len(parts) == 1:
        return None, parts[0], ""
    if len(parts) == 2:
        if docker_valid_mode(parts[1]):
            raise Refused(f"docker: Error response from daemon: invalid volume specification: '{raw}'", rc=125)
        return parts[0], parts[1], ""
    if len(parts) == 3:
        if not docker_valid_mode(parts[2]):
            raise Refused(f"docker: Error response from daemon: invalid mode: {parts[2]}", rc=125)
        return parts[0], parts[1], parts[2]
    raise Refused(f"docker: Error response from daemon: invalid volume specification: '{raw}'", rc=125)


def docker_exec_args(argv):
    """(options, container, command) of `docker exec`; only the flags krops uses are known here.

    docker/cli cli/command/container/exec.go: -i/--interactive, -t/--tty, -u/--user, -w/--workdir,
    -e/--env, -d/--detach take these forms; the first non-flag word is the container.
    """
    takes_value = {"-u", "--user", "-w", "--workdir", "-e", "--env"}
    flags = {"-i", "--interactive", "-t", "--tty", "-d", "--detach"}
    options, index = [], 0
    while index < len(argv) and argv[index].startswith("-"):
        word = argv[index]
        if word in flags:
            options.append(word)
        elif word in takes_value and index + 1 < len(argv):
            options += [word, argv[index + 1]]
            index += 1
        else:
            raise Refused(f"unknown shorthand flag: {word!r} in {word}\nSee 'docker exec --help'.", rc=125)
        index += 1
    if len(argv) - index < 2:
        raise Refused('"docker exec" requires at least 2 arguments.', rc=1)
    return options, argv[index], argv[index + 1 :]


# --- kind -----------------------------------------------------------------------------
# kubernetes-sigs/kind @ v0.32.0.
KIND_VERSION = "0.32.0"
# pkg/internal/apis/config/encoding/load.go: only kind.x-k8s.io/v1alpha4, kind Cluster, decoded
# with yaml.v3 KnownFields(true), so an unknown field is an error.
# pkg/apis/config/v1alpha4/types.go: the fields of each type.
_KIND_TYPES = {
    "Cluster": {
        "kind": None,
        "apiVersion": None,
        "name": None,
        "nodes": ["Node"],
        "networking": "Networking",
        "featureGates": None,
        "runtimeConfig": None,
        "kubeadmConfigPatches": None,
        "kubeadmConfigPatchesJSON6902": ["PatchJSON6902"],
        "containerdConfigPatches": None,
        "containerdConfigPatchesJSON6902": None,
    },
    "Node": {
        "role": None,
        "image": None,
        "labels": None,
        "extraMounts": ["Mount"],
        "extraPortMappings": ["PortMapping"],
        "kubeadmConfigPatches": None,
        "kubeadmConfigPatchesJSON6902": ["PatchJSON6902"],
    },
    "Networking": {
        "ipFamily": None,
        "apiServerPort": None,
        "apiServerAddress": None,
        "podSubnet": None,
        "serviceSubnet": None,
        "disableDefaultCNI": None,
        "kubeProxyMode": None,
        "dnsSearch": None,
    },
    "PatchJSON6902": {"group": None, "version": None, "kind": None, "patch": None},
    "Mount": {"containerPath": None, "hostPath": None, "readOnly": None, "selinuxRelabel": None, "propagation": None},
    "PortMapping": {"containerPort": None, "hostPort": None, "listenAddress": None, "protocol": None},
}
# pkg/cmd/kind/*: the flags of each command krops runs (plus the global --verbosity/-v, --quiet/-q).
KIND_FLAGS = {
    ("create", "cluster"): {"--name", "-n", "--config", "--image", "--retain", "--wait", "--kubeconfig"},
    ("delete", "cluster"): {"--name", "-n", "--kubeconfig"},
    ("get", "nodes"): {"--name", "-n", "--all-clusters", "-A"},
    ("get", "kubeconfig"): {"--name", "-n", "--internal"},
    ("get", "clusters"): set(),
}
_KIND_BOOL_FLAGS = {"--retain", "--all-clusters", "-A", "--internal", "--quiet", "-q"}


def _strict(type_name, value, errors):
    if not isinstance(value, dict):
        return
    fields = _KIND_TYPES[type_name]
    for key, item in value.items():
        if key not in fields:
            errors.append(f"field {key} not found in type v1alpha4.{type_name}")
            continue
        nested = fields[key]
        if isinstance(nested, list):
            for element in item or []:
                _strict(nested[0], element, errors)
        elif nested:
            _strict(nested, item, errors)


def kind_parse_config(text):
    """The Cluster config as kind v0.32.0 parses it, or Refused with kind's reason."""
    try:
        raw = yaml.safe_load(text) if text and text.strip() else None
    except yaml.YAMLError as exc:
        raise Refused(f"ERROR: failed to create cluster: could not determine kind / apiVersion for config: {exc}")
    raw = raw or {}
    if raw.get("apiVersion") != "kind.x-k8s.io/v1alpha4":
        raise Refused("ERROR: failed to create cluster: unknown apiVersion: %s" % (raw.get("apiVersion") or ""))
    if raw.get("kind") != "Cluster":
        raise Refused(
            "ERROR: failed to create cluster: unknown kind {} for apiVersion: {}".format(
                raw.get("kind") or "", raw["apiVersion"]
            )
        )
    errors = []
    _strict("Cluster", raw, errors)
    if errors:
        raise Refused(
            "ERROR: failed to create cluster: unable to decode config: yaml: unmarshal errors:\n  "
            + "\n  ".join(errors)
        )
    return raw


def kind_mount_bindings(mounts):
    """The `--volume` values kind passes to docker run (providers/docker/provision.go generateMountBindings)."""
    binds = []
    for mount in mounts or []:
        bind = "{}:{}".format(mount.get("hostPath", ""), mount.get("containerPath", ""))
        attrs = []
        if mount.get("readOnly"):
            attrs.append("ro")
        if mount.get("selinuxRelabel"):
            attrs.append("Z")
        propagation = mount.get("propagation")
        if propagation == "Bidirectional":
            attrs.append("rshared")
        elif propagation == "HostToContainer":
            attrs.append("rslave")
        if attrs:
            bind = "{}:{}".format(bind, ",".join(attrs))
        binds.append(bind)
    return binds


def kind_node_names(cluster, config):
    """Node container names: <cluster>-control-plane[N], <cluster>-worker[N] (kind's naming)."""
    counts, names = {}, []
    for node in config.get("nodes") or [{"role": "control-plane"}]:
        role = node.get("role") or "control-plane"
        counts[role] = counts.get(role, 0) + 1
        names.append("{}-{}{}".format(cluster, role, counts[role] if counts[role] > 1 else ""))
    return names


def kind_args(argv):
    """(command words, {flag: value}) for a kind argv; Refused for a flag the command lacks."""
    words, index = [], 0
    while index < len(argv) and not argv[index].startswith("-"):
        words.append(argv[index])
        index += 1
    command = tuple(words[:2]) if words[:1] != ["version"] else ("version",)
    if command == ("version",):
        return command, {}
    if command not in KIND_FLAGS:
        raise Refused('ERROR: unknown command "{}" for "kind"'.format(" ".join(words)))
    allowed = KIND_FLAGS[command] | {"--verbosity", "-v", "--quiet", "-q"}
    flags = {}
    rest = argv[index:]
    position = 0
    while position < len(rest):
        word = rest[position]
        name, _eq, inline = word.partition("=")
        if name not in allowed:
            raise Refused(f"ERROR: unknown flag: {name}")
        if name in _KIND_BOOL_FLAGS:
            flags[name] = inline or "true"
        elif inline:
            flags[name] = inline
        else:
            if position + 1 >= len(rest):
                raise Refused(f"ERROR: flag needs an argument: {name}")
            flags[name] = rest[position + 1]
            position += 1
        position += 1
    return command, flags


# --- helm, clusterctl, kubectl: commands and flags at the pinned versions ----------------------
# Flag names read from the cobra/pflag definitions at the tag (value = takes an argument;
# OPTIONAL = may stand alone or take =value, pflag's NoOptDefVal).
OPTIONAL = "optional"
HELM_VERSION = "4.2.4"
# helm/helm @ v4.2.4: pkg/cli/environment.go (global), pkg/cmd/{upgrade,list,uninstall,status,
# version,flags,helpers}.go. `--wait` and `--dry-run` have NoOptDefVal (flags.go AddWaitFlag,
# helpers.go). v4 has no `--recreate-pods` or upgrade `--dry-run=client` spelled `--dry-run` alone.
_HELM_GLOBAL = {
    "--namespace": True,
    "-n": True,
    "--kubeconfig": True,
    "--kube-context": True,
    "--kube-token": True,
    "--kube-as-user": True,
    "--kube-as-group": True,
    "--kube-apiserver": True,
    "--kube-ca-file": True,
    "--kube-tls-server-name": True,
    "--kube-insecure-skip-tls-verify": False,
    "--debug": False,
    "--registry-config": True,
    "--repository-config": True,
    "--repository-cache": True,
    "--content-cache": True,
    "--burst-limit": True,
    "--qps": True,
    "--color": True,
    "--colour": True,
}
_HELM_CHART = {
    "--version": True,
    "--verify": False,
    "--keyring": True,
    "--repo": True,
    "--username": True,
    "--password": True,
    "--cert-file": True,
    "--key-file": True,
    "--insecure-skip-tls-verify": False,
    "--plain-http": False,
    "--ca-file": True,
    "--pass-credentials": False,
}
_HELM_VALUES = {
    "--values": True,
    "-f": True,
    "--set": True,
    "--set-string": True,
    "--set-file": True,
    "--set-json": True,
    "--set-literal": True,
}
HELM_FLAGS = {
    ("upgrade",): dict(
        _HELM_CHART,
        **_HELM_VALUES,
        **{
            "--install": False,
            "-i": False,
            "--create-namespace": False,
            "--devel": False,
            "--hide-secret": False,
            "--force-replace": False,
            "--force-conflicts": False,
            "--server-side": True,
            "--no-hooks": False,
            "--disable-openapi-validation": False,
            "--skip-crds": False,
            "--timeout": True,
            "--reset-values": False,
            "--reuse-values": False,
            "--reset-then-reuse-values": False,
            "--wait-for-jobs": False,
            "--rollback-on-failure": False,
            "--atomic": False,
            "--history-max": True,
            "--cleanup-on-fail": False,
            "--render-subchart-notes": False,
            "--hide-notes": False,
            "--skip-schema-validation": False,
            "--labels": True,
            "-l": True,
            "--description": True,
            "--dependency-update": False,
            "--enable-dns": False,
            "--take-ownership": False,
            "--wait": OPTIONAL,
            "--dry-run": OPTIONAL,
            "--output": True,
            "-o": True,
            "--post-renderer": True,
            "--post-renderer-args": True,
            "--force": False,
        },
    ),
    ("list",): {
        "--short": False,
        "-q": False,
        "--no-headers": False,
        "--time-format": True,
        "--date": False,
        "-d": False,
        "--reverse": False,
        "-r": False,
        "--uninstalled": False,
        "--superseded": False,
        "--uninstalling": False,
        "--deployed": False,
        "--failed": False,
        "--pending": False,
        "--all-namespaces": False,
        "-A": False,
        "--max": True,
        "-m": True,
        "--offset": True,
        "--filter": True,
        "-f": True,
        "--selector": True,
        "-l": True,
        "--output": True,
        "-o": True,
    },
    ("uninstall",): {
        "--dry-run": False,
        "--no-hooks": False,
        "--ignore-not-found": False,
        "--keep-history": False,
        "--cascade": True,
        "--timeout": True,
        "--description": True,
        "--wait": OPTIONAL,
    },
    ("status",): {"--revision": True, "--output": True, "-o": True},
    ("version",): {"--short": False, "--template": True},
}
HELM_FLAGS[("get", "values")] = {"--all": False, "-a": False, "--revision": True, "--output": True, "-o": True}
HELM_POSITIONAL = {
    ("upgrade",): 2,
    ("list",): 0,
    ("uninstall",): None,
    ("status",): 1,
    ("version",): 0,
    ("get", "values"): 1,
}
# helm/helm @ v3.21.4 (cmd/helm/*.go) differs: upgrade has --wait (bool), --dry-run, --recreate-pods and
# no --server-side/--force-replace/--force-conflicts/--rollback-on-failure; list has --all/-a;
# uninstall has --wait (bool); status has --show-desc/--show-resources; no --content-cache/--color.
HELM3_VERSION = "3.21.4"
_HELM3_GLOBAL = {k: v for k, v in _HELM_GLOBAL.items() if k not in ("--content-cache", "--color", "--colour")}
HELM3_FLAGS = {command: dict(flags) for command, flags in HELM_FLAGS.items()}
for _name in ("--server-side", "--force-replace", "--force-conflicts", "--rollback-on-failure"):
    HELM3_FLAGS[("upgrade",)].pop(_name)
HELM3_FLAGS[("upgrade",)].update({"--wait": False, "--dry-run": OPTIONAL, "--recreate-pods": False})
HELM3_FLAGS[("list",)].update({"--all": False, "-a": False})
HELM3_FLAGS[("uninstall",)]["--wait"] = False
HELM3_FLAGS[("status",)].update({"--show-desc": False, "--show-resources": False})

CLUSTERCTL_VERSION = "1.13.5"
# kubernetes-sigs/cluster-api @ v1.13.5: cmd/clusterctl/cmd/{root,move,version,describe_cluster}.go.
CLUSTERCTL_GLOBAL = {"--config": True, "-v": True, "--v": True}
CLUSTERCTL_FLAGS = {
    ("move",): {
        "--dry-run": False,
        "--from-directory": True,
        "--hide-api-warnings": False,
        "--kubeconfig": True,
        "--kubeconfig-context": True,
        "--namespace": True,
        "-n": True,
        "--to-directory": True,
        "--to-kubeconfig": True,
        "--to-kubeconfig-context": True,
    },
    ("version",): {"--output": True, "-o": True},
    ("describe", "cluster"): {
        "--color": False,
        "-c": False,
        "--echo": False,
        "--grouping": False,
        "--kubeconfig": True,
        "--kubeconfig-context": True,
        "--namespace": True,
        "-n": True,
        "--show-conditions": True,
        "--show-machinesets": False,
        "--show-resourcesets": False,
        "--show-templates": False,
    },
}

# kubectl (kubernetes/kubernetes staging/src/k8s.io/kubectl, v1.35): the global flags krops passes
# and the commands it runs.
KUBECTL_GLOBAL = {"--kubeconfig": True, "--context": True, "--namespace": True, "-n": True, "--request-timeout": True}
KUBECTL_FLAGS = {
    ("kustomize",): {"--enable-helm": False, "--load-restrictor": True},
    ("get",): {"--raw": True, "-o": True, "--output": True},
    ("port-forward",): {"--address": True, "--pod-running-timeout": True},
    ("version",): {"--client": False, "-o": True, "--output": True},
}


def _strict_flags(tool, argv, tables, global_flags, hint):
    words, flags, position = [], {}, 0
    while position < len(argv):
        word = argv[position]
        if word == "--":
            words.extend(argv[position + 1 :])
            break
        if not word.startswith("-") or word == "-":
            words.append(word)
            position += 1
            continue
        name, eq, inline = word.partition("=")
        command = next((c for c in sorted(tables, key=len, reverse=True) if tuple(words[: len(c)]) == c), None)
        allowed = dict(global_flags)
        if command:
            allowed.update(tables[command])
        if name not in allowed:
            raise Refused(f"Error: unknown flag: {name}{hint(command)}")
        takes = allowed[name]
        if takes is True and not eq:
            if position + 1 >= len(argv):
                raise Refused(f"Error: flag needs an argument: {name}")
            flags[name] = argv[position + 1]
            position += 2
            continue
        if takes is False and eq:
            if inline not in ("true", "false"):
                raise Refused(
                    f'Error: invalid argument "{inline}" for "{name}" flag: strconv.ParseBool: parsing "{inline}": '
                    "invalid syntax"
                )
        flags[name] = inline if eq else "true"
        position += 1
    command = next((c for c in sorted(tables, key=len, reverse=True) if tuple(words[: len(c)]) == c), None)
    if command is None:
        raise Refused('Error: unknown command "{}" for "{}"'.format(" ".join(words[:1]), tool))
    return command, words[len(command) :], flags


# Chart versions that exist upstream (docs/upstream-facts.md), for the charts krops installs: a
# pin that does not exist fails like helm does, instead of passing silently.
#   cert-manager: cert-manager/cert-manager release tags (the chart version is the tag, make/_shared_new/helm/helm.mk)
#   cluster-api-operator: kubernetes-sigs/cluster-api-operator index.yaml (main)
#   flux-operator: controlplaneio-fluxcd/flux-operator release tags without the v (chart version = operator version)
CHART_VERSIONS = {
    ("https://charts.jetstack.io", "cert-manager"): [
        "v1.18.0",
        "v1.18.1",
        "v1.18.2",
        "v1.18.3",
        "v1.18.4",
        "v1.18.5",
        "v1.18.6",
        "v1.19.0",
        "v1.19.1",
        "v1.19.2",
        "v1.19.3",
        "v1.19.4",
        "v1.19.5",
        "v1.19.6",
        "v1.20.0",
        "v1.20.1",
        "v1.20.2",
        "v1.20.3",
        "v1.21.0",
        "v1.21.1",
    ],
    ("https://kubernetes-sigs.github.io/cluster-api-operator", "cluster-api-operator"): [
        "0.18.1",
        "0.19.0",
        "0.20.0",
        "0.21.0",
        "0.22.0",
        "0.23.0",
        "0.24.0",
        "0.24.1",
        "0.25.0",
        "0.26.0",
        "0.27.0",
        "0.28.0",
    ],
    ("oci", "ghcr.io/controlplaneio-fluxcd/charts/flux-operator"): [
        "0.40.0",
        "0.41.0",
        "0.41.1",
        "0.42.0",
        "0.42.1",
        "0.43.0",
        "0.44.0",
        "0.45.0",
        "0.45.1",
        "0.46.0",
        "0.47.0",
        "0.48.0",
        "0.49.0",
        "0.50.0",
        "0.51.0",
        "0.52.0",
        "0.53.0",
        "0.54.0",
        "0.54.1",
        "0.55.0",
        "0.56.0",
        "0.57.0",
        "0.58.0",
        "0.58.1",
    ],
}


def _chart_version_exists(chart, flags):
    """Refused when a chart krops knows is asked for at a version that was never published."""
    version = flags.get("--version")
    if not version or not version.lstrip("v")[:1].isdigit() or any(c in version for c in "^~<>=*x, "):
        return  # no version, or a range: helm picks from what exists
    if chart.startswith("oci://"):
        known = CHART_VERSIONS.get(("oci", chart[len("oci://") :]))
        # pkg/registry/client.go: an exact version is used as the tag as it is.
        if known is not None and version not in known:
            raise Refused(
                'Error: failed to perform "FetchReference" on source: {}:{}: not found'.format(
                    chart[len("oci://") :], version
                )
            )
        return
    repo = (flags.get("--repo") or "").rstrip("/")
    known = CHART_VERSIONS.get((repo, chart))
    # pkg/repo/v1/chartrepo.go: the index is searched with a semver constraint (a leading v does not matter).
    if known is not None and version.lstrip("v") not in [k.lstrip("v") for k in known]:
        raise Refused(f'Error: chart "{chart}" version "{version}" not found in {repo} repository')


def check_helm(argv, major=4):
    """(command, positional, flags) for a helm v4.2.4 (or, major=3, v3.21.4) argv, or Refused as helm answers."""
    tables, global_flags = (HELM_FLAGS, _HELM_GLOBAL) if major >= 4 else (HELM3_FLAGS, _HELM3_GLOBAL)
    command, positional, flags = _strict_flags("helm", argv, tables, global_flags, lambda c: "")
    expected = HELM_POSITIONAL[command]
    if expected is not None and len(positional) != expected:
        raise Refused('Error: "helm %s" requires %d argument%s' % (command[0], expected, "" if expected == 1 else "s"))
    if command == ("upgrade",):
        chart = positional[1]
        # An oci:// reference names the chart with no tag (the version comes from --version), and a
        # plain name needs --repo or a repo/ prefix (pkg/action ... LocateChart).
        if chart.startswith("oci://"):
            if ":" in chart[len("oci://") :].rsplit("/", 1)[-1] and "--version" in flags:
                raise Refused("Error: chart reference and version mismatch")
        elif "/" not in chart and "--repo" not in flags and not chart.startswith((".", "/")):
            raise Refused(f"Error: non-absolute URLs should be in form of repo_name/path_to_chart, got: {chart}")
        _chart_version_exists(chart, flags)
    return command, positional, flags


def check_clusterctl(argv):
    return _strict_flags(
        "clusterctl",
        argv,
        CLUSTERCTL_FLAGS,
        CLUSTERCTL_GLOBAL,
        lambda c: "\nRun 'clusterctl {} --help' for usage.".format(" ".join(c or ())),
    )


def check_kubectl(argv):
    return _strict_flags(
        "kubectl",
        argv,
        KUBECTL_FLAGS,
        KUBECTL_GLOBAL,
        lambda c: "\nSee 'kubectl {} --help' for usage.".format(" ".join(c or ())),
    )


def check_docker(argv):
    """`docker run`/`create`: every -v/--volume value parsed as the daemon parses it; other commands pass."""
    words = list(argv)
    if words[:2] in (["container", "run"], ["container", "create"]):
        words = words[1:]
    if words[:1] not in (["run"], ["create"]):
        return
    index = 1
    while index < len(words) and words[index].startswith("-"):
        word = words[index]
        name, eq, inline = word.partition("=")
        if name in ("-v", "--volume"):
            value = inline if eq else (words[index + 1] if index + 1 < len(words) else "")
            docker_volume(value)
            index += 1 if eq else 2
            continue
        index += 1
    return


STRICT = {"helm": check_helm, "clusterctl": check_clusterctl, "kubectl": check_kubectl, "docker": check_docker}
