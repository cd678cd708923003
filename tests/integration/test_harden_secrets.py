# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""--tags secrets, hardening round 2 (issue 22): a creation rule that leaves values in plaintext fails naming
the rule (before writing when the rule shows it, and by proof after sops ran); an age key inside the checkout
is refused unless Git ignores it; a value with a control character is refused naming its variable."""

from __future__ import annotations

import secrets
import subprocess

import pytest
import yaml
from test_secrets_role import AWS_VARIABLES, SOPS_FILES, failure, secrets_run, tree  # noqa: F401  # pylint: disable=unused-import

PREFIX = "krops.platform.secrets"


def keyed(tmp_path, root, rule=None):
    """An age key outside the checkout, listed in the aws rule of .sops.yaml (with ``rule``'s keys)."""
    key = tmp_path / "age.agekey"
    subprocess.run(["age-keygen", "-o", str(key)], capture_output=True, check=True)
    public = subprocess.run(["age-keygen", "-y", str(key)], capture_output=True, text=True, check=True).stdout.strip()
    config = yaml.safe_load((root / ".sops.yaml").read_text())
    config["creation_rules"][0]["age"] = public
    if rule is not None:
        config["creation_rules"][0].pop("encrypted_regex", None)
        config["creation_rules"][0].update(rule)
    (root / ".sops.yaml").write_text(yaml.safe_dump(config))
    return key


def values():
    return {name: f"v-{name.lower()}-{secrets.token_hex(8)}" for name in AWS_VARIABLES}


def test_a_rule_that_would_leave_string_data_in_plaintext_fails_before_writing(tmp_path, tree):  # noqa: F811
    key = keyed(tmp_path, tree, {"encrypted_regex": "^data$"})
    before = {rel: (tree / rel).read_bytes() for rel in SOPS_FILES}
    given = values()
    rc, output, text = secrets_run(tmp_path, tree, key, given)
    assert rc == 2
    assert failure(output) == (
        f"the creation rule of {tree}/.sops.yaml for mgmt/aws/capa-system/aws-credentials.sops.yaml (path_regex "
        "^(mgmt|workload)/aws/.*\\.sops\\.yaml$) would leave stringData unencrypted (encrypted_regex: ^data$): set "
        "encrypted_regex: ^(data|stringData)$ in that rule (docs/secrets.md)"
    )
    assert {rel: (tree / rel).read_bytes() for rel in SOPS_FILES} == before
    assert not any(v in text for v in given.values())


def test_after_encryption_every_value_is_proven_encrypted_or_the_rule_is_named(tmp_path, tree):  # noqa: F811
    """unencrypted_regex ^password$ passes the rule check (stringData itself is encrypted) but sops leaves the
    password in plaintext: the proof after sops finds it and fails, naming the file, the key and the rule."""
    key = keyed(tmp_path, tree, {"unencrypted_regex": "^password$"})
    given = values()
    rc, output, text = secrets_run(tmp_path, tree, key, given)
    assert rc == 2, text[-2000:]
    assert failure(output) == (
        "sops left value(s) in plaintext: mgmt/aws/flux-apps/workload-flux/flux-github-pat.sops.yaml "
        "stringData.password (rule path_regex ^(mgmt|workload)/aws/.*\\.sops\\.yaml$). The creation rule of "
        f"{tree}/.sops.yaml named there does not encrypt them: fix its encrypted_regex, run --tags secrets again, "
        "and do not commit the file meanwhile (git checkout -- <file>) (docs/secrets.md)"
    )
    assert not any(v in text for v in given.values())


@pytest.mark.parametrize("value", ["line1\n[profile attacker]\naws_access_key_id = x", "tab\there", "nul\x01"])
def test_a_value_with_a_control_character_is_refused_naming_the_variable(tmp_path, tree, value):  # noqa: F811
    key = keyed(tmp_path, tree)
    before = {rel: (tree / rel).read_bytes() for rel in SOPS_FILES}
    given = dict(values(), AWS_SECRET_ACCESS_KEY=value)
    rc, output, text = secrets_run(tmp_path, tree, key, given)
    assert rc == 2
    assert failure(output) == (
        "environment variable(s) AWS_SECRET_ACCESS_KEY hold a control character (a newline, tab, ...): a Secret "
        "value is one line of printable text; export it again without them (docs/secrets.md)"
    )
    assert {rel: (tree / rel).read_bytes() for rel in SOPS_FILES} == before
    assert "attacker" not in text


def test_an_age_key_inside_the_checkout_is_refused_unless_git_ignores_it(tmp_path, tree):  # noqa: F811
    subprocess.run(["git", "-C", str(tree), "init", "-q"], check=True)
    key = tree / "keys" / "age.agekey"
    rc, output, text = secrets_run(tmp_path, tree, key, values())
    assert rc == 2
    assert failure(output) == (
        f"the age key {key} lies inside the checkout {tree} and Git does not ignore it, so it could be committed "
        "with the Secrets it decrypts: keep it outside the checkout (age-key-file in bootstrap.toml, default "
        "~/.config/krops/age.agekey) or add it to .gitignore (docs/secrets.md)"
    )
    assert not key.exists()  # refused before it was generated
    (tree / ".gitignore").write_text("/keys/\n")
    rc, output, text = secrets_run(tmp_path, tree, key, values())
    assert key.exists()  # ignored by Git: generated (the run then stops at the recipients check)
    assert "lies inside the checkout" not in text
