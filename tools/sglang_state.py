#!/usr/bin/env python3
"""Golden data for what SGLang's transfer backends do with a hybrid model's *state* at P ≠ D:
the sliding-window (SWA) layers' KV, Mamba / linear-attention state and the DSA/NSA
sparse-index (DeepSeek-V3.2) cache, generated from each release's own code.

    python tools/sglang_state.py --wheels /tmp/sglang-wheels   # wheels already downloaded
    python tools/sglang_state.py                               # every release (downloads)

(It needs numpy: the senders build their index arrays with it. SGLang itself is never
imported.)

It reads ``sglang/srt/disaggregation/`` out of each release's wheel (as
``tools/sglang_golden.py`` does, whose :class:`Release`, :func:`fetch` and rank mapping it
reuses) and **never imports SGLang**. Per release and transfer backend:

* **The state path, driven.** The backend's state sender (Mooncake's and NIXL's
  ``maybe_send_extra``, MORI's ``send_state``) is compiled from the release's source and run
  on a stand-in prefill manager (``self``) whose state kind is set the way the release's
  ``prefill.py`` sets it (``kv_args.state_type = "swa" | "mamba" | "nsa"`` up to 0.5.11,
  ``kv_args.state_types = [StateType.X]`` from 0.5.12), for every (prefill rank, decode rank)
  pair the release's rank mapping makes real. Methods of the release's manager the sender
  calls run as written (``_is_generic_kvcache_state_type`` ...); the ones that move bytes
  (``_send_*``, ``_transfer_data``) are recorded by name, not run. Before the sender, the
  guards its caller runs right before calling it (an ``if`` that raises, in the same block:
  0.5.3.post3-0.5.8 Mooncake's "does NOT support PD different TP sizes for non-MLA hybrid
  models") run too. Recorded per pair: the sub-senders called (``sends``) or the exception
  (class, text). The kinds: SWA and Mamba on a non-MLA model, the sparse index on an MLA one
  (DeepSeek-V3.2 is MLA).
* **Where an exception surfaces.** From the sender's call site up its callers in the file:
  a ``try`` whose handler fails the request (``record_failure``, ``conclude_failure``,
  ``_conclude_room_failure``, ``KVPoll.Failed``: one failed request), one that re-raises in
  a thread loop (``while True``: the transfer thread dies), or no handler up to a method
  the sender class calls (the prefill scheduler's ``send``: it crashes).
* **Whether the state is set up at all.** Whether the release's ``prefill.py`` names the kind
  (it hands the backend state indices for it) and its ``decode.py`` does (it allocates and
  registers the state buffers). A release without a state sender never sends state.

Grid: P, D ∈ {1, 2, 4, 8} (attention TP), 8 KV heads.

Output: ``tests/data/sglang_golden_state.json.gz``: per backend, runs of releases with equal
outcomes, and the wheels' sha256.
"""

from __future__ import annotations

import ast
import enum
import sys
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_golden as sg

SIZES = (1, 2, 4, 8)
KINDS = ("swa", "mamba", "dsa")  # the sparse index is NSA before 0.5.15
MLA_OF = {"swa": False, "mamba": False, "dsa": True}
SENDERS = {"mooncake": "maybe_send_extra", "nixl": "maybe_send_extra", "mori": "send_state"}
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "sglang_golden_state.json.gz"


def _fn(cls: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    if cls is None:
        return None
    return next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == name), None)


def _manager_classes(rel: sg.Release, backend: str) -> list[ast.ClassDef]:
    """The backend's KV manager and the classes its methods come from (mixins, common)."""
    own = rel.cls(f"{backend}/conn.py", f"{backend.capitalize()}KVManager")
    out = [own] if own is not None else []
    for rel_file in sorted(rel.files):
        tree = rel.tree(rel_file)
        assert tree is not None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and (
                node.name == "CommonKVManager" or node.name.endswith("ManagerMixin")
            ):
                out.append(node)
    return out


def _module_function(rel: sg.Release, name: str) -> ast.FunctionDef | None:
    for rel_file in sorted(rel.files):
        f = rel.func(rel_file, name)
        if f is not None:
            return f
    return None


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.blocks: list[list[int]] = []  # (source address, destination address, bytes)


# Methods that move bytes (or wait on them): recorded, never run.
def _is_io(name: str) -> bool:
    return name.startswith("_send_") or name in (
        "_transfer_data",
        "send_kvcache",
        "send_kvcache_slice",
        "_await_transfer_futures",
    )


class StateSelf:
    """The prefill rank's KV manager as the state sender sees it: the attributes given, the
    release's own methods compiled on first use, the byte movers recorded."""

    def __init__(self, ns: dict[str, Any], methods: dict[str, ast.FunctionDef], rec: Recorder,
                 **attrs: Any):  # fmt: skip
        self.__dict__.update(attrs)
        self.__dict__["_ns"] = ns
        self.__dict__["_methods"] = methods
        self.__dict__["_rec"] = rec

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        methods = self.__dict__["_methods"]
        if name == "_transfer_data":  # Mooncake's one byte mover: the blocks it is handed
            rec = self.__dict__["_rec"]

            def transfer(session: Any, blocks: Any) -> int:
                rec.calls.append(name)
                rec.blocks.extend([int(a), int(b), int(n)] for a, b, n in blocks)
                return 0

            return transfer
        if _is_io(name) and name not in self.__dict__.get("_run", ()):
            rec = self.__dict__["_rec"]

            def io(*a: Any, **k: Any) -> Any:
                # The state movers' own checks run; the KV movers they share
                # (``_send_kvcache_generic``) check nothing of the state.
                if name in methods and "state" in name:
                    name_done = self._checks(name, a, k)
                else:
                    name_done = name
                rec.calls.append(name_done)
                return []  # no transfer statuses or handles: falsy, as a return code of 0

            return io
        if name in methods:
            ns = self.__dict__["_ns"]
            key = f"__method_{name}"
            if key not in ns:
                fn = ast.parse(ast.unparse(methods[name])).body[0]
                assert isinstance(fn, ast.FunctionDef)
                fn.decorator_list = []
                fn.name = key
                sg._compile(fn, ns, f"method {name}")
            return types.MethodType(ns[key], self)
        raise sg.Gap(f"state stand-in has no attribute {name!r}")

    def _checks(self, name: str, a: tuple[Any, ...], k: dict[str, Any]) -> str:
        """Run a byte mover's own checks (its top-level statements that compute, assert,
        raise or return early, minus the I/O: ``sglang_golden._slice_function``), then name
        it. MORI checks the TP sizes there (0.5.12 on) and slices Mamba state where its
        ``tp_mismatch`` is true: the name says which (``:slice`` / ``:whole``)."""
        import inspect

        ns, methods = self.__dict__["_ns"], self.__dict__["_methods"]
        fn = methods[name]
        key = f"__checks_{name}"
        if key not in ns:
            full = ast.parse(ast.unparse(fn)).body[0]
            assert isinstance(full, ast.FunctionDef)
            full.decorator_list, full.name = [], f"__sig_{name}"
            sg._compile(full, ns, f"signature {name}")
            params = list(inspect.signature(ns[f"__sig_{name}"]).parameters)
            checks = sg._slice_function(fn, params)
            checks.name = key
            sg._compile(checks, ns, f"checks {name}")
        bound = inspect.signature(ns[f"__sig_{name}"]).bind(self, *a, **k)
        bound.apply_defaults()
        got = ns[key](**bound.arguments)
        if isinstance(got, dict) and "tp_mismatch" in got:
            return f"{name}:{'slice' if got['tp_mismatch'] else 'whole'}"
        return name


def _state_enum(rel: sg.Release, ns: dict[str, Any]) -> type | None:
    node = rel.cls("base/conn.py", "StateType")
    if node is None:
        return None
    ns.setdefault("enum", enum)
    sg._compile(node, ns, f"{rel.version} StateType")
    return ns["StateType"]  # type: ignore[no-any-return]


def _member(enum_cls: type, kind: str) -> Any:
    values = {"dsa": ("dsa", "nsa")}.get(kind, (kind,))
    for m in enum_cls:  # type: ignore[attr-defined]
        if m.value in values:
            return m
    return None


def _call_site(rel: sg.Release, backend: str) -> tuple[ast.FunctionDef, list[ast.stmt], int] | None:
    """The method calling the sender, the statement list holding the call, its index."""
    tree = rel.tree(f"{backend}/conn.py")
    assert tree is not None
    name = SENDERS[backend]

    def calls(node: ast.AST) -> bool:
        return any(
            isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == name
            for c in ast.walk(node)
        )

    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or fn.name == name or not calls(fn):
            continue
        best = None
        for node in ast.walk(fn):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if isinstance(block, list):
                    for i, s in enumerate(block):
                        if isinstance(s, ast.stmt) and calls(s):
                            best = (block, i)  # ast.walk goes outside in: the last is innermost
        if best is not None:
            return fn, best[0], best[1]
    return None


def _guards(site: tuple[ast.FunctionDef, list[ast.stmt], int] | None) -> ast.FunctionDef | None:
    """The ``if ...: raise`` statements right before the sender's call, in its block."""
    if site is None:
        return None
    _, block, idx = site
    ifs = [
        s
        for s in block[:idx]
        if isinstance(s, ast.If) and any(isinstance(n, ast.Raise) for n in ast.walk(s))
    ]
    if not ifs:
        return None
    text = "def _guard(self, target_rank_registration_info, decode_tp_size, peer_info):\n"
    for s in ifs:
        text += "".join("    " + line + "\n" for line in ast.unparse(s).splitlines())
    text += "    return None\n"
    return ast.parse(text).body[0]  # type: ignore[return-value]


def surface(rel: sg.Release, backend: str) -> dict[str, Any] | None:
    """Where an exception of the sender reaches the user (see the module's docstring)."""
    tree = rel.tree(f"{backend}/conn.py")
    assert tree is not None
    cls_methods: dict[str, ast.FunctionDef] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            cls_methods.setdefault(node.name, node)
    name, chain = SENDERS[backend], []
    for _ in range(6):
        caller = None
        for fn in cls_methods.values():
            if fn.name == name:
                continue
            for c in ast.walk(fn):
                if (
                    isinstance(c, ast.Call)
                    and isinstance(c.func, ast.Attribute)
                    and c.func.attr == name
                ):
                    caller = fn
                    break
            if caller:
                break
        if caller is None:
            return {"where": "prefill_scheduler", "chain": chain}
        chain.append(caller.name)
        tries = [
            t
            for t in ast.walk(caller)  # outside in
            if isinstance(t, ast.Try)
            and any(
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                and c.func.attr == name
                for s in t.body for c in ast.walk(s)
            )
        ]  # fmt: skip
        for t in reversed(tries):  # the innermost handler catches first
            for h in t.handlers:
                if h.type is not None and "Exception" not in ast.unparse(h.type):
                    continue
                text = ast.unparse(h)
                if any(w in text for w in ("_failure(", "KVPoll.Failed")):
                    return {"where": "request_failed", "chain": chain}
                if any(isinstance(n, ast.Raise) for n in ast.walk(h)):
                    if any(isinstance(n, ast.While) for n in ast.walk(caller)):
                        return {"where": "transfer_thread_death", "chain": chain}
                    break  # re-raised: up to the next caller
        if any(isinstance(n, ast.While) for n in ast.walk(caller)):
            return {"where": "transfer_thread_death", "chain": chain}
        if caller.name == "send" or caller.name.startswith("add_transfer"):
            return {"where": "prefill_scheduler", "chain": chain}
        name = caller.name
    return None


def set_up(rel: sg.Release, kind: str) -> dict[str, bool]:
    """Whether prefill.py / decode.py name the kind (hand over / allocate its state)."""
    words = {
        "swa": ('"swa"', "StateType.SWA"),
        "mamba": ('"mamba"', "StateType.MAMBA"),
        "dsa": ('"nsa"', "StateType.NSA", "StateType.DSA"),
    }[kind]
    out = {}
    for side in ("prefill", "decode"):
        src = rel.files.get(f"{side}.py", "")
        out[side] = any(w in src for w in words)
    return out


_CACHE: dict[tuple[str, str], tuple[Any, ...]] = {}


def drive(
    rel: sg.Release, backend: str, kind: str, p: int, d: int, src: int, dst: int
) -> dict[str, Any]:
    """The release's state sender for prefill rank ``src`` → decode rank ``dst``."""
    import numpy as np

    fn_name = SENDERS[backend]
    key = (rel.version, backend)
    if key not in _CACHE:
        methods: dict[str, ast.FunctionDef] = {}
        for c in reversed(_manager_classes(rel, backend)):  # the backend's own class wins
            for m in c.body:
                if isinstance(m, ast.FunctionDef):
                    methods[m.name] = m
        ns = sg._namespace(rel, sg.Prefill(p, 1, 1), sg.Log())
        import collections

        ns.update(
            np=np,
            deque=collections.deque,
            get_parallel=lambda: sg.Strict(enable_kv_cache_sharding=False),
            get_memory=lambda: sg.Strict(enable_unified_memory=False),
            get_disagg=lambda: sg.Strict(),
        )
        _CACHE.clear()  # one release at a time
        guard = _guards(_call_site(rel, backend))
        new = "state_types" in ast.unparse(methods[fn_name])
        _CACHE[key] = (ns, methods, _state_enum(rel, ns), guard, new)
    ns, methods, st, guard, new_api = _CACHE[key]
    new_api = st is not None and new_api
    log = ns["logger"] = sg.Log()
    mla = MLA_OF[kind]
    h = 8
    per_src, per_dst = max(1, h // p), max(1, h // d)
    if new_api:
        assert st is not None
        member = _member(st, kind)
        if member is None:
            return {"unknown_kind": True}
        state_kw: dict[str, Any] = dict(
            state_types=[member],
            state_data_ptrs=[[1000]],
            state_item_lens=[[per_src * 16]],
            state_data_lens=[[per_src * 16 * 64]],
            state_dim_per_tensor=[[per_src]],
            state_layer_ids=[[0]],
            state_conv_shard_groups=[[]],
            state_slice_outer_counts=[[]],
        )
        src_idx: Any = [[3]] if kind == "mamba" else [[3, 4]]
        dst_idx: Any = [[5]] if kind == "mamba" else [[5, 6]]
        dst_ptrs: Any = [[2000]]
        dst_lens: Any = [[per_dst * 16]]
        dst_dims: Any = [[per_dst]]
    else:
        state_kw = dict(
            state_type={"dsa": "nsa"}.get(kind, kind),
            state_data_ptrs=[1000],
            state_item_lens=[per_src * 16],
            state_data_lens=[per_src * 16 * 64],
            state_dim_per_tensor=[per_src],
        )
        src_idx = [3] if kind == "mamba" else [3, 4]
        dst_idx = [5] if kind == "mamba" else [5, 6]
        dst_ptrs, dst_lens, dst_dims = [2000], [per_dst * 16], [per_dst]
    kv_args = sg.Strict(engine_rank=src, gpu_id=0, pp_rank=0, page_size=1, **state_kw)
    peer = sg.Strict(
        dst_attn_tp_size=d,
        dst_tp_rank=dst,
        dst_tp_size=d,
        decode_tp_size=d,
        decode_tp_rank=dst,
        dst_state_data_ptrs=dst_ptrs,
        dst_state_item_lens=dst_lens,
        dst_state_dim_per_tensor=dst_dims,
        dst_state_layer_ids=[[0]] if new_api else [0],
        dst_state_mem_descs=["desc"],
        gpu_id=0,
        engine_rank=dst,
    )
    req = sg.Strict(
        dst_state_indices=dst_idx,
        mooncake_session_id="decode-session",
        room=0,
        agent_name="decode-peer",
        is_dummy=lambda: False,
    )
    rec = Recorder()
    self = StateSelf(
        ns,
        methods,
        rec,
        kv_args=kv_args,
        attn_tp_size=p,
        state_tp_size=p,
        tp_size=p,
        pp_size=1,
        is_mla_backend=mla,
        is_hybrid_mla_backend=False,
        request_status={0: 2},  # KVPoll.WaitingForInput
        state_mem_descs=["desc"],
        state_executors=sg.Strict(),
        _prepared_state_plans={},
        _state_layout_rejections={},
        decode_kv_args_table={"decode-peer": peer, "decode-session": peer},
        disaggregation_mode="prefill",
        # Mooncake's Mamba slice runs to its end: its blocks say which heads go where.
        _run=("_send_mamba_state_slice",) if backend == "mooncake" else (),
    )
    args = {
        "req": req,
        "prefill_state_indices": src_idx,
        # MORI's sender takes numpy index arrays (one per state component from 0.5.13).
        "src_state_indices": _arrays(src_idx),
        "dst_state_indices": _arrays(dst_idx) if backend == "mori" else dst_idx,
        "dst_state_data_ptrs": dst_ptrs,
        "executor": sg.Strict(),
        "target_rank_registration_info": peer,
        "peer_info": peer,
        "peer_name": "decode-peer",
        "dst_gpu_id": 0,
        "notif": "0_state_0",
        "decode_tp_size": d,
        "decode_tp_rank": dst,
        "dst_state_item_lens": dst_lens,
        "dst_state_dim_per_tensor": dst_dims,
        "dst_state_layer_ids": [[0]] if new_api else [0],
    }
    fn = methods[fn_name]
    params = [a.arg for a in fn.args.args[1:]]
    required = len(fn.args.args) - 1 - len(fn.args.defaults)
    call = {k: args[k] for k in params if k in args}
    missing = [k for k in params[:required] if k not in call]
    if missing:
        raise sg.Gap(f"{rel.version} {backend} {fn_name}: no stand-in for {missing}")
    for _ in range(30):
        rec.calls.clear()
        rec.blocks.clear()
        log.errors.clear()
        try:
            if guard is not None:
                if "_guard" not in ns:
                    sg._compile(guard, ns, f"{rel.version} {backend} caller guard")
                ns["_guard"](self, peer, d, peer)
            out = getattr(self, fn_name)(**call)
            if isinstance(out, types.GeneratorType):  # NIXL 0.5.23 yields its handles
                list(out)
        except NameError as e:
            f = _module_function(rel, e.name or "")
            if f is None or e.name in ns:
                raise sg.Gap(f"{rel.version} {backend}: name {e.name!r}") from e
            sg._compile(f, ns, f"{rel.version} {e.name}")
            continue
        except (sg.Gap, TypeError, AttributeError, ImportError):
            raise
        except Exception as e:  # the release's own
            return {"error": [type(e).__name__, sg._text(e)]}
        out = {"sends": sorted(set(rec.calls))}
        if rec.blocks:  # in state heads: source head, heads sent, destination head
            src_len, dst_len = per_src * 16, per_dst * 16
            out["heads"] = [
                [
                    (a - 1000 - src_len * 3) // 16,
                    n // 16,
                    (b - 2000 - dst_len * 5) // 16,
                ]
                for a, b, n in rec.blocks
            ]
        return out
    raise sg.Gap(f"{rel.version} {backend}: too many names")


def _arrays(idx: Any) -> Any:
    import numpy as np

    if idx and isinstance(idx[0], list):
        return [np.asarray(i, dtype=np.int32) for i in idx]
    return np.asarray(idx, dtype=np.int32)


_MAPPED: dict[tuple[Any, ...], dict[str, Any]] = {}


def _mapped(rel: sg.Release, backend: str, p: int, d: int, mla: bool, dst: int) -> dict[str, Any]:
    key = (rel.version, backend, p, d, mla, dst)
    if key not in _MAPPED:
        _MAPPED[key] = sg.map_rank(rel, backend, p, d, mla, dst, 1, 1, 1)
    return _MAPPED[key]


def run_backend(rel: sg.Release, backend: str) -> dict[str, Any]:
    has_sender = any(SENDERS[backend] in ast.unparse(c) for c in _manager_classes(rel, backend)[:1])
    out: dict[str, Any] = {"sender": has_sender, "kinds": {}}
    if has_sender:
        out["surface"] = surface(rel, backend)
    for kind in KINDS:
        cases = []
        for p in SIZES:
            for d in SIZES:
                pairs = []
                if has_sender:
                    for dst in range(d):
                        got = _mapped(rel, backend, p, d, MLA_OF[kind], dst)
                        for src, dummy in got.get("reads", []):
                            if not dummy:
                                pairs.append([src, dst, drive(rel, backend, kind, p, d, src, dst)])
                cases.append({"p": p, "d": d, "pairs": pairs})
        out["kinds"][kind] = {"set_up": set_up(rel, kind), "cases": cases}
    return out


def main(argv: list[str] | None = None) -> None:
    sg.generate(
        argv,
        __doc__.split("\n")[0],
        OUT,
        run_backend,
        "tools/sglang_state.py",
        {"grid": {"sizes": list(SIZES), "kv_heads": 8, "mla": MLA_OF}},
    )


if __name__ == "__main__":
    main()
