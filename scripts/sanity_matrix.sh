#!/usr/bin/env bash
# ansible-test sanity once per ansible-core release that meta/runtime.yml admits, on this machine
# (no Docker), as the sanity workflow does on GitHub:
#
#   scripts/sanity_matrix.sh                   every release with a tests/sanity/ignore-X.Y.txt
#   scripts/sanity_matrix.sh 2.18 2.20         only these releases
#   scripts/sanity_matrix.sh 2.19 -- --test pylint   extra ansible-test arguments after --
#
# Each release gets its own virtual environment, .sanity-venvs/X.Y (git ignores it), holding the
# newest ansible-core X.Y.* from PyPI; SANITY_UPGRADE=1 re-checks PyPI for a newer patch.
# SANITY_PYTHON names the interpreter (default: a Python 3.12, which every release from 2.18 to
# 2.21 supports as a controller); the script refuses one the release does not support.
# The collection is the tarball unpacked by `make shipped` (outside the checkout: ansible-test skips files
# git ignores). ansible-test's --venv mode installs each test's pinned tools, so PyPI must answer.
# The shellcheck tool must be on PATH (scripts/setup.sh installs it), or that test is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

say() { printf '>>> %s\n' "$*"; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 2; }

releases=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    [0-9]*.[0-9]*) releases+=("$1"); shift ;;
    *) die "unknown argument '$1': give releases (e.g. 2.18) and then -- and ansible-test arguments" ;;
  esac
done
extra=("$@")

if [ ${#releases[@]} -eq 0 ]; then
  for file in tests/sanity/ignore-*.txt; do
    name=${file##*/ignore-}
    releases+=("${name%.txt}")
  done
fi
for release in "${releases[@]}"; do
  [ -f "tests/sanity/ignore-$release.txt" ] \
    || die "no tests/sanity/ignore-$release.txt: add one (copy ignore-2.21.txt) for each release requires_ansible admits"
done

# A candidate counts when it runs (a pyenv shim for a version not selected exists but fails).
runs() { "$1" -c 'import sys' >/dev/null 2>&1; }
find_python() {
  local candidate
  if [ -n "${SANITY_PYTHON:-}" ]; then command -v "$SANITY_PYTHON"; return 0; fi
  if command -v python3.12 >/dev/null 2>&1 && runs python3.12; then command -v python3.12; return 0; fi
  if command -v pyenv >/dev/null 2>&1; then
    for candidate in "$(pyenv root)"/versions/3.12*; do
      runs "$candidate/bin/python" && { echo "$candidate/bin/python"; return 0; }
    done
  fi
  return 1
}
if [ -n "${SANITY_PYTHON:-}" ] && ! runs "$SANITY_PYTHON"; then die "SANITY_PYTHON=$SANITY_PYTHON does not run"; fi
python=$(find_python) || die "no Python 3.12 found: install one, or set SANITY_PYTHON=/path/to/python3.X (a controller Python of every release tested)"
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
command -v shellcheck >/dev/null 2>&1 || say "warning: shellcheck is not on PATH, ansible-test will skip its shellcheck test (scripts/setup.sh installs it)"

build=${SANITY_BUILD:-/tmp/krops-sanity$(printf '%s' "$root" | tr / -)}
collection=$build/shipped/ansible_collections/krops/platform
failed=()
for release in "${releases[@]}"; do
  venv=$root/.sanity-venvs/$release
  if [ ! -x "$venv/bin/ansible-test" ] || [ "${SANITY_UPGRADE:-0}" = 1 ]; then
    say "ansible-core $release: installing the newest $release.* into .sanity-venvs/$release ($python)"
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade "ansible-core~=$release.0"
  fi
  site=$("$venv/bin/python" -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')
  # The release's own list of controller Pythons (ansible_test/_util/target/common/constants.py).
  "$venv/bin/python" - "$site" "$pyver" <<'EOF' || die "ansible-core $release does not support Python $pyver as a controller: set SANITY_PYTHON to one it lists"
import ast, sys
tree = ast.parse(open(sys.argv[1] + "/_util/target/common/constants.py").read())
versions = next(ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) and node.targets[0].id == "CONTROLLER_PYTHON_VERSIONS")
sys.exit(0 if sys.argv[2] in versions else 1)
EOF
  # ansible-test seeds pip in its environments with a get-pip script it downloads; offline, the
  # ensurepip stand-in takes its place (the same one scripts/setup.sh installs for .venv).
  pip_version=$(sed -n "s/^ *pip='\([0-9.]*\)',*$/\1/p" "$site/_internal/python_requirements.py" | head -1)
  if [ -n "$pip_version" ]; then
    cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
    if [ ! -f "$cache" ]; then
      mkdir -p "$(dirname "$cache")"
      cp scripts/get-pip-offline.py "$cache"
    fi
  fi
  make -s shipped BUILD="$build"
  say "ansible-core $("$venv/bin/python" -c 'from ansible.release import __version__; print(__version__)'): ansible-test sanity --python $pyver ${extra[*]}"
  if (cd "$collection" && PATH="$venv/bin:$PATH" "$venv/bin/ansible-test" sanity --venv --python "$pyver" --color no "${extra[@]}"); then
    say "ansible-core $release: sanity passed"
  else
    say "ansible-core $release: sanity FAILED"
    failed+=("$release")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  printf 'ERROR: ansible-test sanity failed on ansible-core %s\n' "${failed[*]}" >&2
  exit 1
fi
say "sanity passed on ansible-core ${releases[*]}"
