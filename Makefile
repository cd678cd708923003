# krops.platform: one command to set up and test a checkout.
#   make test      set up (venv, packages) then sanity, units, integration, lint
#   make setup     only the set-up (scripts/setup.sh)
# Everything it needs is in the checkout (the CRD schemas are vendored in schemas/crds).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
BIN := $(abspath $(VENV)/bin)
# ansible-test ignores files that git ignores, so the copy lives outside the checkout.
BUILD ?= /tmp/krops-build$(subst /,-,$(CURDIR))
COLLECTION := $(BUILD)/ansible_collections/krops/platform
PYTEST_ARGS ?=
# ansible-test runs on the virtual environment's Python (its bin folder comes first on PATH).
PYVER = $(shell $(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
export KROPS_SCHEMA_LOCATION ?=

.PHONY: test setup sanity units integration lint yamllint ansible-lint collection bench clean

test: setup sanity units integration lint
	@echo "make test: all checks passed"

setup:
	@./scripts/setup.sh

# ansible-test needs the collection at .../ansible_collections/krops/platform. It tests what
# galaxy.yml builds: the GitOps trees are left out (validate and yamllint check them).
collection:
	@mkdir -p $(COLLECTION)
	@rsync -a --delete --delete-excluded --exclude .git --exclude .venv --exclude .collections --exclude 'build*' \
	  --exclude /mgmt --exclude /workload --exclude /schemas --exclude /extensions --exclude /airgap --exclude /.github \
	  --exclude tests/output --exclude .hypothesis --exclude '__pycache__' ./ $(COLLECTION)/

sanity: collection
	cd $(COLLECTION) && PATH=$(BIN):$$PATH $(BIN)/ansible-test sanity --venv --python $(PYVER) --color no

units: collection
	cd $(COLLECTION) && PATH=$(BIN):$$PATH $(BIN)/ansible-test units --local --python $(PYVER) --color no

integration:
	@mkdir -p tests/output
	$(BIN)/python -m pytest $(PYTEST_ARGS) | tee tests/output/pytest.log
	@grep -E '^=+ .*(passed|failed).* =+$$' tests/output/pytest.log | tail -n 1 | tr -d '=' | sed 's/^ *//; s/ *$$//' > tests/output/pytest-summary.txt

lint: yamllint ansible-lint

yamllint:
	$(BIN)/yamllint -s .

ansible-lint:
	PATH=$(BIN):$$PATH ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/.collections $(BIN)/ansible-lint --profile production

bench:
	@for script in tests/benchmarks/*.py; do echo ">>> $$script"; $(BIN)/python $$script; done

clean:
	rm -rf $(BUILD) tests/output .collections .pytest_cache
