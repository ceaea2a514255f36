# kvreplay: the two commands of the README.
#   make demo   create .venv, build the extension, replay the bundled workload against the simulator
#   make test   the same set-up, then the whole test suite (native pass, then pure-Python pass)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kvreplay-installed

.PHONY: demo test install bench clean

$(STAMP): pyproject.toml setup.py $(wildcard ext/*.pyx)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/kvreplay demo

test: $(STAMP)
	$(PY) -m pytest -q
	KVREPLAY_NO_EXTENSIONS=1 $(PY) -m pytest -q -m 'not real_server' $(wildcard tests/unit tests/parity tests/integration tests/goldens)

bench: $(STAMP)
	$(PY) -m pytest bench -q --benchmark-only

clean:
	rm -rf $(VENV) build src/*.egg-info src/kvreplay/**/*.so ext/*.c
