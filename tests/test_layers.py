"""The import layers (issue 23, point 3; issue 35, points 1 and 2; DESIGN.md, "Layers"):
resolving a config and the algorithms' tables load neither torch nor numba, the records are
plain data, the solver interface and the built-in solvers load neither torch nor numba nor
MPI, nothing below the loops imports :mod:`hpc_refer.parallel` (the team, the reducer and the
external-solver links are protocols defined below it; their MPI implementations are passed
in), the packages' faces re-export nothing, and no module imports itself back. Imports are
measured in a fresh interpreter; import-linter's contracts (``make lint``) state the layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from mpi_launch import run_snippet
from output_lines import one_line_with

PACKAGE = Path(__file__).resolve().parents[1] / "hpc_refer"

HEAVY = ("torch", "numba", "mpi4py")
"""What the solver interface and a solver's import of it must not load."""


def loaded(module: str, watched: tuple[str, ...]) -> list[str]:
    """The modules of ``watched`` that importing ``module`` loads (a fresh interpreter)."""
    out = run_snippet(f"import sys\nimport {module}\n"
                      f"print('loaded:', sorted(m for m in {watched!r} if m in sys.modules))\n")
    line = one_line_with(out, "loaded: ")  # (warnings may come with it)
    return ast.literal_eval(line.removeprefix("loaded: "))  # type: ignore[no-any-return]


@pytest.mark.parametrize("module", ["hpc_refer.envs.interface", "hpc_refer.envs",
                                    "hpc_refer.envs.diffusion", "hpc_refer.envs.ks"])
def test_the_solver_interface_and_a_solver_load_neither_torch_nor_numba_nor_mpi(module):
    assert loaded(module, (*HEAVY, "hpc_refer.parallel")) == []


def test_the_team_protocol_imports_with_the_interface_names():
    out = run_snippet("import sys\n"
                      "from hpc_refer.envs.interface import Team, TeamCommand\n"
                      "from hpc_refer.envs import SolverFault, Status\n"
                      "print('said:', TeamCommand.STEP == 1, Team.__name__, "
                      "'torch' in sys.modules)\n")
    assert one_line_with(out, "said: ") == "said: True Team False", out


RESOLVE_EVERY_CONFIG = """\
import argparse, sys
from hpc_refer.config.cli import add_arguments, config_from_args, parse_command_line
from hpc_refer.config.presets import PRESETS
from hpc_refer.config.resolve import algorithm_tables, build_config, load_toml
from hpc_refer.algorithms.registry import ALGORITHMS
resolved = 0
for name in algorithm_tables():
    for preset in ("", *PRESETS):
        build_config({"run": {"algorithm": name, "preset": preset}})
        resolved += 1
parser = argparse.ArgumentParser()
add_arguments(parser)
args = parse_command_line(parser, ["--algorithm", "sac", "--sac.lr", "1e-3", "--env.nu", "0.1"])
assert config_from_args(args).algorithm.lr == 1e-3
print("resolved:", resolved, sorted(ALGORITHMS),
      sorted(m for m in ("torch", "numba", "mpi4py") if m in sys.modules))
"""


def test_resolving_a_config_loads_neither_torch_nor_numba():
    """Every registered algorithm's config with every preset, and a command line, resolve in a
    fresh interpreter that then holds neither torch, numba nor mpi4py (the algorithms' tables
    are light modules; an algorithm's own module is imported where it is built)."""
    out = run_snippet(RESOLVE_EVERY_CONFIG)
    line = one_line_with(out, "resolved: ")
    assert line == "resolved: 18 ['crossq', 'ddpg', 'naf', 'sac', 'td3', 'vracer'] []", out


def test_an_algorithm_class_is_imported_when_it_is_first_asked_for():
    """The registry's names need no import; its class brings torch (so the test above would
    see an algorithm module imported by resolving a config)."""
    out = run_snippet("import sys\n"
                      "from hpc_refer.algorithms.registry import ALGORITHMS\n"
                      "before = 'torch' in sys.modules\n"
                      "cls = ALGORITHMS['ddpg']\n"
                      "print('torch:', before, 'torch' in sys.modules, cls.__module__)\n")
    assert one_line_with(out, "torch: ") == "torch: False True hpc_refer.algorithms.ddpg", out


FACES = sorted(p for p in PACKAGE.rglob("__init__.py")
               if p.parent.name not in ("envs", "tables", "kinds") and "prediction" not in p.parts)
"""The packages' ``__init__.py`` files that must hold nothing but their docstring (``envs/``
still holds the names of the solver interface that solvers import, the prediction suite its
own API, and ``algorithms/tables/`` and ``envs/kinds/`` the loop that imports every table or
kind; see ARCHITECTURE.md)."""


@pytest.mark.parametrize("face", FACES, ids=lambda p: str(p.parent.relative_to(PACKAGE.parent)))
def test_a_package_face_holds_only_its_docstring(face):
    """One address per name: a package's ``__init__.py`` re-exports nothing of its modules
    (the package root's holds ``__version__`` and the module ``__getattr__`` that hands on the
    Python API on first use, tested below; it imports nothing of hpc_refer)."""
    body = ast.parse(face.read_text()).body
    assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    rest = body[1:]
    if face.parent == PACKAGE:
        names = [n.name if isinstance(n, ast.FunctionDef) else ast.unparse(n).split(" =")[0]
                 for n in rest if not isinstance(n, ast.Import | ast.ImportFrom)]
        assert names == ["__version__", "_API", "__getattr__"]
        imported = {a.name for n in rest if isinstance(n, ast.Import | ast.ImportFrom)
                    for a in n.names}
        assert imported <= {"annotations", "importlib", "Any"}, imported
    else:
        assert rest == [], f"{face} holds {[ast.unparse(n)[:60] for n in rest]}"


def test_the_package_root_hands_on_the_api_without_importing_it():
    """``import hpc_refer`` loads none of its modules; the API's names are the objects at
    their one address (``export/api.py``; ``evaluate`` is the module); others raise."""
    out = run_snippet("import sys\n"
                      "import hpc_refer\n"
                      "before = sorted(m for m in sys.modules if m.startswith('hpc_refer.'))\n"
                      "import hpc_refer.export.api as api, hpc_refer.evaluate as ev\n"
                      "same = (hpc_refer.train is api.train, hpc_refer.load_policy is "
                      "api.load_policy, hpc_refer.evaluate is ev)\n"
                      "try:\n    hpc_refer.Controller\nexcept AttributeError as e:\n"
                      "    missing = str(e)\n"
                      "print('face:', before, same, missing)\n")
    assert one_line_with(out, "face: ") == (
        "face: [] (True, True, True) module 'hpc_refer' has no attribute 'Controller'"), out


def test_the_records_are_plain_data():
    """No torch, no numba, and neither the replay nor its sum tree (they import the records:
    the circle records -> replay -> sumtree -> records is gone)."""
    watched = ("torch", "numba", "hpc_refer.replay", "hpc_refer.replay.sumtree")
    assert loaded("hpc_refer.report.records", watched) == []


BELOW_THE_LOOP = ("envs/**/*.py", "replay/*.py", "algorithms/**/*.py", "report/*.py", "config/*.py")
"""The modules that receive MPI objects and never import them (globs under hpc_refer/)."""


def imported_modules(tree: ast.Module, package: str) -> set[str]:
    """Every module an ``import`` or ``from ... import`` of ``tree`` names (anywhere: at
    module level, in functions, under TYPE_CHECKING), relative imports resolved in
    ``package`` (the one the file is in), ``from package import name`` also as
    ``package.name``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) + 1 - node.level]
                base = ".".join([*parent, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_nothing_below_the_loop_imports_parallel():
    files = sorted({p for pattern in BELOW_THE_LOOP for p in PACKAGE.glob(pattern)})
    assert len(files) > 10 and PACKAGE / "envs" / "diffusion.py" in files
    offenders = []
    for path in files:
        package = ".".join(("hpc_refer", *path.relative_to(PACKAGE).parent.parts))
        for name in imported_modules(ast.parse(path.read_text(), str(path)), package):
            if name == "hpc_refer.parallel" or name.startswith("hpc_refer.parallel."):
                offenders.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert not offenders, "\n".join(sorted(offenders))


def import_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module of the import graph
    ``edges`` (Tarjan's algorithm, iterative): each is a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            nxt = next(targets, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_the_circle_finder_finds_a_circle():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_package_imports_itself_back():
    """No circle of imports anywhere in hpc_refer (function-level and TYPE_CHECKING imports
    included), through grimp, the import graph of import-linter."""
    import grimp

    graph = grimp.build_graph("hpc_refer")
    modules = set(graph.modules)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) & modules for m in modules}
    assert len(edges) > 50
    assert import_circles(edges) == []
