#!/usr/bin/env python3
"""Golden data for pdtp's connector rules, generated from vLLM's own code.

    python tools/vllm_golden.py                    # every release in RELEASES (downloads wheels)
    python tools/vllm_golden.py --versions 0.34.0  # add one release
    python tools/vllm_golden.py --source 0.33.0=/path/to/unpacked/wheel   # no download

For each vLLM release the script downloads the wheel with ``pip download vllm==X --no-deps
--only-binary :all:`` (a wheel never runs a build step; an sdist would, and needs torch), reads
the Python source straight out of the archive and **never imports vLLM** (it needs torch and
GPUs). With :mod:`ast` it pulls out the functions, methods and small classes listed below,
compiles them into a private namespace and runs them against small stub objects that carry
exactly the attributes those functions read. Everything that decides accept/reject, the
exception class, its message, or which rank reads which, is vLLM's own code; the stubs only
supply the state a real engine would hold (TP sizes, rank, KV-head count, block lengths that
follow vLLM's ``max(1, H // tp)`` heads per rank) and absorb I/O (sockets, NIXL, RDMA).

What is extracted and how it is driven
--------------------------------------
Model load (every release): ``divide``/``ensure_divisibility`` (``vllm/distributed/utils.py``)
as ``QKVParallelLinear`` calls them, and the attention-head check of
``ModelConfig.verify_with_parallel_config`` (the ``if ... % ... != 0: raise ValueError`` statement,
run on its own). Not part of the connector golden: pdtp checks them the same way for every
connector.

NIXL (``NixlConnector``, pull mode): one decode rank ("local", TP = D) connects to a prefill
instance (TP = P). The driver builds a stub worker carrying the release's own methods
``_nixl_handshake``, ``add_remote_agent`` (cut right after its call of
``_validate_remote_agent_handshake``; in releases without that method, all of it) and
``_validate_remote_agent_handshake``, plus the release's topology class (``TpKVTopology`` /
``TransferTopology`` with all their methods, ``EngineTransferInfo``) and ``compute_tp_mapping``.
``_nixl_handshake`` runs with a fake ZMQ socket that answers every metadata query with the
prefill rank's ``NixlAgentMetadata`` (block lengths = heads per rank x a fixed byte size, the KV
layout NIXL itself requires via ``get_required_kvcache_layout``, same block size/count and
backend on both sides). The outcome of one decode rank is the first exception these raise
(class and message; ``ZeroDivisionError`` included), else the prefill ranks it handshook with
and, where the release has ``compute_tp_mapping``, the ranks it reads (``all_source_ranks``).
A pair's outcome is that of its lowest failing decode rank, else "ok" plus every rank's reads.

MoRIIO READ mode (decode side = local): ``_moriio_handshake`` up to the socket (the
statements computing ``port_offset``/``dial_tp_rank``), which names the prefill rank dialled;
``_remote_tp_rank``/``get_moriio_remote_tp_rank``; ``get_moriio_read_holder_tp_ranks`` (ranks
released); the per-layer offset path ``_compute_read_attention_offsets`` (where present) with
``_block_copy_matches_peer``, ``HeadLayout`` and ``_compute_block_transfer_offsets`` (which calls
``validate_moriio_heterogeneous_tp_kv_heads``); the geometry helpers they call are stubs that
return empty offset lists. Prefill side: ``get_moriio_expected_ack_count`` (release acks).

MoRIIO WRITE mode (prefill side = local): the producer's ``_moriio_handshake`` dial (as above)
and, where present, ``compute_write_tp_mapping`` with ``validate_write_tp_topology``,
``_producer_targets`` and ``_rank_heads``; otherwise the write target of
``MoRIIOWriter``'s notify port (``get_port_offset(decode_dp_rank, tp_rank)``: the same rank).

Function vectors (MoRIIO, where the release has them): ``get_moriio_remote_tp_rank`` for
sizes -2..64 and every rank -1..size, ``validate_moriio_heterogeneous_tp_kv_heads`` and
``validate_write_tp_topology`` for sizes -2..64, KV heads -1..128, MLA on/off,
``get_moriio_expected_ack_count`` for sizes -2..64.

Parallel layouts (part ``layout``, every release): the rules that are pure functions of sizes
and ranks, each run from the release's own code over a grid — ``get_pp_indices`` (the layers
of each pipeline stage; layers 1..128, PP 1..16), ``determine_expert_map`` (the experts each EP
rank holds, linear and round-robin; EP 1..32), ``FusedMoEParallelConfig.make`` (EP size and the
MoE layer's TP for TP, DP 1..16 with and without ``--enable-expert-parallel``, every rank), the
config-time statements of ``ModelConfig.verify_with_parallel_config`` (attention heads by TP,
``_verify_with_expert_parallelism``, pipeline parallel needs ``SupportsPP``), MoRIIO's port
offsets (the ``side_channel_port`` each (DP rank, TP rank) binds, and the offset
``_moriio_handshake`` dials for each remote DP rank), and NIXL's pipeline-parallel handling (the
worker's ``pp_size`` checks per ``kv_role``, and the (PP rank, TP rank) pairs a decode rank's
``_nixl_handshake`` queries for a prefill of PP 1..4).

Output: ``tests/data/golden/<part>-<digest>.json.gz`` (part: a connector or ``layout``), one file
per run of releases whose outcomes are identical, and ``tests/data/golden/index.json`` (part ->
release -> file).
"""

from __future__ import annotations
import __future__ as _future

import argparse
import ast
import builtins
import contextlib
import dataclasses
import enum
import functools
import gzip
import hashlib
import itertools
import json
import math
import re
import subprocess
import sys
import tempfile
import typing
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

# Every release from 0.11.0 to the newest the script has been run on. A new release: add it
# here and rerun (see README "Golden data").
RELEASES = [
    "0.11.0",
    "0.11.1",
    "0.11.2",
    "0.12.0",
    "0.13.0",
    "0.14.0",
    "0.14.1",
    "0.15.0",
    "0.15.1",
    "0.16.0",
    "0.17.0",
    "0.17.1",
    "0.18.0",
    "0.18.1",
    "0.19.0",
    "0.19.1",
    "0.20.0",
    "0.20.1",
    "0.20.2",
    "0.21.0",
    "0.22.0",
    "0.22.1",
    "0.23.0",
    "0.24.0",
    "0.25.0",
    "0.25.1",
    "0.26.0",
    "0.27.0",
    "0.27.1",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    "0.33.0",
]

# Grid of the pair golden: TP sizes 1..MAX_TP on each side, every rank, KV heads 1..MAX_HEADS
# without MLA. With MLA vLLM holds one latent per rank and reads the KV-head count only to
# compare it with TP sizes, so the MLA grid samples it: every count up to 8, then the TP-size
# steps up to MAX_TP + 1, and MAX_HEADS (DeepSeek's 128).
MAX_TP = 64
MAX_HEADS = 128
MLA_HEADS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 40, 48, 56, 63, 64, 65, 128]


def heads_grid(mla: bool) -> list[int]:
    return [h for h in MLA_HEADS if h <= MAX_HEADS] if mla else list(range(1, MAX_HEADS + 1))


# Grid of the function vectors: sizes FUNC_LO..MAX_TP, heads -1..MAX_HEADS.
FUNC_LO = -2

KV = "vllm/distributed/kv_transfer/kv_connector"
# Where the parallel-layout rules live: MoE parallel config and expert map, model config checks.
FUSED_MOE = "vllm/model_executor/layers/fused_moe/"
MODEL_CONFIG = "vllm/config/model.py"
LAYOUT_SOURCES = (FUSED_MOE, MODEL_CONFIG)
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "golden"

# Bytes one KV head occupies in one block (any constant: vLLM only compares ratios).
HEAD_BYTES = 4096
BLOCK_SIZE = 16
NUM_BLOCKS = 2  # the descriptor loops of 0.11.0 run once per block
NUM_LAYERS = 1  # every layer of a plain model is alike


# ---------------------------------------------------------------- source of one release


class Release:
    """The Python source of one vLLM release, read from its wheel (or an unpacked tree)."""

    def __init__(self, version: str, path: Path):
        self.version = version
        self.files: dict[str, str] = {}
        wanted = (
            KV + "/",
            "vllm/distributed/utils.py",
            "vllm/v1/kv_cache_layout.py",
            *LAYOUT_SOURCES,
        )
        if path.is_dir():
            for f in path.rglob("*.py"):
                rel = f.relative_to(path).as_posix()
                if rel.startswith(wanted):
                    self.files[rel] = f.read_text()
        else:
            with zipfile.ZipFile(path) as z:
                for name in z.namelist():
                    if name.endswith(".py") and name.startswith(wanted):
                        self.files[name] = z.read(name).decode()
        if not self.files:
            raise SystemExit(f"{path}: no vLLM source found")
        self._trees: dict[str, ast.Module] = {}

    def tree(self, rel: str) -> ast.Module:
        if rel not in self._trees:
            self._trees[rel] = ast.parse(self.files[rel])
        return self._trees[rel]

    def find(self, qualname: str, under: str = KV) -> tuple[str, ast.AST] | None:
        """The one definition of ``Class.method``, ``Class`` or ``function`` under ``under``."""
        cls, _, name = qualname.rpartition(".")
        hits = []
        for rel in sorted(self.files):
            if not rel.startswith(under):
                continue
            if name not in self.files[rel]:
                continue
            top = self.tree(rel).body
            # Classes may be nested one level (0.11.x defines TpKVTopology inside the worker).
            nested = [n for c in top if isinstance(c, ast.ClassDef) for n in c.body]
            for node in top + nested:
                if cls:
                    if isinstance(node, ast.ClassDef) and node.name == cls:
                        for m in node.body:
                            if isinstance(m, ast.FunctionDef) and m.name == name:
                                hits.append((rel, m))
                elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                    hits.append((rel, node))
        if len(hits) > 1:
            raise SystemExit(f"{self.version}: {qualname} defined {len(hits)} times: {hits}")
        return hits[0] if hits else None

    def methods_of(self, cls: str, under: str) -> dict[str, ast.FunctionDef]:
        """The methods of class ``cls`` defined under ``under``."""
        found = self.find(cls, under=under)
        if found is None:
            return {}
        _, node = found
        assert isinstance(node, ast.ClassDef)
        return {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}

    def methods(self, cls: str) -> dict[str, ast.FunctionDef]:
        found = self.find(cls)
        if found is None:
            return {}
        _, node = found
        assert isinstance(node, ast.ClassDef)
        return {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}

    def digest(self, names: list[str]) -> str:
        """Hash of the extracted definitions (for the index: which code a golden file saw)."""
        h = hashlib.sha256()
        for n in names:
            found = self.find(n)
            h.update(n.encode())
            h.update(ast.dump(found[1]).encode() if found else b"-")
        return h.hexdigest()[:16]


def fetch(version: str, cache: Path) -> Path:
    """Download the release's wheel with pip (no dependencies, no build)."""
    dest = cache / version
    dest.mkdir(parents=True, exist_ok=True)
    wheels = list(dest.glob("vllm-*.whl"))
    if not wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"vllm=={version}",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--quiet",
                "-d",
                str(dest),
            ],
            check=True,
        )
        wheels = list(dest.glob("vllm-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one wheel for vllm=={version} in {dest}, got {wheels}")
    return wheels[0]


# ---------------------------------------------------------------- compiling extracted code

_FLAGS = _future.annotations.compiler_flag  # annotations stay strings: torch types never resolve


# Source of everything compiled since the last reset: two releases whose drivers compiled the
# same code produce the same golden data, so the second reuses the first's (see main()).
COMPILED: list[str] = []


def compile_defs(nodes: list[ast.AST], ns: dict[str, Any], where: str) -> None:
    """Compile top-level function/class definitions (methods are compiled as plain functions)
    into ``ns``."""
    for node in nodes:
        node = _copy(node)
        COMPILED.append(ast.unparse(node))
        _dedent(node)
        module = ast.Module(body=[node], type_ignores=[])
        ast.fix_missing_locations(module)
        exec(compile(module, f"<vllm {where}:{getattr(node, 'name', '?')}>", "exec", _FLAGS), ns)


def _copy(node: ast.AST) -> ast.AST:
    return ast.parse(ast.unparse(node)).body[0]


def _dedent(node: ast.AST) -> None:
    for n in ast.walk(node):
        if hasattr(n, "col_offset"):
            n.col_offset = 0


def truncate_after_call(fn: ast.FunctionDef, callee: str) -> ast.FunctionDef:
    """``fn`` with its body cut right after the top-level statement that calls ``callee``
    (the statements after it register NIXL descriptors: no rule lives there)."""
    fn = _copy(fn)  # type: ignore[assignment]
    for i, stmt in enumerate(fn.body):
        calls = [
            c
            for c in ast.walk(stmt)
            if isinstance(c, ast.Call)
            and isinstance(c.func, ast.Attribute)
            and c.func.attr == callee
        ]
        if calls:
            fn.body = [*fn.body[: i + 1], ast.parse("return '<stop>'").body[0]]
            return fn
    raise SystemExit(f"{fn.name} never calls {callee}")


def statements_assigning(fn: ast.FunctionDef, targets: set[str]) -> list[ast.stmt]:
    """The top-level statements of ``fn`` that assign one of ``targets`` (in order)."""
    out = []
    for stmt in fn.body:
        if isinstance(stmt, ast.Assign):
            names = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            if names & targets:
                out.append(stmt)
    return out


class NullLogger:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *a, **k: None


class Stub:
    """An object with exactly the attributes given; anything else is an AttributeError, so a
    release that reads new state fails loudly here instead of silently reading a default."""

    def __init__(self, **attrs: Any):
        self.__dict__.update(attrs)

    def __repr__(self) -> str:
        return f"Stub({', '.join(sorted(self.__dict__))})"


def base_namespace() -> dict[str, Any]:
    ns: dict[str, Any] = {
        "__builtins__": builtins,
        "__name__": __name__,  # dataclasses look the module up in sys.modules
        "logger": NullLogger(),
        "np": np,
        "math": math,
        "itertools": itertools,
        "functools": functools,
        "dataclass": dataclasses.dataclass,
        "field": dataclasses.field,
        "cache": functools.cache,
        "lru_cache": functools.lru_cache,
        "NamedTuple": typing.NamedTuple,
        "Enum": enum.Enum,
        "contextlib": contextlib,
        "defaultdict": defaultdict,
        "Any": Any,
        "cast": lambda t, v: v,
        "time": _FakeTime,
    }
    return ns


class _FakeTime:
    @staticmethod
    def perf_counter() -> float:
        return 0.0

    @staticmethod
    def monotonic() -> float:
        return 0.0

    @staticmethod
    def time() -> float:
        return 0.0


class HarnessError(Exception):
    """The extracted code read something the stubs do not carry: fix the stubs."""


def outcome_of(fn: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", value)`` or ``(exception class name, message)``. A ``NameError``,
    ``AttributeError``, ``TypeError`` or ``KeyError`` means the stubs are incomplete (a plain
    model never makes vLLM raise those), so it stops the run instead of becoming golden data."""
    try:
        return "ok", fn()
    except (NameError, AttributeError, TypeError, KeyError) as e:
        raise HarnessError(f"{type(e).__name__}: {e}") from e
    except Exception as e:
        return type(e).__name__, str(e)


# ---------------------------------------------------------------- model-load helpers


def heads_per_rank(h: int, tp: int, mla: bool) -> int:
    """vLLM's ``ModelConfig.get_num_kv_heads``: 1 for MLA, else ``max(1, H // tp)``."""
    return 1 if mla else max(1, h // tp)


def loads(h: int, tp: int, mla: bool) -> bool:
    """Whether a TP size loads the model's KV heads (``QKVParallelLinear``'s ``divide``).
    Pairs where either side fails this never reach a connector, so they are not golden."""
    if mla:
        return True
    return (tp % h == 0) if tp >= h else (h % tp == 0)


# ---------------------------------------------------------------- NIXL


class _FakeSocket:
    """Answers every NIXL metadata query with the one prefill rank's metadata (every prefill
    rank of one instance advertises the same block geometry). Records what was asked."""

    def __init__(self, reply: Any, asked: list[Any]):
        self.reply = reply
        self.asked = asked

    def setsockopt(self, *a: Any) -> None:
        pass

    def send(self, msg: Any) -> None:
        self.asked.append(msg)

    def recv(self) -> Any:
        return self.reply

    def recv_multipart(self) -> list[Any]:
        return [self.reply, 0.0]


class _IdentityMsgpack:
    """msgspec stand-in: what the fake socket returns is already the decoded object."""

    class Decoder:
        def __init__(self, *a: Any, **k: Any):
            pass

        def decode(self, data: Any) -> Any:
            return data

    class Encoder:
        def encode(self, data: Any) -> Any:
            return data

    @staticmethod
    def encode(data: Any) -> Any:
        return data

    @staticmethod
    def decode(data: Any) -> Any:
        return data


class _Msgspec:
    msgpack = _IdentityMsgpack
    DecodeError = ValueError
    ValidationError = ValueError


class _Zmq:
    REQ = DEALER = ROUTER = RCVTIMEO = SNDTIMEO = LINGER = 0


class _NixlWrapper:
    def add_remote_agent(self, metadata: Any) -> str:
        return "prefill-agent"

    def get_xfer_descs(self, *a: Any, **k: Any) -> list[Any]:
        return []

    def prep_xfer_dlist(self, *a: Any, **k: Any) -> int:
        return 0


class _AttentionSpec:
    pass


class _FullAttentionSpec(_AttentionSpec):
    pass


class _MambaSpec:
    pass


class _AttentionBackendEnum(enum.Enum):
    FLASH_ATTN = "FLASH_ATTN"
    PALLAS = "PALLAS"


class Nixl:
    """Drives one release's NIXL pull-mode handshake + validation (see the module doc)."""

    WORKERS = ("NixlPullConnectorWorker", "NixlBaseConnectorWorker", "NixlConnectorWorker")
    TOPOLOGIES = ("TransferTopology", "TpKVTopology")
    CONNECTORS = ("NixlBaseConnector", "NixlConnector")

    def __init__(self, rel: Release):
        self.rel = rel
        ns = base_namespace()
        ns.update(
            zmq=_Zmq,
            msgspec=_Msgspec,
            make_zmq_path=lambda *a: "tcp://stub",
            GET_META_MSG=b"get_meta_msg",
            NixlAgentMetadata=object,
            NixlHandshakePayload=object,
            current_platform=Stub(set_device=lambda *a: None),
            envs=Stub(VLLM_NIXL_SIDE_CHANNEL_HOST="localhost"),
            AttentionSpec=_AttentionSpec,
            MambaSpec=_MambaSpec,
            KVCacheSpec=object,
            FullAttentionSpec=_FullAttentionSpec,
            AttentionBackendEnum=_AttentionBackendEnum,
        )
        self.asked: list[Any] = []
        self.reply: Any = None
        ns["zmq_ctx"] = self._zmq_ctx
        # vLLM helpers the extracted code calls, compiled from the release itself.
        for name in ["ensure_divisibility", "divide"]:
            found = rel.find(name, under="vllm/distributed/utils.py")
            if found:
                compile_defs([found[1]], ns, name)
        for name in ["KVCacheLayout"]:
            found = rel.find(name, under="vllm/v1/kv_cache_layout.py")
            if found:
                layout_src = rel.files["vllm/v1/kv_cache_layout.py"]
                COMPILED.append(layout_src)
                exec(compile(layout_src, "<vllm kv_cache_layout>", "exec", _FLAGS), ns)
        for name in [
            "EngineTransferInfo",
            "MambaEngineTransferInfo",
            "compute_head_offset",
            "compute_tp_mapping",
            "TPMapping",
            "ReadSpec",
            "_is_attention_spec",
            "_is_ssm_spec",
        ]:
            found = rel.find(name)
            if found:
                compile_defs([found[1]], ns, name)
        self.topology_cls = None
        self.topology_source = ""
        for name in self.TOPOLOGIES:
            found = rel.find(name)
            if found:
                compile_defs([found[1]], ns, name)
                self.topology_cls = ns[name]
                self.topology_name = name
                self.topology_source = ast.unparse(found[1])
                break
        # The worker: the release's own methods, first definition along the MRO.
        methods: dict[str, ast.FunctionDef] = {}
        for cls in self.WORKERS:
            for name, node in rel.methods(cls).items():
                methods.setdefault(name, node)
        if "_nixl_handshake" not in methods:
            raise SystemExit(f"{rel.version}: no NIXL worker found")
        self.has_validate = "_validate_remote_agent_handshake" in methods
        wanted = [
            "_nixl_handshake",
            "add_remote_agent",
            "_validate_remote_agent_handshake",
            "_validate_remote_parallel_config",
            "_validate_csa_linear_tp_layout",
            "_is_region_replicated",
            "get_backend_aware_kv_block_len",
        ]
        # Which ranks a decode rank reads: compute_tp_mapping where the release has it; else
        # _read_blocks_for_req where it loops over target ranks (0.14-0.20); before that the
        # one rank _read_blocks computes is the rank it handshook with.
        self.has_mapping = "compute_tp_mapping" in ns
        node = methods.get("_read_blocks_for_req")
        self.runs_read_loop = (
            not self.has_mapping and node is not None and "remote_ranks" in ast.unparse(node)
        )
        if self.runs_read_loop:
            wanted.append("_read_blocks_for_req")
        worker_ns = dict(ns)
        fns = []
        for name in wanted:
            if name not in methods:
                continue
            node = methods[name]
            if name == "add_remote_agent" and self.has_validate:
                node = truncate_after_call(node, "_validate_remote_agent_handshake")
            fns.append(node)
        compile_defs(fns, worker_ns, "NixlWorker")
        self.Worker = type("NixlWorker", (), {n.name: worker_ns[n.name] for n in fns})
        self.ns = ns
        self.topology_fields: set[str] | None = None
        conn = {}
        for cls in self.CONNECTORS:
            for name, node in rel.methods(cls).items():
                conn.setdefault(name, node)
        layout_ns = dict(ns)
        compile_defs([conn["get_required_kvcache_layout"]], layout_ns, "NixlConnector")
        self.required_layout = layout_ns["get_required_kvcache_layout"].__func__  # classmethod
        self.handshake_params = [a.arg for a in methods["_nixl_handshake"].args.args]

    @contextlib.contextmanager
    def _zmq_ctx(self, *a: Any) -> Iterator[_FakeSocket]:
        yield _FakeSocket(self.reply, self.asked)

    @functools.cache  # noqa: B019 - one driver per release, two keys
    def layout(self, mla: bool) -> str:
        cfg = Stub(model_config=Stub(use_mla=mla))
        got = self.required_layout(None, cfg)
        # MLA: NIXL leaves the layout alone (vLLM's default; it never matters for MLA).
        return got if got is not None else "default"

    def topology(self, rank: int, d: int, h: int, mla: bool, w: Any) -> Any:
        if self.topology_cls is None:
            return None
        # The worker hands its own dicts to the topology (they are shared, not copied).
        given = {
            "tp_rank": rank,
            "tp_size": d,
            "is_mla": mla,
            "total_num_kv_heads": h,
            "engine_id": "decode",
            "block_size": BLOCK_SIZE,
            "is_mamba": False,
            "remote_tp_size": w._tp_size,
            "remote_block_size": w._block_size,
            "attn_backend": self.backend(mla),
            "attn_backends": [self.backend(mla)],
            "dcp_size": 1,
            "tensor_shape": None,
        }
        if self.topology_fields is None:
            fields = dataclasses.fields(self.topology_cls)
            missing = {
                f.name
                for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            } - set(given)
            if missing:
                raise SystemExit(f"{self.rel.version}: {self.topology_name} needs {missing}")
            self.topology_fields = {f.name for f in fields}
        return self.topology_cls(**{k: v for k, v in given.items() if k in self.topology_fields})

    @functools.cache  # noqa: B019 - one driver per release
    def backend(self, mla: bool) -> type:
        """An attention backend with the cache shape the release's topology accepts: the
        standardized blocks-first shape where it asserts one (0.26.0-0.28.x), else FlashAttention's
        ``[2, blocks, block_size, heads, head_size]``; MLA ``[blocks, block_size, latent]``."""
        blocks_first = "blocks-first" in self.topology_source

        def shape(
            num_blocks: int, block_size: int, num_kv_heads: int, head_size: int, *a: Any, **k: Any
        ) -> tuple[int, ...]:
            if mla:
                return (num_blocks, block_size, head_size)
            if blocks_first:
                return (num_blocks, num_kv_heads, block_size, head_size)
            return (2, num_blocks, block_size, num_kv_heads, head_size)

        return type(
            "Backend",
            (),
            {
                "get_kv_cache_shape": staticmethod(shape),
                "get_name": staticmethod(lambda: "FLASH_ATTN"),
            },
        )

    @functools.cache  # noqa: B019 - one driver per release
    def _shared(self, h: int, mla: bool) -> dict[str, Any]:
        """Worker state that no step writes to (configs), shared by every rank."""
        layout = self.layout(mla)
        return dict(
            engine_id="decode",
            use_mla=mla,
            block_size=BLOCK_SIZE,
            num_blocks=NUM_BLOCKS,
            nixl_wrapper=_NixlWrapper(),
            backend_name="FLASH_ATTN",
            kv_cache_layout=layout,
            host_buffer_kv_cache_layout=layout,
            use_host_buffer=False,
            _use_pallas=False,
            _use_flashinfer=False,
            device_type="cuda",
            model_config=Stub(get_total_num_kv_heads=lambda: h, use_mla=mla),
            _has_mamba=False,
            _is_hma_required=False,
            enable_permute_local_kv=False,
            kv_transfer_config=Stub(enable_permute_local_kv=False),
            compat_hash="same",
            enforce_compat_hash=True,
            dcp_size=1,
            pcp_size=1,
            pp_size=1,
            _is_csa_linear=False,
            device_id=0,
            _group_spec_types=(_FullAttentionSpec,),
            _head_sharded_draft_regions=frozenset(),
            _head_sharded_draft_kv_heads=None,
            _transfer_layer_region_indices=(),
            _packed_member_layouts={},
            _physical_blocks_per_logical_kv_block=1,
            region_group_ids=[],
            nixl_memory_type="VRAM",
            _layer_specs={},
            enable_heterogeneous_attn_post_process=False,
            vllm_config=Stub(cache_config=Stub(enable_prefix_caching=False)),
            _TRANSFER_MODE="pull",
            _region_is_mla=[mla] * NUM_LAYERS,
        )

    def worker(self, rank: int, d: int, h: int, mla: bool) -> Any:
        w = self.Worker()
        block_len = heads_per_rank(h, d, mla) * HEAD_BYTES
        w.__dict__.update(self._shared(h, mla))
        w._tp_size = {"decode": d}
        w._block_size = {"decode": BLOCK_SIZE}
        topo = self.topology(rank, d, h, mla, w)
        w.__dict__.update(
            tp_rank=rank,
            world_size=d,
            kv_topo=topo,
            transfer_topo=topo,
            dst_xfer_side_handles=defaultdict(dict),
            dst_num_blocks={},
            kv_caches_base_addr=defaultdict(dict),
            _remote_agents=defaultdict(dict),
            block_len_per_layer=[block_len] * NUM_LAYERS,
            slot_size_per_layer=[block_len // BLOCK_SIZE] * NUM_LAYERS,
            tp_mappings={},
            draft_tp_mappings={},
            dst_region_group_ids={},
            dst_region_num_blocks={},
            dst_region_mem_types={},
            dst_uses_region_group_mapping={},
        )
        return w

    def metadata(self, p: int, h: int, mla: bool) -> Any:
        block_len = heads_per_rank(h, p, mla) * HEAD_BYTES
        layout = self.layout(mla)
        m = Stub(
            engine_id="prefill",
            agent_metadata=b"",
            kv_caches_base_addr=[0] * NUM_LAYERS,
            device_id=0,
            num_blocks=NUM_BLOCKS,
            block_lens=[block_len] * NUM_LAYERS,
            block_strides=[block_len] * NUM_LAYERS,
            kv_cache_layout=layout,
            block_size=BLOCK_SIZE,
            ssm_sizes=(0, 0),
            attn_backend_name="FLASH_ATTN",
            physical_blocks_per_logical_kv_block=1,
            region_num_blocks=None,
            region_group_ids=None,
            region_names=None,
            region_mem_types=None,
            dcp_size=1,
            pcp_size=1,
            ple_block_len=None,
            region_members=[],
            packed_member_layouts={},
            compatibility_hash="same",
        )
        m.agent_metadata_bytes = m
        return m

    def decode_rank(self, p: int, d: int, h: int, mla: bool, rank: int) -> tuple[str, Any]:
        """One decode rank's handshake with a P-rank prefill instance."""
        w = self.worker(rank, d, h, mla)
        self.reply = self.metadata(p, h, mla)
        self.asked = []
        handshook: list[int] = []
        add = w.add_remote_agent

        def add_remote_agent(meta: Any, remote_tp_rank: int = 0, *a: Any, **k: Any) -> Any:
            if not 0 <= remote_tp_rank < p:
                # vLLM would dial a prefill rank that does not exist and wait for it.
                raise NoSuchRank(f"decode rank {rank} dials prefill rank {remote_tp_rank}")
            handshook.append(remote_tp_rank)
            return add(meta, remote_tp_rank, *a, **k)

        w.add_remote_agent = add_remote_agent
        kwargs = {
            "host": "prefill",
            "port": 5600,
            "remote_tp_size": p,
            "expected_engine_id": "prefill",
        }
        kind, value = outcome_of(
            lambda: w._nixl_handshake(
                **{k: v for k, v in kwargs.items() if k in self.handshake_params}
            )
        )
        if kind != "ok":
            return kind, value
        if self.has_mapping:
            reads = list(w.tp_mappings["prefill"].all_source_ranks)
        elif self.runs_read_loop:
            reads = self._read_loop(w)
        else:
            reads = list(handshook)
        return "ok", {"handshake": handshook, "reads": reads}

    def _read_loop(self, w: Any) -> list[int]:
        """Run ``_read_blocks_for_req`` with ``_read_blocks`` recording the rank it reads."""
        read: list[int] = []
        w._read_blocks = lambda **k: read.append(k["remote_rank"])
        w._logical_to_kernel_block_ids = lambda ids, *a: ids  # block-size mapping: not a rule
        w.src_xfer_handles_by_tp_ratio = _AnyKey([0] * (MAX_TP + 1))
        w.src_xfer_handles_by_block_size = _AnyKey(0)
        w.dst_xfer_side_handles = _AnyKey(_AnyKey(0))
        w.nixl_wrapper.send_notif = lambda *a, **k: None
        meta = Stub(
            remote=Stub(engine_id="prefill", request_id="req", block_ids=[[1]]),
            local_physical_block_ids=[[1]],
        )
        kind, value = outcome_of(lambda: w._read_blocks_for_req("req", meta))
        if kind != "ok":
            raise HarnessError(f"_read_blocks_for_req raised {kind}: {value}")
        return read


class NoSuchRank(Exception):
    """Not a vLLM exception: the rank dials a peer rank that does not exist and waits."""


class _AnyKey(dict):
    """A handle table that has an entry for every key (NIXL descriptor handles)."""

    def __init__(self, value: Any):
        super().__init__()
        self.value = value

    def __missing__(self, key: Any) -> Any:
        return self.value


# ---------------------------------------------------------------- MoRIIO


def function_from_statements(
    name: str, params: list[str], stmts: list[ast.stmt], returns: str, ns: dict[str, Any]
) -> Callable[..., Any]:
    """Wrap statements lifted out of a vLLM method into ``def name(params): ...; return
    returns`` (how the driver runs one step of a long method on its own)."""
    args = ", ".join(params)
    fn = ast.parse(f"def {name}({args}):\n    pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    fn.body = [_copy(s) for s in stmts] + [ast.parse(f"return {returns}").body[0]]  # type: ignore[misc]
    compile_defs([fn], ns, name)
    return ns[name]


class _Tensor:
    """The two facts MoRIIO's pre-0.25 offset code reads from a KV-cache tensor."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape

    def stride(self) -> tuple[int, ...]:
        out, acc = [], 1
        for n in reversed(self.shape):
            out.append(acc)
            acc *= n
        return tuple(reversed(out))

    def element_size(self) -> int:
        return 2


class Moriio:
    """Drives one release's MoRIIO READ (decode side) and WRITE (prefill side) steps."""

    WORKER = "MoRIIOConnectorWorker"
    FUNCTIONS = (
        "get_port_offset",
        "get_moriio_remote_tp_rank",
        "get_moriio_read_holder_tp_ranks",
        "validate_moriio_heterogeneous_tp_kv_heads",
        "get_moriio_expected_ack_count",
        "get_moriio_peer_tp_size",
        "validate_write_tp_topology",
        "compute_write_tp_mapping",
        "_producer_targets",
        "_rank_heads",
        "WriteTarget",
        "MoRIIOWriteTPMapping",
        "HeadLayout",
        "MoRIIOMode",
        "MoRIIOError",
    )
    METHODS = (
        "_remote_tp_rank",
        "_resolve_read_source",
        "_spreads_replicated_reads",
        "_next_flex_tp_rank",
        "_compute_read_attention_offsets",
        "_block_copy_matches_peer",
        "_compute_block_transfer_offsets",
        "_apply_layer_mr_offsets",
        "_write_tp_mapping",
        "_is_mla_cache_layer",
    )

    def __init__(self, rel: Release):
        self.rel = rel
        ns = base_namespace()
        # Geometry helpers: byte offsets only, no rule (they never raise for a plain model).
        ns.update(
            compute_block_transfer_offsets=lambda **k: ([], [], []),
            compute_head_slice_offsets=lambda *a, **k: ([], [], []),
            validate_transfer_block_ids=lambda *a, **k: None,
            is_mla_cache_layer=lambda layer_to_spec, name: layer_to_spec[name] == "mla",
        )
        self.present = set()
        for name in self.FUNCTIONS:
            found = rel.find(name)
            if found:
                compile_defs([found[1]], ns, name)
                self.present.add(name)
        if "get_port_offset" not in self.present:
            raise SystemExit(f"{rel.version}: no MoRIIO connector")
        methods = rel.methods(self.WORKER)
        fns = [methods[m] for m in self.METHODS if m in methods]
        worker_ns = dict(ns)
        compile_defs(fns, worker_ns, self.WORKER)
        self.Worker = type("MoRIIOWorker", (), {n.name: worker_ns[n.name] for n in fns})
        self.ns = ns
        self.methods = {n.name for n in fns}
        hs = methods["_moriio_handshake"]
        dial_stmts = statements_assigning(hs, {"dial_tp_rank", "port_offset"})
        self.dial = function_from_statements(
            "_dial",
            ["self", "remote_tp_size", "remote_tp_rank=None", "remote_dp_rank=0"],
            dial_stmts,
            "port_offset",
            worker_ns,
        )
        rb = methods["_read_blocks"]
        self.read_prefix = function_from_statements(
            "_read_prefix",
            ["self", "remote_tp_size", "chosen_tp=None", "flexible=False", "remote_dp_rank=0"],
            statements_assigning(rb, {"remote_tp_size", "eff_tp", "holders"}),
            "locals()",
            worker_ns,
        )
        # The rank(s) a READ release is sent to: `holders` where the release has it, else the
        # right-hand side of `remote_notify_port + <rank expression>` in _read_blocks.
        self.holders = "holders" in ast.unparse(rb)
        notify = [
            n.right
            for n in ast.walk(rb)
            if isinstance(n, ast.BinOp)
            and isinstance(n.left, ast.Name)
            and n.left.id == "remote_notify_port"
        ]
        if not self.holders:
            if len({ast.unparse(n) for n in notify}) != 1:
                raise SystemExit(f"{rel.version}: cannot find the READ notify rank")
            self.notify_rank = function_from_statements(
                "_notify_rank",
                ["self", "env"],
                [ast.parse("globals().update(env)").body[0]],
                ast.unparse(notify[0]),
                dict(worker_ns),
            )
        self.has_flexible = "_resolve_read_source" in self.methods
        offs = (
            "_compute_read_attention_offsets"
            if "_compute_read_attention_offsets" in ast.unparse(rb)
            else "_compute_block_transfer_offsets"
        )
        self.offsets = offs
        self.offsets_params = [a.arg for a in methods[offs].args.args]

    def worker(self, rank: int, tp: int, h: int, mla: bool, producer: bool) -> Any:
        w = self.Worker()
        local_heads = heads_per_rank(h, tp, mla)
        layers = [f"model.layers.{i}.self_attn.attn" for i in range(NUM_LAYERS)]
        shape = (
            (NUM_BLOCKS, BLOCK_SIZE, 576) if mla else (2, NUM_BLOCKS, BLOCK_SIZE, local_heads, 128)
        )
        w.__dict__.update(
            tp_rank=rank,
            world_size=tp,
            use_mla=mla,
            dp_rank=0,
            is_producer=producer,
            model_config=Stub(get_total_num_kv_heads=lambda: h, use_mla=mla),
            moriio_config=Stub(backend="rdma", transfer_timeout=30.0),
            layer_to_spec={n: ("mla" if mla else "attention") for n in layers},
            layer_names=layers,
            kv_caches={n: _Tensor(shape) for n in layers},
            kv_cache_shape=shape,
            kv_layer_mr_offset={},
            _has_mamba=False,
            kv_head_layouts={} if mla else {n: self.head_layout(local_heads) for n in layers},
            merge_contiguous_blocks=lambda a, b, c, assume_sorted=False: (a, b, c),
        )
        if "MoRIIOMode" in self.present:
            w.mode = self.ns["MoRIIOMode"].WRITE if producer else self.ns["MoRIIOMode"].READ
        return w

    def head_layout(self, heads: int) -> Any:
        """vLLM's HeadLayout of a dense [2, blocks, block_size, heads, head_dim] cache."""
        if "HeadLayout" not in self.present:
            return None
        hb = 128 * 2
        return self.ns["HeadLayout"](
            num_heads=heads,
            num_tokens=BLOCK_SIZE,
            head_bytes=hb,
            block_stride=BLOCK_SIZE * heads * hb,
            head_stride=hb,
            token_stride=heads * hb,
            plane_offsets=(0, NUM_BLOCKS * BLOCK_SIZE * heads * hb),
        )

    def remote_meta(self, tp: int, h: int, mla: bool) -> Any:
        layers = [f"model.layers.{i}.self_attn.attn" for i in range(NUM_LAYERS)]
        wire = (
            {}
            if mla or "HeadLayout" not in self.present
            else {n: self.head_layout(heads_per_rank(h, tp, mla)).to_wire() for n in layers}
        )
        return Stub(num_blocks=NUM_BLOCKS, kv_head_layouts=wire, attention_block_sizes={})

    def read_rank(self, p: int, d: int, h: int, mla: bool, rank: int) -> tuple[str, Any]:
        """One decode rank of a READ transfer from a P-rank prefill instance."""
        w = self.worker(rank, d, h, mla, producer=False)

        def run() -> dict[str, Any]:
            chosen, flexible = None, False
            if self.has_flexible:
                chosen, flexible = w._resolve_read_source(Stub(tp_size=p, remote_dp_size=1))
            dial = self.dial(w, p, chosen if flexible else None)
            if not 0 <= dial < p:
                raise NoSuchRank(f"decode rank {rank} dials prefill rank {dial}")
            env = self.read_prefix(w, p, chosen, flexible)
            meta = self.remote_meta(p, h, mla)
            for layer in w.layer_names:
                kwargs: dict[str, Any] = {}
                if "remote_tp_size" in self.offsets_params:
                    kwargs["remote_tp_size"] = env.get("remote_tp_size", p)
                if "remote_engine_id" in self.offsets_params:
                    kwargs["remote_engine_id"] = "prefill"
                getattr(w, self.offsets)(layer, [1], [1], meta, **kwargs)
            if self.holders:
                release = list(env["holders"])
            else:
                release = [self.notify_rank(w, {"remote_dp_rank": 0, **env})]
            read = env.get("eff_tp", dial)
            return {"dial": dial, "read": read, "release": release}

        return outcome_of(run)

    def write_rank(self, p: int, d: int, h: int, mla: bool, rank: int) -> tuple[str, Any]:
        """One prefill rank of a WRITE transfer to a D-rank decode instance."""
        w = self.worker(rank, p, h, mla, producer=True)

        def run() -> dict[str, Any]:
            targets = None
            if "_write_tp_mapping" in self.methods:
                mapping = w._write_tp_mapping(d)
                targets = [
                    [t.tp_rank, t.remote_head, t.num_heads, t.num_writers] for t in mapping.targets
                ]
            # _background_moriio_handshake: a producer with several write targets dials each
            # of them; otherwise it dials the local-rank mapping.
            if targets is not None and len(targets) > 1:
                dials = [t[0] for t in targets]
            else:
                dials = [self.dial(w, d, None)]
            for dial in dials:
                if not 0 <= dial < d:
                    raise NoSuchRank(f"prefill rank {rank} dials decode rank {dial}")
            if targets is None:
                # Before the write mapping: blocks go over the dialled session and the
                # write_done notice to get_port_offset(decode_dp_rank, tp_rank).
                return {"dial": dials, "data": dials, "notify": [rank]}
            return {"dial": dials, "targets": targets}

        return outcome_of(run)

    def acks(self, p: int, d: int) -> tuple[str, Any]:
        if "get_moriio_expected_ack_count" not in self.present:
            return "ok", None
        return outcome_of(lambda: self.ns["get_moriio_expected_ack_count"](p, d))


# ---------------------------------------------------------------- grids and encoding


class Table:
    """Interns payloads: equal outcomes share one index."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.index: dict[Any, int] = {}

    def add(self, item: Any) -> int:
        key = _freeze(item)
        found = self.index.get(key)
        if found is None:
            found = self.index[key] = len(self.items)
            self.items.append(item)
        return found


def _freeze(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


def template(message: str, args: tuple[Any, ...]) -> str:
    """Lossless compression of a message: each number equal to an argument becomes ``{i}``
    (``template(m, a).format(*a) == m`` is checked), so messages that differ only in the
    sizes they quote share one table entry. Literal braces are doubled."""
    text = message.replace("{", "{{").replace("}", "}}")
    ints = {
        str(a): i
        for i, a in reversed(list(enumerate(args)))
        if isinstance(a, int) and not isinstance(a, bool)
    }

    def sub(m: re.Match[str]) -> str:
        i = ints.get(m.group(0))
        return m.group(0) if i is None else f"{{{i}}}"

    out = re.sub(r"(?<![\w.])-?\d+(?![\w])", sub, text)
    if out.format(*args) != message:
        return text  # keep it literal rather than risk a lossy template
    return out


def rle(values: list[int]) -> list[int]:
    """[v0, n0, v1, n1, ...] run-length encoding."""
    out: list[int] = []
    for v in values:
        if out and out[-2] == v:
            out[-1] += 1
        else:
            out += [v, 1]
    return out


def pair_grid(
    side: Callable[[int, int, int, bool, int], tuple[str, Any]],
    ranks: str,
    extra: Callable[[int, int], Any] | None = None,
) -> dict[str, Any]:
    """Every loadable (mla, H, P, D): the outcome of the lowest failing rank of the side that
    runs the checks (``ranks`` = "decode" or "prefill"), else every rank's payload.
    Codes: -1 = a side does not load the model; 2k = error k; 2k+1 = ok with map k."""
    errors, maps = Table(), Table()
    codes: dict[str, list[int]] = {}
    for mla in (False, True):
        seq: list[int] = []
        for h in heads_grid(mla):
            for p in range(1, MAX_TP + 1):
                for d in range(1, MAX_TP + 1):
                    if not (loads(h, p, mla) and loads(h, d, mla)):
                        seq.append(-1)
                        continue
                    payload = []
                    code = None
                    for r in range(d if ranks == "decode" else p):
                        kind, value = side(p, d, h, mla, r)
                        if kind != "ok":
                            code = 2 * errors.add([kind, template(value, (p, d, h))])
                            break
                        payload.append(value)
                    if code is None:
                        code = 2 * maps.add(payload) + 1
                    seq.append(code)
        codes["1" if mla else "0"] = rle(seq)
    out = {
        "errors": errors.items,
        "maps": maps.items,
        "pairs": codes,
        "heads": {"0": heads_grid(False), "1": heads_grid(True)},
    }
    if extra is not None:
        acks = Table()
        seq = [
            acks.add(list(extra(p, d))) for p in range(1, MAX_TP + 1) for d in range(1, MAX_TP + 1)
        ]
        out["acks"] = {"values": acks.items, "pd": rle(seq)}
    return out


def function_grid(fn: Callable[..., Any], args: list[tuple[Any, ...]]) -> dict[str, Any]:
    values = Table()
    seq = []
    for a in args:
        kind, value = outcome_of(functools.partial(fn, *a))
        seq.append(values.add([kind, template(value, a) if kind != "ok" else _plain(value)]))
    return {"values": values.items, "codes": rle(seq)}


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


SIZES = list(range(FUNC_LO, MAX_TP + 1))
HEADS = list(range(-1, MAX_HEADS + 1))


_FUNCTION_MEMO: dict[str, dict[str, Any]] = {}


def moriio_functions(m: Moriio) -> dict[str, Any]:
    """The pure MoRIIO functions over their whole grid (release where they exist)."""
    names = [
        "get_moriio_remote_tp_rank",
        "get_moriio_expected_ack_count",
        "validate_moriio_heterogeneous_tp_kv_heads",
        "validate_write_tp_topology",
    ]
    key = m.rel.digest(names)  # same code, same vectors: computed once
    if key not in _FUNCTION_MEMO:
        _FUNCTION_MEMO[key] = _moriio_functions(m)
    return _FUNCTION_MEMO[key]


def _moriio_functions(m: Moriio) -> dict[str, Any]:
    ns, out = m.ns, {}
    if "get_moriio_remote_tp_rank" in m.present:
        args = [(r, lo, re) for lo in SIZES for re in SIZES for r in range(-1, max(lo, 0) + 1)]
        out["get_moriio_remote_tp_rank"] = function_grid(ns["get_moriio_remote_tp_rank"], args)
    if "get_moriio_expected_ack_count" in m.present:
        args = [(a, b) for a in SIZES for b in SIZES]
        out["get_moriio_expected_ack_count"] = function_grid(
            ns["get_moriio_expected_ack_count"], args
        )
    for name in ("validate_moriio_heterogeneous_tp_kv_heads", "validate_write_tp_topology"):
        if name in m.present:
            args = [
                (a, b, h, mla) for mla in (False, True) for h in HEADS for a in SIZES for b in SIZES
            ]
            out[name] = function_grid(ns[name], args)
    return out


# ---------------------------------------------------------------- layouts (DP / EP / PP)
#
# The rules of parallel layouts that are pure functions of sizes and ranks, each run from the
# release's own code: the pipeline layer partition (``get_pp_indices``), the expert map
# (``determine_expert_map``), the MoE parallel sizes (``FusedMoEParallelConfig.make``: EP size
# = TP x DP, the MoE layer's own TP), the config-time checks of ``verify_with_parallel_config``
# (attention heads by TP, expert parallel needs experts, pipeline parallel needs SupportsPP),
# MoRIIO's port offsets (each (DP rank, TP rank) binds ``handshake_port + offset``; a peer dials
# ``port + offset`` of each remote DP rank), and NIXL's pipeline-parallel handling (the worker's
# PP checks per ``kv_role``; which (PP rank, TP rank) a decode rank's handshake queries).

MAX_LAYERS = 128
MAX_PP = 16
EXPERTS = [*range(1, 41), 60, 64, 128, 160, 256, 384]
MAX_EP = 32
MOE_MAX = 16  # TP and DP sizes of the MoE grid
MORIIO_MAX = 8  # TP and DP sizes of the MoRIIO port grid
VERIFY_HEADS = (32, 40, 64)
NIXL_PP_SIZES = (1, 2, 3, 4)
NIXL_PP_TP = (1, 2, 4, 8)
NIXL_ROLES = ("kv_both", "kv_producer", "kv_consumer")


class _TorchStub:
    """The few ``torch`` calls of ``determine_expert_map``, on numpy."""

    int32 = np.int32
    Tensor = np.ndarray

    @staticmethod
    def full(shape: Any, fill: Any, dtype: Any = None) -> Any:
        return np.full(shape, fill, dtype=dtype)

    @staticmethod
    def arange(start: int, end: int | None = None, step: int = 1, dtype: Any = None) -> Any:
        if end is None:
            start, end = 0, start
        return np.arange(start, end, step, dtype=dtype)

    @staticmethod
    def ones(shape: Any, dtype: Any = None) -> Any:
        return np.ones(shape, dtype=dtype)

    @staticmethod
    def zeros(shape: Any, dtype: Any = None) -> Any:
        return np.zeros(shape, dtype=dtype)


def method_statements(fn: ast.FunctionDef, keep: Callable[[str], bool]) -> list[ast.stmt]:
    """The top-level statements of ``fn`` whose source ``keep`` accepts (in order)."""
    return [stmt for stmt in fn.body if keep(ast.unparse(stmt))]


class Layouts:
    """Drives one release's layout rules (see the section comment)."""

    def __init__(self, rel: Release):
        self.rel = rel
        ns = base_namespace()
        ns.update(
            torch=_TorchStub, envs=Stub(VLLM_PP_LAYER_PARTITION=None), get_args=typing.get_args
        )
        self.ns = ns
        found = rel.find("get_pp_indices", under="vllm/distributed/utils.py")
        if found is None:
            raise SystemExit(f"{rel.version}: no get_pp_indices")
        compile_defs([found[1]], ns, "get_pp_indices")
        found = rel.find("determine_expert_map", under=FUSED_MOE)
        if found is None:
            raise SystemExit(f"{rel.version}: no determine_expert_map")
        compile_defs([found[1]], ns, "determine_expert_map")
        self.expert_params = [a.arg for a in found[1].args.args]  # type: ignore[attr-defined]
        self._moe_init(rel)
        self._verify_init(rel)
        self.moriio = Moriio(rel) if has_connector(rel, "moriio") else None
        if self.moriio is not None:
            init = rel.methods(Moriio.WORKER)["__init__"]
            binds = [
                st
                for st in init.body
                if isinstance(st, (ast.Assign, ast.AnnAssign))
                and "self.side_channel_port" in ast.unparse(st).split("=")[0]
            ]
            if len(binds) != 1:
                raise SystemExit(f"{rel.version}: cannot find MoRIIO's side_channel_port")
            self.bind = function_from_statements(
                "_bind", ["self"], binds, "self.side_channel_port", dict(self.moriio.ns)
            )
        self.nixl = Nixl(rel) if has_connector(rel, "nixl") else None
        if self.nixl is not None:
            # The PP checks of the worker's __init__ (base class or the one worker class).
            checks = [
                st
                for cls in Nixl.WORKERS
                if (init := rel.methods(cls).get("__init__")) is not None
                for st in init.body
                if isinstance(st, ast.If) and "pp_size" in ast.unparse(st.test)
            ]
            self.pp_init = function_from_statements(
                "_pp_init", ["self", "vllm_config"], checks, "None", dict(self.nixl.ns)
            )

    def _moe_init(self, rel: Release) -> None:
        methods = rel.methods_of("FusedMoEParallelConfig", under=FUSED_MOE)
        if "make" not in methods:
            raise SystemExit(f"{rel.version}: no FusedMoEParallelConfig.make")
        ns = dict(self.ns)
        statics = {}
        for name, node in methods.items():
            decorators = {ast.unparse(d) for d in node.decorator_list}
            if "staticmethod" in decorators:
                # One namespace for all: `make` calls the class's other static methods.
                compile_defs([node], ns, f"FusedMoEParallelConfig.{name}")
                statics[name] = staticmethod(ns.pop(name))

        def record(self: Any, **kw: Any) -> None:
            self.kw = kw

        self.moe_cls = type("FusedMoEParallelConfig", (), {**statics, "__init__": record})
        ns["FusedMoEParallelConfig"] = self.moe_cls
        self.moe_ns = ns
        self.make = self.moe_cls.make
        self.make_params = [a.arg for a in methods["make"].args.args]

    def _verify_init(self, rel: Release) -> None:
        methods = rel.methods_of("ModelConfig", under=MODEL_CONFIG)
        verify = methods["verify_with_parallel_config"]
        wanted = ("total_num_attention_heads", "tensor_parallel_size =", "enable_expert_parallel",
                  "pipeline_parallel_size")  # fmt: skip
        unrelated = ("hc_sp", "decode_context", "mm_tensor_ipc", "external_launcher",
                     "world_size_across_dp")  # fmt: skip
        stmts = method_statements(
            verify,
            lambda src: any(w in src for w in wanted) and not any(u in src for u in unrelated),
        )
        ns = dict(self.ns)
        compile_defs([methods["_verify_with_expert_parallelism"]], ns, "ModelConfig")
        self.verify_ep = ns["_verify_with_expert_parallelism"]
        self.verify = function_from_statements(
            "_verify", ["self", "parallel_config"], stmts, "None", ns
        )

    # -- the functions, one vector each

    def pp_indices(self, layers: int, rank: int, pp: int) -> Any:
        return self.ns["get_pp_indices"](layers, rank, pp)

    def expert_map(self, strategy: str, experts: int, ep: int, rank: int) -> Any:
        kwargs: dict[str, Any] = {"ep_size": ep, "ep_rank": rank, "global_num_experts": experts}
        if "expert_placement_strategy" in self.expert_params:
            kwargs["expert_placement_strategy"] = strategy
        elif strategy != "linear":
            return None
        got = self.ns["determine_expert_map"](**kwargs)
        local, mapping = got[0], got[1]
        if mapping is None:
            return [int(local), None]
        owned = sorted((int(v), e) for e, v in enumerate(mapping.tolist()) if v >= 0)
        if [v for v, _ in owned] != list(range(len(owned))):
            raise HarnessError(f"expert map is not 0..n-1: {owned}")
        return [int(local), [e for _, e in owned]]

    def moe(self, ep: bool, tp: int, dp: int, dp_rank: int, tp_rank: int) -> Any:
        self.moe_ns.update(
            get_dp_group=lambda: Stub(rank_in_group=dp_rank),
            get_pcp_group=lambda: Stub(rank_in_group=0),
            get_tensor_model_parallel_rank=lambda: tp_rank,
        )
        # Sequence-parallel MoE and EPLB are off: pdtp plans neither.
        cfg = Stub(enable_expert_parallel=ep, all2all_backend="naive", enable_eplb=False,
                   use_sequence_parallel_moe=False)  # fmt: skip
        given = {"tp_size_": tp, "dp_size_": dp, "pcp_size_": 1, "sp_size_": 1,
                 "vllm_parallel_config": cfg}  # fmt: skip
        made = self.make(**{k: given[k] for k in self.make_params})
        kw = made.kw
        return [kw["tp_size"], kw["tp_rank"], kw["ep_size"], kw["ep_rank"], kw["use_ep"]]

    def config_check(
        self, heads: int, tp: int, pp: int, ep: bool, experts: int, supports_pp: bool
    ) -> Any:
        model = Stub(
            hf_text_config=Stub(num_attention_heads=heads, num_experts=experts),
            model_arch_config=Stub(total_num_attention_heads=heads),
            is_moe=experts > 0,
            get_num_experts=lambda: experts,
            architectures=["Model"],
            registry=Stub(is_pp_supported_model=lambda archs, cfg: supports_pp),
        )
        model._verify_with_expert_parallelism = lambda: self.verify_ep(model)
        parallel = Stub(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                        enable_expert_parallel=ep)  # fmt: skip
        return self.verify(model, parallel)

    def moriio_bind(self, dp_rank: int, tp_rank: int) -> Any:
        assert self.moriio is not None
        w = Stub(dp_rank=dp_rank, tp_rank=tp_rank, moriio_config=Stub(handshake_port=0))
        return self.bind(w)

    def moriio_dial(self, remote_dp_rank: int, local_tp: int, rank: int, remote_tp: int) -> Any:
        m = self.moriio
        assert m is not None
        w = m.worker(rank, local_tp, 8, False, producer=False)
        return m.dial(w, remote_tp, None, remote_dp_rank)

    def nixl_pp_init(self, role: str, pp: int) -> Any:
        me = Stub(pp_size=pp, _is_hma_required=False, _supports_pp_hma=False, _has_mamba=False)
        cfg = Stub(kv_transfer_config=Stub(kv_role=role))
        return self.pp_init(me, cfg)

    def nixl_handshake(self, tp: int, rank: int, remote_pp: int) -> Any:
        n = self.nixl
        assert n is not None
        w = n.worker(rank, tp, 8, False)
        n.reply = n.metadata(tp, 8, False)
        n.asked = []
        kwargs = {"host": "prefill", "port": 5600, "remote_tp_size": tp,
                  "expected_engine_id": "prefill", "remote_pp_size": remote_pp}  # fmt: skip
        if "remote_pp_size" not in n.handshake_params and remote_pp > 1:
            return None  # the release has no pipeline-parallel handshake
        w._nixl_handshake(**{k: v for k, v in kwargs.items() if k in n.handshake_params})
        out = []
        for msg in n.asked:
            if not isinstance(msg, tuple):  # 0.11.0: the port names the rank, the message none
                out.append([0, None])
                continue
            ranks = list(msg[1:])
            out.append([0, *ranks] if len(ranks) == 1 else ranks)
        return out


def layout_golden(rel: Release) -> dict[str, Any]:
    """Every layout vector of one release (see :class:`Layouts`)."""
    COMPILED.clear()
    lay = Layouts(rel)
    key = hashlib.sha256("\n".join(COMPILED).encode()).hexdigest()
    if ("layout", key) in _GENERATED:
        return _GENERATED[("layout", key)]
    out: dict[str, Any] = {
        "format": 1,
        "part": "layout",
        "max_layers": MAX_LAYERS,
        "max_pp": MAX_PP,
        "experts": EXPERTS,
        "max_ep": MAX_EP,
        "moe_max": MOE_MAX,
        "moriio_max": MORIIO_MAX,
        "verify_heads": list(VERIFY_HEADS),
        "nixl_pp_sizes": list(NIXL_PP_SIZES),
        "nixl_pp_tp": list(NIXL_PP_TP),
        "nixl_roles": list(NIXL_ROLES),
    }
    out["pp_indices"] = function_grid(
        lay.pp_indices,
        [(n, r, pp) for pp in range(1, MAX_PP + 1) for n in range(1, MAX_LAYERS + 1)
         for r in range(pp)],
    )  # fmt: skip
    out["expert_map"] = function_grid(
        lay.expert_map,
        [(s, e, ep, r) for s in ("linear", "round_robin") for e in EXPERTS
         for ep in range(1, MAX_EP + 1) for r in range(ep)],
    )  # fmt: skip
    out["moe_parallel"] = function_grid(
        lay.moe,
        [(ep, tp, dp, dr, tr) for ep in (False, True) for tp in range(1, MOE_MAX + 1)
         for dp in range(1, MOE_MAX + 1) for dr in range(dp) for tr in range(tp)],
    )  # fmt: skip
    out["config_check"] = function_grid(
        lay.config_check,
        [(a, tp, pp, ep, e, sp) for a in VERIFY_HEADS for tp in range(1, 9) for pp in (1, 2, 3)
         for ep in (False, True) for e in (0, 8) for sp in (False, True)],
    )  # fmt: skip
    if lay.moriio is not None:
        m = MORIIO_MAX
        out["moriio_bind"] = function_grid(
            lay.moriio_bind, [(d, t) for d in range(m) for t in range(m)]
        )
        out["moriio_dial"] = function_grid(
            lay.moriio_dial,
            [(k, lt, r, rt) for k in range(m) for lt in range(1, m + 1) for r in range(lt)
             for rt in range(1, m + 1)],
        )  # fmt: skip
    if lay.nixl is not None:
        out["nixl_pp_init"] = function_grid(
            lay.nixl_pp_init, [(role, pp) for role in NIXL_ROLES for pp in NIXL_PP_SIZES]
        )
        out["nixl_handshake"] = function_grid(
            lay.nixl_handshake,
            [(tp, r, pp) for tp in NIXL_PP_TP for r in range(tp) for pp in NIXL_PP_SIZES],
        )
    _GENERATED[("layout", key)] = out
    return out


_GENERATED: dict[tuple[str, str], dict[str, Any]] = {}


def generate(rel: Release, connector: str) -> dict[str, Any]:
    """The golden data of one release, reused from an earlier release that compiled exactly
    the same vLLM code."""
    COMPILED.clear()
    if connector == "nixl":
        driver: Any = Nixl(rel)
    else:
        driver = Moriio(rel)
    key = (connector, hashlib.sha256("\n".join(COMPILED).encode()).hexdigest())
    if key not in _GENERATED:
        _GENERATED[key] = _generate(driver, connector)
    return _GENERATED[key]


def _generate(driver: Any, connector: str) -> dict[str, Any]:
    if connector == "nixl":
        body = pair_grid(driver.decode_rank, "decode")
    elif connector == "moriio":
        body = pair_grid(driver.read_rank, "decode", extra=driver.acks)
        body["functions"] = moriio_functions(driver)
    elif connector == "moriio-write":
        body = pair_grid(driver.write_rank, "prefill")
    else:
        raise SystemExit(f"unknown connector {connector}")
    return {
        "format": 1,
        "connector": connector,
        "max_tp": MAX_TP,
        "max_heads": MAX_HEADS,
        "func_lo": FUNC_LO,
        **body,
    }


def has_connector(rel: Release, connector: str) -> bool:
    if connector == "layout":  # the layout rules of every release (not a connector)
        return True
    if connector == "nixl":
        return any(rel.find(f"{c}._nixl_handshake") for c in Nixl.WORKERS)
    return rel.find("MoRIIOConnectorWorker._moriio_handshake") is not None


CONNECTORS = ["nixl", "moriio", "moriio-write"]
# What the golden index holds: each connector's pair rules, then the layout rules.
PARTS = [*CONNECTORS, "layout"]


def write_flow_data(out: Path, part: str, data: dict[str, Any]) -> str:
    """Write a flow driver's data as ``<part>-<digest of its bytes>.json.gz`` in ``out``
    (compact, sorted JSON; kept if a file of that name exists) and return the file name."""
    blob = json.dumps(data, separators=(",", ":"), sort_keys=True)
    name = f"{part}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}.json.gz"
    if not (out / name).exists():
        with gzip.open(out / name, "wt", compresslevel=9) as f:
            f.write(blob)
    return name


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", help="comma-separated releases (default: RELEASES)")
    ap.add_argument(
        "--connectors",
        default=",".join(PARTS),
        help=f"parts to generate (default: {','.join(PARTS)}; 'layout' is the layout rules)",
    )
    ap.add_argument(
        "--source",
        action="append",
        default=[],
        help="VERSION=PATH: read that release from an unpacked wheel or a .whl",
    )
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "pdtp-vllm-wheels"))
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    versions = args.versions.split(",") if args.versions else RELEASES
    sources = dict(s.split("=", 1) for s in args.source)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    for connector in args.connectors.split(","):
        runs = index.setdefault(connector, {})  # release -> golden file
        for v in versions:
            path = Path(sources[v]) if v in sources else fetch(v, Path(args.cache))
            rel = Release(v, path)
            if not has_connector(rel, connector):
                runs[v] = None
                print(f"{connector} {v}: not in this release", flush=True)
                index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
                continue
            data = layout_golden(rel) if connector == "layout" else generate(rel, connector)
            digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
            name = f"{connector}-{digest}.json.gz"
            target = out / name
            if not target.exists():
                with gzip.open(target, "wt", compresslevel=9) as f:
                    json.dump(data, f, separators=(",", ":"), sort_keys=True)
            runs[v] = name
            print(f"{connector} {v}: {name}", flush=True)
            index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    # Golden files no release points at any more are stale.
    used = {n for runs in index.values() for n in runs.values() if n}
    for f in out.glob("*.json.gz"):
        if f.name not in used:
            f.unlink()


if __name__ == "__main__":
    main()
