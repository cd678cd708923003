# krops.platform: one command to set up and test a checkout.
#   make test      set up (venv, packages) then sanity, units, integration, lint, importer, docs
#   make check     the quick tier: units, ruff and the integration tests not marked slow (docs/testing.md)
#   make setup     only the set-up (scripts/setup.sh)
#   make build     the collection tarball (build/), refused when it would pack a secret
#   make importer  galaxy-importer's checks on that tarball, offline (what Galaxy runs on upload)
#   make ee-context the execution environment's build context (build/ee/context; ansible-builder create)
#   make sanity-matrix  ansible-test sanity on every ansible-core release requires_ansible admits (scripts/sanity_matrix.sh)
# Everything it needs is in the checkout (the CRD schemas are vendored in schemas/crds).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
BIN := $(abspath $(VENV)/bin)
# ansible-test ignores files that git ignores, so the copy lives outside the checkout.
BUILD ?= /tmp/krops-build$(subst /,-,$(CURDIR))
COLLECTION := $(BUILD)/ansible_collections/krops/platform
DIST := $(BUILD)/dist
PYTEST_ARGS ?=
# pytest-xdist workers; each test file stays on one worker (module-scoped fixtures, shared folders). Three on two
# cores: a lifecycle test waits on its emulated controllers and on ansible-playbook's polls part of the time, and a
# third worker fills those waits (docs/testing.md, round 17).
PYTEST_WORKERS ?= 3
# Files go out in tests/conftest.py's order, costliest first (not xdist's default: most tests first).
XDIST = $(if $(filter-out 0 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder,)
# ansible-test runs on the virtual environment's Python (its bin folder comes first on PATH).
PYVER = $(shell $(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
export KROPS_SCHEMA_LOCATION ?=
# The pytest runs let Python cache what it compiles (__pycache__): a machine that sets PYTHONDONTWRITEBYTECODE
# would otherwise compile ansible, the kubernetes client, boto and moto from source again in each of the suite's
# thousands of processes (setup.sh installs with --no-compile). Only there: ansible-test reads a compile warning
# on stderr as a failure, and its own venvs are compiled by pip.
PYTEST = env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

CRASH_ARGS ?= --limit 12
# galaxy-importer's own ansible-lint run (galaxy-importer.cfg run_ansible_lint; make test turns it off: static)
IMPORTER_LINT ?= true
.PHONY: crash-matrix test static check quick durations setup shipped sanity sanity-matrix units integration lint ruff yamllint ansible-lint shellcheck docs-lint zizmor renovate docs docs-setup collection build importer ee-context bench scale-bench clean

# After set-up, the integration suite runs beside the other checks (TEST_JOBS=1: one after the
# other): it waits on its emulators more than it computes, so sanity, units, lint, importer and the
# docs site share the cores with it. The other checks run one after another (the two ansible-test
# runs share the collection copy; docs, the only one that needs Chromium, comes last). Each side's output is printed whole when it ends; any failure fails make test.
TEST_JOBS ?= 2
# stdin is /dev/null: the two sides' Node.js processes (the docs site, Renovate) would otherwise leave the
# stdin they share with every ansible process non-blocking (nodejs/node#14752), and ansible then refuses to
# start (ansible/ansible#77639: "Ansible requires blocking IO on stdin/stdout/stderr").
test: setup
	@$(MAKE) --no-print-directory -j $(TEST_JOBS) --output-sync=target integration static < /dev/null
	@echo "make test: all checks passed"

# ansible-lint runs once in make test: lint's run (the production profile, no rule skipped, over the repository,
# which holds everything the tarball packs) covers galaxy-importer's (the same profile with six rules skipped, over
# the tarball's roles and playbooks). `make importer` alone and the release dry run keep Galaxy's own run of it.
# The static side runs at a lower CPU priority (nice): the integration suite is make test's longest path and
# leaves a core partly idle while it waits on its emulators; the static checks take that time first, not the
# suite's (docs/testing.md, round 18).
static:
	@IMPORTER_LINT=false nice -n 10 $(MAKE) --no-print-directory -j 1 sanity units lint importer docs

setup:
	@./scripts/setup.sh

# ansible-test needs the collection at .../ansible_collections/krops/platform. ansible-test units runs on a
# copy of the checkout (the unit tests read bootstrap.toml and the trees); the GitOps trees are left out.
collection:
	@mkdir -p $(COLLECTION)
	@rsync -a --delete --delete-excluded --exclude .git --exclude .venv --exclude .sanity-venvs --exclude .collections --exclude 'build*' \
	  --exclude /mgmt --exclude /workload --exclude /schemas --exclude /extensions --exclude /airgap --exclude /.github \
	  --exclude tests/output --exclude .ruff_cache --exclude .hypothesis --exclude '__pycache__' ./ $(COLLECTION)/

# ansible-test sanity runs on what users install: the tarball `make build` packs (galaxy.yml's build_ignore),
# unpacked, as Galaxy's import does; the development-only files (the emulator suites, scripts, CI) are not
# collection content, and ruff checks them.
SHIPPED := $(BUILD)/shipped/ansible_collections/krops/platform
shipped: build
	@rm -rf $(SHIPPED) && mkdir -p $(SHIPPED)
	@tar -xzf "$$(cat $(DIST)/tarball.txt)" -C $(SHIPPED)

sanity: shipped
	cd $(SHIPPED) && PATH=$(BIN):$$PATH $(BIN)/ansible-test sanity --venv --python $(PYVER) --color no

# One release at a time, each in its own .sanity-venvs/X.Y (SANITY_ARGS passes ansible-test options).
sanity-matrix:
	./scripts/sanity_matrix.sh $(SANITY_RELEASES) -- $(SANITY_ARGS)

units: collection
	cd $(COLLECTION) && PATH=$(BIN):$$PATH $(BIN)/ansible-test units --local --python $(PYVER) --color no

integration:
	@mkdir -p tests/output
	$(PYTEST) $(XDIST) $(PYTEST_ARGS) | tee tests/output/pytest.log
	@grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|errors?)\b.*' tests/output/pytest.log | tail -n 1 | tr -d '=' | sed 's/^ *//; s/ *$$//' > tests/output/pytest-summary.txt

# The quick tier, for the inner loop: no ansible-playbook process, no emulated lifecycle
# (tests/conftest.py marks those slow). Needs a set-up checkout (make setup).
check:
	@$(MAKE) --no-print-directory -j $(TEST_JOBS) --output-sync=target units ruff quick < /dev/null
	@echo "make check: quick tier passed"

quick:
	@mkdir -p tests/output
	$(PYTEST) $(XDIST) -m 'not slow' $(PYTEST_ARGS) | tee tests/output/pytest-quick.log

# Each test's seconds into tests/benchmarks/durations.json: a test recorded over tests/conftest.py's
# QUICK_SECONDS is slow, so make check stays quick. Run it on an idle machine after adding tests.
durations:
	$(PYTEST) $(XDIST) -m 'not playbook and not lifecycle' --record-durations -q $(PYTEST_ARGS)

lint: ruff yamllint ansible-lint shellcheck docs-lint zizmor

# The formatter and the linter, configured in ruff.toml; `ruff format .` fixes what the first reports.
ruff:
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

shellcheck:
	shellcheck scripts/*.sh .ci/run

yamllint:
	$(BIN)/yamllint -s .

# What a docs site (docs.ansible.com's antsibull-docs) makes of every plugin's and role's documentation:
# markup, option types, and defaults that must be literals of the option's type.
docs-lint:
	PATH=$(BIN):$$PATH ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/.collections $(BIN)/antsibull-docs lint-collection-docs --plugin-docs .

# The workflows' static analysis (zizmor, configured in .github/zizmor.yml): pedantic, so any
# finding fails unless the config ignores it with a reason. Offline here; the online audits
# (impostor commits, known-vulnerable actions) run in ci.yml with the job's token.
zizmor:
	$(BIN)/zizmor --offline --persona=pedantic --no-progress .github/workflows

ansible-lint:
	PATH=$(BIN):$$PATH ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/.collections $(BIN)/ansible-lint --profile production

# The tarball users install: galaxy.yml's build_ignore, then a content check for age keys.
build:
	@mkdir -p $(DIST)
	$(BIN)/python scripts/build_collection.py --output $(DIST) > $(DIST)/tarball.txt
	@cat $(DIST)/tarball.txt

# galaxy-importer exits 0 even when a check reports an error, so its log is read: any ERROR line,
# or a WARNING other than the known one about tests/sanity ignore files, fails the target.
importer: build
	cd $(DIST) && PATH=$(BIN):$$PATH GALAXY_IMPORTER_CONFIG=$(CURDIR)/galaxy-importer.cfg GALAXY_IMPORTER_RUN_ANSIBLE_LINT=$(IMPORTER_LINT) \
	  $(BIN)/python -m galaxy_importer.main "$$(cat tarball.txt)" 2>&1 | tee importer.log | grep -v '^  ' || true
	@if grep -E '^(ERROR|CRITICAL|WARNING)' $(DIST)/importer.log | grep -v '^WARNING: Ignore files skip ansible-test sanity tests'; then \
	  echo "make importer: galaxy-importer reported the problems above" >&2; exit 1; fi
	@grep -q '^Importer processing completed successfully' $(DIST)/importer.log

# execution-environment.yml takes the tarball from build/ee (a path relative to the definition).
ee-context: build
	@mkdir -p build/ee
	cp "$$(cat $(DIST)/tarball.txt)" build/ee/krops-platform.tar.gz
	$(BIN)/ansible-builder create -f execution-environment.yml -c build/ee/context

# Renovate's own checks of renovate.json5 (not in make test: Renovate needs Node.js 24 and ~600 npm
# packages, installed once into RENOVATE_DIR outside the checkout): the config validator, then
# Renovate's extraction offline (--platform=local --dry-run=extract), which
# tests/integration/test_renovate.py compares with its emulation of the same rules. ci.yml runs it.
# Where NODE is older than 24, Node.js itself comes from the npm registry (the node-linux-<arch> package
# ships the release's binary), so a machine that reaches only package registries can run it.
RENOVATE_VERSION := 44.121.2
RENOVATE_NODE_VERSION := 24.22.3
RENOVATE_DIR ?= $(HOME)/.cache/krops/renovate-$(RENOVATE_VERSION)
NODE ?= node
RENOVATE_NODE_PACKAGE := node-linux-$(subst x86_64,x64,$(subst aarch64,arm64,$(shell uname -m)))
NODE_24 = $(shell $(NODE) -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 24 ? 0 : 1)' 2>/dev/null \
  && command -v $(NODE) || echo $(RENOVATE_DIR)/node/node_modules/$(RENOVATE_NODE_PACKAGE)/bin/node)
renovate:
	@test -x $(NODE_24) || npm install --prefix $(RENOVATE_DIR)/node --no-audit --no-fund $(RENOVATE_NODE_PACKAGE)@$(RENOVATE_NODE_VERSION)
	@$(NODE_24) -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 24 ? 0 : 1)' || \
	  { echo "make renovate: Renovate $(RENOVATE_VERSION) needs Node.js 24 or newer; set NODE=/path/to/node" >&2; exit 1; }
	@test -f $(RENOVATE_DIR)/node_modules/renovate/package.json || \
	  PATH="$$(dirname $(NODE_24)):$$PATH" npm install --prefix $(RENOVATE_DIR) --no-audit --no-fund renovate@$(RENOVATE_VERSION)
	@mkdir -p $(BUILD)
	$(NODE_24) $(RENOVATE_DIR)/node_modules/renovate/dist/config-validator.js --strict
	LOG_LEVEL=warn $(NODE_24) $(RENOVATE_DIR)/node_modules/renovate/dist/renovate.js --platform=local \
	  --dry-run=extract --report-type=file --report-path=$(BUILD)/renovate-report.json
	KROPS_RENOVATE_REPORT=$(BUILD)/renovate-report.json $(BIN)/python -m pytest -q -p no:cacheprovider tests/integration/test_renovate.py

# The docs site (docs/docsite/make_site.py): antsibull-docs' collection reference, docs/*.md through
# myst-parser, the mermaid diagrams rendered to SVG, Sphinx with -W -n (a broken link fails), offline.
# In make test (the static side, beside the integration suite); .github/workflows/docs.yml builds and
# deploys it and tests/integration/test_docsite.py tests its link checker and staging. docs-setup
# installs what it needs once: a Chromium for mermaid-cli (Debian's package when root with apt) and
# npm; mermaid-cli, the rendered diagrams and Sphinx's parsed pages are kept in ~/.cache/krops/docsite
# (docs/testing.md, Docs site).
docs: docs-setup
	$(BIN)/python docs/docsite/make_site.py --output $(BUILD)/docsite

# Only what is missing: a machine whose Node.js came from elsewhere has its npm, and Debian's npm package
# conflicts with that nodejs (apt-get refuses both).
docs-setup:
	@missing=""; \
	  command -v chromium >/dev/null || command -v google-chrome >/dev/null || missing=" chromium"; \
	  command -v npm >/dev/null || missing="$$missing npm"; \
	  if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	    else echo "make docs: needs$$missing: sudo apt-get install$$missing" >&2; exit 1; fi; fi

# The crash matrix (tests/benchmarks/crash_matrix.py, issue 30): the local-host playbook killed at task
# boundaries, inside clusterctl move, or with one failed Kubernetes write; then a re-run must converge
# (changed=0 after it) and a teardown from the partial state must leave nothing owned. About 8 minutes a
# point on 2 cores, so not in make test (its fast form is: tests/integration/test_crash_matrix.py);
# CRASH_ARGS='--list' prints the points, '--only task:40' runs one, '--env aws' runs the aws lifecycle.
crash-matrix:
	$(BIN)/python tests/benchmarks/crash_matrix.py $(CRASH_ARGS)

bench:
	@for script in tests/benchmarks/*.py; do [ "$$script" = tests/benchmarks/crash_matrix.py ] && continue; echo ">>> $$script"; $(BIN)/python $$script; done

# Issue 26's scale benchmark alone (validate, render_diff, the Flux hand-off wait at 1, 10 and 50
# workload clusters; docs/scale.md); SCALE_ARGS passes its options (--sizes, --repeat, --only).
SCALE_ARGS ?=
scale-bench:
	$(BIN)/python tests/benchmarks/scale_bench.py $(SCALE_ARGS)

clean:
	rm -rf $(BUILD) build/ee tests/output .collections .pytest_cache
