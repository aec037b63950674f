#!/usr/bin/env python3
"""Golden data from vLLM's NIXL connector *flow*: what happens to a request, per release.

    python tools/vllm_flow_nixl.py                 # every release in RELEASES (downloads wheels)
    python tools/vllm_flow_nixl.py --versions 0.33.0 --source 0.33.0=/tmp/vllm-0.33.0/x.whl

``tools/vllm_golden.py`` runs NIXL's handshake on one decode rank and records the first
exception, or the ranks the TP mapping names. This script runs, per (P, D, KV heads, MLA,
hybrid) vector and for **every** decode and prefill rank, the release's own code for the steps
a request goes through (``NixlConnectorWorker`` / ``NixlBaseConnectorWorker`` /
``NixlPullConnectorWorker`` methods, extracted with :mod:`ast` from the wheel and compiled
against stand-ins; the worker state they read is what ``register_kv_caches`` leaves, built by
``vllm_golden.Nixl``):

1. the decode rank's **background handshake** as the worker starts it
   (``_background_nixl_handshake``, with ``_ensure_handshake`` where the release has it, its
   ``done_callback`` and ``request_ready``), the executor running the submitted
   ``_nixl_handshake`` inline (its ZMQ socket answering with the prefill rank's
   ``NixlAgentMetadata``; ``add_remote_agent`` runs up to its validation, as in
   ``vllm_golden``). An exception there stays in the handshake future, as in vLLM's thread:
   what the request meets is what the release's callbacks do with it — queued as ready (then
   the release's ``_read_blocks_for_req`` runs without a remote agent and raises at the first
   transfer), queued as failed (``_failed_recv_reqs``: reported finished with its blocks
   invalid, and vLLM's ``kv_load_failure_policy`` fails or recomputes the request), or left
   nowhere (it waits forever);
2. the **read**: the release's ``_read_blocks_for_req`` and ``_read_blocks`` for the request
   (the prefix-cache-hit path: no local blocks to fill, so ``_read_blocks`` only posts the
   notification it would attach to the READ, to the same remote rank), recording the prefill
   ranks each decode rank reads and every notification (target rank, message) it sends —
   the MLA fan-in's extra notifications included — and **which KV heads each read moves**:
   the release's whole ``add_remote_agent`` registers the remote descriptors (the head
   offset into the prefill rank's block) and the split local handles (where P > D), and
   the local and remote handles ``_read_blocks_for_req`` hands each read are decoded back,
   descriptor by descriptor, to the heads they cover on both sides (``heads_moved``);
3. the **release**: every prefill rank's ``_get_new_notifs`` with the notifications addressed
   to it (NIXL's ``get_new_notifs``), counting them against what the message says, then the
   expiry of the deferred send (``get_finished``'s ``_reqs_to_send`` loop /
   ``_reap_expired_send_leases``) with the clock past ``VLLM_NIXL_ABORT_REQUEST_TIMEOUT``;
4. **engine start** with pipeline parallelism: the connector's
   ``set_xfer_handshake_metadata_pp_aware`` (the base class's where NIXL does not override
   it) with the workers' metadata keyed ``(pp_rank, tp_rank)``;
5. **data parallelism**: each DP rank is its own engine, whose scheduler binds the handshake
   port its requests name (``self.side_channel_port``, the release's statement run per DP
   rank): the ports must differ, then each DP rank runs the TP flow above.

Hybrid models (KV-cache groups full attention + Mamba: ``_is_mamba_group``,
``_group_spec_types``) run the same flow: their reads, notifications and releases are
recorded as for any model. Pipeline layouts record the engine start (the stages' handshake
is the layout golden's), DP layouts the ports and the TP flow's verdict.

Recorded per vector: the verdict (``ok``, or the stage — ``engine_start`` / ``handshake`` /
``first_transfer`` — and the exception class and message that reaches the user, with the one
the handshake raised where the callbacks only log it, and what becomes of the request:
``failed_recv`` / ``ready_without_agent`` / ``waits``), per decode rank the prefill ranks it
reads and notifies and the (prefill rank, KV heads) of each read (a head landing in another
head's slot is recorded as ``misplaced``), per prefill rank the notifications received and
whether it freed the request by them (``acks``) or only by the abort timeout (``timeout``).
Grid vectors also carry the attention heads (192, H, 3H) that pdtp's check is given.

Output: ``tests/data/golden/flow-nixl-<digest>.json.gz`` (one file per run of releases whose
extracted code is identical) and the ``flow-nixl`` part of ``tests/data/golden/index.json``
(with each release's wheel sha256 under ``flow-nixl-wheels``).
"""

from __future__ import annotations

import argparse
import ast
import collections
import hashlib
import json
import queue
import sys
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_golden as vg
from vllm_golden import (
    COMPILED,
    RELEASES,
    HarnessError,
    Nixl,
    NoSuchRank,
    Release,
    Stub,
    _AnyKey,
    compile_defs,
    fetch,
    function_from_statements,
    loads,
)

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "golden"

# The grid: TP sizes powers of two and 3, 6, 12, 24, 48; KV heads as the issue lists them.
TP_SIZES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
KV_HEADS = [1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128]
MLA_HEADS = [1, 8, 128]
# Pipeline layouts (prefill PP, decode PP) at these TP sizes, 8 KV heads.
PP_LAYOUTS = [(2, 1), (4, 1), (1, 2), (2, 2)]
PP_TP = [1, 2, 4, 8]
# Data-parallel layouts (prefill DP, decode DP) at the same TP sizes and heads.
DP_LAYOUTS = [(2, 1), (4, 1), (1, 2), (2, 2)]
SIDE_CHANNEL_PORT = 5600
ABORT_TIMEOUT = 480.0  # vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT default (s)
ENGINE = "prefill"
REQ = "cmpl-req-0"
# Address space of the read's descriptors: one region per layer, local and remote apart.
REGION = 1 << 32
LOCAL_BASE = 1 << 40
REMOTE_BASE = 1 << 44


class _Clock:
    now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    monotonic = time = perf_counter


CLOCK = _Clock()
# Exceptions raised inside handshake futures (what vLLM's thread would hold), in order.
ERRORS: list[list[str]] = []


class _Future(Future):  # type: ignore[type-arg]
    """A future whose done-callbacks run at once and may not fail (concurrent.futures only
    logs a callback's exception: here it means a stand-in is missing something)."""

    def add_done_callback(self, fn: Any) -> None:
        try:
            fn(self)
        except Exception as e:
            raise HarnessError(f"done callback: {type(e).__name__}: {e}") from e


class _InlineExecutor:
    """NIXL's one-thread handshake executor, running the task at submit: its exception stays
    in the future, as in the thread."""

    def submit(self, fn: Any, *a: Any, **k: Any) -> Future[Any]:
        f: Future[Any] = _Future()
        try:
            f.set_result(fn(*a, **k))
        except (NameError, AttributeError, TypeError, HarnessError) as e:
            raise HarnessError(f"{type(e).__name__} in the handshake: {e}") from e
        except Exception as e:
            ERRORS.append(_err(e))
            f.set_exception(e)
        return f


class _Agent:
    """NIXL's agent: records notifications (target agent, message)."""

    def __init__(self, log: list[tuple[str, str]] | None = None):
        self.log = log if log is not None else []
        self.inbox: dict[str, list[bytes]] = {}
        # Prepared descriptor lists by handle: (agent, [(addr, len, device)]).
        self.dlists: dict[int, tuple[str, list[tuple[int, int, int]]]] = {}

    def send_notif(self, agent: str, notif_msg: bytes) -> None:
        self.log.append((agent, notif_msg.decode()))

    def get_new_notifs(self) -> dict[str, list[bytes]]:
        out, self.inbox = self.inbox, {}
        return out

    def add_remote_agent(self, metadata: Any) -> str:
        return "prefill-agent"

    def get_xfer_descs(self, blocks_data: Any, *a: Any, **k: Any) -> list[Any]:
        # Strided rows (addr, len, device, stride, count) stand for `count` plain rows.
        out = []
        for row in blocks_data:
            addr, length, dev, *strided = (int(x) for x in row)
            stride, count = strided if strided else (0, 1)
            out += [(addr + j * stride, length, dev) for j in range(count)]
        return out

    def prep_xfer_dlist(self, agent: str, descs: Any, *a: Any, **k: Any) -> int:
        handle = 1000 + len(self.dlists)
        self.dlists[handle] = (agent, self.get_xfer_descs(descs))
        return handle

    def make_prepped_xfer(self, *a: Any, **k: Any) -> int:
        raise HarnessError("a READ was posted: the driver only takes the notification path")


class _SlidingWindowSpec(vg._AttentionSpec):
    """vLLM's ``SlidingWindowSpec``: an attention KV-cache group (``_is_attention_spec``)."""


class _Anything:
    """Statistics sinks (``xfer_stats``): every call is accepted."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: None


class NixlFlow(Nixl):
    """One release's NIXL worker methods for the whole request flow."""

    EXTRA = (
        "_background_nixl_handshake",
        "_ensure_handshake",
        "_read_blocks_for_req",
        "_read_blocks",
        "_get_new_notifs",
        "_reap_expired_send_leases",
        "_logical_to_kernel_block_ids",
        "_apply_prefix_caching",
        "_get_remote_rank",  # some releases name the read target here
        "_logical_to_remote_kernel_block_ids",
        "_handle_failed_transfer",
        "_get_block_descs_ids",
        # The descriptors of the read (which bytes, so which KV heads, move): the whole
        # add_remote_agent, with the builders it calls.
        "add_remote_agent",
        "_build_fa_remote",
        "_build_fa_remote_for_mamba",
        "_build_local_splits_from_plan",
        "_fa_desc_replicated",
        "_needs_split_local_xfer_handles",
        "_split_remote_blocks",
        "_align_remote_regions_by_layer",
        "_block_strided_descs",
        "_pack_strided_descs",
        "_strided_desc_starts",
        "_stack_descs",
        "_build_fa_local",
    )

    def __init__(self, rel: Release):
        super().__init__(rel)
        methods: dict[str, ast.FunctionDef] = {}
        for cls in self.WORKERS:
            for name, node in rel.methods(cls).items():
                methods.setdefault(name, node)
        self.methods = methods
        fns = [methods[n] for n in self.EXTRA if n in methods]
        if "_get_new_notifs" not in methods or "_background_nixl_handshake" not in methods:
            raise SystemExit(f"{rel.version}: no NIXL flow methods")
        ns = dict(self.ns)
        ns["time"] = CLOCK
        ns["queue"] = queue
        ns["threading"] = threading
        ns["envs"] = Stub(
            VLLM_NIXL_SIDE_CHANNEL_HOST="localhost", VLLM_NIXL_ABORT_REQUEST_TIMEOUT=ABORT_TIMEOUT
        )
        ns["ReadSpec"] = self.ns.get("ReadSpec")
        compile_defs(fns, ns, "NixlFlow")
        # Helpers the handshake of a hybrid model calls (Mamba conv-state split), from the
        # release, into the namespace the handshake methods run in.
        hs_globals = self.Worker._nixl_handshake.__globals__
        for name in ("compute_physical_blocks_per_logical", "derive_mamba_conv_split"):
            found = rel.find(name)
            if found:
                compile_defs([found[1]], hs_globals, name)
                compile_defs([found[1]], ns, name)
        attrs = {n.name: ns[n.name] for n in fns}
        for name, fn in self.Worker.__dict__.items():
            if callable(fn) and not name.startswith("__"):
                attrs.setdefault(name, fn)
        self.FlowWorker = type("NixlFlowWorker", (), attrs)
        self.flow_ns = ns
        # get_finished's expiry of deferred sends (before `_reap_expired_send_leases`).
        self.expire = None
        if "_reap_expired_send_leases" not in methods:
            loop, now = [], []
            for name in ("get_finished", "get_transfer_results"):
                body = methods[name].body if name in methods else []
                loop += [
                    st
                    for st in body
                    if isinstance(st, ast.While) and "_reqs_to_send" in ast.unparse(st.test)
                ]
                now += [
                    st
                    for st in body
                    if isinstance(st, ast.Assign) and ast.unparse(st.targets[0]) == "now"
                ]
            if len(loop) != 1:
                raise SystemExit(f"{rel.version}: no deferred-send expiry in get_finished")
            self.expire = function_from_statements(
                "_expire", ["self", "done_sending"], now + loop, "done_sending", ns
            )
        init_src = "\n".join(
            ast.unparse(m["__init__"]) for c in self.WORKERS if "__init__" in (m := rel.methods(c))
        )
        self.failed_is_queue = "_failed_recv_reqs: queue.Queue" in init_src or (
            "self._failed_recv_reqs = queue" in init_src
        )
        self.invalid_is_queue = "_invalid_block_ids: queue.Queue" in init_src
        self.handles_default = "dst_xfer_side_handles = defaultdict" in init_src
        # Block ids per KV-cache group in ReqMeta (`local_block_ids[0]`), or one flat list.
        self.nested_meta = any("local_block_ids[0]" in ast.unparse(m) for m in methods.values())
        rb = ast.unparse(methods["_read_blocks"])
        self.read_spec = "read_spec" in [a.arg for a in methods["_read_blocks"].args.args]
        self.rb_src = rb
        # The prefix-cache-hit test: an empty list (before 0.2x), or empty groups.
        self.grouped_hit = (
            "len(local_block_ids) == 0" not in rb and "num_local_blocks == 0" not in rb
        )
        self.pp_keys = "remote_pp_rank" in ast.unparse(methods["_nixl_handshake"])
        # The connector supports the hybrid KV-cache manager (0.18.0 on).
        self.hma = False
        for cls in self.CONNECTORS:
            found = rel.find(cls)
            if found and isinstance(found[1], ast.ClassDef):
                self.hma |= any("SupportsHMA" in ast.unparse(b) for b in found[1].bases)
        # How register_kv_caches leaves the local descriptors: (addr, len, device) rows in a
        # list, the same rows in a numpy array (0.27.0 on), or one strided row per region
        # (addr, len, device, stride, count: 0.33.0 `_pack_strided_descs`).
        every = "\n".join(ast.unparse(m) for m in methods.values())
        self.strided = "_pack_strided_descs" in methods
        self.ndarray = self.strided or "src_blocks_data.tolist()" in every

    # ---------------------------------------------------------------- one vector

    hybrid = False

    def topology(self, rank: int, d: int, h: int, mla: bool, w: Any) -> Any:
        # A hybrid model's topology says so (`is_mamba=self._has_mamba`, 0.33.0
        # `nixl/base_worker.py:1500`).
        topo = super().topology(rank, d, h, mla, w)
        if topo is not None and hasattr(topo, "is_mamba"):
            topo.is_mamba = self.hybrid
        return topo

    def metadata(self, p: int, h: int, mla: bool) -> Any:
        m = super().metadata(p, h, mla)
        # The prefill rank's KV regions, at an address no local one has (the read's
        # descriptors are decoded back to heads by address, `heads_moved`).
        m.kv_caches_base_addr = [REMOTE_BASE + i * REGION for i in range(vg.NUM_LAYERS)]
        if self.hybrid:
            # A hybrid model's Mamba state per block: one block's length (conv + SSM halves),
            # so one physical block per logical block.
            half = m.block_lens[0] // 2
            m.ssm_sizes = (half, half)
        return m

    # The model has sliding-window layers (set per vector, as `hybrid`).
    sliding = False

    def flow_worker(self, rank: int, tp: int, h: int, mla: bool, hybrid: bool) -> Any:
        # The KV-cache groups the worker sees: full attention, a hybrid model's Mamba state,
        # and sliding-window layers as a group of their own where the connector supports
        # the hybrid KV-cache manager (`SupportsHMA`; without it vLLM gives every layer a
        # full-attention spec).
        groups: list[type] = [vg._FullAttentionSpec]
        if hybrid:
            groups.append(vg._MambaSpec)
        if self.sliding and self.hma:
            groups.append(_SlidingWindowSpec)
        self.hybrid = hybrid
        base = self.worker(rank, tp, h, mla)
        w = self.FlowWorker()
        w.__dict__.update(base.__dict__)
        log: list[tuple[str, str]] = []
        w.__dict__.update(
            nixl_wrapper=_Agent(log),
            _notif_log=log,
            _has_mamba=hybrid,
            _is_hma_required=hybrid,
            # A hybrid model's KV-cache groups: full attention, then the Mamba state (0.20.0
            # `nixl/worker.py:123`).
            _is_mamba_group=[g is vg._MambaSpec for g in groups],
            _group_spec_types=tuple(groups),
            _handshake_futures={},
            _handshake_lock=threading.RLock(),
            _handshake_initiation_executor=_InlineExecutor(),
            _ready_requests=queue.Queue(),
            _failed_recv_reqs=queue.Queue() if self.failed_is_queue else set(),
            _invalid_block_ids=queue.Queue() if self.invalid_is_queue else set(),
            _recving_metadata={},
            _recving_transfers=collections.defaultdict(list),
            _recv_failures=set(),
            _reqs_to_send={},
            _reqs_to_process=set(),
            consumer_notification_counts_by_req=collections.defaultdict(int),
            expected_consumer_notifications_by_req={},
            xfer_stats=_Anything(),
            _engine_clock_offset={},
            _engine_last_active={},
            _engine_by_address={},
            _invalid_remote_engines=set(),
            _failed_remote_engines=set(),
            _remote_registration_generations={},
            _bidirectional_kv_xfer_enabled=False,
            _hb_handshake_notif_only=False,
            _mixed_mem_types=False,
            _logged=[],
            pcp_rank=0,
            pcp_size=1,
            dcp_rank=0,
            transfer_tp_rank=rank,
            transfer_tp_size=tp,
            _physical_blocks_per_logical_kv_block=1,
            _physical_blocks_per_logical={},  # per remote engine (0.20.0)
            _dram_src_handles_by_tp_ratio=_AnyKey([None] * (vg.MAX_TP + 1)),
            _dram_src_handles_by_block_size=_AnyKey(None),
            kv_cache_config=Stub(transfer_groups=[None], transfer_group_ids=(0,)),
        )
        # What register_kv_caches leaves for the read: each local region's blocks as one
        # descriptor list (`src_blocks_data`, registered as the whole-block handle), and no
        # split handles yet (add_remote_agent makes them per remote TP size).
        local_len = vg.heads_per_rank(h, tp, mla) * vg.HEAD_BYTES
        blocks: Any
        if self.strided:
            blocks = [
                (LOCAL_BASE + i * REGION, local_len, rank, local_len, vg.NUM_BLOCKS)
                for i in range(vg.NUM_LAYERS)
            ]
        else:
            blocks = [
                (LOCAL_BASE + i * REGION + b * local_len, local_len, rank)
                for i in range(vg.NUM_LAYERS)
                for b in range(vg.NUM_BLOCKS)
            ]
        src = w.nixl_wrapper.prep_xfer_dlist("NIXL_INIT_AGENT", blocks)
        if self.ndarray:
            blocks = np.array(blocks, dtype=np.uint64 if self.strided else np.int64)
        w.__dict__.update(
            src_blocks_data=blocks,
            src_blocks_data_by_block_size={vg.BLOCK_SIZE: blocks},
            block_stride_per_layer=[local_len] * vg.NUM_LAYERS,
            region_num_blocks=[vg.NUM_BLOCKS] * vg.NUM_LAYERS,
            num_regions=vg.NUM_LAYERS,
            num_layers=vg.NUM_LAYERS,
            num_descs=vg.NUM_LAYERS * vg.NUM_BLOCKS,
            _logical_num_blocks=vg.NUM_BLOCKS,
            _ple_region_index=None,
            src_xfer_side_handle=src,
            src_xfer_handles_by_block_size={vg.BLOCK_SIZE: src},
            src_xfer_handles_by_tp_ratio={},
        )
        # Descriptor handles per remote engine and rank, as add_remote_agent stores them.
        w.dst_xfer_side_handles = collections.defaultdict(dict)
        if hybrid:
            # Hybrid models: add_remote_agent up to its validation (the driver builds no
            # Mamba descriptors), every handle a stand-in; the reads are compared by rank.
            w.add_remote_agent = self.Worker.add_remote_agent.__get__(w)
            w.dst_xfer_side_handles = _AnyKey(_AnyKey(0))
            w.src_xfer_handles_by_tp_ratio = _AnyKey([0] * (vg.MAX_TP + 1))
            w.src_xfer_handles_by_block_size = _AnyKey(0)
        w._evict_stale_engines = lambda: None
        w._track_remote_engine_replacement = lambda *a, **k: None
        w._cleanup_remote_engine = lambda *a, **k: None

        def log_failure(*a: Any, **k: Any) -> None:
            w._logged.append(k.get("failure_type", a[0] if a else ""))

        w._log_failure = log_failure
        return w

    def meta(self, p: int, groups: int = 1) -> Any:
        """The decode scheduler's ReqMeta of one request (both the flat and the nested
        ``remote`` form), with no local blocks to fill (see the module doc)."""
        remote = Stub(
            engine_id=ENGINE,
            request_id=REQ,
            block_ids=[[1]] * groups if self.nested_meta else [1],
            host="prefill",
            port=5600,
            registration_generation=0,
            blocks_expiry_time=None,
            num_tokens=None,
        )
        return Stub(
            remote=remote,
            remote_engine_id=ENGINE,
            remote_request_id=REQ,
            remote_host="prefill",
            remote_port=5600,
            remote_block_ids=[1],
            local_block_ids=[[1]] * groups if self.nested_meta else [1],
            local_physical_block_ids=[[1]] * groups if self.nested_meta else [1],
            tp_size=p,
            dcp_size=1,
            pp_size=1,
            remote_pp_size=1,
            awaiting_kvs=True,
            local_num_computed_blocks=[0],
            region_blocks_to_zero=None,
        )

    def decode_flow(self, p: int, d: int, h: int, mla: bool, hybrid: bool, rank: int) -> Any:
        ERRORS.clear()
        w = self.flow_worker(rank, d, h, mla, hybrid)
        self.reply = self.metadata(p, h, mla)
        self.asked = []
        add = w.add_remote_agent

        def add_remote_agent(meta: Any, remote_tp_rank: int = 0, *a: Any, **k: Any) -> Any:
            if not 0 <= remote_tp_rank < p:
                raise NoSuchRank(f"decode rank {rank} dials prefill rank {remote_tp_rank}")
            add(meta, remote_tp_rank, *a, **k)
            return f"P{remote_tp_rank}"

        w.add_remote_agent = add_remote_agent
        meta = self.meta(p, len(w._is_mamba_group))
        w._recving_metadata[REQ] = meta
        w._background_nixl_handshake(REQ, ENGINE, meta)
        if ENGINE not in w._remote_agents:
            # The handshake failed: its exception is in the future; the callbacks decide.
            err = ERRORS[-1] if ERRORS else ["", ""]
            failed = (
                list(w._failed_recv_reqs.queue)
                if self.failed_is_queue
                else sorted(w._failed_recv_reqs)
            )
            ready = list(w._ready_requests.queue)
            if REQ in failed:
                return {"error": err, "fate": "failed_recv"}
            if ready:
                # start_load_kv drains the ready queue into _read_blocks_for_req, with the
                # handle tables as the failed handshake left them (empty; a plain dict where
                # __init__ makes one) and what register_kv_caches set.
                w.dst_xfer_side_handles = (
                    collections.defaultdict(dict) if self.handles_default else {}
                )
                w.src_xfer_side_handle = 0
                w.block_window_per_layer = []
                try:
                    w._read_blocks_for_req(*ready[0])
                except (NameError, AttributeError, TypeError) as e:
                    raise HarnessError(f"{type(e).__name__}: {e}") from e
                except Exception as e:
                    return {"error": err, "fate": "ready_without_agent", "then": _err(e)}
                raise HarnessError("a read without a remote agent raised nothing")
            return {"error": err, "fate": "waits"}
        # Handshake done: the request goes on to its read (start_load_kv's ready queue).
        ready = list(w._ready_requests.queue)
        if len(ready) != 1:
            raise HarnessError(f"handshake done, {len(ready)} ready requests")
        # The read: the prefix-cache-hit path (no local blocks to fill; see the module doc).
        groups = len(w._is_mamba_group)
        empty: list[Any] = [[] for _ in range(groups)] if self.grouped_hit else []
        meta.local_block_ids = meta.local_physical_block_ids = empty
        reads: list[int] = []
        real = w._read_blocks

        moved: list[Any] = []

        def read_blocks(*a: Any, **k: Any) -> Any:
            spec = k.get("read_spec")
            if spec is not None:
                reads.append(spec.remote_rank)
            elif "remote_rank" in k:
                reads.append(k["remote_rank"])
            before = len(w._notif_log)
            out = real(*a, **k)
            if spec is None and "remote_rank" not in k:
                # 0.11-0.13: _read_blocks computes the rank it reads (and notifies), with
                # the whole-block local handle and the engine's one remote handle.
                reads.extend(int(t[1:]) for t, _ in w._notif_log[before:])
                k = dict(
                    k,
                    local_xfer_side_handle=w.src_xfer_side_handle,
                    remote_xfer_side_handle=w.dst_xfer_side_handles[ENGINE],
                )
            if not hybrid:
                moved.append(self.heads_moved(w, k, reads[-1], p, d, h, mla, rank))
            return out

        w._read_blocks = read_blocks
        try:
            w._read_blocks_for_req(*ready[0])
        except HarnessError:
            raise
        except (NameError, AttributeError, TypeError, KeyError) as e:
            raise HarnessError(f"{type(e).__name__}: {e}") from e
        except Exception as e:
            return {"error": _err(e), "fate": "read"}
        notified = [[_rank(t), m] for t, m in w._notif_log]
        return {"reads": reads, "notified": notified, "moved": moved}

    def heads_moved(
        self, w: Any, k: dict[str, Any], q: int, p: int, d: int, h: int, mla: bool, rank: int
    ) -> list[Any]:
        """The KV heads one read moves: its local and remote descriptor lists (the handles
        ``_read_blocks`` is given), paired by index as ``make_prepped_xfer`` pairs them,
        each byte range decoded back to (K/V, head) on both sides. ``[q, heads]`` with the
        global indices of the heads read from prefill rank ``q`` (MLA: ``[0]``, the latent),
        or ``[q, heads, "misplaced", pairs]`` where a head lands in another head's slot."""
        dl = w.nixl_wrapper.dlists
        lh, rh = k["local_xfer_side_handle"], k["remote_xfer_side_handle"]
        if lh not in dl or rh not in dl:
            raise HarnessError(f"read with unregistered handles {lh}, {rh}")
        local, remote = dl[lh][1], dl[rh][1]
        if len(local) != len(remote):
            raise HarnessError(f"{len(local)} local and {len(remote)} remote descriptors")
        # K and V as halves of one block (blocks-first layouts), where the topology says so.
        topo = w.kv_topo
        split = getattr(topo, "virtually_split_kv_in_blocks", None)
        if split is None:
            split = getattr(topo, "is_kv_layout_blocks_first", False)
        split = bool(split) and not mla
        mine = heads_of_rank(h, d, rank, mla)
        theirs = heads_of_rank(h, p, q, mla)
        pairs: set[tuple[int, int]] = set()
        for (la, ll, _), (ra, rl, _) in zip(local, remote, strict=True):
            if ll != rl:
                raise HarnessError(f"descriptor lengths {ll} and {rl}")
            lu = _units(la - LOCAL_BASE, ll, len(mine), split)
            ru = _units(ra - REMOTE_BASE, rl, len(theirs), split)
            for (lkv, lhd), (rkv, rhd) in zip(lu, ru, strict=True):
                pairs.add((theirs[rhd] if rkv == lkv else -1, mine[lhd]))
        heads = sorted({a for a, _ in pairs})
        if any(a != b for a, b in pairs):
            return [q, heads, "misplaced", sorted(pairs)]
        return [q, heads]

    def prefill_release(
        self, p: int, d: int, h: int, mla: bool, hybrid: bool, rank: int, msgs: list[str]
    ) -> str:
        """One prefill rank given the notifications addressed to it: ``acks`` (freed by
        them), ``timeout`` (only by the abort timeout) or ``never``."""
        w = self.flow_worker(rank, p, h, mla, hybrid)
        w._reqs_to_send[REQ] = CLOCK.now + ABORT_TIMEOUT
        w._reqs_to_process.add(REQ)
        if msgs:
            w.nixl_wrapper.inbox = {"decode-agent": [m.encode() for m in msgs]}
        done = w._get_new_notifs()
        if REQ in done:
            return "acks"
        saved = CLOCK.now
        CLOCK.now += ABORT_TIMEOUT + 1
        try:
            out: set[str] = set()
            if self.expire is not None:
                self.expire(w, out)
            else:
                w._reap_expired_send_leases(out)
        finally:
            CLOCK.now = saved
        return "timeout" if REQ in out else "never"

    def vector(self, p: int, d: int, h: int, mla: bool, hybrid: bool) -> list[Any]:
        decode = []
        for r in range(d):
            try:
                got = self.decode_flow(p, d, h, mla, hybrid, r)
            except NoSuchRank as e:
                return [["hang", "NoSuchRank", str(e), r], [], []]
            if "error" in got:
                e = got["error"]
                then = got.get("then")
                return [["handshake", e[0], e[1], r, got["fate"], then], [], []]
            decode.append(got)
        inbox: dict[int, list[str]] = collections.defaultdict(list)
        for got in decode:
            for q, m in got["notified"]:
                inbox[q].append(m)
        freed = [self.prefill_release(p, d, h, mla, hybrid, q, inbox.get(q, [])) for q in range(p)]
        reads = [sorted(set(g["reads"])) for g in decode]
        notified = [[q for q, _ in g["notified"]] for g in decode]
        counts = [len(inbox.get(q, [])) for q in range(p)]
        moved = None if hybrid else [g["moved"] for g in decode]
        return [["ok"], [reads, notified, moved], [counts, freed]]


def heads_of_rank(h: int, tp: int, rank: int, mla: bool) -> list[int]:
    """The KV heads a TP rank holds, as ``QKVParallelLinear`` shards them: ``H / tp``
    consecutive heads, or with ``tp > H`` head ``rank // (tp / H)`` (replicated); MLA the
    latent, ``[0]``."""
    if mla:
        return [0]
    if tp >= h:
        return [rank * h // tp]
    n = h // tp
    return list(range(rank * n, (rank + 1) * n))


def _units(addr: int, length: int, heads: int, split: bool) -> list[tuple[int, int]]:
    """The (K/V part, head slot) units a descriptor covers in a block of ``heads`` KV heads
    (``vg.HEAD_BYTES`` each): K and V halves of each head in a ``[2, heads, ...]`` block
    where the layout is blocks-first (K then V), else whole heads."""
    block = heads * vg.HEAD_BYTES
    off = addr % REGION % block
    unit = vg.HEAD_BYTES // 2 if split else vg.HEAD_BYTES
    if off % unit or length % unit:
        raise HarnessError(f"a descriptor at {off} of {length} bytes splits a head")
    out = []
    for u in range(off // unit, (off + length) // unit):
        if split:
            half = heads
            out.append((u // half, u % half))
        else:
            out.append((0, u))
    return out


def _rank(agent: str) -> int:
    if not agent.startswith("P"):
        raise HarnessError(f"notification to {agent!r}")
    return int(agent[1:].strip("()").split(",")[-1])


def _err(e: BaseException) -> list[str]:
    return [type(e).__name__, str(e)]


class _KVConnectorStub:
    """What the connector's handshake-metadata setters reach: the scheduler side stores it."""

    def set_xfer_handshake_metadata(self, metadata: Any) -> None:
        self.stored = metadata


def engine_start_pp(rel: Release) -> Any:
    """The connector hook the engine core hands its workers' handshake metadata to, keyed
    ``(pp_rank, tp_rank)`` (``set_xfer_handshake_metadata_pp_aware``): NIXL's override where
    it has one, else the base class's; ``None`` where the release has neither (the core then
    calls ``set_xfer_handshake_metadata`` with TP-keyed metadata, which accepts anything)."""
    for cls in (*Nixl.CONNECTORS, "KVConnectorBase_V1"):
        node = rel.methods(cls).get("set_xfer_handshake_metadata_pp_aware")
        if node is None:
            continue
        ns = vg.base_namespace()
        compile_defs([node], ns, cls)
        fn = ns["set_xfer_handshake_metadata_pp_aware"]
        conn = type("NixlConnector", (_KVConnectorStub,), {"hook": fn})()
        conn.connector_scheduler = _KVConnectorStub()
        return conn
    return None


def side_channel_ports(rel: Release) -> Any:
    """The scheduler's ``self.side_channel_port = VLLM_NIXL_SIDE_CHANNEL_PORT + …`` of each
    DP rank (its handshake listener's port), from the release's ``__init__`` statement."""
    for cls in ("NixlBaseConnectorScheduler", "NixlConnectorScheduler"):
        init = rel.methods(cls).get("__init__")
        if init is None:
            continue
        stmts = [
            st
            for st in init.body
            if isinstance(st, ast.Assign) and ast.unparse(st.targets[0]) == "self.side_channel_port"
        ]
        if stmts:
            ns = vg.base_namespace()
            ns["envs"] = Stub(VLLM_NIXL_SIDE_CHANNEL_PORT=SIDE_CHANNEL_PORT)
            fn = function_from_statements(
                "_port", ["self", "vllm_config"], stmts, "self.side_channel_port", ns
            )

            def ports(dp: int, tp: int, fn: Any = fn) -> list[int]:
                out = []
                for k in range(dp):
                    pc = Stub(
                        data_parallel_rank=k,
                        data_parallel_index=k,
                        data_parallel_rank_local=k,
                        tensor_parallel_size=tp,
                        data_parallel_size=dp,
                    )
                    out.append(fn(Stub(), Stub(parallel_config=pc)))
                return out

            return ports
    raise SystemExit(f"{rel.version}: no NIXL side_channel_port")


def pp_outcome(conn: Any, pp: int, tp: int) -> list[Any]:
    """One instance's engine start with PP stages ``pp`` and TP ``tp``."""
    if conn is None:
        return ["ok"]
    meta = {(s, t): f"meta-{s}-{t}" for s in range(pp) for t in range(tp)}
    try:
        conn.hook(meta)
    except (NameError, AttributeError, TypeError, KeyError) as e:
        raise HarnessError(f"{type(e).__name__}: {e}") from e
    except Exception as e:
        return ["engine_start", *_err(e)]
    return ["ok"]


# ---------------------------------------------------------------- grid, data, main


# Attention heads of the grid's models: 192 (every TP size of the grid divides it: many
# query heads per KV head, the replicated-KV models) and, per KV-head count H, H (MHA) and 3H
# (GQA with 3 query heads per KV head), where both sides load them.
MANY_HEADS = 192


def attention_heads(h: int) -> list[int]:
    return sorted({MANY_HEADS, h, 3 * h})


def grid() -> list[list[Any]]:
    """[P, D, KV heads, MLA, hybrid, prefill PP, decode PP, prefill DP, decode DP, attention
    heads, sliding window] of every vector (sizes that load the model on both sides — KV heads as
    ``QKVParallelLinear`` splits them, attention heads divisible by TP as vLLM's
    ``ModelConfig.verify_with_parallel_config`` asserts: other vectors never reach the
    connector). NIXL's code never reads the attention heads (no ``num_attention_heads`` in
    any release's connector); pdtp's check is compared at each count."""
    out = []
    for mla in (False, True):
        for hybrid in (False, True):
            if mla and hybrid:
                continue
            for h in MLA_HEADS if mla else KV_HEADS:
                for a in attention_heads(h):
                    for p in TP_SIZES:
                        for d in TP_SIZES:
                            if loads(h, p, mla) and loads(h, d, mla) and a % p == 0 and a % d == 0:
                                out.append([p, d, h, mla, hybrid, 1, 1, 1, 1, a, False])
    # Models with sliding-window layers (Gemma 2/3, gpt-oss, Mistral's SWA): every KV-head
    # count, as MHA/GQA.
    for h in KV_HEADS:
        for p in TP_SIZES:
            for d in TP_SIZES:
                if loads(h, p, False) and loads(h, d, False):
                    out.append([p, d, h, False, False, 1, 1, 1, 1, MANY_HEADS, True])
    for ppp, dpp in PP_LAYOUTS:
        for p in PP_TP:
            for d in PP_TP:
                out.append([p, d, 8, False, False, ppp, dpp, 1, 1, MANY_HEADS, False])
    for pdp, ddp in DP_LAYOUTS:
        for p in PP_TP:
            for d in PP_TP:
                out.append([p, d, 8, False, False, 1, 1, pdp, ddp, MANY_HEADS, False])
    return out


def outcome(flow: NixlFlow, conn: Any, ports: Any, v: list[Any]) -> list[Any]:
    p, d, h, mla, hybrid, ppp, dpp, pdp, ddp, _attention_heads, sliding = v
    flow.sliding = sliding
    if pdp > 1 or ddp > 1:
        # Each DP rank is its own engine: a request carries its prefill DP rank's engine id
        # and handshake port (the scheduler's side_channel_port), and the decode DP rank's
        # workers run the TP flow against it. Two DP ranks of one instance binding one port
        # would never both listen.
        for dp, tp, side in ((pdp, p, "prefill"), (ddp, d, "decode")):
            bound = ports(dp, tp)
            if len(set(bound)) != len(bound):
                return [["engine_start", "port_collision", str(bound), side], None, None]
        return [*flow.vector(p, d, h, mla, hybrid)[:1], None, None]
    for pp, tp, side in ((ppp, p, "prefill"), (dpp, d, "decode")):
        got = pp_outcome(conn, pp, tp)
        if got[0] != "ok":
            return [[*got, side], None, None]
    if ppp > 1 or dpp > 1:
        # The PP handshake (which stages a decode rank queries) is the layout golden's.
        return [["ok"], None, None]
    return flow.vector(p, d, h, mla, hybrid)


def nixl_source(rel: Release) -> str:
    """The NIXL code a flow run compiles (two releases with equal digests share data)."""
    names = sorted(
        f
        for f in rel.files
        if "nixl" in f.rsplit("/", 1)[-1] or "/nixl/" in f or f.endswith(("v1/base.py", "utils.py"))
    )
    return "\n".join(rel.files[f] for f in names)


def _wheel_text(path: Path, rel: str) -> str:
    import zipfile

    if path.is_dir():
        f = path / rel
        return f.read_text() if f.exists() else ""
    with zipfile.ZipFile(path) as z:
        return z.read(rel).decode() if rel in z.namelist() else ""


def send_timeout(rel: Release, path: Path) -> list[Any]:
    """How long a prefill rank keeps a request's blocks for a decode rank that never
    notifies it: ``[name, default seconds]`` of what the prefill scheduler's
    ``request_finished`` adds to the deadline it stamps (``_reqs_need_send``) — the
    environment variable ``VLLM_NIXL_ABORT_REQUEST_TIMEOUT`` (default from ``vllm/envs.py``)
    or the lease ``kv_connector_extra_config.kv_lease_duration`` (default from the
    scheduler's ``get_from_extra_config``)."""
    import re

    schedulers = [
        rel.methods(c)
        for c in (
            "NixlPullConnectorScheduler",
            "NixlBaseConnectorScheduler",
            "NixlConnectorScheduler",
        )
    ]
    finished = next((m["request_finished"] for m in schedulers if "request_finished" in m), None)
    src = ast.unparse(finished) if finished else ""
    if "VLLM_NIXL_ABORT_REQUEST_TIMEOUT" in src:
        envs = _wheel_text(path, "vllm/envs.py")
        m = re.search(r'getenv\(\s*"VLLM_NIXL_ABORT_REQUEST_TIMEOUT",\s*"(\d+)"', envs)
        if not m:
            raise SystemExit(f"{rel.version}: no VLLM_NIXL_ABORT_REQUEST_TIMEOUT default")
        return ["VLLM_NIXL_ABORT_REQUEST_TIMEOUT", int(m.group(1))]
    if "_kv_lease_duration" in src:
        inits = "\n".join(ast.unparse(m["__init__"]) for m in schedulers if "__init__" in m)
        m = re.search(r"'kv_lease_duration',\s*(\d+)", inits)
        if not m:
            raise SystemExit(f"{rel.version}: no kv_lease_duration default")
        return ["kv_lease_duration", int(m.group(1))]
    raise SystemExit(f"{rel.version}: cannot tell the deferred-send deadline")


def load_failure_policy(path: Path) -> str | None:
    """The default of ``KVTransferConfig.kv_load_failure_policy`` (``vllm/config/
    kv_transfer.py``): what the scheduler does with a request whose KV load failed — ``fail``
    it or ``recompute`` it on the decode. ``None`` where the release has no such field (0.12.0:
    the scheduler's ``_handle_invalid_blocks`` always recomputes)."""
    import zipfile

    rel = "vllm/config/kv_transfer.py"
    if path.is_dir():
        f = path / rel
        src = f.read_text() if f.exists() else ""
    else:
        with zipfile.ZipFile(path) as z:
            src = z.read(rel).decode() if rel in z.namelist() else ""
    for node in ast.walk(ast.parse(src)) if src else []:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "kv_load_failure_policy"
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    return None


def generate(rel: Release) -> dict[str, Any]:
    COMPILED.clear()
    flow = NixlFlow(rel)
    conn = engine_start_pp(rel)
    ports = side_channel_ports(rel)
    vectors = grid()
    table: list[Any] = []
    index: dict[str, int] = {}
    codes = []
    seen: dict[str, Any] = {}
    for v in vectors:
        # The attention heads change nothing NIXL runs: one run per other fields.
        run = json.dumps([*v[:9], v[10]])
        if run not in seen:
            seen[run] = outcome(flow, conn, ports, v)
        item = seen[run]
        key = json.dumps(item, sort_keys=True)
        if key not in index:
            index[key] = len(table)
            table.append(item)
        codes.append(index[key])
    return {
        "format": 2,
        "part": "flow-nixl",
        "abort_timeout": ABORT_TIMEOUT,
        "vectors": vectors,
        "outcomes": table,
        "codes": codes,
    }


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", help="comma-separated releases (default: RELEASES)")
    ap.add_argument("--source", action="append", default=[], help="VERSION=PATH: a .whl")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "pdtp-vllm-wheels"))
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    versions = args.versions.split(",") if args.versions else RELEASES
    sources = dict(s.split("=", 1) for s in args.source)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    runs = index.setdefault("flow-nixl", {})
    wheels = index.setdefault("flow-nixl-wheels", {})
    done: dict[str, str] = {}
    for v in versions:
        path = Path(sources[v]) if v in sources else fetch(v, Path(args.cache))
        rel = Release(v, path)
        if path.is_file():
            wheels[v] = f"{path.name} sha256:{sha256(path)}"
        policy = load_failure_policy(path)
        timeout = send_timeout(rel, path)
        key = f"{policy}\n{timeout}\n{nixl_source(rel)}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        if digest not in done:
            data = generate(rel)
            data["source_digest"] = digest
            data["load_failure_policy"] = policy
            data["send_timeout"] = timeout
            done[digest] = vg.write_flow_data(out, "flow-nixl", data)
        runs[v] = done[digest]
        print(f"flow-nixl {v}: {runs[v]}", flush=True)
        index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    used = {n for part in index.values() for n in part.values() if n}
    for f in out.glob("flow-nixl-*.json.gz"):
        if f.name not in used:
            f.unlink()


if __name__ == "__main__":
    main()
