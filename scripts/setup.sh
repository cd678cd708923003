#!/usr/bin/env bash
# Prepare a checkout to run and test krops.platform:
#   - find a Python 3.12+ (KROPS_PYTHON, python3.13/3.12/python3 on PATH, then pyenv versions),
#   - create .venv and install the pinned requirements (skipped when unchanged), and the SBOM tool in .venv/sbom;
#     .venv links to an environment shared by checkouts with the same requirements (KROPS_VENV_CACHE, below),
#   - install the Debian packages the tests need (docker-registry, age, rsync, shellcheck) when root with apt,
#   - link .collections/ansible_collections/krops/platform to this checkout, so
#     ansible-playbook resolves krops.platform.* from the working tree,
#   - provide ansible-test's pip bootstrap from the local Python (it cannot be downloaded offline).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '>>> %s\n' "$*"; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

python_ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }

find_python() {
  local candidate
  for candidate in "${KROPS_PYTHON:-}" python3.12 python3.13 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 && python_ok "$(command -v "$candidate")"; then
      command -v "$candidate"; return 0
    fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    while IFS= read -r candidate; do
      if python_ok "$candidate/bin/python"; then echo "$candidate/bin/python"; return 0; fi
    done < <(printf '%s\n' "$(pyenv root)"/versions/3.1[2-9]* | sort -V)
  fi
  return 1
}

no_python="no Python 3.12 or newer found (ansible-core 2.21 needs it). Install one, or set KROPS_PYTHON=/path/to/python3.12."

# Checkouts that pin the same requirements on the same Python share one virtual environment: .venv is a link
# to $KROPS_VENV_CACHE/<key> (default ~/.cache/krops/venvs), so a fresh clone installs nothing that another
# checkout installed already. The key covers the Python and every requirements file: a change of either links
# a new environment and never alters one another checkout uses. KROPS_VENV_CACHE=off, or a .venv folder of
# its own, keeps the environment in the checkout. A lock serialises set-ups that build the same environment,
# and .krops-ready marks one whose set-up finished (an interrupted one is built again).
if [ "${KROPS_VENV_CACHE:-}" != off ] && { [ -L .venv ] || [ ! -e .venv ]; }; then
  PYTHON=$(find_python) || die "$no_python"
  venvs=${KROPS_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/krops/venvs}
  key=$({ "$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version)'
    cat requirements.txt requirements-test.txt requirements-sbom.txt; } | sha256sum | cut -c1-16)
  mkdir -p "$venvs"
  exec 9>"$venvs/$key.lock"
  if command -v flock >/dev/null 2>&1; then flock 9; fi  # util-linux; macOS has none
  if [ ! -f "$venvs/$key/.krops-ready" ]; then
    rm -rf "${venvs:?}/${key:?}"
    say "creating the shared environment $venvs/$key with $PYTHON ($("$PYTHON" --version))"
    "$PYTHON" -m venv "$venvs/$key"
  fi
  ln -sfn "$venvs/$key" .venv
fi

if [ ! -x .venv/bin/python ] || ! python_ok .venv/bin/python; then
  PYTHON=$(find_python) || die "$no_python"
  say "creating .venv with $PYTHON ($("$PYTHON" --version))"
  rm -rf .venv
  "$PYTHON" -m venv .venv
fi

stamp=.venv/.krops-requirements
want=$(cat requirements.txt requirements-test.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing Python requirements into .venv (first time: several minutes)"
  # Wheels come from pip's cache (~/.cache/pip) when it has them. --no-compile skips byte-compiling
  # every file of the ansible package's bundled collections up front: Python compiles what it imports.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-compile -r requirements-test.txt
  echo "$want" > "$stamp"
fi

# The SBOM tool in a virtual environment of its own (requirements-sbom.txt says why).
sbom_stamp=.venv/sbom/.krops-requirements
sbom_want=$(sha256sum < requirements-sbom.txt | cut -d' ' -f1)
if [ "$(cat "$sbom_stamp" 2>/dev/null)" != "$sbom_want" ]; then
  say "installing the SBOM tool into .venv/sbom"
  rm -rf .venv/sbom
  .venv/bin/python -m venv .venv/sbom
  .venv/sbom/bin/python -m pip install --quiet --disable-pip-version-check --no-compile -r requirements-sbom.txt
  echo "$sbom_want" > "$sbom_stamp"
fi
# A .venv set up before the SBOM tool moved out still holds it and that format checker.
if .venv/bin/python -c 'import cyclonedx' 2>/dev/null; then
  .venv/bin/python -m pip uninstall --quiet --disable-pip-version-check -y cyclonedx-bom cyclonedx-python-lib rfc3987-syntax
fi

missing=()
command -v docker-registry >/dev/null 2>&1 || [ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
command -v age >/dev/null 2>&1 || missing+=(age)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
# ansible-test sanity runs shellcheck when it is installed (as on hosted CI runners): always have it.
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian packages: ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    die "missing tools: ${missing[*]}. Install them (Debian/Ubuntu: sudo apt-get install ${missing[*]})."
  fi
fi

mkdir -p .collections/ansible_collections/krops
ln -sfn ../../.. .collections/ansible_collections/krops/platform

# ansible-test bootstraps pip in its virtual environments with a get-pip script that it
# downloads; offline, a stand-in built on ensurepip takes its place.
pip_version=$(sed -n "s/^ *pip='\([0-9.]*\)',*$/\1/p" .venv/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py | head -1)
if [ -n "$pip_version" ]; then
  cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
  if ! cmp -s scripts/get-pip-offline.py "$cache"; then
    mkdir -p "$(dirname "$cache")"
    cp scripts/get-pip-offline.py "$cache"
  fi
fi
# The whole output is read before its first line is taken: `ansible --version | head -1` closes the
# pipe early, and ansible then prints a BrokenPipeError traceback.
ansible_version=$(.venv/bin/ansible --version)
touch .venv/.krops-ready
say "setup complete: $(.venv/bin/python --version), ${ansible_version%%$'\n'*}"
