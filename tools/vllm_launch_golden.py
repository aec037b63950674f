#!/usr/bin/env python3
"""Regenerate tests/data/vllm_launch_golden.json: what each vLLM release accepts at launch.

`pdtp deploy` writes `vllm serve` lines, KV-transfer configs, environment variables and proxy
commands. This script reads vLLM's own source of every release (never importing vLLM, which
needs torch) with `ast` and records, per version:

- ``serve_flags``: every option `vllm serve` defines (`make_arg_parser`: its own
  ``add_argument`` calls, the ``FrontendArgs`` dataclass fields that become ``--field-name``,
  and every ``add_argument`` in ``EngineArgs`` / ``AsyncEngineArgs``);
- ``kv_transfer_config``: the fields of ``KVTransferConfig`` and the ``kv_role`` values;
- ``connectors``: the connector names the factory registers;
- ``env_vars``: the ``VLLM_HOST_IP`` / ``VLLM_PORT`` / ``VLLM_NIXL_*`` / ``VLLM_MORIIO_*``
  variables ``vllm/envs.py`` defines, each with the parser it applies;
- ``moriio`` (or null before MoRIIO shipped): the ``kv_connector_extra_config`` keys the
  connector reads, the source of ``get_port_offset`` and of every expression that derives a
  bound port, and the reference proxy's path, options and fixed ports;
- ``nixl``: the side-channel port expressions and the reference proxy's path and options.

Tests compare pdtp's launch output with this file (tests/test_deploy_vllm.py); they never
download. Sources: the release's sdist from PyPI (the archive pip would fetch: the sdist,
unlike the wheel, also holds the example proxies), or local archives / unpacked trees.

    python tools/vllm_launch_golden.py                       # every release >= 0.11.0
    python tools/vllm_launch_golden.py --versions 0.33.0 0.34.0
    python tools/vllm_launch_golden.py --from ~/vllm-sdists   # vllm-X.Y.Z.tar.gz or X.Y.Z/
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm_launch_golden.json"
INDEX = "https://pypi.org/simple/vllm/"
OLDEST = (0, 11, 0)
MORIIO_DIR = "vllm/distributed/kv_transfer/kv_connector/v1/moriio"
NIXL_DIRS = (
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl",
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py",
)
ENV_PATTERN = re.compile(r"^(VLLM_HOST_IP|VLLM_PORT|VLLM_NIXL_\w+|VLLM_MORIIO_\w+)$")


def vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


# ---- sources --------------------------------------------------------------------------------


class Source:
    """The files of one vLLM release, from an sdist archive or an unpacked tree; paths are
    relative to the project root (``vllm/...``, ``examples/...``, ``tests/...``)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    @classmethod
    def from_archive(cls, data: bytes) -> Source:
        files = {}
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():
                rel = m.name.split("/", 1)[-1]
                if m.isfile() and rel.endswith(".py") and _wanted(rel):
                    f = tar.extractfile(m)
                    if f is not None:
                        files[rel] = f.read().decode("utf-8")
        return cls(files)

    @classmethod
    def from_tree(cls, root: Path) -> Source:
        files = {}
        for p in root.rglob("*.py"):
            rel = p.relative_to(root).as_posix()
            if _wanted(rel):
                files[rel] = p.read_text(encoding="utf-8")
        return cls(files)

    def get(self, path: str) -> str | None:
        return self.files.get(path)

    def under(self, prefix: str) -> Iterator[tuple[str, str]]:
        for path in sorted(self.files):
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                yield path, self.files[path]

    def named(self, name: str, under: str) -> str | None:
        hits = [p for p in sorted(self.files) if p.startswith(under) and p.endswith("/" + name)]
        return hits[0] if hits else None


def _wanted(rel: str) -> bool:
    return rel.startswith(("vllm/", "examples/", "tests/v1/kv_connector/"))


def pypi_sdists() -> dict[str, str]:
    """``version -> sdist URL`` for every final release on PyPI's simple index (PEP 691)."""
    req = urllib.request.Request(INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        index = json.load(r)
    out = {}
    for f in index["files"]:
        m = re.fullmatch(r"vllm-(\d+\.\d+\.\d+)\.tar\.gz", f["filename"])
        if m and not f.get("yanked"):
            out[m.group(1)] = f["url"]
    return out


def load_sources(versions: list[str] | None, local: Path | None) -> dict[str, Source]:
    out: dict[str, Source] = {}
    if local is not None:
        for p in sorted(local.iterdir()):
            m = re.fullmatch(r"(?:vllm-)?(\d+\.\d+\.\d+)(?:\.tar\.gz)?", p.name)
            if not m or (versions and m.group(1) not in versions):
                continue
            v = m.group(1)
            print(f"reading {p}", file=sys.stderr)
            if p.is_dir():
                root = p / f"vllm-{v}" if (p / f"vllm-{v}").is_dir() else p
                out[v] = Source.from_tree(root)
            else:
                out[v] = Source.from_archive(p.read_bytes())
        return out
    urls = pypi_sdists()
    wanted = versions or [v for v in urls if vkey(v) >= OLDEST]
    for v in sorted(wanted, key=vkey):
        if v not in urls:
            raise SystemExit(f"vLLM {v} has no sdist on PyPI")
        print(f"downloading {urls[v]}", file=sys.stderr)
        with urllib.request.urlopen(urls[v], timeout=600) as r:
            out[v] = Source.from_archive(r.read())
    return out


# ---- ast helpers ----------------------------------------------------------------------------


def _str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _calls(tree: ast.AST, attr: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name == attr:
                yield node


def _option_strings(tree: ast.AST) -> set[str]:
    """Option strings of every ``add_argument`` call under ``tree``: literal arguments, and
    loop variables bound to literal lists (``for arg, t in [("--a", str), ...]``)."""
    loops: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.iter, (ast.List, ast.Tuple)):
            names = [node.target] if isinstance(node.target, ast.Name) else []
            if isinstance(node.target, ast.Tuple):
                names = list(node.target.elts)
            for pos, target in enumerate(names):
                if not isinstance(target, ast.Name):
                    continue
                vals = []
                for elt in node.iter.elts:
                    item = elt.elts[pos] if isinstance(elt, ast.Tuple) else elt
                    s = _str(item)
                    if s is not None:
                        vals.append(s)
                loops[target.id] = vals
    out: set[str] = set()
    for call in _calls(tree, "add_argument"):
        for a in call.args:
            s = _str(a)
            if s is not None and s.startswith("-"):
                out.add(s)
            elif isinstance(a, ast.Name) and a.id in loops:
                out.update(x for x in loops[a.id] if x.startswith("-"))
            elif isinstance(a, ast.JoinedStr):
                pass  # ``f"--{key}"`` over dataclass fields: handled by _dataclass_flags
    return out


def _class_fields(tree: ast.Module, name: str) -> list[str]:
    """Dataclass fields of class ``name`` and of its bases defined in the same module."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    cls = classes.get(name)
    if cls is None:
        return []
    out: list[str] = []
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            out += _class_fields(tree, base.id)
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            ann = ast.unparse(stmt.annotation)
            if not stmt.target.id.startswith("_") and "ClassVar" not in ann:
                out.append(stmt.target.id)
    return out


def _function(tree: ast.AST, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


# ---- facts ----------------------------------------------------------------------------------


def serve_flags(src: Source) -> list[str]:
    # `vllm serve` builds its parser with make_arg_parser, from the module serve.py imports.
    serve = ast.parse(src.get("vllm/entrypoints/cli/serve.py") or "")
    module = next(
        n.module
        for n in ast.walk(serve)
        if isinstance(n, ast.ImportFrom) and any(a.name == "make_arg_parser" for a in n.names)
    )
    cli_path = (module or "").replace(".", "/") + ".py"
    cli = ast.parse(src.get(cli_path) or "")
    make = _function(cli, "make_arg_parser")
    assert make is not None
    flags = _option_strings(make)
    # FrontendArgs.add_cli_args turns every dataclass field into --field-name.
    flags |= {"--" + f.replace("_", "-") for f in _class_fields(cli, "FrontendArgs")}
    engine = ast.parse(src.get("vllm/engine/arg_utils.py") or "")
    for cls in ("EngineArgs", "AsyncEngineArgs"):
        node = next(n for n in engine.body if isinstance(n, ast.ClassDef) and n.name == cls)
        method = _function(node, "add_cli_args")
        if method is not None:
            flags |= _option_strings(method)
    return sorted(flags)


def kv_transfer_config(src: Source) -> dict[str, Any]:
    text = src.get("vllm/config/kv_transfer.py")
    assert text is not None
    tree = ast.parse(text)
    roles: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in ("KVProducer", "KVConsumer") for t in node.targets
        ):
            roles.update(s for s in (_str(c) for c in ast.walk(node.value)) if s is not None)
    return {"fields": _class_fields(tree, "KVTransferConfig"), "kv_roles": sorted(roles)}


def connectors(src: Source) -> list[str]:
    text = src.get("vllm/distributed/kv_transfer/kv_connector/factory.py") or ""
    names = {_str(c.args[0]) for c in _calls(ast.parse(text), "register_connector") if c.args}
    return sorted(n for n in names if n)


def env_vars(src: Source) -> dict[str, str]:
    """``name -> the parser vLLM's envs.py maps it to`` (the unparsed lambda)."""
    tree = ast.parse(src.get("vllm/envs.py") or "")
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                name = _str(k) if k is not None else None
                if name is not None and ENV_PATTERN.match(name) and isinstance(v, ast.Lambda):
                    out[name] = ast.unparse(v)
    return dict(sorted(out.items()))


def _unparse_assigns(tree: ast.AST, attr: str) -> list[str]:
    """Unparsed values assigned to ``x.attr`` / ``attr`` / keyword ``attr=``."""
    out = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        value: ast.AST | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.keyword) and node.arg == attr:
            out.append(ast.unparse(node.value))
            continue
        for t in targets:
            name = t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", None)
            if name == attr and value is not None:
                out.append(ast.unparse(value))
    return out


def _extra_config_keys(trees: list[ast.AST]) -> list[str]:
    keys: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            base = None
            key = None
            if isinstance(node, ast.Subscript):
                base, key = node.value, _str(node.slice)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "get_from_extra_config")
                and node.args
            ):
                base, key = node.func.value, _str(node.args[0])
                if node.func.attr == "get_from_extra_config" and key is not None:
                    keys.add(key)  # KVTransferConfig's own accessor of the extra config
                    continue
            if key is None or base is None:
                continue
            text = ast.unparse(base)
            if text.endswith(("extra_config", "kv_connector_extra_config")):
                keys.add(key)
    return sorted(keys)


def _proxy(src: Source, path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    tree = ast.parse(src.get(path) or "")
    flags: dict[str, Any] = {}
    for call in _calls(tree, "add_argument"):
        names = [s for s in (_str(a) for a in call.args) if s and s.startswith("-")]
        default = next((k.value for k in call.keywords if k.arg == "default"), None)
        for n in names:
            flags[n] = ast.literal_eval(default) if default is not None else None
    fixed = {}
    for call in _calls(tree, "start_service_discovery"):
        fixed["service_discovery"] = ast.unparse(call.args[1]) if len(call.args) > 1 else None
    imports = sorted(
        {
            (n.module or "").split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.level == 0
        }
        | {
            a.name.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.Import)
            for a in n.names
        }
    )
    return {"path": path, "options": flags, "calls": fixed, "imports": imports}


def moriio(src: Source) -> dict[str, Any] | None:
    files = dict(src.under(MORIIO_DIR))
    if not files:
        return None
    trees = {p: ast.parse(t) for p, t in files.items()}
    common = trees[f"{MORIIO_DIR}/moriio_common.py"]
    connector = trees[f"{MORIIO_DIR}/moriio_connector.py"]
    offset = _function(common, "get_port_offset")
    config = _function(common, "from_vllm_config")
    listener = _function(connector, "_moriio_handshake_listener")
    mode = _function(common, "get_moriio_mode")
    assert offset is not None and config is not None and mode is not None
    binds = [ast.unparse(c) for c in _calls(listener, "make_zmq_path")] if listener else []
    proxy = src.named("moriio_toy_proxy_server.py", "examples/")
    return {
        "extra_config_keys": _extra_config_keys(list(trees.values())),
        "get_port_offset": ast.unparse(offset),
        "port_offset": _unparse_assigns(config, "port_offset"),
        "notify_port": _unparse_assigns(config, "notify_port"),
        "handshake_listen_port": _unparse_assigns(connector, "side_channel_port"),
        "handshake_listener_binds": binds,
        "get_moriio_mode": ast.unparse(mode),
        "proxy": _proxy(src, proxy),
    }


def nixl(src: Source) -> dict[str, Any] | None:
    files: dict[str, str] = {}
    for d in NIXL_DIRS:
        files.update(src.under(d))
    if not files:
        return None
    trees = [ast.parse(t) for t in files.values()]
    side: list[str] = []
    binds: list[str] = []
    for tree in trees:
        side += _unparse_assigns(tree, "side_channel_port")
        listener = _function(tree, "_nixl_handshake_listener")
        if listener is not None:
            binds += [ast.unparse(c) for c in _calls(listener, "make_zmq_path")]
    proxy = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"
    return {
        "side_channel_port": sorted(set(side)),
        "listener_binds": sorted(set(binds)),
        "proxy": _proxy(src, proxy if src.get(proxy) is not None else None),
    }


def facts(src: Source) -> dict[str, Any]:
    return {
        "kv_transfer_config": kv_transfer_config(src),
        "connectors": connectors(src),
        "env_vars": env_vars(src),
        "moriio": moriio(src),
        "nixl": nixl(src),
    }


def flag_ranges(per_version: dict[str, list[str]]) -> dict[str, list[list[str]]]:
    """``flag -> [[first, last], ...]``: inclusive runs of consecutive versions."""
    versions = sorted(per_version, key=vkey)
    out: dict[str, list[list[str]]] = {}
    for flag in sorted({f for fs in per_version.values() for f in fs}):
        runs: list[list[str]] = []
        prev_in = False
        for v in versions:
            now_in = flag in per_version[v]
            if now_in and not prev_in:
                runs.append([v, v])
            elif now_in:
                runs[-1][1] = v
            prev_in = now_in
        out[flag] = runs
    return out


def fact_ranges(per_version: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive versions with identical facts as one ``{"from", "to", ...facts}`` row."""
    rows: list[dict[str, Any]] = []
    for v in sorted(per_version, key=vkey):
        if (
            rows
            and {k: x for k, x in rows[-1].items() if k not in ("from", "to")} == (per_version[v])
        ):
            rows[-1]["to"] = v
        else:
            rows.append({"from": v, "to": v, **per_version[v]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", nargs="+", help="releases (default: every one >= 0.11.0)")
    ap.add_argument("--from", dest="local", type=Path, help="folder of sdists or trees")
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    args = ap.parse_args(argv)
    sources = load_sources(args.versions, args.local)
    if not sources:
        raise SystemExit("no vLLM sources found")
    versions = sorted(sources, key=vkey)
    flags = {v: serve_flags(sources[v]) for v in versions}
    doc = {
        "_about": (
            "What each vLLM release accepts at launch, read from its source with ast by "
            "tools/vllm_launch_golden.py (do not edit by hand; rerun it)."
        ),
        "versions": versions,
        "serve_flags": flag_ranges(flags),
        "facts": fact_ranges({v: facts(sources[v]) for v in versions}),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.output} ({len(versions)} versions)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
