#!/usr/bin/env python3
"""SGLang's default ``--mem-fraction-static`` per release, from each release's own code.

SGLang sizes its weights + KV pool at ``mem_fraction_static`` of GPU memory, a default it
computes when the launch line names none: inline in ``ServerArgs.__post_init__`` up to 0.5.2,
in ``ServerArgs._handle_gpu_memory_settings`` from 0.5.3 (with the CUDA-graph settings the
handlers before it resolve: ``_handle_pd_disaggregation``, ``_handle_piecewise_cuda_graph``,
``_handle_cuda_graph_config``), and in ``arg_groups/memory_hook.py``'s
``handle_gpu_memory_settings`` from 0.5.19. This tool reads those functions out of each
wheel with ``ast`` (never importing SGLang), runs them on a stand-in ``ServerArgs`` (the
dataclass's own field defaults; every other attribute None; platform checks answering for
an NVIDIA or AMD GPU; no speculative decoding, multimodal model, LoRA or DeepEP), and
records the fraction over GPU memory × TP × DP attention × PP × role (aggregated, prefill,
decode) × MLA. ``sglang-router`` and the CUDA-graph config module (pure Python) are loaded
from the wheel where a release has them.

    # the wheels: pip download sglang==X --no-deps -d /tmp/sglang-wheels (every release)
    python tools/sglang_memory_golden.py /tmp/sglang-wheels

Output: ``tests/data/sglang_mem_fraction.json.gz``: the grid, and per group of releases
with identical results the fractions in grid order. ``tests/test_sglang_memory.py`` holds
``pdtp``'s own per-release function against it.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import gzip
import json
import re
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "sglang_mem_fraction.json.gz"

# GPU memory as SGLang reads it (MiB): pdtp's catalog GPUs and each bracket of SGLang's
# heuristics (T4-class, A10/4090, A100-40/L40, H100/A100-80, H20, H200, B200/MI300 and up).
MEMORY_MIB = (16384, 24576, 32768, 40960, 46068, 81920, 97280, 144384, 184320, 189471)
AMD_MEMORY_MIB = (196608, 262144, 294912)
TPS = (1, 2, 4, 8, 16)
ROLES = ("null", "prefill", "decode")


def grid() -> list[dict[str, Any]]:
    """Every point the golden data holds, in order."""
    out = []
    for vendor, mems in (("NVIDIA", MEMORY_MIB + AMD_MEMORY_MIB), ("AMD", AMD_MEMORY_MIB)):
        for mem in mems:
            for tp in TPS:
                for dp_attention, pp in ((False, 1), (True, 1), (False, 2)):
                    for role in ROLES:
                        for mla in (False, True):
                            out.append(dict(vendor=vendor, memory_mib=mem, tp=tp,
                                            dp_attention=dp_attention, pp=pp, role=role,
                                            mla=mla))  # fmt: skip
    return out


class Stub:
    """Whatever SGLang's code reaches that the stand-in does not model: callable, any
    attribute, falsy, never equal to anything (env flags read as unset)."""

    def __call__(self, *a: Any, **k: Any) -> Any:
        return Stub()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "get":
            return lambda *a, **k: None
        if name == "is_set":
            return lambda *a, **k: False
        return Stub()

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


class Globals(dict):  # type: ignore[type-arg]
    """A module namespace where every name not defined is a :class:`Stub`."""

    def __missing__(self, key: str) -> Any:
        import builtins

        if hasattr(builtins, key):
            return getattr(builtins, key)
        return Stub()


def _platform(ns: Globals, vendor: str, gpu_mem: float) -> None:
    amd = vendor == "AMD"
    ns.update(
        get_device_memory_capacity=lambda *a, **k: gpu_mem,
        is_hip=lambda: amd,
        is_cuda=lambda: not amd,
        is_cuda_alike=lambda: True,
        is_npu=lambda: False,
        is_cpu=lambda: False,
        is_mps=lambda: False,
        is_xpu=lambda: False,
        is_hpu=lambda: False,
        is_blackwell=lambda: False,
        is_sm100_supported=lambda *a: False,
        is_sm90_supported=lambda *a: False,
        check_gguf_file=lambda *a: False,
        get_device=lambda *a: "cuda",
    )


def _load_module(source: str, name: str, ns_extra: dict[str, Any]) -> types.ModuleType:
    """A pure-Python module of the wheel, its sglang imports stubbed."""
    mod = types.ModuleType(name)
    g = Globals(ns_extra)
    g["__name__"] = name
    sys.modules[name] = mod  # dataclasses look their module up by name
    exec(_module_code(source, name), g)
    for k, v in g.items():
        setattr(mod, k, v)
    return mod


@functools.cache
def _module_code(source: str, name: str) -> Any:
    """A module's code without its imports of SGLang (stand-ins take their place)."""
    tree = ast.parse(source)
    tree.body = [n for n in tree.body if not (isinstance(n, ast.ImportFrom)
                 and (n.module or "").startswith("sglang"))]  # fmt: skip
    return compile(tree, name, "exec")


@functools.cache
def _classes(source: str) -> list[ast.ClassDef]:
    return [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)]


@functools.cache
def _imported(tree: ast.Module, module: str) -> tuple[tuple[str, str], ...]:
    """``(bound name, name)`` of what a file imports from ``module``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            out += [(a.asname or a.name, a.name) for a in node.names]
    return tuple(out)


def _from_imports(tree: ast.Module, module: str, mod: types.ModuleType) -> dict[str, Any]:
    """The names a file imports from ``module`` (``from module import A, B``), bound to ``mod``."""
    return {k: getattr(mod, n) for k, n in _imported(tree, module) if hasattr(mod, n)}


class _StubFinder:
    """Imports of SGLang's own modules inside the functions run (``from sglang.srt.x import
    Y``) get a module whose every name is a :class:`Stub`."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
        if name != "sglang" and not name.startswith("sglang."):
            return None
        import importlib.machinery

        return importlib.machinery.ModuleSpec(name, _StubFinder, is_package=True)

    @staticmethod
    def create_module(spec: Any) -> types.ModuleType:
        mod = types.ModuleType(spec.name)
        mod.__path__ = []  # type: ignore[attr-defined]
        mod.__getattr__ = lambda attr: Stub()  # type: ignore[method-assign]
        return mod

    @staticmethod
    def exec_module(module: types.ModuleType) -> None:
        return None


sys.meta_path.insert(0, _StubFinder)  # type: ignore[arg-type]


class StandIn:
    """``ServerArgs`` with its field defaults; attributes it has none for read as None."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def _field_defaults(classes: list[ast.ClassDef], ns: Globals) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cls in classes:
        for name, code in _fields(cls):
            try:
                value = eval(code, ns)
            except Exception:  # a default that needs SGLang's runtime: left unset (None)
                continue
            if not isinstance(value, Stub):
                out[name] = value
    return out


def _field(*a: Any, default: Any = None, default_factory: Any = None, **k: Any) -> Any:
    return default_factory() if default_factory is not None else default


def _calls_until(body: list[ast.stmt], stop: str) -> list[str]:
    """The ``self._handle_*()`` calls of a dispatcher body, in order, up to ``stop``."""
    out = []
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        ):
            out.append((node.lineno, node.col_offset, node.func.attr))
    names = [n for _, _, n in sorted(out)]
    return names[: names.index(stop) + 1] if stop in names else names


# The handlers before the memory one whose settings it reads (CUDA graphs by role); the
# others (model download, tokenizer, validation) touch nothing it reads.
KEEP = (
    "_handle_pd_disaggregation",
    "_handle_piecewise_cuda_graph",
    "_handle_cuda_graph_config",
    "_handle_gpu_memory_settings",
)


def _point_args(sa: Any, p: dict[str, Any]) -> None:
    dp = p["tp"] if p["dp_attention"] else 1
    sa.tp_size, sa.pp_size, sa.dp_size = p["tp"], p["pp"], dp
    sa.enable_dp_attention = p["dp_attention"]
    sa.attn_dp_size = dp
    sa.disaggregation_mode = p["role"]
    sa.disaggregation_transfer_backend = "mooncake"
    sa.model_path = "stand-in/model"
    sa.device = "cuda"
    sa.mem_fraction_static = None
    sa.speculative_algorithm = None
    sa.lora_paths = None
    sa.enable_lora = None
    sa.moe_a2a_backend = "none"
    sa.load_format = "auto"


class ModelConfig:
    def __init__(self, mla: bool) -> None:
        self.is_multimodal = False
        self.is_piecewise_cuda_graph_disabled_model = False
        self.attention_arch = "MLA" if mla else "MHA"


@functools.cache
def _parsed(source: str) -> tuple[ast.Module, ast.ClassDef, list[tuple[str, Any]], list[Any]]:
    """A release's server_args.py: its tree, ``ServerArgs``, each method compiled, and its
    module-level assignments compiled (parsed once per release, run per point)."""
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    methods = []
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = [
                d for d in node.decorator_list
                if not (isinstance(d, ast.Name) and d.id == "staticmethod")
            ]  # fmt: skip
            code = compile(ast.Module(body=[node], type_ignores=[]), "ServerArgs", "exec")
            methods.append((node.name, code))
    consts = [compile(ast.Module(body=[n], type_ignores=[]), "const", "exec")
              for n in tree.body if isinstance(n, ast.Assign)]  # fmt: skip
    return tree, cls, methods, consts


@functools.cache
def _fields(cls: ast.ClassDef) -> list[tuple[str, Any]]:
    return [(n.target.id, compile(ast.Expression(n.value), "field", "eval")) for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            and n.value is not None]  # fmt: skip


def run_monolithic(source: str, files: dict[str, str], p: dict[str, Any]) -> float:
    """0.4.6-0.5.18: ``ServerArgs`` in server_args.py."""
    tree, cls, compiled, consts = _parsed(source)
    ns = Globals(field=_field, dataclasses=types.SimpleNamespace(field=_field))
    _platform(ns, p["vendor"], p["memory_mib"])
    cg = files.get("sglang/srt/model_executor/cuda_graph_config.py")
    if cg is not None:
        stub_ns = dict(ns)
        mod = _load_module(cg, "cuda_graph_config", stub_ns)
        ns.update(_from_imports(tree, "sglang.srt.model_executor.cuda_graph_config", mod))
    # Module-level constants the class reads (simple assignments).
    for code in consts:
        # One that needs SGLang's runtime is not read by the memory code.
        with contextlib.suppress(Exception):
            exec(code, ns)
    methods: dict[str, Any] = {}
    for name, code in compiled:
        exec(code, ns)
        methods[name] = ns[name]
    model = ModelConfig(p["mla"])
    methods["get_model_config"] = lambda self: model
    methods["use_mla_backend"] = lambda self: p["mla"]
    methods["_resolved"] = lambda self: self
    methods["adjust_mem_fraction_for_vlm"] = lambda self, *a: None
    ns["resolved_view"] = lambda sa: sa
    ns["current_platform"] = Stub()
    sa_cls = type("ServerArgs", (StandIn,), methods)
    sa = sa_cls()
    for k, v in _field_defaults([cls], ns).items():
        setattr(sa, k, v)
    _point_args(sa, p)
    post = cls_method(cls, "_run_resolution_pipeline") or cls_method(cls, "__post_init__")
    assert post is not None
    if "_handle_gpu_memory_settings" in methods:
        for name in _calls_until(post.body, "_handle_gpu_memory_settings"):
            if name in KEEP and name in methods:
                if name == "_handle_gpu_memory_settings":
                    methods[name](sa, float(p["memory_mib"]))
                else:
                    methods[name](sa)
    else:  # inline in __post_init__: gpu_mem, then the blocks that set the defaults
        exec(_inline(post), ns)
        ns["_memory"](sa)
    return float(sa.mem_fraction_static)


@functools.cache
def _inline(post: ast.FunctionDef) -> Any:
    """``__post_init__``'s own statements that set the memory defaults, as one function."""
    body: list[ast.stmt] = []
    for node in post.body:
        reads_memory = isinstance(node, ast.Assign) and "get_device_memory_capacity" in (
            ast.unparse(node)
        )
        sets_default = isinstance(node, ast.If) and re.search(
            r"self\.(mem_fraction_static|chunked_prefill_size|cuda_graph_max_bs) is None",
            ast.unparse(node.test),
        )
        if reads_memory or sets_default:
            body.append(node)
    fn = ast.FunctionDef(name="_memory", args=post.args, body=body, decorator_list=[],
                         returns=None, type_params=[])  # fmt: skip
    ast.fix_missing_locations(fn)
    return compile(ast.Module(body=[fn], type_ignores=[]), "post_init", "exec")


def cls_method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def run_arg_groups(files: dict[str, str], p: dict[str, Any]) -> float:
    """0.5.19 on: ``arg_groups/memory_hook.py`` over the CUDA-graph hook's settings."""
    ns = Globals(field=_field)
    _platform(ns, p["vendor"], p["memory_mib"])
    cg = _load_module(files["sglang/srt/model_executor/cuda_graph_config.py"],
                      "cuda_graph_config", dict(ns))  # fmt: skip
    sys.modules["sglang.srt.model_executor.cuda_graph_config"] = cg
    model = ModelConfig(p["mla"])

    def declare_resolution(sa: Any, _who: str, **values: Any) -> None:
        for k, v in values.items():
            setattr(sa, k, v)

    common = dict(ns)
    common.update(
        declare_resolution=declare_resolution,
        resolving_view=lambda sa: sa,
        resolved_view=lambda sa: sa,
        model_config_of=lambda sa: model,
        use_mla_backend=lambda sa: p["mla"],
        attn_dp_enabled_of=lambda view: bool(view.enable_dp_attention),
        get_platform=lambda: Stub(),
        Backend=cg.Backend,
        Phase=cg.Phase,
    )
    for k in dir(cg):
        if not k.startswith("_"):
            common.setdefault(k, getattr(cg, k))
    hooks = {}
    for path in ("cuda_graph_hook.py", "memory_hook.py"):
        src = files[f"sglang/srt/arg_groups/{path}"]
        g = Globals(common)
        exec(_module_code(src, path), g)
        hooks.update({k: v for k, v in g.items() if callable(v)})
        # Imports of it inside functions get the release's own functions.
        real = types.ModuleType(f"sglang.srt.arg_groups.{path[:-3]}")
        real.__dict__.update({k: v for k, v in g.items() if not isinstance(v, Stub)})
        sys.modules[real.__name__] = real
        common.update({k: v for k, v in g.items() if callable(v) and not isinstance(v, Stub)})
    # Field defaults of every arg-group dataclass.
    classes = []
    for name, src in files.items():
        if name.startswith("sglang/srt/arg_groups/fields/") or name.endswith("server_args.py"):
            classes += _classes(src)
    fns = Globals(field=_field, CudaGraphConfig=getattr(cg, "CudaGraphConfig", Stub()))
    for k in dir(cg):
        if not k.startswith("_"):
            fns.setdefault(k, getattr(cg, k))
    sa = StandIn()
    for k, v in _field_defaults(classes, fns).items():
        setattr(sa, k, v)
    _point_args(sa, p)
    sa._cuda_graph_config_locked = set()
    if getattr(sa, "cuda_graph_config", None) is None:
        sa.cuda_graph_config = cg.CudaGraphConfig()
    hooks["handle_cuda_graph_config"](sa)
    memory = hooks["handle_gpu_memory_settings"]
    if memory.__code__.co_argcount == 2:  # 0.5.19: the caller reads the memory
        memory(sa, float(p["memory_mib"]))
    else:
        memory(sa)
    return float(sa.mem_fraction_static)


def wheel_files(path: Path) -> dict[str, str]:
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n == "sglang/srt/server_args.py"
                 or n == "sglang/srt/model_executor/cuda_graph_config.py"
                 or n.startswith("sglang/srt/arg_groups/")]  # fmt: skip
        return {n: z.read(n).decode() for n in names if n.endswith(".py")}


def release_of(path: Path) -> str:
    return path.name.split("-")[1]


def _key(r: str) -> tuple[Any, ...]:
    base, _, post = r.partition(".post")
    return (*map(int, base.split(".")), int(post or 0))


def main(folder: str) -> None:
    wheels = {release_of(p): p for p in Path(folder).glob("sglang-*.whl")}
    points = grid()
    groups: dict[tuple[float, ...], list[str]] = {}
    for release in sorted(wheels, key=_key):
        files = wheel_files(wheels[release])
        if "sglang/srt/arg_groups/memory_hook.py" in files:
            values = tuple(run_arg_groups(files, p) for p in points)
        else:
            src = files["sglang/srt/server_args.py"]
            values = tuple(run_monolithic(src, files, p) for p in points)
        groups.setdefault(values, []).append(release)
        print(release, values[:6], file=sys.stderr)
    data = {
        "source": "tools/sglang_memory_golden.py (each release's own mem_fraction_static code)",
        "grid": points,
        "groups": [{"releases": rs, "fractions": list(v)} for v, rs in groups.items()],
    }
    OUT.write_bytes(gzip.compress(json.dumps(data, separators=(",", ":")).encode(), mtime=0))
    print(f"{OUT}: {len(wheels)} releases, {len(groups)} distinct, {len(points)} points")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sglang-wheels")
