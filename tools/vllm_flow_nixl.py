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

# The grid: every TP size up to 64 that loads the model (its KV heads and attention heads
# divide as vLLM asserts: with 192, H and 3H attention heads that is the divisors of 192 and
# of H and 3H: 9, 18, 36 with 12 KV heads and 36 attention heads, ...); KV heads as the
# issue lists them.
TP_SIZES = list(range(1, 65))
KV_HEADS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 40, 64, 128]
MLA_HEADS = [1, 8, 128]
# Pipeline layouts (prefill PP, decode PP) at these TP sizes, 8 KV heads.
PP_LAYOUTS = [(2, 1), (4, 1), (1, 2), (2, 2)]
PP_TP = [1, 2, 4, 8, 16, 32, 64]
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
# The block read (sliding-window and hybrid vectors): a request of SEQ_BLOCKS blocks per
# attention group (block ids apart per group, the same on both sides), read with the
# sliding-window sizes WINDOWS (tokens); BIG_BLOCKS descriptors per region hold them.
SEQ_BLOCKS = 6
WINDOWS = (32, 40, 160)
BIG_BLOCKS = 20
# A hybrid model's Mamba-2 state as the grid's models have it: MAMBA_UNITS SSM heads (head
# dim 1, state size 1) and as many x channels and B/C group channels, conv kernel 2 (one
# state row), 1-byte dtypes, all split over TP (so TP sizes divide MAMBA_UNITS, as
# MambaMixer2 asserts of its heads): one byte per unit, a rank's page holding
# x | B | C | SSM of MAMBA_UNITS / tp bytes each.
MAMBA_UNITS = 192
MAMBA_PARTS = ("x", "B", "C", "ssm")
# Mamba-2 models with few B/C groups (n_groups, each of GROUP_STATE state channels): vLLM
# splits the groups over TP where TP divides them, and where it does not (n_groups = 1 only:
# `assert n_groups % tp_size == 0 or n_groups == 1`, 0.20.0 mamba_mixer2.py:285) every rank
# holds its head shard's group whole (`extra_groups_for_head_shards`, :299-306): B and C
# are replicated. The grid's `None` is the model above (as many groups as units).
MAMBA_GROUPS = (1, 2, 4)
GROUP_STATE = 64  # large enough that every P > D read of it (B // |ratio|) has bytes


def mamba_loads(groups: int | None, tp: int) -> bool:
    """The Mamba-2 mixer loads at ``tp`` (its head and group asserts, mamba_mixer2.py)."""
    return MAMBA_UNITS % tp == 0 and (groups is None or groups % tp == 0 or groups == 1)


def bc_units(groups: int | None, tp: int) -> int:
    """B (= C) channels of one rank's conv state."""
    if groups is None:
        return MAMBA_UNITS // tp
    return (groups // tp if groups % tp == 0 else 1) * GROUP_STATE


def bc_base(groups: int | None, tp: int, rank: int) -> int:
    """The first global B (= C) channel a rank holds (of ``groups * GROUP_STATE``): its
    share of the groups, or, replicated, its head shard's group (``rank * groups // tp``)."""
    if groups is None or groups % tp == 0:
        return rank * bc_units(groups, tp)
    return rank * groups // tp * GROUP_STATE


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

    # The READs posted: (local handle, local descriptor ids, remote handle, remote ids).
    xfers: list[tuple[int, Any, int, Any]] | None = None

    def make_prepped_xfer(
        self, op: str, lh: int, lids: Any, rh: int, rids: Any, *a: Any, **k: Any
    ) -> int:
        if self.xfers is None:
            raise HarnessError("a READ was posted on the notification path")
        if op != "READ":
            raise HarnessError(f"a {op} was posted")
        # The notification rides on the READ, to the agent the remote handle is for.
        notif = k.get("notif_msg", a[0] if a else b"")
        self.log.append((self.dlists[rh][0], bytes(notif).decode()))
        self.xfers.append((lh, list(lids), rh, list(rids)))
        return 7000 + len(self.xfers)

    def transfer(self, handle: int, *a: Any, **k: Any) -> str:
        return "PROC"


class _SlidingWindowSpec(vg._AttentionSpec):
    """vLLM's ``SlidingWindowSpec``: an attention KV-cache group (``_is_attention_spec``)."""


class _Torch:
    """The two torch calls of the Mamba state sizes: a dtype here is its byte size."""

    class _Empty:
        def __init__(self, dtype: int):
            self.size = dtype

        def element_size(self) -> int:
            return self.size

    @staticmethod
    def tensor(_data: Any, dtype: int) -> Any:
        return _Torch._Empty(dtype)

    class Size(tuple):  # type: ignore[type-arg]
        def numel(self) -> int:
            out = 1
            for x in self:
                out *= x
            return out


class _MambaBackend:
    """``MambaAttentionBackendEnum``'s members that ``derive_mamba_conv_split`` names."""

    MAMBA1 = "mamba1"
    MAMBA2 = "mamba2"
    GDN_ATTN = "gdn_attn"


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
        "_compute_desc_ids",
        "get_mapped_blocks",
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
        "_build_mamba_local",
        "_build_mamba_remote",
        "register_local_xfer_handler",
    )

    def __init__(self, rel: Release):
        super().__init__(rel)
        self.path: Path = getattr(rel, "path", Path())
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
        # 0.33.0's scratch (circular-buffer) attention cache: no grid model has one.
        ns["CircularBufferSpec"] = type("CircularBufferSpec", (), {})
        compile_defs(fns, ns, "NixlFlow")
        # Helpers the handshake of a hybrid model calls (Mamba conv-state split), from the
        # release, into the namespace the handshake methods run in.
        hs_globals = self.Worker._nixl_handshake.__globals__
        conv_ns = dict(ns)
        conv_ns.update(
            torch=_Torch,
            # Replaced by the release's own function under VLLM_SSM_CONV_STATE_LAYOUT=DS
            # (`conv_layout_function`), as pdtp deploy launches, where the release has it.
            is_conv_state_dim_first=_no_layout_function,
            MambaAttentionBackendEnum=_MambaBackend,
        )
        for name in ("MambaConvSplitInfo", "derive_mamba_conv_split"):
            found = rel.find(name)
            if found:
                compile_defs([found[1]], conv_ns, name)
        self.derive = conv_ns.get("derive_mamba_conv_split")
        self.conv_ns = conv_ns
        self.mamba_type_enum = "MambaAttentionBackendEnum" in (
            ast.unparse(rel.find("derive_mamba_conv_split")[1]) if self.derive else ""
        )
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
        self.window = scheduler_window(rel)
        # The attention cache's layout within a block: K and V packed per head into the
        # content dim from 0.26.0 (`[num_blocks, num_kv_heads, block_size, content_size]`),
        # K then V halves of a blocks-first hybrid cache before.
        self.kv_packed = "packed into the content dim" in nixl_source(rel)
        reg = ast.unparse(methods["register_kv_caches"]) if "register_kv_caches" in methods else ""
        self.doubles_regions = "self.num_regions *= 2" in reg or "else 2 for i in" in reg
        # The worker has a Mamba path (0.18.0 on): before, a hybrid model's layers are
        # attention to it and no Mamba state is registered or read.
        self.knows_mamba = "_has_mamba" in every

    # ---------------------------------------------------------------- one vector

    hybrid = False
    # The Mamba-2 model's B/C groups (`MAMBA_GROUPS`; None: as many as units), per vector.
    groups: int | None = None
    # The engine start's hybrid KV-cache manager (`hybrid_kv_cache_manager`), set per run.
    hma_start: dict[str, Any] | None = None

    def topology(self, rank: int, d: int, h: int, mla: bool, w: Any) -> Any:
        # A hybrid model's topology says so (`is_mamba=self._has_mamba`, 0.33.0
        # `nixl/base_worker.py:1500`).
        topo = super().topology(rank, d, h, mla, w)
        if topo is not None and hasattr(topo, "is_mamba"):
            topo.is_mamba = self.hybrid
            if self.hybrid and hasattr(topo, "__post_init__"):
                # What the topology derives from it (a hybrid cache is blocks-first).
                topo.__post_init__()
        return topo

    def metadata(self, p: int, h: int, mla: bool) -> Any:
        m = super().metadata(p, h, mla)
        # The prefill rank's KV regions, at an address no local one has (the read's
        # descriptors are decoded back to heads by address, `heads_moved`).
        m.kv_caches_base_addr = [REMOTE_BASE + i * REGION for i in range(vg.NUM_LAYERS)]
        m.num_blocks = self.num_blocks
        if self.hybrid:
            # The prefill rank's Mamba state per block: conv (x | B | C) and SSM bytes, within
            # one attention page (one physical block per logical block).
            n = MAMBA_UNITS // p
            m.ssm_sizes = (n + 2 * bc_units(self.groups, p), n)
        return m

    # The model has sliding-window layers (set per vector, as `hybrid`).
    sliding = False
    # Blocks per region of the worker's descriptors (BIG_BLOCKS where the vector runs the
    # block read).
    num_blocks = vg.NUM_BLOCKS

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
        nb = self.num_blocks
        w.__dict__.update(
            nixl_wrapper=_Agent(log),
            _notif_log=log,
            _has_mamba=hybrid,
            # Any KV-cache group other than full attention (the worker's `__init__`).
            _is_hma_required=len(groups) > 1,
            num_blocks=nb,
            # register_kv_caches: the local engine's blocks.
            dst_num_blocks={"decode": nb},
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
            kv_cache_config=Stub(
                transfer_groups=[None] * len(groups),
                transfer_group_ids=tuple(range(len(groups))),
                kv_cache_groups=[Stub(kv_cache_spec=g()) for g in groups],
            ),
        )
        # What register_kv_caches leaves for the read: each local region's blocks as one
        # descriptor list (`src_blocks_data`, registered as the whole-block handle), and no
        # split handles yet (add_remote_agent makes them per remote TP size).
        local_len = vg.heads_per_rank(h, tp, mla) * vg.HEAD_BYTES
        blocks: Any
        if self.strided:
            blocks = [
                (LOCAL_BASE + i * REGION, local_len, rank, local_len, nb)
                for i in range(vg.NUM_LAYERS)
            ]
        else:
            blocks = [
                (LOCAL_BASE + i * REGION + b * local_len, local_len, rank)
                for i in range(vg.NUM_LAYERS)
                for b in range(nb)
            ]
        src = w.nixl_wrapper.prep_xfer_dlist("NIXL_INIT_AGENT", blocks)
        if self.ndarray:
            blocks = np.array(blocks, dtype=np.uint64 if self.strided else np.int64)
        w.__dict__.update(
            src_blocks_data=blocks,
            src_blocks_data_by_block_size={vg.BLOCK_SIZE: blocks},
            block_stride_per_layer=[local_len] * vg.NUM_LAYERS,
            region_num_blocks=[nb] * vg.NUM_LAYERS,
            num_regions=vg.NUM_LAYERS,
            num_layers=vg.NUM_LAYERS,
            num_descs=vg.NUM_LAYERS * nb,
            _logical_num_blocks=nb,
            _ple_region_index=None,
            src_xfer_side_handle=src,
            src_xfer_side_handles={vg.BLOCK_SIZE: src},
            # Per-layer windows: Llama 4's chunked layers only (0.11-0.17
            # `register_kv_caches`); empty for every other model.
            block_window_per_layer=[],
            # 0.33.0 register_kv_caches for layers that share their groups' tensors: no
            # per-layer group routing, no SSM-only regions.
            _transfer_layer_group_ids=(),
            _ssm_region_indices=None,
            _uses_region_group_mapping=False,
            # 0.33.0 __init__: no scratch cache, no PLE state, no packed cache.
            _scratch_region_indices=[],
            _ple_group_index=None,
            _ple_block_len=None,
            _has_packed_cache=False,
            _desc_is_dram_by_block_size={},
            src_xfer_handles_by_block_size={vg.BLOCK_SIZE: src},
            src_xfer_handles_by_tp_ratio={},
        )
        # Descriptor handles per remote engine and rank, as add_remote_agent stores them.
        w.dst_xfer_side_handles = collections.defaultdict(dict)
        if hybrid and self.knows_mamba:
            self.mamba_worker(w, rank, tp)
        w._evict_stale_engines = lambda: None
        w._track_remote_engine_replacement = lambda *a, **k: None
        w._cleanup_remote_engine = lambda *a, **k: None

        def log_failure(*a: Any, **k: Any) -> None:
            w._logged.append(k.get("failure_type", a[0] if a else ""))

        w._log_failure = log_failure
        return w

    def mamba_worker(self, w: Any, rank: int, tp: int) -> None:
        """A hybrid model's worker as its ``__init__`` and ``register_kv_caches`` leave it:
        the Mamba state sizes (``_mamba_ssm_size``) and, from 0.20.0, the conv split the
        release derives from the Mamba spec (``derive_mamba_conv_split``); every layer's
        cache one region whose blocks the attention and the Mamba views share (K | V halves,
        conv | SSM), registered by the release's own ``register_local_xfer_handler`` (whole
        blocks, split in two K/V virtual regions, then the Mamba descriptors)."""
        n = MAMBA_UNITS // tp
        b = bc_units(self.groups, tp)
        spec = vg._MambaSpec()
        spec.shapes = ((n + 2 * b, 1), (n, 1, 1))
        spec.dtypes = (1, 1)
        spec.mamba_type = _MambaBackend.MAMBA2 if self.mamba_type_enum else "mamba2"
        w._mamba_ssm_size = (n + 2 * b, n)
        w._conv_decomp = self.derive(spec, tp) if self.derive else None
        w._physical_blocks_per_logical = {"decode": 1}
        page = w.block_len_per_layer[0]
        if 2 * n + 2 * b > page:
            raise HarnessError(f"a Mamba state of {2 * n + 2 * b} bytes in a {page}-byte page")
        w.kv_caches_base_addr["decode"][rank] = [
            LOCAL_BASE + i * REGION for i in range(vg.NUM_LAYERS)
        ]
        w.block_stride_per_layer = [page] * vg.NUM_LAYERS
        # The release's register_kv_caches: K and V halves as two virtual regions where it
        # doubles them for blocks-first caches (0.18.0-0.26.0; hybrid caches are
        # blocks-first), one region per layer from 0.27.0 (K and V move as one unit).
        w.num_regions = vg.NUM_LAYERS * (2 if self.doubles_regions else 1)
        w.num_descs = w.num_regions * w.num_blocks
        w.region_num_blocks = [w.num_blocks] * w.num_regions
        w.region_mem_types = ["VRAM"] * w.num_regions
        w.nixl_memory_type = "VRAM"
        if "register_local_xfer_handler" not in self.methods:
            raise HarnessError("a hybrid model and no register_local_xfer_handler")
        w.nixl_wrapper.dlists.clear()
        handle, blocks = w.register_local_xfer_handler(vg.BLOCK_SIZE)
        w.src_blocks_data = blocks
        w.src_blocks_data_by_block_size = {vg.BLOCK_SIZE: blocks}
        w.src_xfer_side_handle = handle
        w.src_xfer_side_handles = {vg.BLOCK_SIZE: handle}
        w.src_xfer_handles_by_block_size = {vg.BLOCK_SIZE: handle}
        w.dst_num_blocks = {"decode": w.num_blocks}

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
            if not hybrid and self.num_blocks != BIG_BLOCKS:
                # (A vector with the block read has its heads decoded there, per READ.)
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
        out: dict[str, Any] = {"reads": reads, "notified": notified, "moved": moved}
        if self.num_blocks == BIG_BLOCKS:
            w._read_blocks = real
            # The windows matter to sliding-window groups only (a hybrid model reads once).
            windows = WINDOWS if self.sliding else WINDOWS[:1]
            out["blocks"] = [self.block_read(w, ready[0], p, d, h, mla, rank, n) for n in windows]
        return out

    def block_read(
        self, w: Any, ready: Any, p: int, d: int, h: int, mla: bool, rank: int, window: int
    ) -> list[Any]:
        """The blocks one request's reads move, per KV-cache group, with sliding windows of
        ``window`` tokens: the prefill scheduler's ``request_finished`` and the decode
        scheduler's ``update_state_after_alloc`` clip each side's blocks as the release does
        (``get_sw_clipped_blocks`` / ``get_exchange_clipped_blocks``, ``blocks_per_sw`` from
        the scheduler's ``__init__``), then the worker's ``_read_blocks_for_req`` and
        ``_read_blocks`` run for real and each READ posted (``make_prepped_xfer``) is
        decoded, descriptor by descriptor, back to the (remote, local) blocks it moves.
        Per READ posted, in order: ``[prefill rank, [[group kind, blocks read], ...] (block
        indices within the request), KV heads moved, [[Mamba part, first unit, end], ...]
        (global units of x, B, C and the SSM heads)]``, with ``["misplaced", …]`` where
        a block, a head or a Mamba unit lands in another's slot."""
        groups = list(w._group_spec_types)
        if not self.nested_meta:
            # One flat block list: the first (full-attention) group's.
            groups = groups[:1]
        kinds = [_kind(g) for g in groups]
        alloc = [
            [1 + g * SEQ_BLOCKS + b for b in range(1 if k == "mamba" else SEQ_BLOCKS)]
            for g, k in enumerate(kinds)
        ]
        remote: Any = [list(b) for b in alloc]
        local: Any = [list(b) for b in alloc]
        if self.window is not None:
            remote = self.window.clip(groups, window, remote, "request_finished")
            local = self.window.clip(groups, window, local, "update_state_after_alloc")
        _, meta = ready
        if not self.nested_meta:
            remote, local = remote[0], local[0]
        meta.remote.block_ids = remote
        meta.remote_block_ids = remote
        meta.local_block_ids = meta.local_physical_block_ids = local
        agent = w.nixl_wrapper
        agent.xfers = []
        try:
            w._read_blocks_for_req(*ready)
        except HarnessError:
            raise
        except (NameError, AttributeError, TypeError, KeyError) as e:
            raise HarnessError(f"{type(e).__name__}: {e}") from e
        except Exception as e:
            return ["error", *_err(e)]
        lpage = vg.heads_per_rank(h, d, mla) * vg.HEAD_BYTES
        rpage = vg.heads_per_rank(h, p, mla) * vg.HEAD_BYTES
        handles = w.dst_xfer_side_handles.get(ENGINE)
        if isinstance(handles, dict):
            rank_of = {v: k for k, v in handles.items()}
        else:
            # One remote handle per engine (0.11-0.13): the one rank the worker handshook.
            (only,) = w._remote_agents[ENGINE]
            rank_of = {handles: only}
        topo = w.kv_topo
        split = getattr(topo, "virtually_split_kv_in_blocks", None)
        if split is None:
            split = getattr(topo, "is_kv_layout_blocks_first", False)
        split = bool(split) and not mla
        if self.hybrid and self.knows_mamba:
            # A hybrid cache is blocks-first (before 0.18.0 the worker knows no Mamba layers
            # and the layout is the dense model's).
            split = not self.kv_packed and not mla
        # Attention descriptors come first in both lists; a hybrid model's Mamba ones follow.
        boundary = w.num_descs if self.hybrid and self.knows_mamba else None
        mine = heads_of_rank(h, d, rank, mla)
        out: list[Any] = []
        for lh, lids, rh, rids in agent.xfers:
            ldescs, rdescs = agent.dlists[lh][1], agent.dlists[rh][1]
            if len(lids) != len(rids):
                raise HarnessError(f"{len(lids)} local and {len(rids)} remote descriptor ids")
            q = rank_of.get(rh, -1)
            theirs = heads_of_rank(h, p, q, mla) if q >= 0 else []
            moved: dict[int, set[int]] = collections.defaultdict(set)
            wrong: set[Any] = set()
            heads: set[int] = set()
            state: dict[str, set[int]] = collections.defaultdict(set)
            for li, ri in zip(lids, rids, strict=True):
                la, ll, _ = ldescs[int(li)]
                ra, rl, _ = rdescs[int(ri)]
                if ll != rl:
                    raise HarnessError(f"descriptor lengths {ll} and {rl}")
                lb = (la - LOCAL_BASE) % REGION // lpage
                rb = (ra - REMOTE_BASE) % REGION // rpage
                if lb != rb:
                    wrong.add(("block", rb, lb))
                g = (rb - 1) // SEQ_BLOCKS
                moved[g].add(rb - 1 - g * SEQ_BLOCKS)
                lfa = boundary is None or int(li) < boundary
                rfa = boundary is None or int(ri) < boundary
                if lfa != rfa:
                    wrong.add(("view", int(ri), int(li)))
                elif lfa:
                    lu = _units(la - LOCAL_BASE, ll, len(mine), split)
                    ru = _units(ra - REMOTE_BASE, rl, len(theirs), split)
                    for (lkv, lhd), (rkv, rhd) in zip(lu, ru, strict=True):
                        if rkv != lkv or theirs[rhd] != mine[lhd]:
                            wrong.add(("head", theirs[rhd], mine[lhd]))
                        heads.add(theirs[rhd])
                else:
                    lo = (la - LOCAL_BASE) % REGION % lpage
                    ro = (ra - REMOTE_BASE) % REGION % rpage
                    for b in range(ll):
                        lpart, lg = _mamba_unit(lo + b, rank, d, self.groups)
                        rpart, rg = _mamba_unit(ro + b, q, p, self.groups)
                        if (lpart, lg) != (rpart, rg):
                            wrong.add((f"{rpart}->{lpart}", rg, lg))
                        state[rpart].add(rg)
            read: list[Any] = [
                q,
                [[kinds[g], sorted(moved.get(g, ()))] for g in range(len(groups))],
                sorted(heads),
                [[part, *_span(state[part])] for part in MAMBA_PARTS if part in state],
            ]
            if wrong:
                read.append(["misplaced", sorted(wrong, key=str)[:8]])
            out.append(read)
        return out

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
        moved = None if hybrid or self.num_blocks == BIG_BLOCKS else [g["moved"] for g in decode]
        body: list[Any] = [reads, notified, moved]
        if all("blocks" in g for g in decode):
            # Per decode rank, per window: the blocks each group's reads move.
            body.append([g["blocks"] for g in decode])
        return [["ok"], body, [counts, freed]]


def _mamba_unit(offset: int, rank: int, tp: int, groups: int | None = None) -> tuple[str, int]:
    """The (part, global unit) one byte at ``offset`` of a rank's page holds, in the
    grid's Mamba-2 state (x | B | C | SSM: ``MAMBA_UNITS / tp`` bytes of x and SSM heads,
    ``bc_units`` of B and C; B and C units global of ``groups * GROUP_STATE``)."""
    n = MAMBA_UNITS // tp
    if groups is not None:
        b = bc_units(groups, tp)
        if offset < n:
            return "x", rank * n + offset
        if offset < n + 2 * b:
            part = "B" if offset < n + b else "C"
            return part, bc_base(groups, tp, rank) + (offset - n) % b
        if offset < 2 * n + 2 * b:
            return "ssm", rank * n + offset - n - 2 * b
        return "padding", offset
    part = offset // n
    if part >= len(MAMBA_PARTS):
        return "padding", offset
    return MAMBA_PARTS[part], rank * n + offset % n


def _span(units: set[int]) -> list[int]:
    """``[first, end)`` of a contiguous set of units (a gap is recorded as it is)."""
    lo, hi = min(units), max(units) + 1
    return [lo, hi] if len(units) == hi - lo else [lo, hi, "gaps", sorted(units)]


def _kind(spec: type) -> str:
    if spec is vg._MambaSpec:
        return "mamba"
    return "sliding" if spec is _SlidingWindowSpec else "full"


class _SchedulerWindow:
    """The scheduler's sliding-window clipping of one release: the statements of its
    ``__init__`` that size each group's window (``_is_hma_required``, ``sw_sizes_tokens``,
    ``self.blocks_per_sw``, ``self._ssm_spec_blocks``) and its clip method, with which
    scheduler methods call the clip (``request_finished``: the blocks the prefill sends;
    ``update_state_after_alloc``: the blocks the decode fills)."""

    NAMES = (
        "self._is_hma_required",
        "sw_sizes_tokens",
        "self.blocks_per_sw",
        "self._ssm_spec_blocks",
        "self._ssm_state_slots_are_positional",
    )

    def __init__(self, rel: Release):
        methods: dict[str, ast.FunctionDef] = {}
        inits: list[ast.FunctionDef] = []
        for cls in SCHEDULERS:
            ms = rel.methods(cls)
            for name, node in ms.items():
                methods.setdefault(name, node)
            if "__init__" in ms:
                inits.append(ms["__init__"])
        clip = methods.get("get_exchange_clipped_blocks") or methods.get("get_sw_clipped_blocks")
        if clip is None:
            raise LookupError("no clip")
        stmts = []
        for init in inits:
            for st in init.body:
                target = (
                    st.targets[0] if isinstance(st, ast.Assign) else getattr(st, "target", None)
                )
                if target is not None and ast.unparse(target) in self.NAMES:
                    stmts.append(st)
        if not any("blocks_per_sw" in ast.unparse(st) for st in stmts):
            raise SystemExit(f"{rel.version}: a clip method and no blocks_per_sw")
        ns = vg.base_namespace()
        ns.update(
            cdiv=lambda a, b: -(-a // b),
            SlidingWindowSpec=_SlidingWindowSpec,
            FullAttentionSpec=vg._FullAttentionSpec,
            MambaSpec=vg._MambaSpec,
        )
        found = rel.find("clip_ssm_state_blocks")
        if found:
            compile_defs([found[1]], ns, "clip_ssm_state_blocks")
        self.init = function_from_statements(
            "_window", ["self", "vllm_config", "kv_cache_config"], stmts, "self", ns
        )
        compile_defs([clip], ns, "NixlScheduler")
        self.clip_fn = ns[clip.name]
        call = f"self.{clip.name}("
        self.clips = {
            name: call in ast.unparse(methods[name]) if name in methods else False
            for name in ("request_finished", "update_state_after_alloc")
        }

    def clip(self, groups: list[type], window: int, blocks: Any, where: str) -> Any:
        if not self.clips[where]:
            return blocks
        specs = []
        for g in groups:
            spec = g()
            spec.block_size = vg.BLOCK_SIZE
            spec.sliding_window = window
            spec.num_speculative_blocks = 0
            specs.append(Stub(kv_cache_spec=spec))
        kcc = Stub(
            kv_cache_groups=specs,
            transfer_groups=specs,
            transfer_group_ids=tuple(range(len(specs))),
            # Every group is transferable here (no host-resident groups).
            select_transfer_block_ids=lambda ids: tuple(ids),
        )
        sched = type("Scheduler", (), {})()
        sched.block_size = vg.BLOCK_SIZE
        sched.kv_cache_config = kcc
        cfg = Stub(
            scheduler_config=Stub(disable_hybrid_kv_cache_manager=False),
            # vLLM's default (no Mamba prefix caching: one state block per request).
            cache_config=Stub(mamba_cache_mode="none"),
        )
        self.init(sched, cfg, kcc)
        return [list(b) for b in self.clip_fn(sched, tuple(blocks))]


SCHEDULERS = ("NixlPullConnectorScheduler", "NixlBaseConnectorScheduler", "NixlConnectorScheduler")


def scheduler_window(rel: Release) -> _SchedulerWindow | None:
    """The release's scheduler window code, ``None`` where it has none (before 0.18.0)."""
    try:
        return _SchedulerWindow(rel)
    except LookupError:
        return None


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
    heads, sliding window(, B/C groups)] of every vector (sizes that load the model on both
    sides — KV heads as
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
                            mamba = not hybrid or (MAMBA_UNITS % p == 0 and MAMBA_UNITS % d == 0)
                            if (
                                loads(h, p, mla)
                                and loads(h, d, mla)
                                and a % p == 0
                                and a % d == 0
                                and mamba
                            ):
                                out.append([p, d, h, mla, hybrid, 1, 1, 1, 1, a, False])
    # Models with sliding-window layers (Gemma 2/3, gpt-oss, Mistral's SWA): every KV-head
    # count, as MHA/GQA.
    for h in KV_HEADS:
        for p in TP_SIZES:
            for d in TP_SIZES:
                if (
                    loads(h, p, False)
                    and loads(h, d, False)
                    and MANY_HEADS % p == 0
                    and MANY_HEADS % d == 0
                ):
                    out.append([p, d, h, False, False, 1, 1, 1, 1, MANY_HEADS, True])
    # Mamba-2 models with MAMBA_GROUPS B/C groups (a 12th field): TP sizes the mixer loads
    # at (n_groups = 1 at every TP, replicated; 2 and 4 at the TP sizes dividing them).
    for g in MAMBA_GROUPS:
        for h in KV_HEADS:
            for a in attention_heads(h):
                for p in TP_SIZES:
                    for d in TP_SIZES:
                        if (
                            loads(h, p, False)
                            and loads(h, d, False)
                            and a % p == 0
                            and a % d == 0
                            and mamba_loads(g, p)
                            and mamba_loads(g, d)
                        ):
                            out.append([p, d, h, False, True, 1, 1, 1, 1, a, False, g])
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
    p, d, h, mla, hybrid, ppp, dpp, pdp, ddp, _attention_heads, sliding = v[:11]
    flow.groups = v[11] if len(v) > 11 else None
    hma = flow.hma_start
    if hybrid and hma is not None and True not in (hma["default"], hma["with_flag"]):
        # No launch keeps the hybrid KV-cache manager on (0.11.0-0.17.x): the engine core
        # unifies the specs when it sizes the KV cache, before any worker registers one
        # (`get_kv_cache_configs` -> `get_kv_cache_groups`, 0.17.1
        # vllm/v1/core/kv_cache_utils.py:1231), and a Mamba spec does not unify.
        return [["engine_start", *hma["mamba"], "core"], None, None]
    flow.sliding = sliding
    tp_only = ppp == dpp == pdp == ddp == 1
    flow.num_blocks = BIG_BLOCKS if (sliding or hybrid) and tp_only else vg.NUM_BLOCKS
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


# The launch flag that keeps vLLM's hybrid KV-cache manager on with a KV connector.
HMA_FLAG = "--no-disable-hybrid-kv-cache-manager"
KV_CACHE_UTILS = "vllm/v1/core/kv_cache_utils.py"
KV_CACHE_INTERFACE = "vllm/v1/kv_cache_interface.py"


class _KvSpec:
    """A KV-cache spec stand-in for the release's spec unification: the fields it reads and
    copies, ``merge`` asserting one spec type (``KVCacheSpec.merge`` / ``FullAttentionSpec
    .merge``: an ``AssertionError`` is what ``is_kv_cache_spec_uniform`` catches)."""

    def __init__(self, **fields: Any):
        self.block_size = vg.BLOCK_SIZE
        self.num_kv_heads = 8
        self.head_size = 128
        self.head_size_v = 128
        self.dtype = 2
        self.sliding_window = None
        self.attention_chunk_size = None
        self.page_size_padded = None
        self.__dict__.update(fields)

    def __getattr__(self, name: str) -> Any:
        # A field the conversion copies and no test here reads (a quantization mode, ...).
        if name.startswith("__"):
            raise AttributeError(name)
        return None

    def merge(self, specs: list[Any]) -> Any:
        assert all(type(s) is type(self) for s in specs)
        return self


def _spec_classes() -> dict[str, type]:
    names = (
        "AttentionSpec",
        "FullAttentionSpec",
        "SlidingWindowSpec",
        "ChunkedLocalAttentionSpec",
        "CrossAttentionSpec",
        "MambaSpec",
        "MLAAttentionSpec",
        "SlidingWindowMLASpec",
        "SinkFullAttentionSpec",
        "EncoderOnlyAttentionSpec",
    )
    out: dict[str, type] = {"KVCacheSpec": _KvSpec}
    out["AttentionSpec"] = type("AttentionSpec", (_KvSpec,), {})
    out["FullAttentionSpec"] = type("FullAttentionSpec", (out["AttentionSpec"],), {})
    for name in names:
        if name not in out:
            base = out["FullAttentionSpec"] if name.endswith("MLASpec") else out["AttentionSpec"]
            out[name] = type(name, (_KvSpec if name == "MambaSpec" else base,), {})
    return out


def hybrid_kv_cache_manager(rel: Release, path: Path, supports_hma: bool) -> dict[str, Any]:
    """What the engine start does with a model whose layers are not all full attention, with
    ``--kv-transfer-config`` naming NixlConnector: the release's own ``VllmConfig
    .__post_init__`` statements that set ``scheduler_config.disable_hybrid_kv_cache_manager``
    (vllm/config/vllm.py; vllm/config/__init__.py in 0.11.0), run with the field at its default
    and with ``HMA_FLAG`` (``False``), the connector's ``SupportsHMA`` as the factory reports
    it; then, where the manager is off, the release's ``unify_hybrid_kv_cache_specs``
    (vllm/v1/core/kv_cache_utils.py, called by ``get_kv_cache_groups`` when the engine core
    sizes the KV cache, before any worker's ``register_kv_caches``) on the specs of a hybrid
    model (full attention + Mamba) and of a sliding-window one (full + sliding window).
    ``{"flag", "default": manager on, "with_flag": on | [class, message] (the flag refused),
    "mamba": [class, message] | None (with the manager off), "sliding": "unified" | [class,
    message]}``."""
    src = next((_wheel_text(path, f) for f in CONFIG_FILES if _wheel_text(path, f)), "")
    cls = next(
        (
            n
            for n in ast.walk(ast.parse(src))
            if isinstance(n, ast.ClassDef) and n.name == "VllmConfig"
        ),
        None,
    )
    post = (
        next(
            (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__post_init__"),
            None,
        )
        if cls
        else None
    )
    if post is None:
        raise SystemExit(f"{rel.version}: no VllmConfig.__post_init__")

    class _NoImports(ast.NodeTransformer):
        def visit_Import(self, node: ast.AST) -> ast.AST:
            return ast.Pass()

        visit_ImportFrom = visit_Import

    stmts = [
        _NoImports().visit(ast.parse(ast.unparse(s)).body[0])
        for s in post.body
        if "hybrid_kv_cache_manager" in ast.unparse(s)
    ]
    if not any("kv_transfer_config" in ast.unparse(s) for s in stmts):
        raise SystemExit(f"{rel.version}: the config never reads kv_transfer_config for HMA")
    sched_src = _wheel_text(path, "vllm/config/scheduler.py")
    default: Any = (
        None if "disable_hybrid_kv_cache_manager: bool | None = None" in sched_src else False
    )

    class _Factory:
        @staticmethod
        def get_connector_class(config: Any) -> Any:
            return type(config.kv_connector, (), {})

        @staticmethod
        def supports_hma_config(config: Any) -> bool:
            return supports_hma

    ns = vg.base_namespace()
    ns.update(
        envs=Stub(VLLM_USE_V1=True, VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=False),
        current_platform=Stub(support_hybrid_kv_cache=lambda: True),
        KVConnectorFactory=_Factory,
        supports_hma=lambda c: supports_hma,
        KVTransferConfig=lambda **k: Stub(**k),
    )
    fn = function_from_statements(
        "_hma", ["self"], stmts, "self.scheduler_config.disable_hybrid_kv_cache_manager", ns
    )

    def manager_on(flag: Any) -> Any:
        cfg = Stub(
            scheduler_config=Stub(disable_hybrid_kv_cache_manager=flag),
            kv_transfer_config=Stub(
                kv_connector="NixlConnector", kv_connector_extra_config={}, kv_role="kv_both"
            ),
            kv_events_config=None,
            model_config=Stub(attention_chunk_size=None),
            speculative_config=None,
            attention_config=Stub(hisparse_config=None),
        )
        try:
            return not fn(cfg)
        except (NameError, AttributeError, TypeError) as e:
            raise HarnessError(f"{rel.version}: the HMA statements: {e}") from e
        except Exception as e:
            return _err(e)

    on = manager_on(default)
    # 0.11.0-0.13.0 have no flag to keep it on (the field defaults to False and the
    # statements turn it off for any connector); 0.14.0-0.17.x refuse it in the factory for a
    # connector without SupportsHMA (0.17.1 `kv_connector/factory.py:58`).
    with_flag = manager_on(False) if default is None else on
    if with_flag is True and not supports_hma:
        with_flag = factory_refusal(rel, path)
    off = on is not True
    if not off:
        # With the manager on, no spec is unified (the KV-cache groups stay apart).
        return {
            "flag": HMA_FLAG,
            "default": on,
            "with_flag": with_flag,
            "mamba": None,
            "sliding": None,
        }
    utils = _wheel_text(path, KV_CACHE_UTILS)
    iface = _wheel_text(path, KV_CACHE_INTERFACE)
    funcs = {n.name: n for n in ast.parse(utils).body if isinstance(n, ast.FunctionDef)}
    uni = (
        next(
            n
            for n in ast.parse(iface).body
            if isinstance(n, ast.ClassDef) and n.name == "UniformTypeKVCacheSpecs"
        )
        if "class UniformTypeKVCacheSpecs" in iface
        else None
    )
    uns = vg.base_namespace()
    specs = _spec_classes()
    uns.update(specs)
    names = ["unify_hybrid_kv_cache_specs", "is_kv_cache_spec_uniform"]
    compile_defs([funcs[n] for n in names], uns, "kv_cache_utils")
    if uni is not None:
        method = next(
            m for m in uni.body if isinstance(m, ast.FunctionDef) and m.name == "is_uniform_type"
        )
        compile_defs([method], uns, "UniformTypeKVCacheSpecs")
        uns["UniformTypeKVCacheSpecs"] = type(
            "UniformTypeKVCacheSpecs", (), {"is_uniform_type": classmethod(uns["is_uniform_type"])}
        )
    vg.COMPILED.append(utils)

    def unify(other: str) -> Any:
        layers = {f"layer.{i}": specs["FullAttentionSpec"]() for i in range(3)}
        layers["layer.3"] = (
            specs[other](sliding_window=32) if other != "MambaSpec" else specs[other]()
        )
        try:
            uns["unify_hybrid_kv_cache_specs"](layers)
        except (NameError, AttributeError, TypeError, KeyError) as e:
            raise HarnessError(f"{rel.version}: unify_hybrid_kv_cache_specs: {e}") from e
        except Exception as e:
            return _err(e)
        kinds = {type(s).__name__ for s in layers.values()}
        return "unified" if kinds == {"FullAttentionSpec"} else sorted(kinds)

    return {
        "flag": HMA_FLAG,
        "default": on,
        "with_flag": with_flag,
        "mamba": unify("MambaSpec"),
        "sliding": unify("SlidingWindowSpec"),
    }


def factory_refusal(rel: Release, path: Path) -> list[str]:
    """What ``KVConnectorFactory.create_connector`` raises for a connector without
    ``SupportsHMA`` when the hybrid KV-cache manager is on (its ``raise`` evaluated with
    NixlConnector; 0.17.1 ``kv_connector/factory.py:58``)."""
    src = _wheel_text(path, "vllm/distributed/kv_transfer/kv_connector/factory.py")
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Raise) and "support HMA" in ast.unparse(node) and node.exc:
            ns = vg.base_namespace()
            ns["connector_cls"] = type("NixlConnector", (), {})
            try:
                exc = eval(compile(ast.Expression(node.exc), "<vllm factory>", "eval"), ns)
            except Exception as e:
                raise HarnessError(f"{rel.version}: the factory's HMA refusal: {e}") from e
            return _err(exc)
    raise SystemExit(f"{rel.version}: the manager stays on for NIXL and no factory refusal")


CONFIG_FILES = ("vllm/config/vllm.py", "vllm/config/__init__.py")


MAMBA_UTILS = "vllm/model_executor/layers/mamba/mamba_utils.py"


def mamba_conv_layout(rel: Release, path: Path) -> dict[str, Any] | None:
    """What NIXL's worker asserts of a hybrid model's Mamba conv state at start: the
    ``assert is_conv_state_dim_first(), …`` of its ``__init__`` (0.20.0 on), run against
    the release's own ``get_conv_state_layout`` with ``VLLM_SSM_CONV_STATE_LAYOUT`` unset
    (its default) and set to each layout it accepts. ``None`` where the worker asserts no
    layout. ``{"env", "default", "passes": [layouts the assert accepts], "error": [class,
    message] with the default}``."""
    check = None
    for cls in Nixl.WORKERS:
        init = rel.methods(cls).get("__init__")
        for node in ast.walk(init) if init else ():
            if (
                isinstance(node, ast.Assert)
                and "is_conv_state_dim_first" in ast.unparse(node.test)
                and node.msg is not None
            ):
                check = node
                break
        if check:
            break
    if check is None:
        return None
    assert check.msg is not None
    message = ast.literal_eval(check.msg)
    utils = _wheel_text(path, MAMBA_UTILS)
    defs = {
        n.name: n
        for n in ast.parse(utils).body
        if isinstance(n, ast.FunctionDef)
        and n.name in ("get_conv_state_layout", "is_conv_state_dim_first")
    }
    if len(defs) != 2:
        raise SystemExit(f"{rel.version}: a conv-layout assert and no get_conv_state_layout")
    vg.COMPILED.append(utils)
    env = "VLLM_SSM_CONV_STATE_LAYOUT"

    def layout(value: str | None) -> bool:
        return bool(conv_layout_function(defs, value)())

    passes = [v for v in ("SD", "DS") if layout(v)]
    return {
        "env": env,
        "passes": passes,
        "error": None if layout(None) else ["AssertionError", message],
        # The hybrid vectors run the release's `is_conv_state_dim_first` with this value.
        "vectors_run_with": "DS",
    }


def _no_layout_function() -> bool:
    raise HarnessError("is_conv_state_dim_first called in a release without the layout assert")


def conv_layout_defs(path: Path) -> dict[str, ast.FunctionDef]:
    utils = _wheel_text(path, MAMBA_UTILS)
    return (
        {
            n.name: n
            for n in ast.parse(utils).body
            if isinstance(n, ast.FunctionDef)
            and n.name in ("get_conv_state_layout", "is_conv_state_dim_first")
        }
        if utils
        else {}
    )


def conv_layout_function(defs: dict[str, ast.FunctionDef], value: str | None) -> Any:
    """The release's ``is_conv_state_dim_first`` with ``VLLM_SSM_CONV_STATE_LAYOUT`` =
    ``value`` (None: unset)."""
    ns = vg.base_namespace()
    ns["envs"] = Stub(VLLM_SSM_CONV_STATE_LAYOUT=value)
    ns["logger"] = Stub(info_once=lambda *a, **k: None, info=lambda *a, **k: None)
    compile_defs(list(defs.values()), ns, "mamba_utils")
    return ns["is_conv_state_dim_first"]


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


def generate(
    rel: Release, conv_layout: dict[str, Any] | None = None, hma: dict[str, Any] | None = None
) -> dict[str, Any]:
    COMPILED.clear()
    flow = NixlFlow(rel)
    flow.hma_start = hma
    if conv_layout is not None:
        # The hybrid vectors run under DS, as pdtp deploy sets it: the release's own function.
        defs = conv_layout_defs(flow.path)
        fn = conv_layout_function(defs, conv_layout["vectors_run_with"])
        if not fn():
            raise SystemExit(f"{rel.version}: DS does not pass the release's conv-layout check")
        flow.conv_ns["is_conv_state_dim_first"] = fn
    if hma is not None and True not in (hma["default"], hma["with_flag"]):
        # The manager off: sliding-window layers are full attention to the connector.
        if hma["sliding"] != "unified":
            raise SystemExit(f"{rel.version}: sliding-window specs not unified: {hma}")
        flow.hma = False
    conn = engine_start_pp(rel)
    ports = side_channel_ports(rel)
    vectors = grid()
    table: list[Any] = []
    index: dict[str, int] = {}
    codes = []
    seen: dict[str, Any] = {}
    for v in vectors:
        # The attention heads change nothing NIXL runs: one run per other fields.
        run = json.dumps([*v[:9], *v[10:]])
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
        # The block read of sliding-window vectors: a request's blocks per attention group,
        # the windows (tokens) and the block size (tokens) it runs with.
        # A hybrid model's engine start with the conv-state layout left at its default
        # (the hybrid vectors run with the layout the assert accepts, as pdtp deploy sets it).
        "mamba_conv_layout": conv_layout,
        # The hybrid KV-cache manager at engine start with NIXL (`hybrid_kv_cache_manager`):
        # on by default, or only with HMA_FLAG (the vectors run with it, as pdtp deploy
        # launches), and what a Mamba / sliding-window model meets with it off.
        "hybrid_kv_cache_manager": hma,
        "block_read": {
            # B and C channels of a vector with B/C groups: groups x group_state.
            "group_state": GROUP_STATE,
            "request_blocks": SEQ_BLOCKS,
            "windows": list(WINDOWS),
            "block_size": vg.BLOCK_SIZE,
        },
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
        rel.path = path  # type: ignore[attr-defined]
        if path.is_file():
            wheels[v] = f"{path.name} sha256:{sha256(path)}"
        policy = load_failure_policy(path)
        timeout = send_timeout(rel, path)
        conv_layout = mamba_conv_layout(rel, path)
        hma = hybrid_kv_cache_manager(rel, path, NixlFlow(rel).hma)
        key = f"{policy}\n{timeout}\n{conv_layout}\n{hma}\n{nixl_source(rel)}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        if digest not in done:
            data = generate(rel, conv_layout, hma)
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
