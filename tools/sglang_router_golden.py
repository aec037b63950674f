#!/usr/bin/env python3
"""The flags of SGLang's P/D router (``python -m sglang_router.launch_router``), read from
sglang-router's own argument definitions (``sglang_router/router_args.py``,
``RouterArgs.add_cli_args``) with ``ast``, never imported.

    pip download sglang-router==0.3.2 --no-deps -d /tmp/sglang-router
    python tools/sglang_router_golden.py /tmp/sglang-router/sglang_router-0.3.2-*.whl

Output: ``tests/data/sglang_router_flags.json``: each flag (the ``--{prefix}`` of
``add_cli_args`` is empty for ``launch_router``) with its ``nargs`` and ``action``.
"""

from __future__ import annotations

import ast
import json
import sys
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "sglang_router_flags.json"


def flag_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):  # f"--{prefix}name": prefix "" for launch_router
        parts = [v.value for v in node.values if isinstance(v, ast.Constant)]
        return "".join(str(p) for p in parts)
    return None


def flags(source: str) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and node.args
        ):
            continue
        name = flag_name(node.args[0])
        if not name or not name.startswith("--"):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg in ("nargs", "action")}
        out[name] = {
            k: (v.value if isinstance(v, ast.Constant) else ast.unparse(v)) for k, v in kw.items()
        }
    return dict(sorted(out.items()))


def main() -> None:
    wheel = Path(sys.argv[1])
    with zipfile.ZipFile(wheel) as z:
        source = z.read("sglang_router/router_args.py").decode()
        version = z.read("sglang_router/version.py").decode().split('"')[1]
    doc = {
        "generator": "tools/sglang_router_golden.py",
        "source": f"sglang-router {version} ({wheel.name}): sglang_router/router_args.py",
        "version": version,
        "flags": flags(source),
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
