# Two entry points (see README): `make main` runs the main job, `make test` runs the tests.
# Both create .venv on first use with the CPU build of torch pinned in constraints.txt.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: main test setup

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

main: $(STAMP)
	$(VENV)/bin/seqdyn demo

test: $(STAMP)
	$(PY) -m pytest -q
