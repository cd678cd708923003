# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""bootstrap.toml and GIT_REPO_URL refuse a Git URL that carries credentials, without echoing them."""

from __future__ import annotations

import json

import pytest

from ansible_collections.krops.platform.plugins.module_utils import config
from tests.substrate.fixtures import REPO

TOKEN = "ghp_0123456789abcdefABCDEF0123456789abcd"
EXPECTED = (
    "expected a Git URL without credentials; the URL carries a user name or token before '@' (not shown "
    "here); remove it and give the token as GITHUB_TOKEN (the Flux sync secret and the preflight check read "
    "it from there)"
)


def toml_with(url):
    text = (REPO / "bootstrap.toml").read_text()
    assert 'git-url = "https://github.com/krops/krops"' in text
    return text.replace('git-url = "https://github.com/krops/krops"', f'git-url = "{url}"')


@pytest.mark.parametrize(
    "url",
    [
        f"https://user:{TOKEN}@github.com/krops/krops",
        f"https://{TOKEN}@github.com/krops/krops",
        f"https://x-access-token:{TOKEN}@github.com/krops/krops.git",
        f"ssh://git:{TOKEN}@github.com/krops/krops.git",
        f"https://user:{TOKEN}@github.com/krops krops",  # also malformed: the credentials are still not echoed
    ],
)
def test_credentials_in_git_url_are_refused(url):
    with pytest.raises(config.ConfigError) as err:
        config.loads(toml_with(url), path="bootstrap.toml")
    assert str(err.value).startswith("bootstrap.toml: bootstrap.git-url: " + EXPECTED)
    assert TOKEN not in str(err.value)


def test_credentials_in_git_repo_url_variable_are_refused():
    with pytest.raises(config.ConfigError) as err:
        config.loads(
            (REPO / "bootstrap.toml").read_text(),
            path="bootstrap.toml",
            environ={"GIT_REPO_URL": f"https://me:{TOKEN}@github.com/me/fork"},
        )
    assert str(err.value).startswith(
        "environment variable GIT_REPO_URL (overrides bootstrap.git-url in "
        "bootstrap.toml): bootstrap.git-url: " + EXPECTED
    )
    assert TOKEN not in str(err.value)


@pytest.mark.parametrize(
    "url",
    ["https://github.com/krops/krops", "ssh://git@github.com/krops/krops.git", "https://github.com/krops/krops@v1"],
)
def test_urls_without_credentials_are_accepted(url):
    loaded = config.loads(toml_with(url), path="bootstrap.toml")
    assert loaded.lookup("bootstrap.git-url") == url


# --- the same rule for the URL options of the modules (they bypass bootstrap.toml) -----------------

MODULE_EXPECTED = (
    "carries a user name or token before '@' (not shown here); remove it and give the token as GITHUB_TOKEN "
    "(the Flux sync secret and the preflight check read it from there)"
)


@pytest.mark.parametrize(
    "url", [f"https://user:{TOKEN}@github.com/krops/krops", f"https://{TOKEN}@github.com/krops/krops.git"]
)
def test_preflight_refuses_a_git_url_option_with_credentials(run_module, url):
    from ansible_collections.krops.platform.plugins.modules import preflight_check

    # Port 9 answers nothing: the check must refuse before it calls the GitHub API.
    result = run_module(
        preflight_check,
        {"git_url": url, "git_branch": "main", "github_token": "t0ken", "github_api_url": "http://127.0.0.1:9"},
    )
    assert result.failed
    assert result["problems"] == ["git_url " + MODULE_EXPECTED]
    assert TOKEN not in json.dumps(result)


def test_flux_handoff_refuses_a_sync_url_option_with_credentials(kind_api, run_module):
    from ansible_collections.krops.platform.plugins.modules import flux_handoff

    result = run_module(
        flux_handoff,
        {
            "kubeconfig": kind_api.kubeconfig_path,
            "context": "kind-mgmt",
            "environment": "aws",
            "config_file": str(REPO / "bootstrap.toml"),
            "sync_url": f"https://x-access-token:{TOKEN}@github.com/krops/krops",
            "install_operator": False,
            "wait_timeout": 5,
        },
    )
    assert result.failed
    assert "sync_url " + MODULE_EXPECTED in result["msg"]
    assert TOKEN not in json.dumps(result)
    # Refused before anything was written to the cluster.
    assert kind_api.list("v1", "Secret", "flux-system") == []
    assert kind_api.list("v1", "ConfigMap", "flux-system") == []
