#!/usr/bin/env python3
"""Golden data for SGLang's prefill/decode pair rules, generated from SGLang's own code.

    python tools/sglang_golden.py                          # every release (downloads wheels)
    python tools/sglang_golden.py --wheels /tmp/sglang-wheels   # wheels already downloaded
    python tools/sglang_golden.py --versions 0.5.24        # add one release

Each release's wheel comes from ``pip download sglang==X --no-deps --only-binary :all:`` (a
wheel never runs a build step). The script reads ``sglang/srt/disaggregation/`` straight out of
the archive and **never imports SGLang** (it needs torch, GPUs and RDMA). With :mod:`ast` it
compiles the release's own classes and functions into a private namespace and runs them
against stand-ins that carry exactly the state a real engine holds and absorb all I/O.

What runs, per transfer backend (``mooncake``, ``nixl``, ``mori``: the backends with a
``<backend>/conn.py`` in that release):

* **Rank mapping (decode side).** One decode rank (attention TP = D, its ``engine_rank``)
  meets a prefill instance (attention TP = P, registered ranks 0..P-1). Before 0.5.10 the
  release's ``<Backend>KVReceiver.__init__`` runs whole (its ``super().__init__`` is the
  release's ``CommonKVReceiver.__init__``), from 0.5.10 ``CommonKVManager._resolve_rank_mapping``
  then ``CommonKVReceiver._setup_bootstrap_infos``. Their bootstrap queries go to a fake
  ``requests`` that answers like the prefill's bootstrap server: the parallel info for
  ``engine_rank=-1``, the rank's address for a registered rank, HTTP 404 otherwise. Recorded:
  the prefill ranks the decode rank fetches and which are dummy (``is_dummy``),
  ``required_dst_info_num``, ``required_prefill_response_num``, the first exception (class,
  text), and whether the rank's request is failed (``update_status(..., KVPoll.Failed)`` /
  ``record_failure``) with the logged or recorded text.
* **Head slicing (prefill side).** For every (prefill rank, decode rank) pair the mapping makes
  real (not dummy), non-MLA and P ≠ D: the release's head-slice code — ``compute_head_slice_params``
  where it exists, else the statements of ``send_kvcache_slice`` (Mooncake, NIXL) or
  ``_build_tp_slice_config`` (MORI) that compute the head offsets — with the prefill rank's
  ``kv_args`` (``kv_head_num = max(1, H // P)``), to the end of the method: every top-level
  statement that computes a size or an offset, asserts, raises, or checks and returns early
  (NIXL 0.5.22's tiling asserts, MORI's ``ValueError`` checks, Mooncake's slot-size check),
  minus the I/O (pointers, descriptor lists, the transfer engine) and what only I/O feeds.
  Recorded: source head start, heads sent, destination head start, NIXL's prepared-path
  ``num_groups`` (``groups``), or the exception, or the logged text of an early return. The
  senders call the slice code only when the model is not MLA and the attention TP sizes
  differ (the ``if self.is_mla_backend or (... == ...)`` of every release's transfer code);
  where a release has no slice code, P ≠ D copies whole blocks.
* **Where a slice exception surfaces.** The function that calls the slice code, and whether a
  ``try`` around the call catches ``Exception``.
* **Page size and KV-cache dtype.** For ``--page-size`` and ``--kv-cache-dtype`` pairs
  (:data:`PAGES` x :data:`DTYPES`, prefill and decode), the release's own checks on them:
  ``try_ensure_parallel_info``'s (0.5.10 on), else the receiver's ``__init__`` run whole
  (0.5.8's page-size check). Recorded: the exception (class, text), or none.
* **Bootstrap timeout.** Whether the release's prefill sender times out a room no decode rank
  joined (``bootstrap_timeout`` in ``CommonKVSender``/``<Backend>KVSender``), else it waits
  forever.

Grid: P, D ∈ {1, 2, 3, 4, 6, 8, 16} (attention TP, i.e. TP ÷ DP with DP attention), KV heads
{1, 2, 3, 4, 6, 8, 16, 32, 64, 128} without MLA, MLA on (one latent, heads irrelevant), and a
DP-attention grid (decode DP 2, TP = 2·D, every engine rank) and a pipeline grid (prefill PP
and decode PP ∈ {1, 2, 4}).

Output: ``tests/data/sglang_golden.json.gz``: per backend, one entry per run of releases whose
recorded outcomes are identical (``releases``, the cases), plus ``provenance`` (the wheels'
sha256 and the source digest of every release).
"""

from __future__ import annotations
import __future__ as _future

import argparse
import ast
import enum
import gzip
import hashlib
import json
import logging
import subprocess
import sys
import tempfile
import threading
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

# Every release from 0.4.6 (SGLang's first with Mooncake and NIXL transfer backends) to the
# newest the script has been run on. A new release: add it here and rerun.
RELEASES = [
    "0.4.6", "0.4.6.post1", "0.4.6.post2", "0.4.6.post3", "0.4.6.post4", "0.4.6.post5",
    "0.4.7", "0.4.7.post1", "0.4.8", "0.4.8.post1", "0.4.9", "0.4.9.post1", "0.4.9.post2",
    "0.4.9.post3", "0.4.9.post4", "0.4.9.post5", "0.4.9.post6", "0.4.10", "0.4.10.post1",
    "0.4.10.post2", "0.5.1", "0.5.1.post1", "0.5.1.post2", "0.5.1.post3", "0.5.2", "0.5.3",
    "0.5.3.post1", "0.5.3.post2", "0.5.3.post3", "0.5.4", "0.5.4.post1", "0.5.4.post2",
    "0.5.4.post3", "0.5.5", "0.5.5.post1", "0.5.5.post2", "0.5.5.post3", "0.5.6",
    "0.5.6.post1", "0.5.6.post2", "0.5.7", "0.5.8", "0.5.8.post1", "0.5.9", "0.5.10",
    "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14",
    "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21",
    "0.5.22", "0.5.23",
]  # fmt: skip

BACKENDS = ("mooncake", "nixl", "mori")
SIZES = (1, 2, 3, 4, 6, 8, 16)
HEADS = (1, 2, 3, 4, 6, 8, 16, 32, 64, 128)
PP_SIZES = (1, 2, 4)
DISAGG = "sglang/srt/disaggregation/"
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "sglang_golden.json.gz"

_FLAGS = _future.annotations.compiler_flag  # annotations stay strings: torch never resolves


class Gap(BaseException):
    """The stand-ins lack something the release's code reads: a bug of this script."""


# ---------------------------------------------------------------- source of one release


class Release:
    def __init__(self, version: str, wheel: Path):
        self.version = version
        self.files: dict[str, str] = {}
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.startswith(DISAGG) and name.endswith(".py"):
                    self.files[name[len(DISAGG) :]] = z.read(name).decode()
        if not self.files:
            raise SystemExit(f"{wheel}: no {DISAGG}")
        self.sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
        self._trees: dict[str, ast.Module] = {}

    def tree(self, rel: str) -> ast.Module | None:
        if rel not in self.files:
            return None
        if rel not in self._trees:
            self._trees[rel] = ast.parse(self.files[rel])
        return self._trees[rel]

    def cls(self, rel: str, name: str) -> ast.ClassDef | None:
        tree = self.tree(rel)
        if tree is None:
            return None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        return None

    def func(self, rel: str, name: str) -> ast.FunctionDef | None:
        tree = self.tree(rel)
        if tree is None:
            return None
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
        return None

    def backends(self) -> list[str]:
        return [b for b in BACKENDS if f"{b}/conn.py" in self.files]

    def digest(self) -> str:
        h = hashlib.sha256()
        for rel in sorted(self.files):
            h.update(rel.encode() + b"\0" + self.files[rel].encode())
        return h.hexdigest()[:16]


def fetch(version: str, cache: Path) -> Path:
    found = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if not found:
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps"),
                *("--only-binary", ":all:", "--quiet", "-d", str(cache)),
            ],
            check=True,
        )
        found = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if not found:
        raise SystemExit(f"no wheel for sglang=={version} in {cache}")
    return found[0]


# ---------------------------------------------------------------- stand-ins


class Strict(types.SimpleNamespace):
    """An object with exactly the attributes given: reading any other one is a Gap."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise Gap(f"stand-in has no attribute {name!r}")


class Log:
    """SGLang's logger: records errors and warnings, drops the rest."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, msg: Any, *a: Any, **k: Any) -> None:
        self.errors.append(str(msg))

    exception = error

    def _drop(self, *a: Any, **k: Any) -> None:
        pass

    warning = warning_once = info = debug = _drop


class KVPoll(enum.IntEnum):
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


class Response:
    def __init__(self, status: int, payload: Any):
        self.status_code = status
        self._payload = payload
        self.text = json.dumps(payload)

    def json(self) -> Any:
        return self._payload


class Prefill:
    """The prefill instance a decode rank queries: its bootstrap server's answers."""

    def __init__(self, attn_tp: int, dp: int, pp: int, page_size: int = 1, kv_dtype: str = "auto"):
        self.attn_tp, self.dp, self.pp, self.page_size = attn_tp, dp, pp, page_size
        self.kv_dtype = kv_dtype

    def parallel_info(self) -> dict[str, Any]:
        tp = self.attn_tp * self.dp
        return Keys(
            prefill_dp_size=self.dp,
            dp_size=self.dp,
            tp_size_per_dp_rank=self.attn_tp,
            prefill_tp_size=tp,
            tp_size=tp,
            prefill_attn_tp_size=self.attn_tp,
            attn_tp_size=self.attn_tp,
            prefill_pp_size=self.pp,
            pp_size=self.pp,
            prefill_cp_size=1,
            attn_cp_size=1,
            prefill_page_size=self.page_size,
            page_size=self.page_size,
            kv_cache_dtype=self.kv_dtype,
            prefill_kv_cache_dtype=self.kv_dtype,
            follow_bootstrap_room=True,
            enable_dsa_cache_layer_split=False,
            enable_kv_cache_sharding=False,
            dsv41_spec_layout=None,
            kv_layout=None,
            decode_allocation_policy="early",
            prefill_http_port=None,
            is_mla_backend=None,
        )

    def get(self, url: str, timeout: Any = None, **kw: Any) -> Response:
        q = {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
        if not q:  # NIXL 0.4.6.post3 with DP attention: every rank's address at once
            return Response(200, {str(r): self.rank(r) for r in range(self.attn_tp)})
        tp = int(q.get("engine_rank", q.get("target_tp_rank", q.get("prefill_tp_rank", "0"))))
        if tp == -1:
            return Response(200, self.parallel_info())
        pp = int(q.get("target_pp_rank", q.get("prefill_pp_rank", "0")))
        dp = int(q.get("target_dp_group", q.get("prefill_dp_rank", "0")))
        if 0 <= tp < self.attn_tp and 0 <= pp < self.pp and 0 <= dp < self.dp:
            return Response(200, self.rank(tp))
        return Response(404, "Bootstrap info not Found")

    @staticmethod
    def rank(tp: int) -> dict[str, Any]:
        return {"rank_ip": "10.0.0.1", "rank_port": 17000 + tp}


class Keys(dict):
    def __getitem__(self, key: str) -> Any:
        if key not in self:
            raise Gap(f"bootstrap payload has no key {key!r}")
        return dict.__getitem__(self, key)


class FakeRequests:
    class exceptions:
        RequestException = OSError
        Timeout = TimeoutError

    RequestException = OSError

    def __init__(self, prefill: Prefill):
        self.prefill = prefill

    def get(self, url: str, timeout: Any = None, **kw: Any) -> Response:
        return self.prefill.get(url, timeout)

    def Session(self) -> FakeRequests:
        return self


class Envs:
    """``sglang.srt.environ.envs``: every variable at its default."""

    def __getattr__(self, name: str) -> Any:
        return types.SimpleNamespace(get=lambda: None, value=None)


class Placeholder:
    """A module-level name a definition reads when it is defined (a default argument's enum
    member): defining works, and any use of it in a driven path is a Gap."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self._name}.{attr}")

    def __call__(self, *a: Any, **k: Any) -> Any:
        raise Gap(f"driven code calls {self._name}")

    def __repr__(self) -> str:
        return self._name


def _compile(node: ast.AST, ns: dict[str, Any], where: str) -> None:
    node = ast.parse(ast.unparse(node)).body[0]
    module = ast.Module(body=[node], type_ignores=[])
    ast.fix_missing_locations(module)
    code = compile(module, f"<sglang {where}>", "exec", _FLAGS)
    for _ in range(20):
        try:
            exec(code, ns)
            return
        except NameError as e:  # a name read at definition time only
            ns[e.name] = Placeholder(e.name)
    raise Gap(f"{where}: cannot define")


def _methods_only(cls: ast.ClassDef, base: str) -> ast.ClassDef:
    """``cls`` with only its methods (class attributes open sockets), based on ``base``."""
    body = [n for n in cls.body if isinstance(n, ast.FunctionDef)]
    for fn in body:
        fn.decorator_list = [
            d for d in fn.decorator_list if ast.unparse(d) in ("classmethod", "staticmethod")
        ]
    return ast.ClassDef(
        name=cls.name,
        bases=[ast.Name(base, ast.Load())],
        keywords=[],
        body=body or [ast.Pass()],
        decorator_list=[],
        type_params=[],
    )


# I/O methods of the receivers: what they do is the network, not a rule.
NETWORK = {
    "_register_kv_args": lambda self, *a, **k: True,
    "_connect": classmethod(lambda cls, *a, **k: Strict()),
    "_connect_to_bootstrap_server": classmethod(lambda cls, *a, **k: None),
    "_get_bootstrap_session": lambda *a, **k: None,
    "send_metadata": lambda self, *a, **k: None,
    "_send_bootstrap_message": lambda self, *a, **k: None,
    "_register_prefill_dp_rank": lambda self, *a, **k: None,
}


class Manager:
    """The decode rank's KV manager: the state the receiver reads, and its status calls."""

    def __init__(
        self,
        d_attn: int,
        dp: int,
        pp: int,
        rank: int,
        mla: bool,
        log: Log,
        page_size: int = 1,
        kv_dtype: str = "auto",
    ):
        tp = d_attn * dp
        self.tp_size, self.dp_size, self.attn_tp_size = tp, dp, d_attn
        self.attn_tp_rank = rank % d_attn
        self.tp_size_of_dp, self.dp_rank = d_attn, rank // d_attn
        self.attn_cp_size, self.attn_cp_rank = 1, 0
        self.pp_size, self.pp_rank = pp, 0
        self.enable_dp_attention = dp > 1
        self.is_mla_backend, self.is_hybrid_mla_backend = mla, False
        self.enable_all_cp_ranks_for_transfer = False
        self.kv_args = Strict(
            engine_rank=rank, page_size=page_size, pp_rank=0, system_dp_rank=0, state_types=()
        )
        self.kv_cache_dtype_str = kv_dtype
        self.server_args = Strict(
            dp_size=dp,
            tp_size=tp,
            enable_dp_attention=dp > 1,
            kv_cache_dtype=kv_dtype,
            enable_hisparse=False,
        )
        self.disaggregation_mode = "decode"
        for table in [
            "prefill_dp_size_table",
            "prefill_tp_size_table",
            "prefill_attn_tp_size_table",
            "prefill_pp_size_table",
            "prefill_info_table",
            "connection_pool",
            "required_prefill_response_num_table",
            "prefill_page_size_table",
        ]:
            setattr(self, table, {})
        self.connection_lock = threading.Lock()
        self.failed: list[str] = []
        self.status: dict[int, int] = {}
        self.log = log

    def update_status(self, room: int, status: Any) -> None:
        if self.status.get(room) != KVPoll.Failed:
            self.status[room] = int(status)

    def record_failure(self, room: int, reason: str) -> None:
        self.failed.append(str(reason))

    def get_session_id(self) -> str:
        return "decode-session"

    def check_status(self, room: int) -> Any:
        return self.status.get(room)

    def __getattr__(self, name: str) -> Any:
        # Lookup tables and caches the receiver fills start empty.
        if name.endswith("_tracker"):
            setattr(self, name, __import__("collections").defaultdict(set))
            return self.__dict__[name]
        if name.endswith(("_table", "_infos", "_pool", "_cache", "_tables")) or "room" in name:
            setattr(self, name, {})
            return self.__dict__[name]
        raise Gap(f"manager has no attribute {name!r}")


# ---------------------------------------------------------------- rank mapping


def _namespace(rel: Release, prefill: Prefill, log: Log) -> dict[str, Any]:
    import dataclasses
    import os
    import typing

    module = types.ModuleType(f"sglang_golden_ns_{rel.version.replace('.', '_')}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    ns: dict[str, Any] = module.__dict__
    ns.update(
        {
            "logger": log,
            "KVPoll": KVPoll,
            "requests": FakeRequests(prefill),
            "threading": threading,
            "os": os,
            "dataclasses": dataclasses,
            "json": json,
            "logging": logging,
            "envs": Envs(),
            "BaseKVReceiver": object,
            "BaseKVManager": object,
            "BaseKVSender": object,
            "get_local_ip_by_remote": lambda *a: "10.0.0.2",
            "get_free_port": lambda *a: 18000,
            "get_int_env_var": lambda name, default=None: default,
            "get_bool_env_var": lambda name, default="false": str(default).lower() == "true",
            "is_valid_ipv6_address": lambda *a: False,
            "format_tcp_address": lambda host, port: f"tcp://{host}:{port}",
            "_get_bootstrap_session": lambda *a, **k: ns["requests"],
            "DisaggregationMode": types.SimpleNamespace(PREFILL="prefill", DECODE="decode"),
        }
    )
    for name in dir(typing):
        if not name.startswith("_"):
            ns.setdefault(name, getattr(typing, name))
    # The release's own small classes the receiver builds.
    for f, name in (
        ("common/conn.py", "PrefillServerInfo"),
        ("common/conn.py", "PrefillRankInfo"),
        ("common/conn.py", "KVTransferError"),
        ("base/conn.py", "KVArgs"),
    ):
        node = rel.cls(f, name)
        if node is not None:
            _compile(node, ns, f"{rel.version} {name}")
    ns.setdefault("KVTransferError", type("KVTransferError", (Exception,), {}))
    return ns


def receiver_class(rel: Release, backend: str, ns: dict[str, Any]) -> type:
    common = rel.cls("common/conn.py", "CommonKVReceiver")
    if common is not None:
        _compile(_methods_only(common, "object"), ns, f"{rel.version} CommonKVReceiver")
    own = rel.cls(f"{backend}/conn.py", f"{backend.capitalize()}KVReceiver")
    if own is None:
        raise Gap(f"{rel.version}: no {backend.capitalize()}KVReceiver")
    # The base the rules live in (mixins beside it handle failure reporting only).
    bases = [ast.unparse(b) for b in own.bases]
    base = "CommonKVReceiver" if "CommonKVReceiver" in bases else "object"
    _compile(_methods_only(own, base), ns, f"{rel.version} {own.name}")
    cls = ns[own.name]
    # Same class name as SGLang's: its AttributeError texts name the class.
    return type(own.name, (cls,), dict(NETWORK))


_DRIVEN: dict[tuple[str, str], tuple[dict[str, Any], type, bool]] = {}


def map_rank(
    rel: Release,
    backend: str,
    p: int,
    d: int,
    mla: bool,
    rank: int,
    dp: int,
    ppp: int,
    dpp: int,
    page: tuple[int, int] = (1, 1),
    dtype: tuple[str, str] = ("auto", "auto"),
) -> dict[str, Any]:
    log = Log()
    prefill = Prefill(p, 1, ppp, page[0], dtype[0])
    key = (rel.version, backend)
    if key not in _DRIVEN:
        ns = _namespace(rel, prefill, log)
        common = rel.cls("common/conn.py", "CommonKVManager")
        resolve_fn = None
        if common is not None:
            resolve_fn = next(
                (
                    m
                    for m in common.body
                    if isinstance(m, ast.FunctionDef) and m.name == "_resolve_rank_mapping"
                ),
                None,
            )
        if resolve_fn is not None:
            _compile(resolve_fn, ns, f"{rel.version} _resolve_rank_mapping")
        _DRIVEN.clear()  # one release at a time
        _DRIVEN[key] = (ns, receiver_class(rel, backend, ns), resolve_fn is not None)
    ns, Recv, new_mapping = _DRIVEN[key]
    ns["requests"].prefill = prefill
    ns["logger"] = log
    mgr = Manager(d, dp, dpp, rank, mla, log, page[1], dtype[1])
    out: dict[str, Any] = {}
    room = 0
    try:
        if new_mapping:
            info_cls = ns["PrefillServerInfo"]
            payload = prefill.parallel_info()
            fields = {
                f.name: payload.get(f.name)
                for f in __import__("dataclasses").fields(info_cls)
                if f.name in payload
            }
            info = info_cls(**fields)
            ns["_resolve_rank_mapping"](mgr, info)
            recv = object.__new__(Recv)
            recv.kv_mgr = mgr
            recv.bootstrap_addr = "10.0.0.1:8998"
            recv.bootstrap_room = room
            recv.prefill_dp_rank = 0
            recv.conclude_state = None
            recv._connection_pool_entries = {}
            recv.bootstrap_infos = None
            for k in [
                "target_tp_rank",
                "target_tp_ranks",
                "target_cp_ranks",
                "target_pp_ranks",
                "required_dst_info_num",
                "required_prefill_response_num",
            ]:
                setattr(recv, k, getattr(info, k))
            recv._setup_bootstrap_infos()
        else:
            recv = object.__new__(Recv)
            import inspect

            params = inspect.signature(Recv.__init__).parameters
            kw: dict[str, Any] = {}
            if "data_parallel_rank" in params:
                kw["data_parallel_rank"] = None
            if "prefill_dp_rank" in params:
                kw["prefill_dp_rank"] = None
            recv.__init__(mgr, "10.0.0.1:8998", room, **kw)
    except (Gap, NameError, TypeError):
        raise  # the stand-ins lack something: fix the script (stand-ins raise Gap, never
        # AttributeError: an AttributeError is the release's own, on its own objects)
    except Exception as e:  # the release's own exception
        out["error"] = [type(e).__name__, _text(e)]
        if log.errors or mgr.failed:
            out["logged"] = (mgr.failed or log.errors)[0]
        return out
    infos = getattr(recv, "bootstrap_infos", None) or []
    if not infos and getattr(recv, "bootstrap_info", None):
        infos = [recv.bootstrap_info]  # 0.4.6: one prefill rank per decode rank
    out["reads"] = [
        [int(i["rank_port"]) - 17000, bool(i.get("is_dummy", False))] for i in _flat(infos)
    ]
    out["dst_info_num"] = getattr(recv, "required_dst_info_num", None)
    out["response_num"] = getattr(recv, "required_prefill_response_num", None)
    failed = mgr.status.get(room) == KVPoll.Failed or bool(mgr.failed)
    if failed or (log.errors and not infos):
        out["failed"] = (mgr.failed or log.errors)[0]
        out["failed_request"] = failed
    return out


def _flat(infos: Any) -> list[dict[str, Any]]:
    """The rank records in what a receiver keeps (a list, or NIXL 0.4.6's nested lists)."""
    if isinstance(infos, dict):
        return [infos] if "rank_port" in infos else [x for v in infos.values() for x in _flat(v)]
    if isinstance(infos, (list, tuple)):
        return [x for v in infos for x in _flat(v)]
    raise Gap(f"unexpected bootstrap info {infos!r}")


def _text(e: BaseException) -> str:
    if isinstance(e, AssertionError) and e.args and isinstance(e.args[0], tuple):
        return str(e.args[0][0])  # SGLang's `assert x, (f"...",)`: a one-tuple message
    return str(e)


# ---------------------------------------------------------------- head slicing

OFFSET_NAMES = {
    "src_head_start_offset": "src",
    "src_head_start": "src",
    "num_heads_to_send": "n",
    "dst_head_start_offset": "dst",
    "dst_head_start": "dst",
    "src_head_offset": "src",
    "dst_head_offset": "dst",
}


SLICE_METHODS = ("send_kvcache_slice", "_build_tp_slice_config", "_init_hetero_tp_prep_handle")


def _slice_source(rel: Release, backend: str) -> ast.FunctionDef | None:
    """The backend's method that computes the head offsets of a TP-heterogeneous transfer
    (it may call ``compute_head_slice_params``): ``send_kvcache_slice`` (Mooncake, NIXL to
    0.5.12), ``_build_tp_slice_config`` (MORI), NIXL's prepared-transfer
    ``_init_hetero_tp_prep_handle`` (0.5.13 on: ``send_kvcache_slice`` only replays it)."""
    mgr = rel.cls(f"{backend}/conn.py", f"{backend.capitalize()}KVManager")
    if mgr is None:
        return None
    methods = {m.name: m for m in mgr.body if isinstance(m, ast.FunctionDef)}
    for name in SLICE_METHODS:
        m = methods.get(name)
        if m is not None and any(
            isinstance(t, ast.Name) and t.id == "num_heads_to_send"
            for s in m.body
            for t in _targets(s)
        ):
            return m
    return None


_SLICES: dict[tuple[str, str], Any] = {}


def head_slice(
    rel: Release, backend: str, p: int, d: int, h: int, src: int, dst: int
) -> dict[str, Any]:
    key = (rel.version, backend)
    if key not in _SLICES:
        _SLICES.clear()
        _SLICES[key] = _slice_source(rel, backend), {}
    fn, ns = _SLICES[key]
    if fn is None:
        return {"whole": True}
    ns.setdefault("logger", Log())
    helper = rel.func("common/staging_buffer.py", "compute_head_slice_params")
    if helper is not None and "compute_head_slice_params" not in ns:
        _compile(helper, ns, f"{rel.version} compute_head_slice_params")
    per_rank = max(1, h // p)
    bytes_per_head = 64
    item = lambda heads: heads * bytes_per_head  # noqa: E731 (one page of one token)
    kv_args = Strict(
        engine_rank=src,
        kv_head_num=per_rank,
        total_kv_head_num=h,
        page_size=1,
        kv_item_lens=[item(per_rank)],
        kv_data_ptrs=[0],
    )
    self = Strict(kv_args=kv_args, attn_tp_size=p, tp_size=p, dp_size=1, pp_size=1)
    dst_item = item(max(1, h // d))
    args = {
        "self": self,
        "dst_tp_rank": dst,
        "dst_attn_tp_size": d,
        "dst_tp_size": d,
        "dst_kv_item_len": dst_item,
        "dst_kv_ptrs": [0],
        "prefill_tp_size": p,
        "decode_tp_size": d,
        "decode_tp_rank": dst,
        "peer_name": "decode-peer",
        "mooncake_session_id": "decode-session",
        "decode_kv_args": Strict(
            decode_tp_size=d, decode_tp_rank=dst, dst_kv_item_len=dst_item, dst_tp_rank=dst
        ),
        "peer_info": Strict(
            decode_tp_size=d, decode_tp_rank=dst, dst_kv_item_len=dst_item, dst_tp_rank=dst
        ),
    }
    wanted = [a.arg for a in fn.args.args + fn.args.kwonlyargs]
    local = {k: v for k, v in args.items() if k in wanted}
    if "_slice" not in ns:
        _compile(_slice_function(fn, list(local)), ns, f"{rel.version} {backend} {fn.name}")
    log = ns["logger"] = Log()
    try:
        got = ns["_slice"](**local)
    except (Gap, NameError, AttributeError, TypeError, ImportError):
        raise
    except Exception as e:
        return {"error": [type(e).__name__, _text(e)]}
    if RETURNED in got:  # an early `return -1` after logging why: the transfer fails
        return {"fails": log.errors[-1] if log.errors else "", "returned": got[RETURNED]}
    out = _offsets(got, p, d, f"{rel.version} {backend} {fn.name}")
    if "head_group_idx" in got:  # NIXL's prepared path: its descriptor-list tiling
        out["groups"] = got["num_groups"]
    return out


# The I/O of a transfer path (pointers, descriptor lists, the transfer engine, page indices):
# statements that touch them move bytes, they decide nothing, and the stand-ins hold none.
IO_WORDS = (
    "executor", "indices", "get_mha", "session", "self.agent", "self.engine", "ptr", "np.",
    "futures", "handle", "dlist", "layer_ids", "data_lens", "num_slots", "_runs", "descs",
    "addrs", "device_id", "make_req_array",
)  # fmt: skip
RETURNED = "__returned__"


def _names_read(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _names_set(node: ast.AST) -> set[str]:
    return {
        n.id
        for n in ast.walk(node)
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))
    }


class _Returns(ast.NodeTransformer):
    """``return X`` inside a check becomes ``return {RETURNED: X}``: the caller reads it."""

    def visit_Return(self, node: ast.Return) -> ast.AST:
        value = node.value if node.value is not None else ast.Constant(None)
        return ast.Return(ast.Dict([ast.Constant(RETURNED)], [value]))


def _slice_function(fn: ast.FunctionDef, params: list[str]) -> ast.FunctionDef:
    """The slice method's whole transfer path, minus its I/O: every top-level statement that
    computes a size or offset, asserts, raises, or checks and returns early, in order, to the
    end of the method. A statement that reads a name only I/O defines goes too (transitively),
    so what runs is exactly the release's arithmetic and its checks on it."""
    defined = set(params)
    body: list[ast.stmt] = []
    for stmt in fn.body:
        text = ast.unparse(stmt)
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue  # the names imported are in the namespace already
        if isinstance(stmt, (ast.Expr, ast.Return)):
            continue  # a docstring, a log line, the value handed to the caller
        if isinstance(
            stmt, (ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            continue  # loops over layers/pages and nested helpers: I/O
        local_reads = _names_read(stmt) - defined
        io = any(w in text for w in IO_WORDS)
        assigned = _names_set(stmt)
        # A read of a local name only a dropped statement assigns: drop this one too.
        missing = {n for n in local_reads - assigned if n in _assigned_anywhere(fn)}
        if io or missing:
            continue
        if isinstance(stmt, ast.If):
            stmt = _Returns().visit(ast.parse(text).body[0])
        body.append(_drop_imports(stmt))
        defined |= assigned
    text = "def _slice(" + ", ".join(params) + "):\n"
    for stmt in body:
        text += "".join("    " + line + "\n" for line in ast.unparse(stmt).splitlines())
    text += "    return dict(locals())\n"
    return ast.parse(text).body[0]  # type: ignore[return-value]


def _assigned_anywhere(fn: ast.FunctionDef) -> set[str]:
    return _names_set(fn) | {a.arg for a in fn.args.args + fn.args.kwonlyargs}


class _NoImports(ast.NodeTransformer):
    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        return ast.Pass()  # the names imported are in the namespace already


def _drop_imports(stmt: ast.stmt) -> ast.stmt:
    return _NoImports().visit(ast.parse(ast.unparse(stmt)).body[0])  # type: ignore[no-any-return]


def _offsets(got: dict[str, Any], p: int, d: int, where: str) -> dict[str, Any]:
    """Head offsets (in heads) from the slice code's locals. Names vary by release:
    ``*_head_start_offset`` / ``*_head_start`` (heads), 0.4.8's ``*_head_offset`` (heads);
    NIXL's prepared path assigns only the sliced side's start (the other side starts at 0)
    and uses ``dst_head_offset`` for bytes."""
    src = next((got[k] for k in ("src_head_start_offset", "src_head_start") if k in got), None)
    dst = next((got[k] for k in ("dst_head_start_offset", "dst_head_start") if k in got), None)
    prepared = "head_group_idx" in got
    if not prepared:
        src = got.get("src_head_offset") if src is None else src
        dst = got.get("dst_head_offset") if dst is None else dst
    if prepared and src is None and p > d:
        src = 0
    if prepared and dst is None and p < d:
        dst = 0
    n = got.get("num_heads_to_send")
    if src is None or dst is None or n is None:
        raise Gap(f"{where}: offsets not found: {sorted(got)}")
    return {"src": src, "n": n, "dst": dst}


def _targets(stmt: ast.stmt) -> list[ast.expr]:
    out: list[ast.expr] = []
    for n in ast.walk(stmt):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                out.extend(t.elts if isinstance(t, ast.Tuple) else [t])
    return out


def slice_surface(rel: Release, backend: str) -> dict[str, Any] | None:
    """Who calls the slice code, and whether a ``try`` around the call catches Exception."""
    found = _slice_source(rel, backend)
    if found is None:
        return None
    tree = rel.tree(f"{backend}/conn.py")
    assert tree is not None
    names = {found.name}

    def calls(node: ast.AST) -> bool:
        return any(
            isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in names
            for c in ast.walk(node)
        )

    def caught(node: ast.AST, inside: bool) -> bool | None:
        if isinstance(node, ast.Try):
            catches = any(
                h.type is None or "Exception" in ast.unparse(h.type) for h in node.handlers
            )
            for s in node.body:
                if calls(s):
                    return caught(s, inside or catches)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef) and child is not node:
                continue
            if calls(child):
                r = caught(child, inside)
                if r is not None:
                    return r
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in names
        ):
            return inside
        return None

    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or fn.name in names:
            continue
        direct = [s for s in fn.body if calls(s)]
        if not direct:
            continue
        nested = [n for n in ast.walk(fn) if isinstance(n, ast.FunctionDef) and n is not fn]
        if any(calls(n) for n in nested):
            continue  # the caller is the nested function
        return {"caller": fn.name, "caught": bool(caught(fn, False))}
    return None


def bootstrap_timeout(rel: Release, backend: str) -> bool:
    for f, name in (
        ("common/conn.py", "CommonKVSender"),
        (f"{backend}/conn.py", f"{backend.capitalize()}KVSender"),
    ):
        node = rel.cls(f, name)
        if node is not None and "bootstrap_timeout" in ast.unparse(node):
            return True
    return False


# ---------------------------------------------------------------- the grid


def kv_heads_of(h: int, tp: int, rank: int) -> list[int]:
    """The KV heads an attention-TP rank holds (SGLang's QKV split: replicated past H)."""
    if tp <= h:
        per = h // tp
        return list(range(rank * per, rank * per + per))
    return [rank * h // tp]


def loads(h: int, tp: int) -> bool:
    """The QKV split loads: TP divides the KV heads, or is a multiple of them."""
    return h % tp == 0 if tp <= h else tp % h == 0


# --page-size / --kv-cache-dtype of (prefill, decode): equal, and each way unequal.
PAGES = ((1, 1), (16, 16), (16, 32), (32, 16))
DTYPES = (("auto", "auto"), ("fp8_e4m3", "auto"), ("auto", "fp8_e5m2"), ("fp8_e4m3", "fp8_e4m3"))


def settings_check(
    rel: Release, backend: str, page: tuple[int, int], dtype: tuple[str, str]
) -> dict[str, Any]:
    """What the decode side does when the two instances' ``--page-size`` or
    ``--kv-cache-dtype`` differ (P = D = 2, rank 0, no MLA). Where ``CommonKVManager`` has
    ``try_ensure_parallel_info`` (0.5.10 on; the decode scheduler calls it before a request's
    receiver is made), its sanity checks on ``page_size``/``kv_cache_dtype`` run on the
    prefill's bootstrap answer; before, the receiver's ``__init__`` runs whole (0.5.8's page
    check is there). Recorded: the exception (class, text), else nothing."""
    common = rel.cls("common/conn.py", "CommonKVManager")
    ensure = None
    if common is not None:
        ensure = next(
            (
                m
                for m in common.body
                if isinstance(m, ast.FunctionDef) and m.name == "try_ensure_parallel_info"
            ),
            None,
        )
    if ensure is None:
        got = map_rank(rel, backend, 2, 2, False, 0, 1, 1, 1, page, dtype)
        return {"error": got["error"]} if "error" in got else {}
    checks = [
        s
        for s in ensure.body
        if isinstance(s, ast.If)
        and any(w in ast.unparse(s.test) for w in ("page_size", "kv_cache_dtype"))
    ]
    text = "def _settings(self, info):\n"
    for stmt in checks:
        text += "".join("    " + line + "\n" for line in ast.unparse(stmt).splitlines())
    text += "    return None\n"
    ns = _namespace(rel, Prefill(2, 1, 1, page[0], dtype[0]), Log())
    _compile(ast.parse(text).body[0], ns, f"{rel.version} try_ensure_parallel_info checks")
    payload = Prefill(2, 1, 1, page[0], dtype[0]).parallel_info()
    info_cls = ns["PrefillServerInfo"]
    fields = {
        f.name: payload.get(f.name)
        for f in __import__("dataclasses").fields(info_cls)
        if f.name in payload
    }
    mgr = Manager(2, 1, 1, 0, False, Log(), page[1], dtype[1])
    try:
        ns["_settings"](mgr, info_cls(**fields))
    except (Gap, NameError, AttributeError, TypeError):
        raise
    except Exception as e:
        return {"error": [type(e).__name__, _text(e)]}
    return {}


def run_backend(rel: Release, backend: str) -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    grid = [(p, d, mla, 1, 1, 1) for p in SIZES for d in SIZES for mla in (False, True)]
    grid += [(p, d, True, 2, 1, 1) for p in (1, 2, 4, 8) for d in (1, 2, 4, 8)]
    grid += [(2, 2, False, 1, a, b) for a in PP_SIZES for b in PP_SIZES]
    for p, d, mla, dp, ppp, dpp in grid:
        ranks = [map_rank(rel, backend, p, d, mla, r, dp, ppp, dpp) for r in range(d * dp)]
        case: dict[str, Any] = {
            "p": p, "d": d, "mla": mla, "dp": dp, "pp": [ppp, dpp], "ranks": ranks
        }  # fmt: skip
        if not mla and dp == 1 and ppp == dpp == 1 and p != d:
            heads: dict[str, Any] = {}
            for h in HEADS:
                if not (loads(h, p) and loads(h, d)):
                    continue  # the model does not load at this TP (QKV split)
                pairs = []
                for dst, r in enumerate(ranks):
                    for src, dummy in r.get("reads", []):
                        if not dummy:
                            got = head_slice(rel, backend, p, d, h, src, dst)
                            pairs.append([src, dst, got])
                heads[str(h)] = pairs
            case["heads"] = heads
        cases.append(case)
    settings = [
        {"page": list(page), "dtype": list(dtype), **settings_check(rel, backend, page, dtype)}
        for page in PAGES
        for dtype in DTYPES
    ]
    return {
        "cases": cases,
        "settings": settings,
        "slice_surface": slice_surface(rel, backend),
        "bootstrap_timeout": bootstrap_timeout(rel, backend),
    }


def drive_releases(
    versions: list[str], cache: Path, run: Callable[[Release, str], Any]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, str]]]:
    """``run(release, backend)`` for every release's backends, consecutive releases with the
    same answer merged into one run; and each wheel's provenance. (This tool's and
    tools/sglang_state.py's one release loop.)"""
    cache.mkdir(parents=True, exist_ok=True)
    per_backend: dict[str, list[dict[str, Any]]] = {b: [] for b in BACKENDS}
    provenance = {}
    for v in versions:
        rel = Release(v, fetch(v, cache))
        provenance[v] = {"wheel_sha256": rel.sha256, "disaggregation_digest": rel.digest()}
        for b in rel.backends():
            got = run(rel, b)
            runs = per_backend[b]
            if runs and runs[-1]["data"] == got:
                runs[-1]["releases"].append(v)
            else:
                runs.append({"releases": [v], "data": got})
        print(v, " ".join(f"{b}:{len(per_backend[b])}" for b in rel.backends()), flush=True)
    return per_backend, provenance


def generate(
    argv: list[str] | None,
    description: str,
    out: Path,
    run_backend: Any,
    generator: str,
    extra: dict[str, Any] | None = None,
) -> None:
    """One command line for both SGLang tools: drive ``run_backend`` over the releases asked
    for and write the gzipped record (``extra`` adds tool-specific keys such as a grid)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--versions", nargs="*", default=None)
    ap.add_argument("--wheels", type=Path, default=None, help="directory of sglang wheels")
    ap.add_argument("--out", type=Path, default=out)
    args = ap.parse_args(argv)
    versions = RELEASES if args.versions is None else args.versions
    cache = args.wheels or Path(tempfile.mkdtemp(prefix="sglang-wheels-"))
    per_backend, provenance = drive_releases(versions, cache, run_backend)
    doc = {
        "generator": generator,
        "command": f"python {generator}",
        "source": "pip download sglang==X --no-deps --only-binary :all:, "
        "sglang/srt/disaggregation/",
        "releases": versions,
        **(extra or {}),
        "provenance": provenance,
        "backends": per_backend,
    }
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    args.out.write_bytes(gzip.compress(raw, mtime=0))
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


def main(argv: list[str] | None = None) -> None:
    generate(argv, __doc__.split("\n")[0], OUT, run_backend, "tools/sglang_golden.py")


if __name__ == "__main__":
    main()
