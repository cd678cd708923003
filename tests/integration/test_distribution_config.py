# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""bootstrap.toml and GIT_REPO_URL refuse a Git URL that carries credentials, without echoing them."""

from __future__ import annotations

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
