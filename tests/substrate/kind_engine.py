"""A kind + docker stand-in: one script installed as both `kind` and `docker` on PATH.

kind keeps its clusters in kind-state.json beside the script and answers with kubeconfigs that
point at Kubernetes API emulators (kind-servers.json). `kind create cluster` parses the config as
kind v0.32.0 does and hands every mount to the "engine" as the `--volume` spec kind builds, which
is parsed as Docker parses it (tests/substrate/tool_contracts.py), so a config the real pair would
refuse is refused here too. `docker exec <node> ...` reads and writes the node containers' files
(mkdir -p, cp /dev/stdin, cat), which is how krops writes containerd's hosts.toml.
"""

SCRIPT = r"""#!{python}
import json, os, sys
sys.path.insert(0, {root!r})
from tests.substrate import tool_contracts as contracts

here = os.path.dirname(os.path.abspath(__file__))
tool = os.path.basename(sys.argv[0])
stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
argv = sys.argv[1:]
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"tool": tool, "argv": argv, "env": {{}}, "cwd": os.getcwd(), "stdin": stdin}}) + "\n")
state_path = os.path.join(here, "kind-state.json")
state = json.load(open(state_path)) if os.path.exists(state_path) else {{"clusters": {{}}}}
servers_path = os.path.join(here, "kind-servers.json")
servers = json.load(open(servers_path)) if os.path.exists(servers_path) else {{}}


def save():
    json.dump(state, open(state_path, "w"))


def refuse(exc):
    sys.stderr.write(str(exc) + "\n")
    sys.exit(exc.rc)


def kubeconfig(name):
    ctx = "kind-" + name
    return {{"apiVersion": "v1", "kind": "Config", "current-context": ctx, "preferences": {{}},
            "clusters": [{{"name": ctx, "cluster": {{"server": servers[name]}}}}],
            "contexts": [{{"name": ctx, "context": {{"cluster": ctx, "user": ctx}}}}],
            "users": [{{"name": ctx, "user": {{"token": "kind-secret-token-" + name}}}}]}}


def node_of(container):
    for cluster in state["clusters"].values():
        if container in cluster.get("nodes", {{}}):
            return cluster["nodes"][container]
    return None


def docker():
    if argv[:1] == ["version"]:
        print("Client: Docker Engine - Community\n Version:           28.3.0")
        return
    if argv[:1] != ["exec"]:
        sys.stderr.write("docker stand-in: unsupported command %s\n" % argv)
        sys.exit(2)
    try:
        options, container, command = contracts.docker_exec_args(argv[1:])
    except contracts.Refused as exc:
        refuse(exc)
    node = node_of(container)
    if node is None:
        sys.stderr.write("Error response from daemon: No such container: %s\n" % container)
        sys.exit(1)
    files = node.setdefault("files", {{}})
    if command[:2] == ["mkdir", "-p"]:
        node.setdefault("dirs", []).extend(command[2:])
    elif command[:2] == ["cp", "/dev/stdin"] and len(command) == 3:
        if "-i" not in options and "--interactive" not in options:
            stdin_text = ""  # without -i docker does not forward stdin
        else:
            stdin_text = stdin
        parent = os.path.dirname(command[2])
        if parent not in node.get("dirs", []):
            sys.stderr.write("cp: cannot create regular file '%s': No such file or directory\n" % command[2])
            sys.exit(1)
        files[command[2]] = stdin_text
    elif command[:1] == ["cat"] and len(command) == 2:
        if command[1] not in files:
            sys.stderr.write("cat: %s: No such file or directory\n" % command[1])
            sys.exit(1)
        sys.stdout.write(files[command[1]])
    else:
        sys.stderr.write("docker stand-in: unsupported exec command %s\n" % command)
        sys.exit(2)
    save()


def kind():
    try:
        command, flags = contracts.kind_args(argv)
    except contracts.Refused as exc:
        refuse(exc)
    name = flags.get("--name", flags.get("-n", "kind"))
    if command == ("version",):
        print("kind v%s go1.24.4 linux/amd64" % os.environ.get("FAKE_KIND_VERSION", contracts.KIND_VERSION))
    elif command == ("get", "clusters"):
        if not state["clusters"]:
            sys.stderr.write("No kind clusters found.\n")
        for cluster in sorted(state["clusters"]):
            print(cluster)
    elif command == ("get", "nodes"):
        if name not in state["clusters"]:
            sys.stderr.write("No kind nodes found for cluster \"%s\".\n" % name)
        for node in sorted(state["clusters"].get(name, {{}}).get("nodes", {{}})):
            print(node)
    elif command == ("get", "kubeconfig"):
        if name not in state["clusters"]:
            sys.stderr.write("ERROR: could not locate any control plane nodes for cluster named '%s'. Use the "
                             "--name option to select a different cluster\n" % name)
            sys.exit(1)
        print(json.dumps(kubeconfig(name)))
    elif command == ("create", "cluster"):
        if name in state["clusters"]:
            sys.stderr.write('ERROR: failed to create cluster: node(s) already exist for a cluster with the name '
                             '"%s"\n' % name)
            sys.exit(1)
        config_text = stdin if flags.get("--config") == "-" else (
            open(flags["--config"]).read() if flags.get("--config") else "")
        try:
            config = contracts.kind_parse_config(config_text) if config_text else {{
                "kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4"}}
            names = contracts.kind_node_names(name, config)
            for node_config, node_name in zip(config.get("nodes") or [{{}}], names):
                for spec in contracts.kind_mount_bindings(node_config.get("extraMounts")):
                    try:
                        contracts.docker_volume(spec)
                    except contracts.Refused as exc:
                        raise contracts.Refused(
                            'ERROR: failed to create cluster: command "docker run --name %s --volume %s ..." failed '
                            "with error: exit status 125\nCommand Output: %s" % (node_name, spec, exc))
        except contracts.Refused as exc:
            refuse(exc)
        if os.environ.get("FAKE_KIND_CREATE_FAIL"):
            sys.stderr.write("ERROR: failed to create cluster: failed to pull image kindest/node\n")
            sys.exit(1)
        state["clusters"][name] = {{"config": config, "image": flags.get("--image"),
                                   "nodes": {{n: {{"files": {{}}, "dirs": []}} for n in names}}}}
        save()
        path = flags.get("--kubeconfig")
        if path:
            with open(path, "w") as handle:
                json.dump(kubeconfig(name), handle)
        sys.stderr.write("Creating cluster \"%s\" ...\n" % name)
    elif command == ("delete", "cluster"):
        state["clusters"].pop(name, None)
        save()
        sys.stderr.write("Deleting cluster \"%s\" ...\n" % name)


docker() if tool == "docker" else kind()
"""
