# Sphinx configuration of the krops.platform docs site, built by docs/docsite/make_site.py (make docs).
# Started from `antsibull-docs sphinx-init` 2.28.0; changes: the Markdown pages of docs/ through
# myst-parser, and no intersphinx (the build runs offline: nothing is fetched).
project = "krops.platform"
copyright = "krops contributors"
title = "krops.platform"
html_short_title = "krops.platform"

extensions = ["sphinx_antsibull_ext", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}

pygments_style = "ansible"
highlight_language = "YAML+Jinja"

html_theme = "sphinx_ansible_theme"
html_show_sphinx = False
display_version = False
html_use_smartypants = True
html_use_modindex = False
html_use_index = False
html_copy_source = False
html_theme_options = {"collapse_navigation": False, "display_version": False}

# Markdown: GitHub-style anchors for headings down to ####, so docs/*.md links such as
# upstream-facts.md#tool-checksums-metatoolsyml resolve (and a broken one is a warning, so an error).
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
# Mermaid blocks are replaced by rendered SVG files before Sphinx runs (make_site.py).
suppress_warnings = []
nitpicky = True
default_role = "any"

# The generated reference links to labels of Ansible's own documentation, which intersphinx would
# resolve from docs.ansible.com's inventory. Offline, the few labels it uses resolve here to their
# pages; any other unresolved reference stays a warning, and so fails the build.
# Pages: ansible/ansible-documentation docs/docsite/rst/reference_appendices/common_return_values.rst
# and plugins/action.rst; config.html is generated there from ansible-core's config (docs/upstream-facts.md).
ANSIBLE_DOCS = "https://docs.ansible.com/projects/ansible/devel/"
ANSIBLE_LABELS = {
    "common_return_values": ("reference_appendices/common_return_values.html", "Return Values"),
    "action_plugins": ("plugins/action.html", "Action plugins"),
    "ansible_configuration_settings": ("reference_appendices/config.html", "Ansible Configuration Settings"),
}


def _ansible_label(app, env, node, contnode):
    target = node.get("reftarget")
    if node.get("reftype") not in ("ref", "any") or target not in ANSIBLE_LABELS:
        return None
    from docutils import nodes

    page, title = ANSIBLE_LABELS[target]
    ref = nodes.reference("", "", internal=False, refuri=ANSIBLE_DOCS + page)
    ref += contnode if contnode.astext() and contnode.astext() != target else nodes.Text(title)
    return ref


def setup(app):
    app.connect("missing-reference", _ansible_label)
