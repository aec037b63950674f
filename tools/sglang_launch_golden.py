#!/usr/bin/env python3
"""The launch flags of every SGLang release pdtp covers, read from SGLang's own argument
definitions (``server_args.py``'s ``add_cli_args``; from 0.5.2x also the dataclass fields of
``sglang/srt/arg_groups/fields/`` that ``add_cli_args_from_dataclass`` turns into flags).

    python tools/sglang_launch_golden.py --wheels /tmp/sglang-wheels

Output: ``tests/data/sglang_launch_flags.json``: per release, which of the flags
``pdtp``'s SGLang launch lines may use exist, and the choices of ``--disaggregation-mode``
and ``--disaggregation-transfer-backend``. Wheels as for ``tools/sglang_golden.py``.
"""

from __future__ import annotations

import argparse
import ast
import json
import zipfile
from pathlib import Path
from typing import Any

import sglang_golden

# The flags pdtp's launch lines are built from (present or not, per release).
WANTED = (
    "--model-path",
    "--host",
    "--port",
    "--tp-size",
    "--dp-size",
    "--ep-size",
    "--pp-size",
    "--enable-dp-attention",
    "--attn-dp-size",
    "--disaggregation-mode",
    "--disaggregation-transfer-backend",
    "--disaggregation-bootstrap-port",
    "--disaggregation-ib-device",
    # An instance spanning nodes: one launch per node.
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
    # What the plan sized: the KV cache's dtype, online weight quantization, the served name.
    "--kv-cache-dtype",
    "--quantization",
    "--served-model-name",
)
CHOICES = (
    "--disaggregation-mode",
    "--disaggregation-transfer-backend",
    "--kv-cache-dtype",
    "--quantization",
)
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "sglang_launch_flags.json"


def sources(wheel: Path) -> dict[str, str]:
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name == "sglang/srt/server_args.py" or (
                name.startswith("sglang/srt/arg_groups/") and name.endswith(".py")
            ):
                out[name] = z.read(name).decode()
    return out


def _literal_list(node: ast.AST, names: dict[str, ast.AST]) -> list[str] | None:
    if isinstance(node, ast.Name) and node.id in names:
        node = names[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        vals = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return [v for v in vals if isinstance(v, str)]
    return None


def flags(files: dict[str, str]) -> dict[str, Any]:
    found: dict[str, list[str] | None] = {}
    names: dict[str, ast.AST] = {}  # module-level list constants (choices)
    trees = {f: ast.parse(src) for f, src in files.items()}
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                t = node.targets[0]
                if isinstance(t, ast.Name):
                    names[t.id] = node.value
    for tree in trees.values():
        for node in ast.walk(tree):
            # parser.add_argument("--flag", ..., choices=[...])
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                kw = {k.arg: k.value for k in node.keywords}
                choices = _literal_list(kw["choices"], names) if "choices" in kw else None
                for a in node.args:
                    if isinstance(a, ast.Constant) and str(a.value).startswith("--"):
                        found[a.value] = choices
            # field: A[T, Arg(...)] or A[T, "help"] in a dataclass of arg_groups/fields
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(node.annotation, ast.Subscript)
                and ast.unparse(node.annotation.value) == "A"
            ):
                found.update(_field_flags(node.target.id, node.annotation, names))
    wanted = {f: f in found for f in WANTED}
    choices = {f: found.get(f) for f in CHOICES}
    return {"flags": wanted, "choices": choices}


def _field_flags(
    name: str, ann: ast.Subscript, names: dict[str, ast.AST]
) -> dict[str, list[str] | None]:
    parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    if len(parts) < 2:
        return {}
    typ, meta = parts[0], parts[1]
    cli = ["--" + name.replace("_", "-")]
    choices = None
    if isinstance(typ, ast.Subscript) and ast.unparse(typ.value) == "Literal":
        elts = typ.slice.elts if isinstance(typ.slice, ast.Tuple) else [typ.slice]
        choices = [e.value for e in elts if isinstance(e, ast.Constant)]
    if isinstance(meta, ast.Call) and ast.unparse(meta.func) == "Arg":
        kw = {k.arg: k.value for k in meta.keywords}
        if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value:
            return {}
        if isinstance(kw.get("cli_name"), ast.Constant):
            cli = [kw["cli_name"].value]
        if "aliases" in kw:
            cli += _literal_list(kw["aliases"], names) or []
        if "choices" in kw:
            choices = _literal_list(kw["choices"], names)
    elif not (isinstance(meta, ast.Constant) and isinstance(meta.value, str)):
        return {}
    return dict.fromkeys(cli, choices)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheels", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    doc: dict[str, Any] = {
        "generator": "tools/sglang_launch_golden.py",
        "source": "server_args.py add_cli_args and arg_groups/fields of each sglang wheel",
        "releases": {},
    }
    for v in sglang_golden.RELEASES:
        doc["releases"][v] = flags(sources(sglang_golden.fetch(v, args.wheels)))
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
