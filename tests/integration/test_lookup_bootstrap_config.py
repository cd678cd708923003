"""The bootstrap_config lookup, resolved from the checkout by a real ansible-playbook run."""

from tests.substrate.fixtures import REPO, task_results


def test_lookup_reads_values_overrides_and_fails_clearly(ansible_playbook):
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "value",
                    "ansible.builtin.set_fact": {
                        "mgmt": "{{ lookup('krops.platform.bootstrap_config', 'environments.aws.mgmt-cluster') }}",
                        "charts": f"{{{{ lookup('krops.platform.bootstrap_config', 'charts', file='{REPO}/bootstrap.toml') }}}}",
                        "port": "{{ lookup('krops.platform.bootstrap_config', 'bootstrap.registry-port') }}",
                        "selected": "{{ lookup('krops.platform.bootstrap_config', 'environment', environment='gcp') }}",
                        "registry": "{{ lookup('krops.platform.bootstrap_config', 'profile.local-registry', environment='local-host') }}",
                        "aws": "{{ lookup('krops.platform.bootstrap_config', 'profiles.aws') }}",
                    },
                },
                {
                    "name": "unknown environment",
                    "ansible.builtin.debug": {
                        "msg": "{{ lookup('krops.platform.bootstrap_config', 'environments.prod.mgmt-cluster') }}"
                    },
                    "ignore_errors": True,
                },
            ],
        }
    ]
    rc, output, stderr = ansible_playbook(
        play, env={"BOOTSTRAP_CONFIG": str(REPO / "bootstrap.toml"), "REGISTRY_PORT": "5055"}
    )
    results = task_results(output)
    facts = results["value"]["ansible_facts"]
    assert rc == 0, stderr
    assert facts["mgmt"] == "eu-north-1-management"
    assert facts["charts"] == {"flux-operator": "0.58.1", "cert-manager": "v1.21.1", "capi-operator": "0.28.0"}
    assert facts["port"] == 5055
    assert facts["selected"] == "gcp"
    assert facts["registry"] is True
    assert facts["aws"]["platform"] == "aws" and facts["aws"]["cloud-teardown-step"] == "aws-orphan-sweep"
    assert facts["aws"]["local-registry"] is False and facts["aws"]["pivot-credentials"] == "aws"
    failed = results["unknown environment"]
    assert failed["failed"] is True
    assert (
        "environments.prod: expected a defined environment; unknown environment 'prod' "
        "(valid environments: local-host, aws, aws-crossplane, azure, gcp, local-talos)"
    ) in failed["msg"]
