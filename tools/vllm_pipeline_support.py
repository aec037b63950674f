"""Which vLLM architectures support pipeline parallel: regenerates
``python/pdtp/data/vllm_pipeline.json`` from a vLLM source tree or wheel.

vLLM refuses ``--pipeline-parallel-size > 1`` unless the model class implements
``SupportsPP`` (``ModelConfig.verify_with_parallel_config`` → the registry's
``is_pp_supported_model`` → ``supports_pp(model_cls)``: ``SupportsPP`` in the class's MRO).
vLLM itself answers that by importing every model (torch, CUDA kernels); this tool answers it
without importing anything: it reads the registry's ``architecture -> (module, class)``
tables and walks each class's bases through the ``model_executor/models`` sources with
``ast`` (same-module classes, relative and absolute imports, module-level aliases).

    python tools/vllm_pipeline_support.py /path/to/vllm-0.33.0-...whl   # or a source dir
"""

from __future__ import annotations

import ast
import json
import sys
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "python/pdtp/data/vllm_pipeline.json"


PKG = "vllm.model_executor.models"


class Sources:
    """vLLM's Python sources of a wheel or a source tree, by dotted module name."""

    def __init__(self, where: Path):
        self.files: dict[str, str] = {}
        if where.is_file():
            with zipfile.ZipFile(where) as z:
                for n in z.namelist():
                    if n.startswith("vllm/") and n.endswith(".py"):
                        self.files[n[:-3].replace("/", ".")] = z.read(n).decode()
                meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
                version = meta.split("/")[0].split("-")[1].removesuffix(".dist")
        else:
            root = where if (where / "vllm").is_dir() else where.parent
            for f in (root / "vllm").rglob("*.py"):
                self.files[str(f.relative_to(root))[:-3].replace("/", ".")] = f.read_text()
            version = root.name.split("-")[-1]
        self.version = version
        self.trees: dict[str, ast.Module] = {}

    def module(self, name: str) -> ast.Module | None:
        key = name.removesuffix(".__init__")
        for cand in (key, key + ".__init__"):
            if cand in self.files:
                if cand not in self.trees:
                    self.trees[cand] = ast.parse(self.files[cand])
                return self.trees[cand]
        return None

    def is_package(self, name: str) -> bool:
        return name + ".__init__" in self.files


def _registry(src: Sources) -> dict[str, tuple[str, str]]:
    tree = src.module(PKG + ".registry")
    assert tree is not None, "no registry.py"
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Dict):
            continue
        name = node.targets[0].id if isinstance(node.targets[0], ast.Name) else ""
        if not name.endswith("_MODELS") or name.startswith("_PREVIOUSLY"):
            continue
        for k, v in zip(node.value.keys, node.value.values):
            if isinstance(k, ast.Constant) and isinstance(v, ast.Tuple) and len(v.elts) >= 2:
                mod, cls = v.elts[0], v.elts[1]
                if isinstance(mod, ast.Constant) and isinstance(cls, ast.Constant):
                    m = str(mod.value)
                    full = m if m.startswith("vllm.") else f"{PKG}.{m}"
                    out.setdefault(str(k.value), (full, str(cls.value)))
    return out


def _imports(src: Sources, tree: ast.Module, module: str) -> dict[str, tuple[str, str]]:
    """Names imported into a module: local name -> (full module, name)."""
    out: dict[str, tuple[str, str]] = {}
    package = module if src.is_package(module) else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            target = ".".join([*parts, base] if base else parts)
        else:
            target = base
        for a in node.names:
            out[a.asname or a.name] = (target, a.name)
    return out


def supports_pp(src: Sources, module: str, cls: str, seen: set[tuple[str, str]]) -> bool:
    if (module, cls) in seen:
        return False
    seen.add((module, cls))
    tree = src.module(module)
    if tree is None:
        return False
    imports = _imports(src, tree, module)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for base in node.bases:
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
                if isinstance(base, ast.Subscript):
                    inner = base.value
                    name = getattr(inner, "id", getattr(inner, "attr", None))
                if name is None:
                    continue
                if name == "SupportsPP":
                    return True
                if any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body):
                    if supports_pp(src, module, name, seen):
                        return True
                elif name in imports:
                    mod, orig = imports[name]
                    if orig == "SupportsPP":
                        return True
                    if supports_pp(src, mod, orig, seen):
                        return True
            return False
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and any(isinstance(t, ast.Name) and t.id == cls for t in node.targets)
        ):
            return supports_pp(src, module, node.value.id, seen)
    if cls in imports:  # re-exported
        mod, orig = imports[cls]
        return supports_pp(src, mod, orig, seen)
    return False


def main(where: str) -> None:
    src = Sources(Path(where))
    table = {arch: supports_pp(src, m, c, set()) for arch, (m, c) in sorted(_registry(src).items())}
    data = {
        "_about": (
            "vLLM architectures whose model class implements SupportsPP (pipeline parallel "
            "loads) and those that do not, read from vLLM's model registry and sources by "
            "tools/vllm_pipeline_support.py"
        ),
        "vllm": src.version,
        "pipeline": sorted(a for a, ok in table.items() if ok),
        "no_pipeline": sorted(a for a, ok in table.items() if not ok),
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(
        f"{OUT}: {len(data['pipeline'])} with, {len(data['no_pipeline'])} without "
        f"(vLLM {src.version})"
    )


if __name__ == "__main__":
    main(sys.argv[1])
