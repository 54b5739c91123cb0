# warden: `make demo`, `make demo-mcp`, `make test`, `make bench`. Each creates .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: all install gen lint test demo demo-mcp bench images image clean

all: test

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Regenerate the committed gRPC stubs and the HTTP door's OpenAPI description (docs/openapi.json) from
# proto/, and the compiled draft-7 meta-schema check
# (checkpoint/policy/input_schemas.py); tests fail when they drift.
gen: $(STAMP)
	$(BIN)/python -m warden.protogen
	$(BIN)/python -m warden.openapigen
	$(BIN)/python -m checkpoint.policy.input_schemas

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy checkpoint toolrunner driver warden

# Docker up and the local tool images built (skipped when up to date). The toolrunner and driver
# tests and the demo run real containers; without an engine this fails saying how to get one.
images:
	scripts/ensure-docker.sh && scripts/build-images.sh

# warden's own container images (warden:local, warden-all:local) from Debian packages and PyPI
# wheels, no registry (docs/deploy.md); skipped when up to date.
image:
	scripts/ensure-docker.sh && scripts/build-warden-image.sh checkpoint all

# One command runs every check: ruff, mypy, then the whole suite.
test: lint images
	$(BIN)/python -m pytest -q

bench: $(STAMP) images
	$(BIN)/python -m bench

demo: $(STAMP) images
	$(BIN)/python -m demo

# the MCP gateway (docs/mcp.md): the npm reference filesystem server when npm can install it, else
# the Python-SDK one; no Docker needed
demo-mcp: $(STAMP)
	-cd examples/mcp/filesystem-server && npm install --no-audit --no-fund
	$(BIN)/python -m demo.mcp

clean:
	rm -rf $(VENV) .warden .pytest_cache
