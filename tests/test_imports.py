"""Issue 24 part 5: no import cycles. pdtp's modules form layers — a module imports only
modules below it — so following a value through ``pdtp.solve`` enters each module once,
downward.

The graph is built with ``ast`` from every ``import`` that runs (module level and inside
functions; ``if TYPE_CHECKING:`` blocks are types only). Module-level imports must be acyclic
outright. A function may import a module *above* it only where :data:`UPWARD` lists the edge
with the reason: each is a convenience that reaches up by design, and the test checks that
every listed edge still exists and is lazy (so the list cannot rot or hide a new cycle).

The Rust core's modules are checked the same way (``use`` paths inside ``src/plan``).
"""

from __future__ import annotations

import ast
import pathlib
import re
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "pdtp"

# (importer, imported): the documented upward imports, each inside a function.
UPWARD: dict[tuple[str, str], str] = {
    ("pdtp.planning.plan", "pdtp.deployment.build"): (
        "Plan.vllm_commands(): the launch lines are the deployment layer's (one maker)"
    ),
    ("pdtp.planning.plan", "pdtp.deployment"): "Plan.deploy(): pdtp.deploy(plan, ...)",
    ("pdtp.planning.plan", "pdtp.planning.plan_read"): (
        "Plan.from_dict/from_json: the reader of plan dicts lives beside Plan (it builds Plans)"
    ),
    ("pdtp.deployment.ports", "pdtp.deployment.launch"): (
        "the DP RPC and master port bases are launch facts the port table reports"
    ),
    ("pdtp.transfer", "pdtp.deployment.connectors"): (
        "transfer_map asks the connector's own deploy module how its ranks pair"
    ),
    ("pdtp.simulate", "pdtp.planning.plan"): (
        "simulate(<plan dict>): Plan.from_dict is the one reader of a plan's JSON"
    ),
    ("pdtp.simulate", "pdtp.planning.solve"): (
        "simulate(<pdtp.Scenario>): the plan pdtp.solve gives the scenario is simulated"
    ),
    ("pdtp.scenario", "pdtp.planning.scenario"): (
        "Scenario's pool and field checks are the planners' own resolvers, run once when the "
        "scenario is made"
    ),
    ("pdtp.cli", "pdtp.service.command"): (
        "`pdtp serve`: its flags and its start; the HTTP service is built on the CLI's parser"
    ),
}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "vendored" not in p.parts}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import that runs, with whether it runs at module level."""

    def walk(
        nodes: list[ast.stmt], top: bool
    ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield node, top
            elif isinstance(node, ast.If) and _is_type_checking(node):
                yield from walk(node.orelse, top)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(getattr(node, "body", []), False)
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, top)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        yield from walk([n for n in inner if isinstance(n, ast.AST)], top)

    yield from walk(tree.body, True)


def _edges() -> dict[tuple[str, str], bool]:
    """(importer, imported) → whether any import of it runs at module level."""
    mods = _modules()
    out: dict[tuple[str, str], bool] = {}
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node, top in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" for a in node.names] + [module]
            for t in targets:
                # The deepest pdtp module the name is (or is in).
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                # A module's own packages are already importing when it runs.
                if not t or t == name or name.startswith(t + "."):
                    continue
                out[(name, t)] = out.get((name, t), False) or top
                break
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return [*stack[stack.index(w) :], w]
            if w not in state and (found := visit(w)):
                return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def _graph(edges: dict[tuple[str, str], bool], *, lazy: bool) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for (a, b), top in edges.items():
        if (top or lazy) and (a, b) not in UPWARD:
            out.setdefault(a, set()).add(b)
    return out


def test_module_level_imports_are_acyclic():
    edges = _edges()
    assert _cycle(_graph(edges, lazy=False)) is None


def test_every_import_that_runs_is_acyclic_but_the_documented_upward_ones():
    cycle = _cycle(_graph(_edges(), lazy=True))
    assert cycle is None, " -> ".join(cycle or [])


def test_the_documented_upward_imports_exist_and_are_lazy():
    edges = _edges()
    for edge, why in UPWARD.items():
        assert edge in edges, f"{edge} is no longer imported: drop it from UPWARD ({why})"
        assert not edges[edge], f"{edge} is imported at module level: {why}"


def test_the_detector_finds_a_cycle():
    # The check itself must be able to fail.
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None
    edges = _edges()
    assert edges[("pdtp.planning.solve", "pdtp.scenario")] is True  # the parser sees imports
    assert edges[("pdtp.planning.plan", "pdtp.deployment.build")] is False


def test_engine_defaults_sit_below_calibration_and_perf():
    # The cycle issue 24 found: perf imported calibration for engine_defaults, calibration
    # imported perf. Both read pdtp.engine now, which imports neither.
    edges = _edges()
    assert ("pdtp.perf", "pdtp.calibration") not in edges
    assert ("pdtp.perf", "pdtp.engine") in edges
    assert not any(a == "pdtp.engine" and b in ("pdtp.perf", "pdtp.calibration") for a, b in edges)


# ---- the Rust core: src/plan's modules ------------------------------------------------------

_USE = re.compile(r"\b(?:super|crate::plan)::(\w+)")


def test_rust_plan_modules_are_acyclic():
    plan = ROOT / "src" / "plan"
    names = {p.stem for p in plan.glob("*.rs")} - {"mod", "tests"}
    graph: dict[str, set[str]] = {}
    for name in names:
        text = (plan / f"{name}.rs").read_text()
        text = text.split("#[cfg(test)]")[0]  # unit tests may use any module
        text = re.sub(r"//.*", "", text)  # doc links are not uses
        for m in _USE.finditer(text):
            if m.group(1) in names and m.group(1) != name:
                graph.setdefault(name, set()).add(m.group(1))
    assert graph.get("candidates"), "the parser sees candidates' uses"
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


# ---- docs/architecture.md: the files it names exist, and its layers hold -------------------

DOC = ROOT / "docs" / "architecture.md"
_PATH = re.compile(r"`((?:python|src|tests|tools|benchmarks|docs)/[\w./-]+)`")


def _doc_paths(text: str) -> list[str]:
    return _PATH.findall(text)


def test_every_file_the_architecture_page_names_exists():
    paths = _doc_paths(DOC.read_text())
    assert len(paths) > 40, "the page names the files to touch"
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def _layers() -> dict[str, int]:
    """Each module the page's layer list names → its layer number (a folder: every module in
    it; ``planning/x.py`` items continue the item's folder)."""
    text = DOC.read_text().split("## The layers")[1].split("\n## ")[0]
    mods = _modules()
    out: dict[str, int] = {}
    for item in re.split(r"\n(?=\d+\. )", text.strip()):
        head = re.match(r"(\d+)\. ", item)
        if head is None:
            continue
        layer = int(head.group(1))
        folder = ""
        for token in re.findall(r"`([\w./-]+)`", item):
            if token.startswith("python/pdtp/"):
                folder = token if token.endswith("/") else folder
                path = ROOT / token
            elif token.endswith(".py") and folder:
                path = ROOT / folder / token
            else:
                continue
            for name, p in mods.items():
                if p == path or (path.is_dir() and path in p.parents):
                    out.setdefault(name, layer)
    return out


def test_the_layers_the_page_lists_are_the_import_graph():
    layers = _layers()
    assert layers["pdtp.planning.solve"] == 5 and layers["pdtp.engine"] == 2
    wrong = [
        f"{a} (layer {layers[a]}) imports {b} (layer {layers[b]})"
        for (a, b) in _edges()
        if a in layers and b in layers and layers[b] > layers[a] and (a, b) not in UPWARD
    ]
    assert not wrong, "\n".join(wrong)


# ---- the model's walk through pdtp.solve ----------------------------------------------------
# Following `model` through `pdtp.solve` (issue 24): every call into pdtp that receives it as
# an argument — the value the user gave, or the resolved `pdtp.Model` (not the Model's own
# methods: those are the model answering, not the model travelling) — is a stop; a stop whose
# caller is in another module is a crossing (`public_api`'s wrapper in `_validate` is
# transparent). The model must be resolved once (one crossing into the catalog, with what the
# user gave), and travel downward: along every chain of nested stops it never returns to a
# module it left, and every crossing goes to the same or a lower layer of
# docs/architecture.md.


def _walk(run: object, given: object) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """``(caller module, module, function, chain)`` per stop while ``run()`` runs; ``chain``
    the modules of the enclosing stops, outermost first, then this one's."""
    import sys

    import pdtp
    from pdtp._model import Model
    from pdtp.perf import constant_inputs, gpu_inputs, model_inputs

    for cached in (model_inputs, gpu_inputs, constant_inputs):  # cached calls are not seen
        cached.cache_clear()
    # The package that runs: the source tree (editable install) or site-packages (CI's).
    installed = pathlib.Path(pdtp.__file__).parent
    root = str(installed)
    mods = {str(installed / p.relative_to(PACKAGE)): name for name, p in _modules().items()}

    def carries(v: object) -> bool:
        return v is given or isinstance(v, Model) or (isinstance(given, str) and v == given)

    stops: dict[object, tuple[str, ...]] = {}
    out: list[tuple[str, str, str, tuple[str, ...]]] = []

    def hook(frame, event, arg):  # type: ignore[no-untyped-def]
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(root):
            return
        n = code.co_argcount + code.co_kwonlyargcount
        n += bool(code.co_flags & 4) + bool(code.co_flags & 8)
        args = [a for a in code.co_varnames[:n] if a != "self" and a in frame.f_locals]
        if not any(carries(frame.f_locals[a]) for a in args):
            return
        module = mods[code.co_filename]
        caller, up = frame.f_back, "<user>"
        while caller is not None and mods.get(caller.f_code.co_filename) == "pdtp._validate":
            caller = caller.f_back
        if caller is not None and caller.f_code.co_filename in mods:
            up = mods[caller.f_code.co_filename]
        outer = frame.f_back
        while outer is not None and outer not in stops:
            outer = outer.f_back
        chain = (*(stops[outer] if outer is not None else ()), module)
        stops[frame] = chain
        out.append((up, module, code.co_name, chain))

    sys.setprofile(hook)
    try:
        run()  # type: ignore[operator]
    finally:
        sys.setprofile(None)
    return out


def _returns(chain: tuple[str, ...]) -> list[str]:
    """Modules a chain comes back to after leaving them."""
    seen: list[str] = []
    back = []
    for m in chain:
        if seen and seen[-1] == m:
            continue
        if m in seen:
            back.append(m)
        seen.append(m)
    return back


def _check_walk(walk: list[tuple[str, str, str, tuple[str, ...]]], given: object) -> None:
    layers = _layers()
    crossings = [(a, b, f) for a, b, f, _ in walk if a != b]
    into_catalog = [(a, f) for a, b, f in crossings if b == "pdtp.catalog"]
    assert into_catalog == [("pdtp.scenario", "resolve_model")], (
        f"the model is resolved once (the public Scenario's), not {into_catalog}"
    )
    for *_, chain in walk:
        assert not _returns(chain), f"the model returns to {_returns(chain)}: {chain}"
    for a, b, f in crossings:
        if a == "<user>":
            continue
        assert a in layers and b in layers, f"{a} or {b} has no layer in docs/architecture.md"
        assert layers[b] <= layers[a], f"{a} (layer {layers[a]}) hands the model up to {b}.{f}"
    # The walk is seen: the tracer follows the model into the catalog, the performance
    # inputs and the layout facts (the catalog's parse of a name is cached per process).
    reached = {b for _, b, _ in crossings}
    assert {"pdtp.catalog", "pdtp.perf", "pdtp.layout"} <= reached, reached


def test_the_model_walks_through_solve_once_and_downward():
    import pdtp

    for given in ("llama-3.1-70b", pdtp.model("qwen3-30b-a3b")):
        walk = _walk(lambda g=given: pdtp.solve(g, gpus=16, gpu="h100", mode="auto"), given)
        _check_walk(walk, given)
        # The mean-based planner enters each module from one place only.
        callers: dict[str, set[str]] = {}
        for a, b, _, _ in walk:
            if a != b:
                callers.setdefault(b, set()).add(a)
        twice = {b: sorted(a) for b, a in callers.items() if len(a) > 1}
        assert not twice, f"modules the model enters from two places: {twice}"


def test_the_goodput_planners_walk_is_downward_too():
    # slo_percentile: each candidate plan is simulated (the simulator reads the model from
    # the plan, already resolved): the same crossings again per candidate, never a lookup.
    import pdtp

    given = "llama-3.1-8b"
    walk = _walk(lambda: pdtp.solve(given, gpus=8, gpu="h100", slo_percentile=0.9), given)
    _check_walk(walk, given)
    assert any(b == "pdtp.perf" and a == "pdtp.simulate" for a, b, _, _ in walk)


def test_the_walk_check_can_fail():
    assert _returns(("pdtp.planning.solve", "pdtp.scenario", "pdtp.planning.solve")) == [
        "pdtp.planning.solve"
    ]
    assert _returns(("a", "a", "b", "c")) == []
    # Looking a resolved model up again is seen.
    import pdtp
    from pdtp.catalog import resolve_model

    m = pdtp.model("llama-3.1-8b")

    def again() -> None:
        pdtp.solve(m, gpus=8, gpu="h100")
        pdtp.evaluate(resolve_model(m), gpu="h100", aggregated="tp1", aggregated_instances=1)

    walk = _walk(again, m)
    try:
        _check_walk(walk, m)
    except AssertionError as e:
        assert "resolved once" in str(e)
    else:
        raise AssertionError("a second lookup went unseen")
