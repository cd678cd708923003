# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Reading nested plain data (parsed YAML or JSON, an API's answer) by path: the one walk that admission, the AWS
paginator, render_diff and the tag rules share."""

from __future__ import annotations


def dig(data, *path):
    """The value at ``path`` (one key per step) in the nested dicts ``data``; None where a step is missing or
    reaches something that is not a dict."""
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
