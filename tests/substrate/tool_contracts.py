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
        raise Refused("docker: Error response from daemon: invalid volume specification: '%s'" % raw, rc=125)
    if len(parts) == 1:
        return None, parts[0], ""
    if len(parts) == 2:
        if docker_valid_mode(parts[1]):
            raise Refused("docker: Error response from daemon: invalid volume specification: '%s'" % raw, rc=125)
        return parts[0], parts[1], ""
    if len(parts) == 3:
        if not docker_valid_mode(parts[2]):
            raise Refused("docker: Error response from daemon: invalid mode: %s" % parts[2], rc=125)
        return parts[0], parts[1], parts[2]
    raise Refused("docker: Error response from daemon: invalid volume specification: '%s'" % raw, rc=125)


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
            raise Refused("unknown shorthand flag: %r in %s\nSee 'docker exec --help'." % (word, word), rc=125)
        index += 1
    if len(argv) - index < 2:
        raise Refused('"docker exec" requires at least 2 arguments.', rc=1)
    return options, argv[index], argv[index + 1:]


# --- kind -----------------------------------------------------------------------------
# kubernetes-sigs/kind @ v0.32.0.
KIND_VERSION = "0.32.0"
# pkg/internal/apis/config/encoding/load.go: only kind.x-k8s.io/v1alpha4, kind Cluster, decoded
# with yaml.v3 KnownFields(true), so an unknown field is an error.
# pkg/apis/config/v1alpha4/types.go: the fields of each type.
_KIND_TYPES = {
    "Cluster": {"kind": None, "apiVersion": None, "name": None, "nodes": ["Node"], "networking": "Networking",
                "featureGates": None, "runtimeConfig": None, "kubeadmConfigPatches": None,
                "kubeadmConfigPatchesJSON6902": ["PatchJSON6902"], "containerdConfigPatches": None,
                "containerdConfigPatchesJSON6902": None},
    "Node": {"role": None, "image": None, "labels": None, "extraMounts": ["Mount"],
             "extraPortMappings": ["PortMapping"], "kubeadmConfigPatches": None,
             "kubeadmConfigPatchesJSON6902": ["PatchJSON6902"]},
    "Networking": {"ipFamily": None, "apiServerPort": None, "apiServerAddress": None, "podSubnet": None,
                   "serviceSubnet": None, "disableDefaultCNI": None, "kubeProxyMode": None, "dnsSearch": None},
    "PatchJSON6902": {"group": None, "version": None, "kind": None, "patch": None},
    "Mount": {"containerPath": None, "hostPath": None, "readOnly": None, "selinuxRelabel": None,
              "propagation": None},
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
            errors.append("field %s not found in type v1alpha4.%s" % (key, type_name))
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
        raise Refused("ERROR: failed to create cluster: could not determine kind / apiVersion for config: %s" % exc)
    raw = raw or {}
    if raw.get("apiVersion") != "kind.x-k8s.io/v1alpha4":
        raise Refused("ERROR: failed to create cluster: unknown apiVersion: %s" % (raw.get("apiVersion") or ""))
    if raw.get("kind") != "Cluster":
        raise Refused("ERROR: failed to create cluster: unknown kind %s for apiVersion: %s"
                      % (raw.get("kind") or "", raw["apiVersion"]))
    errors = []
    _strict("Cluster", raw, errors)
    if errors:
        raise Refused("ERROR: failed to create cluster: unable to decode config: yaml: unmarshal errors:\n  "
                      + "\n  ".join(errors))
    return raw


def kind_mount_bindings(mounts):
    """The `--volume` values kind passes to docker run (providers/docker/provision.go generateMountBindings)."""
    binds = []
    for mount in mounts or []:
        bind = "%s:%s" % (mount.get("hostPath", ""), mount.get("containerPath", ""))
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
            bind = "%s:%s" % (bind, ",".join(attrs))
        binds.append(bind)
    return binds


def kind_node_names(cluster, config):
    """Node container names: <cluster>-control-plane[N], <cluster>-worker[N] (kind's naming)."""
    counts, names = {}, []
    for node in config.get("nodes") or [{"role": "control-plane"}]:
        role = node.get("role") or "control-plane"
        counts[role] = counts.get(role, 0) + 1
        names.append("%s-%s%s" % (cluster, role, counts[role] if counts[role] > 1 else ""))
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
        raise Refused('ERROR: unknown command "%s" for "kind"' % " ".join(words))
    allowed = KIND_FLAGS[command] | {"--verbosity", "-v", "--quiet", "-q"}
    flags = {}
    rest = argv[index:]
    position = 0
    while position < len(rest):
        word = rest[position]
        name, _, inline = word.partition("=")
        if name not in allowed:
            raise Refused("ERROR: unknown flag: %s" % name)
        if name in _KIND_BOOL_FLAGS:
            flags[name] = inline or "true"
        elif inline:
            flags[name] = inline
        else:
            if position + 1 >= len(rest):
                raise Refused("ERROR: flag needs an argument: %s" % name)
            flags[name] = rest[position + 1]
            position += 1
        position += 1
    return command, flags
