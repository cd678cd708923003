# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The shell of a krops module that is one verb on one cluster (the Kubernetes-side teardown steps).

Its options are the kubeconfig options (kube.KUBE_ARGS) and its own. The shell checks the input contract first,
before any file or network call, then this checks that each duration is at least 1 second, then calls
``verb(kubeconfig, context, check_mode=..., connect_options=..., **the module's own options)``: the cluster is
always named, never the operator's current context. Errors are the module shell's (module_utils.shell.run).
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import kube, shell


spec = kube.argument_spec  # the argument_spec of such a module: KUBE_ARGS and its own options


def run(name, argument_spec, verb, doing, **renamed):
    """Run module ``name``: ``doing`` is the step the verb runs in. The verb takes each of the module's own options
    (all but KUBE_ARGS) under its name, or under the verb argument ``renamed`` gives it ({verb argument: option});
    request_timeout and each ``*_timeout`` option of its own is a duration, at least 1 second."""
    own = [option for option in argument_spec if option not in kube.KUBE_ARGS]
    durations = " ".join([option for option in own if option.endswith("_timeout")] + ["request_timeout"])
    passed = " ".join(option for option in own if option not in renamed.values())

    def body(module, step):
        params = module.params
        step("checking the options")
        shell.positive(params, durations, unit=" second")
        step(doing)
        return verb(
            params["kubeconfig"],
            params["context"],
            check_mode=module.check_mode,
            connect_options=kube.connect_options(params),
            **shell.options(params, passed, **renamed),
        )

    shell.run(name, argument_spec, body)
