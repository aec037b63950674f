#!/usr/bin/env python3
"""Golden data from vLLM's connector *flow*: what happens to a request, per release.

    python tools/vllm_flow.py                      # every release in RELEASES (downloads wheels)
    python tools/vllm_flow.py --source 0.33.0=/path/to/unpacked/wheel --versions 0.33.0

``tools/vllm_golden.py`` runs vLLM's module-level rule functions and a few worker methods over
a grid. This script runs the connector's **flow**: the MoRIIO modules of each release
(``vllm/distributed/kv_transfer/kv_connector/v1/moriio/*.py``) are parsed with :mod:`ast`,
every ``import`` is replaced by a stand-in (MoRI's ``IOEngine``, ZMQ sockets, ``torch``, vLLM's
config and parallel-state getters; the standard library and numpy stay real), and the modules
run as vLLM wrote them. Then, for one (prefill layout, decode layout, model) vector:

1. every prefill rank and every decode rank is a real ``MoRIIOConnectorWorker`` built by its own
   ``__init__`` (so the ports it binds are the release's: ``side_channel_port``, the notify
   port), with its KV-cache state set as ``register_kv_caches`` leaves it (one layer, memory
   descriptors naming the rank that owns them);
2. the prefill scheduler's real ``request_finished`` produces the ``kv_transfer_params`` of
   each request (one request per prefill DP rank and per prefill TP rank, routed as the
   proxy routes them: ``remote_dp_rank``), and the decode's real ``MoRIIOConnectorMetadata``
   turns them into ``reqs_to_recv``;
3. each decode rank runs ``start_load_kv`` (handshake — background future or, from 0.27.0,
   the eager all-DP handshake with its TP vote — then ``_read_blocks``) and ``get_finished``
   (which sends the release notifications). ZMQ paths are resolved against the ports the
   prefill workers bound: a handshake dialling a port nobody bound waits forever (recorded as
   ``hang``); notifications are delivered to the bound worker's real ``_handle_message``;
4. each prefill rank runs ``get_finished`` (its ack counting: ``resolve_moriio_transfer_ack``
   where present) and the prefill scheduler's real ``update_connector_output`` runs once at the
   step and once past its deferred-send deadline (0.23.0 on), with the clock under the
   driver's control: a request is freed when every prefill worker reported it sent, or reaped
   by the timeout, or never.

WRITE mode (``read_mode`` false, vLLM's default) runs the other direction, vector by vector:
the decode scheduler's real ``update_state_after_alloc`` sends its block notices (to the
ports it computes: the prefill's, or 0.20.0-0.22.1 its own), the prefill scheduler's
``build_connector_meta`` puts the request in ``reqs_to_save``, each prefill rank runs
``start_load_kv``, the forward's ``save_kv_layer`` (its handshake with the decode ranks it
dials, then its write task) and ``wait_for_save``, then its write worker thread
(``MoRIIOWriter._write_worker_loop``, run until it would wait for work); each decode rank
reports what it received (``get_finished``); the prefill ranks report what they sent, then
again after the clock passes the deferred-write timeout (0.23.0 on, tasks whose block notice
never came expire and are marked done). Each write records the decode (DP, TP) rank whose
memory it targets and the KV heads its byte ranges cover on both sides.

Pipeline layouts build every stage's workers (no MoRIIO release reads the pipeline rank:
stages bind the same ports, recorded as the engine-start hang). Hybrid vectors give the
KV-cache config a second group, a Mamba-2 layer or a sliding-window layer: a release whose
MoRIIOConnector is no ``SupportsHMA`` has vLLM turn the hybrid KV-cache manager off, so
sliding windows are unified to full attention (the dense flow runs) and Mamba specs meet the
release's own ``unify_hybrid_kv_cache_specs`` refusal (its text read from
``vllm/v1/core/kv_cache_utils.py``: raised there, or from 0.27.0 in the
``_promote_local_kv_cache_specs`` it calls); a release with it builds both sides' workers,
then their schedulers (vLLM's engine start registers the workers' caches before the engine
core builds its scheduler) with the groups and records what they raise. A Mamba group goes
to a worker's real ``register_kv_caches`` where the worker has Mamba code (0.31.0 on), in
vLLM's default environment (the release's own ``is_conv_state_dim_first``, read from
``vllm/model_executor/layers/mamba/mamba_utils.py``): its refusal is the engine-start
verdict; a release whose registration passes stops the driver (its Mamba state transfer is
not driven; 0.30.0's worker has no Mamba code, and its registration of vLLM's Mamba view is not
driven: the scheduler's refusal is recorded). A sliding-window group that starts (READ, 0.30.0
on) is driven like a dense vector, each rank holding a full and a sliding-window layer whose
blocks are their own group's list (``local_block_ids[group]``): the reads of both layers, the
releases, acks and frees are recorded. Every sliding-window READ vector also records which
blocks of each group the transfer moves, as the two schedulers decide it
(:func:`scheduler_windows`: a request longer than the window through the prefill's
``request_finished`` and the decode's ``update_state_after_alloc`` and
``build_connector_meta``).

Backends: the grid runs MoRI's ``xgmi`` backend beside ``rdma`` where it could matter
(:func:`xgmi_vector`); :func:`check_backend_readers` proves per release, from the code, that
nothing else reads it (a new reader stops the driver).

Names the driver chooses as vLLM's deployment does: request ids ``cmpl-…`` (vLLM's OpenAI
server), transfer ids ``<TRANSFER_PREFIX>-…`` (the MoRIIO proxy; ``tx`` from 0.18.0). A
message handler that raises inside a listener thread ends that listener (vLLM's
``_async_wait`` re-raises and exits): later messages to its port are lost. A
``NameError``/``AttributeError``/``TypeError`` from vLLM's code means a stand-in is missing
something and stops the run (``HarnessError``) instead of becoming golden data.

Recorded per vector: the verdict (``ok`` or the exception class and message that reaches the
user, and the stage: ``handshake`` / ``first_transfer``), per decode rank and request the
prefill (DP, TP) rank whose memory it read and the ranks it notified, per prefill rank the
acks expected vs received, and per request whether its prefill blocks were freed by acks, by
the deferred-send timeout, or never.

Output: ``tests/data/golden/flow-moriio-<digest>.json.gz`` (one file per run of releases with
identical outcomes), the ``flow-moriio`` part of ``tests/data/golden/index.json`` and, as
provenance, ``flow-moriio-wheel-sha256`` (each release's wheel: the file's hash, or for an
unpacked ``--source`` tree the one pip resolves for ``vllm==X``).
"""

from __future__ import annotations
import __future__ as _future

import argparse
import ast
import builtins
import collections
import concurrent.futures
import contextlib
import enum
import hashlib
import importlib
import json
import queue as _queue
import re
import sys
import tempfile
import threading as _threading
import types
import typing
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_golden import RELEASES, fetch, write_flow_data

MORIIO = "vllm/distributed/kv_transfer/kv_connector/v1/moriio/"
MODULES = (
    "moriio_common",
    "moriio_layout",
    "moriio_tp_mapping",
    "moriio_heartbeat",
    "moriio_engine",
    "moriio_connector",
)
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "golden"
_FLAGS = _future.annotations.compiler_flag

# The grid. Every P, D in 1..64 (FULL_TP) that loads the model (a TP size loads it only where
# one of TP and the KV heads divides the other: for 5 KV heads 1, 5, 10, ..., 60; for 96 the
# divisors of 96) for the KV-head counts of FULL_HEADS, odd and prime counts among them;
# TP_SIZES (powers of two and the non-divisors 3, 6, 12, 24, 48) for 1 and 2 KV heads and
# MLA, which load at every size: measured on this project's shared 2-core machine, a vector
# costs ~0.015-0.025 CPU-s (a 64x64 vector builds 128 workers by their own __init__), so each
# such count's 4,096 pairs (MLA's too) would add ~1.5 CPU-minutes to each of the ~25 distinct
# releases' runs. Attention heads are not varied: no MoRIIO module of any release reads the
# attention head count (the driver's model config has no such field: a read would stop the
# driver with an AttributeError), so H and 3H give the same flow (the golden test checks
# pdtp at both).
TP_SIZES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
KV_HEADS = [1, 2]
FULL_TP = list(range(1, 65))
FULL_HEADS = [3, 4, 5, 7, 8, 10, 12, 16, 64, 96, 128]
MLA_HEADS = [1, 8, 128]
# Data-parallel layouts (prefill DP, decode DP), run at the TP sizes below.
DP_LAYOUTS = [(1, 1), (2, 1), (4, 1), (1, 2), (2, 2)]
DP_TP = [1, 2, 4, 8]
DP_HEADS = [1, 8]
BACKENDS = ("rdma", "xgmi")
PP_LAYOUTS = [(2, 1), (1, 2), (2, 2), (4, 1)]
PP_TP = [(1, 1), (2, 2), (4, 4), (2, 4), (8, 8), (16, 16), (32, 64), (64, 64)]
HYBRID_TP = [(1, 1), (2, 2), (4, 4), (2, 1), (1, 2), (8, 8)]
BLOCK_SIZE = 16


DEBUG = bool(__import__("os").environ.get("FLOW_DEBUG"))


class HarnessError(Exception):
    """The stand-ins lack something the release's code reads: fix the driver."""


class Hang(BaseException):
    """A blocking call that never returns in vLLM (a recv on a port nobody bound)."""


# ---------------------------------------------------------------- stand-ins


class _Clock:
    """time.monotonic/perf_counter/time under the driver's control; sleep never waits."""

    now = 1000.0

    def monotonic(self) -> float:
        return self.now

    perf_counter = time = monotonic

    def sleep(self, s: float) -> None:
        # A loop that polls with sleep would spin: vLLM's own deadlines bound it.
        self.now += max(s, 0.001)


CLOCK = _Clock()
time_mod = types.SimpleNamespace(
    monotonic=CLOCK.monotonic,
    perf_counter=CLOCK.monotonic,
    time=CLOCK.monotonic,
    sleep=CLOCK.sleep,
    time_ns=lambda: int(CLOCK.now * 1e9),
)


class _Thread:
    """Threads are never started: the driver calls what they would run."""

    def __init__(self, *a: Any, target: Any = None, **k: Any):
        self.target = target

    def start(self) -> None:
        pass

    def join(self, *a: Any) -> None:
        pass

    def is_alive(self) -> bool:
        return False


threading_mod = types.SimpleNamespace(
    Thread=_Thread,
    Lock=_threading.Lock,
    RLock=_threading.RLock,
    Event=_threading.Event,
    Condition=_threading.Condition,
    current_thread=_threading.current_thread,
)


class _InlineExecutor:
    """ThreadPoolExecutor running each task at submit (MoRIIO uses one worker: same order).
    A task's exception stays in its future, as in a thread."""

    def __init__(self, *a: Any, **k: Any):
        pass

    def submit(self, fn: Any, *a: Any, **k: Any) -> Future[Any]:
        f: Future[Any] = Future()
        try:
            f.set_result(fn(*a, **k))
        except Exception as e:
            f.set_exception(e)
        return f

    def shutdown(self, *a: Any, **k: Any) -> None:
        pass


class _LoopExit(BaseException):
    """A worker thread's loop has nothing left to do (the driver runs it, then stops it)."""


class _FlowQueue(_queue.Queue):  # type: ignore[type-arg]
    """queue.Queue where a blocking get on an empty queue ends the loop calling it: the
    driver runs a thread's loop (MoRIIO's write worker) until it would wait for work."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block and self.empty():
            raise _LoopExit
        return super().get(block=False)


queue_mod = types.SimpleNamespace(Queue=_FlowQueue, Empty=_queue.Empty, Full=_queue.Full)


futures_mod = types.SimpleNamespace(
    Future=Future, ThreadPoolExecutor=_InlineExecutor, as_completed=lambda fs: list(fs)
)


class _NullLogger:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None

    def exception(self, *a: Any, **k: Any) -> None:
        # vLLM logs and swallows what a worker thread raises: one a stand-in caused must not
        # pass for vLLM's behaviour.
        e = sys.exc_info()[1]
        if isinstance(e, (HarnessError, NameError, AttributeError, TypeError)):
            raise HarnessError(f"logged {type(e).__name__}: {e}") from e


class _Loud:
    """An imported name the driver does not provide: any use is a HarnessError."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Loud(f"{self._name}.{attr}")

    def __call__(self, *a: Any, **k: Any) -> Any:
        raise HarnessError(f"called {self._name}")

    def __mro_entries__(self, bases: Any) -> tuple[type, ...]:
        return (object,)


class _Struct:
    """msgspec.Struct: positional then keyword fields, class attributes as defaults."""

    def __init_subclass__(cls, **kw: Any) -> None:
        pass

    def __init__(self, *args: Any, **kw: Any):
        names = [n for c in reversed(type(self).__mro__) for n in getattr(c, "__annotations__", {})]
        names = list(dict.fromkeys(names))
        for n, v in zip(names, args, strict=False):
            setattr(self, n, v)
        for n, v in kw.items():
            setattr(self, n, v)


class _Codec:
    def __init__(self, *a: Any, **k: Any):
        pass

    def decode(self, data: Any) -> Any:
        return data

    def encode(self, data: Any) -> Any:
        return data


msgspec_mod = types.SimpleNamespace(
    Struct=_Struct,
    msgpack=types.SimpleNamespace(
        Decoder=_Codec, Encoder=_Codec, encode=lambda d: d, decode=lambda d, **k: d
    ),
    DecodeError=ValueError,
    ValidationError=ValueError,
    field=lambda default=None, **k: default,
)


class _Tensor:
    def __init__(self, v: Any = 0, *a: Any, **k: Any):
        self.v = v

    def item(self) -> Any:
        return self.v[0] if isinstance(self.v, list) else self.v


class _Dist:
    """torch.distributed: the TP group's all_reduce(MIN) of one vote, over the group's votes
    (the driver runs the decode ranks' eager handshakes and sets each group's result)."""

    class ReduceOp:
        MIN = "min"
        MAX = "max"
        SUM = "sum"

    votes: typing.ClassVar[dict[int, list[int]]] = {}

    def all_reduce(self, t: _Tensor, group: Any = None, op: Any = None) -> None:
        key = group.key if group is not None else 0
        seen = DRIVER.votes_seen
        seen[key] = min(seen.get(key, 1), t.item())
        if op == "min":
            t.v = [min(DRIVER.group_vote(key), t.item())]

    def get_rank(self, *a: Any) -> int:
        return 0

    def is_initialized(self) -> bool:
        return True


DIST = _Dist()


class _Torch(types.SimpleNamespace):
    pass


torch_mod = _Torch(
    Tensor=_Tensor,
    dtype=type("dtype", (), {}),
    Stream=object,
    Event=object,
    device_type=object,
    tensor=lambda v, **k: _Tensor(v),
    int32="int32",
    int64="int64",
    float16="float16",
    bfloat16="bfloat16",
    uint8="uint8",
    Size=tuple,
    distributed=DIST,
    cuda=types.SimpleNamespace(
        current_stream=lambda *a: None,
        Event=lambda *a, **k: types.SimpleNamespace(
            record=lambda *a: None, synchronize=lambda: None
        ),
        synchronize=lambda *a: None,
        current_device=lambda: 0,
    ),
    device=lambda *a, **k: "cpu",
)


class _Status:
    """A MoRI transfer status that has completed."""

    def Succeeded(self) -> bool:
        return True

    def Failed(self) -> bool:
        return False

    def InProgress(self) -> bool:
        return False

    def Wait(self) -> None:
        pass

    def Code(self) -> int:
        return 0

    def Message(self) -> str:
        return ""


class _Engine:
    """MoRI's IOEngine: records the remote memory each read targets."""

    def __init__(self, key: Any = None, config: Any = None):
        self.key = key

    def create_backend(self, *a: Any) -> None:
        pass

    def get_engine_desc(self) -> Any:
        return types.SimpleNamespace(pack=lambda: self.key, key=self.key)

    def register_remote_engine(self, desc: Any) -> None:
        pass

    def create_session(self, local: Any, remote: Any) -> Any:
        return _Session(remote)

    def allocate_transfer_uid(self) -> int:
        return 0

    def read(self, *a: Any, **k: Any) -> _Status:
        return _Status()

    def batch_read(self, *a: Any, **k: Any) -> _Status:
        return _Status()


class _Session:
    """A MoRI session to one remote memory region: records every read of it."""

    def __init__(self, remote: Any):
        self.remote = remote

    def batch_read(self, *a: Any, **k: Any) -> _Status:
        DRIVER.log_read(self.remote.key)
        return _Status()

    read = batch_read

    def batch_write(self, local: Any, remote: Any, sizes: Any, *a: Any, **k: Any) -> _Status:
        DRIVER.log_write(self.remote.key, local, remote, sizes)
        return _Status()

    def write(self, local: Any, remote: Any, size: Any, *a: Any, **k: Any) -> _Status:
        return self.batch_write([local], [remote], [size])


class _Desc:
    @staticmethod
    def unpack(packed: Any) -> Any:
        return types.SimpleNamespace(key=packed, packed=packed)


class _Backend(enum.Enum):
    RDMA = "rdma"
    XGMI = "xgmi"


mori_io_mod = types.SimpleNamespace(
    BackendType=_Backend,
    IOEngine=_Engine,
    IOEngineConfig=lambda *a, **k: None,
    EngineDesc=_Desc,
    MemoryDesc=_Desc,
    PollCqMode=types.SimpleNamespace(POLLING=0, EVENT=1),
    RdmaBackendConfig=lambda *a, **k: None,
    XgmiBackendConfig=lambda *a, **k: None,
    StatusCode=types.SimpleNamespace(SUCCESS=0, ERR_SQ_FULL=-1),
)


class _Socket:
    """A ZMQ socket on the driver's network."""

    def __init__(self, path: str, kind: Any):
        self.path = path
        self.port = int(path.rsplit(":", 1)[1])
        self.kind = kind
        self.frames: list[list[Any]] | None = None

    def setsockopt(self, *a: Any) -> None:
        pass

    def send(self, msg: Any, *a: Any, **k: Any) -> None:
        if msg == DRIVER.get_meta_msg:
            self.frames = DRIVER.handshake_frames(self.port)
            return
        DRIVER.deliver(self.port, msg)

    def send_multipart(self, parts: Any, *a: Any, **k: Any) -> None:
        self.send(parts[-1])

    def recv_multipart(self, *a: Any, **k: Any) -> list[Any]:
        if not self.frames:
            raise Hang(f"recv on port {self.port}: no rank bound it")
        return self.frames.pop(0)

    def recv(self, *a: Any, **k: Any) -> Any:
        return self.recv_multipart()[-1]

    def poll(self, *a: Any, **k: Any) -> int:
        return 1 if self.frames else 0

    def close(self, *a: Any, **k: Any) -> None:
        pass


class _Context:
    def __init__(self, *a: Any, **k: Any):
        pass

    @classmethod
    def instance(cls) -> _Context:
        return cls()

    def socket(self, *a: Any) -> Any:
        raise HarnessError("zmq.Context.socket")

    def destroy(self, *a: Any, **k: Any) -> None:
        pass

    def term(self) -> None:
        pass


zmq_mod = types.SimpleNamespace(
    Context=_Context,
    Socket=_Socket,
    ROUTER=1,
    DEALER=2,
    REQ=3,
    REP=4,
    PUSH=5,
    PULL=6,
    RCVTIMEO=10,
    SNDTIMEO=11,
    LINGER=12,
    IDENTITY=13,
    POLLIN=1,
    NOBLOCK=1,
    Again=type("Again", (Exception,), {}),
    ZMQError=type("ZMQError", (Exception,), {}),
    error=types.SimpleNamespace(Again=Exception, ZMQError=Exception),
)


def _make_zmq_socket(ctx: Any = None, path: str = "", socket_type: Any = None, **k: Any) -> Any:
    return _Socket(path, socket_type)


class _RequestStatus(enum.Enum):
    WAITING = 1
    RUNNING = 2
    FINISHED_STOPPED = 3
    FINISHED_LENGTH_CAPPED = 4
    FINISHED_ABORTED = 5
    WAITING_FOR_REMOTE_KVS = 6
    PREEMPTED = 7


class _KVConnectorBase:
    def __init__(self, *a: Any, **k: Any):
        pass


class _KVConnectorMetadata:
    pass


class _Role(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


def _ctx(fn: Any) -> Any:
    return contextlib.contextmanager(fn)


# Stand-ins by imported name (module-independent: vLLM moves helpers between modules).
NAMES: dict[str, Any] = {
    "init_logger": lambda *a: _NullLogger(),
    "cdiv": lambda a, b: -(-a // b),
    "KVConnectorBase_V1": _KVConnectorBase,
    "KVConnectorMetadata": _KVConnectorMetadata,
    "KVConnectorRole": _Role,
    "RequestStatus": _RequestStatus,
    "make_zmq_socket": _make_zmq_socket,
    "make_zmq_path": lambda scheme, host, port=None: f"{scheme}://{host}:{port}",
    "get_ip": lambda: "10.0.0.1",
    "get_open_port": lambda: 40000,
    "get_tensor_model_parallel_world_size": lambda: DRIVER.current.tp,
    "get_tensor_model_parallel_rank": lambda: DRIVER.current.tp_rank,
    "get_tp_group": lambda: DRIVER.current.tp_group,
    "get_world_group": lambda: types.SimpleNamespace(rank=0, local_rank=0, world_size=1),
    "get_attn_backend": lambda *a, **k: types.SimpleNamespace(get_name=lambda: "ROCM_ATTN"),
    # The forward runs eagerly (no full CUDA graph): per-layer waits cover attention reads.
    "get_forward_context": lambda: types.SimpleNamespace(cudagraph_runtime_mode=None),
    "CUDAGraphMode": enum.Enum("CUDAGraphMode", "NONE PIECEWISE FULL FULL_AND_PIECEWISE"),
    "current_platform": types.SimpleNamespace(
        is_rocm=lambda: True, device_type="cuda", set_device=lambda *a: None
    ),
}
MODULE_STUBS: dict[str, Any] = {
    "time": time_mod,
    "threading": threading_mod,
    "concurrent.futures": futures_mod,
    "queue": queue_mod,
    "msgspec": msgspec_mod,
    "msgpack": msgpack,
    "torch": torch_mod,
    "torch.distributed": DIST,
    "zmq": zmq_mod,
    "mori.io": mori_io_mod,
    "mori": types.SimpleNamespace(io=mori_io_mod),
    "regex": re,
}


def stub_import(module: str, name: str | None) -> Any:
    """What ``from module import name`` (or ``import module``) binds in the driver."""
    if module in MODULE_STUBS:
        mod = MODULE_STUBS[module]
        if name is None:
            return mod
        if hasattr(mod, name):
            return getattr(mod, name)
        return _Loud(f"{module}.{name}")
    if name is not None and name in NAMES:
        return NAMES[name]
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top == "numpy":
        mod = importlib.import_module(module)
        return mod if name is None else getattr(mod, name)
    if module.startswith("vllm.distributed.kv_transfer.kv_connector.v1.moriio."):
        # A sibling module: run already (MODULES order), names in the shared namespace.
        return _Sibling(name)
    return _Loud(f"{module}.{name}" if name else module)


class _Sibling:
    def __init__(self, name: str | None):
        self.name = name


class _Imports(ast.NodeTransformer):
    """Every import becomes assignments from :func:`stub_import`."""

    def _assign(self, target: str, module: str, name: str | None) -> ast.stmt:
        call = f"__stub__({module!r}, {name!r}, {target!r})"
        return ast.parse(f"{target} = {call}").body[0]

    def visit_Import(self, node: ast.Import) -> Any:
        out = []
        for a in node.names:
            if a.asname:
                out.append(self._assign(a.asname, a.name, None))
            else:
                top = a.name.split(".")[0]
                out.append(self._assign(top, top, None))
        return out

    def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
        if node.module == "__future__":
            return None
        module = ("." * node.level) + (node.module or "")
        if node.level:
            module = "vllm.distributed.kv_transfer.kv_connector.v1.moriio." + (node.module or "")
        return [self._assign(a.asname or a.name, module, a.name) for a in node.names] or None


def run_modules(files: dict[str, str]) -> dict[str, Any]:
    """Run the release's MoRIIO modules in one namespace, imports replaced."""
    ns: dict[str, Any] = {"__builtins__": builtins, "__name__": "vllm_moriio_flow"}
    sys.modules.setdefault("vllm_moriio_flow", types.ModuleType("vllm_moriio_flow"))

    def __stub__(module: str, name: str | None, target: str) -> Any:
        got = stub_import(module, name)
        if isinstance(got, _Sibling):
            if got.name in ns:
                return ns[got.name]
            return _Loud(f"{module}.{name}")
        if name == "TYPE_CHECKING":
            return False
        return got

    ns["__stub__"] = __stub__
    for mod in MODULES:
        src = files.get(MORIIO + mod + ".py")
        if src is None:
            continue
        tree = _Imports().visit(ast.parse(src))
        ast.fix_missing_locations(tree)
        exec(compile(tree, f"<vllm {mod}>", "exec", _FLAGS), ns)
    return ns


# ---------------------------------------------------------------- the simulated deployment


class Rank:
    """Who the code now running is (what the parallel-state getters return)."""

    def __init__(self, role: str, tp: int, tp_rank: int, dp: int, dp_rank: int):
        self.role, self.tp, self.tp_rank, self.dp, self.dp_rank = role, tp, tp_rank, dp, dp_rank
        self.tp_group = types.SimpleNamespace(
            cpu_group=types.SimpleNamespace(key=(role, dp_rank)),
            world_size=tp,
            rank_in_group=tp_rank,
        )


class _Config(types.SimpleNamespace):
    pass


LAYER = "model.layers.0.self_attn.attn"
LAYER_2 = "model.layers.1.mixer"  # a hybrid vector's second layer (Mamba or sliding window)
HANDSHAKE_PORT = {"prefill": 6301, "decode": 7301}
NOTIFY_PORT = {"prefill": 61005, "decode": 71005}


class Driver:
    """One vector: the prefill and decode workers of one release, on a simulated network."""

    def __init__(self, ns: dict[str, Any]):
        self.ns = ns
        self.current = Rank("prefill", 1, 0, 1, 0)
        consts = ns["MoRIIOConstants"]
        self.get_meta_msg = consts.GET_META_MSG
        self.votes: dict[Any, int] = {}
        self.workers: dict[tuple[str, int, int], Any] = {}
        self.votes_seen: dict[Any, int] = {}
        self.sent: list[Any] = []
        self.lost: list[int] = []
        self.dead: dict[int, list[Any]] = {}
        self.received: dict[tuple[str, int, int], list[Any]] = collections.defaultdict(list)
        self.dialled: list[Any] = []
        self.hybrid = ""
        self._ports: dict[tuple[str, int], dict[int, list[Any]]] = {}

    def log_read(self, key: Any) -> None:
        w = self.current_worker
        w.moriio_wrapper.__dict__.setdefault("_flow_reads", []).append(list(key)[1:])

    def log_write(self, key: Any, local: Any, remote: Any, sizes: Any) -> None:
        """A WRITE: the decode (DP, TP) rank whose memory it targets, and the KV heads of
        the source rank and of the target rank its byte ranges cover."""
        w = self.current_worker
        dp, tp = list(key)[1:]
        target = self.workers[("decode", dp, tp)]
        item = [dp, tp, heads_covered(w, local, sizes), heads_covered(target, remote, sizes)]
        w.moriio_wrapper.__dict__.setdefault("_flow_writes", []).append(item)

    # -- network
    def handshake_frames(self, port: int) -> list[list[Any]] | None:
        w = self.bound("side_channel_port", port)
        if w is not None:
            self.dialled.append([w.dp_rank, w.tp_rank])
        if w is None:
            return None
        return [[b"", self.agent_metadata(w)], [b"", msgpack.dumps(self.layer_meta(w))]]

    def bound(self, attr: str, port: int) -> Any:
        # The two sides' base ports differ (HANDSHAKE_PORT, NOTIFY_PORT) by more than any
        # rank offset: a port names one rank of one side, whichever side dials it.
        # Built once per vector and port kind, once every rank is built (a linear scan per
        # message was a tenth of the run): the ports a rank binds never change after __init__.
        key = (attr, len(self.workers))
        table = self._ports.get(key)
        if table is None:
            table = collections.defaultdict(list)
            for w in self.workers.values():
                table[self.port_of(w, attr)].append(w)
            self._ports[key] = table
        hits = table.get(port, [])
        if len(hits) > 1:
            raise PortCollision(f"{len(hits)} ranks bound port {port}")
        return hits[0] if hits else None

    @staticmethod
    def port_of(w: Any, attr: str) -> int:
        if attr == "notify":
            return int(w.moriio_wrapper.notify_port)
        return int(getattr(w, attr))

    def deliver(self, port: int, msg: Any) -> None:
        w = self.bound("notify", port)
        if w is None:
            self.lost.append(port)
            self.sent.append(None)
            return
        self.sent.append([w.dp_rank, w.tp_rank])
        if port in self.dead:
            return  # that rank's notify listener has died: nothing reads the port
        with self.as_rank(w):
            try:
                w.moriio_wrapper._handle_message(msg)
            except HarnessError:
                raise
            except Exception as e:
                # The notify listener thread (`async_wait_reqid`'s `_async_wait`) logs it,
                # re-raises it as HandshakeError and exits: later messages are never read.
                self.dead[port] = _error(e)[:2]
                return
        self.received[(w._flow_rank.role, w.dp_rank, w.tp_rank)].append(msg)

    def agent_metadata(self, w: Any) -> Any:
        cls = self.ns["MoRIIOAgentMetadata"]
        fields = {
            "engine_id": w.engine_id,
            "agent_metadata": ("engine", w.dp_rank, w.tp_rank),
            "kv_caches_base_addr": [0],
            "num_blocks": 64,
            "block_len": 1,
            "attn_backend_name": "ROCM_ATTN",
            "backend_name": "ROCM_ATTN",
            "tp_size": self.current.tp,
        }
        fields.update(getattr(w, "_flow_meta_extra", {}))
        m = cls.__new__(cls)
        m.__dict__.update(fields)
        return m

    def layer_meta(self, w: Any) -> dict[str, list[Any]]:
        layers = [LAYER, LAYER_2] if self.hybrid else [LAYER]
        return {name: [["mem", w.dp_rank, w.tp_rank]] for name in layers}

    # -- running as one rank
    @contextlib.contextmanager
    def as_rank(self, w: Any) -> Any:
        saved, saved_w = self.current, getattr(self, "current_worker", None)
        self.current = w._flow_rank
        self.current_worker = w
        setter = self.ns.get("set_role")
        if setter is not None:
            role = self.ns["ROLE"]
            setter(role.PRODUCER if w._flow_rank.role == "prefill" else role.CONSUMER)
        try:
            yield
        finally:
            self.current = saved
            self.current_worker = saved_w
            setter = self.ns.get("set_role")
            if setter is not None and saved_w is not None:
                role = self.ns["ROLE"]
                setter(role.PRODUCER if saved_w._flow_rank.role == "prefill" else role.CONSUMER)

    def group_vote(self, key: Any) -> int:
        return self.votes.get(key, 1)


class PortCollision(Exception):
    pass


DRIVER: Driver = None  # type: ignore[assignment]


class _Envs:
    """vllm.envs: the MoRIIO variables the driver sets, vLLM's defaults otherwise."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self.values:
            return self.values[name]
        if name.endswith(("_TIMEOUT", "_PORT")) or "TIMEOUT" in name:
            return 30
        if name.startswith("VLLM_MORIIO"):
            return None
        raise HarnessError(f"envs.{name}")


ENVS = _Envs()
MODULE_STUBS["vllm.envs"] = ENVS
MODULE_STUBS["vllm"] = types.SimpleNamespace(envs=ENVS)
NAMES["envs"] = ENVS


class _Spec:
    """A KV-cache spec (attention or MLA): the driver's layer_to_spec values."""

    block_size = BLOCK_SIZE
    sliding_window = None
    attention_chunk_size = None


# vLLM's KV-cache spec classes (vllm/v1/kv_cache_interface.py), as the hierarchy the
# connector's isinstance checks see: name -> base.
SPEC_BASES = {
    "KVCacheSpec": None,
    "AttentionSpec": "KVCacheSpec",
    "FullAttentionSpec": "AttentionSpec",
    "MLAAttentionSpec": "FullAttentionSpec",
    "SlidingWindowSpec": "AttentionSpec",
    "SlidingWindowMLASpec": "SlidingWindowSpec",
    "ChunkedLocalAttentionSpec": "AttentionSpec",
    "CrossAttentionSpec": "AttentionSpec",
    "MambaSpec": "KVCacheSpec",
    "UniformTypeKVCacheSpecs": "KVCacheSpec",
}


def _spec_classes(ns: dict[str, Any]) -> None:
    """The spec classes the modules imported: the driver's, in vLLM's hierarchy."""
    made: dict[str, type] = {}
    for name, base in SPEC_BASES.items():
        made[name] = type(name, (made[base] if base else _Spec,), {})
        if name not in ns or isinstance(ns.get(name), _Loud):
            ns[name] = made[name]
    if isinstance(ns.get("is_full_attention_spec"), _Loud):
        # vLLM's helper: a FullAttentionSpec, or a uniform wrapper of them (none here).
        ns["is_full_attention_spec"] = lambda spec: isinstance(spec, ns["FullAttentionSpec"])


KV_CACHE_UTILS = "vllm/v1/core/kv_cache_utils.py"
MAMBA_UTILS = "vllm/model_executor/layers/mamba/mamba_utils.py"
KV_CACHE_INTERFACE = "vllm/v1/kv_cache_interface.py"


def conv_layout_fn(src: str) -> Any:
    """The release's ``is_conv_state_dim_first`` (``vllm/model_executor/layers/mamba/
    mamba_utils.py``, with the ``get_conv_state_layout`` it calls), run against the driver's
    ``vllm.envs`` (``VLLM_SSM_CONV_STATE_LAYOUT``: vLLM's default ``None``, so the release's
    own default layout); ``None`` where the release has none."""
    if not src:
        return None
    wanted = {"get_conv_state_layout", "is_conv_state_dim_first"}
    body = [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    if {n.name for n in body} != wanted:
        return None
    tree = ast.Module(body=body, type_ignores=[])
    ns: dict[str, Any] = {
        "__builtins__": builtins,
        "envs": ENVS,
        "logger": _NullLogger(),
        # No cache: each vector reads the environment it sets.
        "functools": types.SimpleNamespace(lru_cache=lambda f: f),
    }
    exec(compile(tree, "<vllm mamba_utils>", "exec", _FLAGS), ns)
    return ns["is_conv_state_dim_first"]


def unify_error(src: str) -> str | None:
    """The ValueError text of the release's ``unify_hybrid_kv_cache_specs`` (what a hybrid
    model meets at engine start with the hybrid KV-cache manager off): raised in it
    (0.14.0-0.26.0) or in the module function it hands the specs to (0.27.0 on:
    ``_promote_local_kv_cache_specs``, which promotes only sliding-window and chunked-local
    specs, so attention beside Mamba stays two types and it raises, 0.27.0
    ``vllm/v1/core/kv_cache_utils.py:1529``)."""
    if not src:
        return None
    funcs = {n.name: n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)}
    seen: set[str] = set()

    def raised(name: str) -> str | None:
        if name in seen or name not in funcs:
            return None
        seen.add(name)
        for r in ast.walk(funcs[name]):
            if (
                isinstance(r, ast.Raise)
                and isinstance(r.exc, ast.Call)
                and ast.unparse(r.exc.func) == "ValueError"
                and r.exc.args
            ):
                return str(ast.literal_eval(r.exc.args[0]))
        for c in ast.walk(funcs[name]):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name):
                got = raised(c.func.id)
                if got is not None:
                    return got
        return None

    return raised("unify_hybrid_kv_cache_specs")


class Release:
    """One release's MoRIIO modules, run."""

    def __init__(self, version: str, files: dict[str, str]):
        self.version = version
        self.files = files
        self.ns = run_modules(files)
        _spec_classes(self.ns)
        layout = files.get(MORIIO + "moriio_layout.py", "")
        self.ns["_flow_standard_mla"] = "num_states" in layout
        connector = ast.parse(files.get(MORIIO + "moriio_connector.py", ""))
        self.hma = any(
            isinstance(n, ast.ClassDef)
            and n.name == "MoRIIOConnector"
            and any(ast.unparse(b).endswith("SupportsHMA") for b in n.bases)
            for n in connector.body
        )
        self.unify_error = unify_error(files.get(KV_CACHE_UTILS, ""))
        self.conv_dim_first = conv_layout_fn(files.get(MAMBA_UTILS, ""))
        check_backend_readers(version, files)
        # Block ids per KV-cache group (`BlockIds`, 0.30.0 on: `local_block_ids[group_idx]`).
        self.grouped_blocks = "BlockIds" in files.get(MORIIO + "moriio_connector.py", "")
        for name in ("MoRIIOConnectorWorker", "MoRIIOConnectorScheduler"):
            if name not in self.ns:
                raise SystemExit(f"{version}: no {name}")
        self.digest = hashlib.sha256(
            "\n".join(files.get(MORIIO + m + ".py", "") for m in MODULES).encode()
        ).hexdigest()[:16]

    def config(
        self,
        side: str,
        tp: int,
        dp: int,
        dp_rank: int,
        h: int,
        mla: bool,
        read: bool,
        backend: str,
        pp: int = 1,
        hma: bool = False,
    ) -> Any:
        extra = {
            "proxy_ip": "",
            "proxy_ping_port": 36367,
            "http_port": 8100 if side == "prefill" else 8200,
            "handshake_port": HANDSHAKE_PORT[side],
            "notify_port": NOTIFY_PORT[side],
            "backend": backend,
            "read_mode": "true" if read else "false",
            "host_ip": f"10.0.{0 if side == 'prefill' else 1}.1",
        }
        role = "kv_producer" if side == "prefill" else "kv_consumer"
        return _Config(
            kv_transfer_config=_Config(
                is_kv_producer=side == "prefill",
                is_kv_consumer=side == "decode",
                kv_role=role,
                kv_connector_extra_config=extra,
                engine_id=side,
                kv_connector="MoRIIOConnector",
            ),
            parallel_config=_Config(
                data_parallel_rank=dp_rank,
                data_parallel_rank_local=dp_rank,
                data_parallel_size=dp,
                data_parallel_size_local=dp,
                tensor_parallel_size=tp,
                pipeline_parallel_size=pp,
                enable_expert_parallel=False,
            ),
            cache_config=_Config(
                block_size=BLOCK_SIZE, cache_dtype="auto", mamba_cache_mode="none"
            ),
            num_lookahead_tokens=0,
            num_speculative_tokens=0,
            speculative_config=None,
            model_config=_Config(
                use_mla=mla,
                get_head_size=lambda: 576 if mla else 128,
                dtype="bfloat16",
                get_total_num_kv_heads=lambda: h,
                get_num_kv_heads=lambda pc=None: 1 if mla else max(1, h // tp),
                hf_text_config=_Config(),
            ),
            # vLLM turns the hybrid KV-cache manager off for a connector without SupportsHMA
            # (vllm/config/vllm.py); a hybrid vector of a release that has it keeps it on.
            scheduler_config=_Config(
                max_num_batched_tokens=8192, disable_hybrid_kv_cache_manager=not hma
            ),
        )


def flow_vector(
    rel: Release,
    read: bool,
    p: int,
    d: int,
    h: int,
    mla: bool,
    pdp: int = 1,
    ddp: int = 1,
    backend: str = "rdma",
    ppp: int = 1,
    dpp: int = 1,
    hybrid: str = "",
) -> dict[str, Any]:
    """One deployment's first requests, as the release's code runs them; the decode TP
    groups' handshake votes (0.27.0 on) are taken from a first run. ``ppp``/``dpp``: the
    sides' pipeline stages; ``hybrid``: ``mamba`` (attention and Mamba-2 layers) or
    ``sliding`` (full and sliding-window attention layers)."""
    if hybrid:
        started = hybrid_start(rel, read, p, d, h, mla, hybrid)
        # A sliding-window group that starts (READ, 0.30.0 on) is driven through the
        # transfer with both groups; the others stop at the start.
        if started is not None and not (started["verdict"] == ["started"] and hybrid == "sliding"):
            return started
    # A sliding-window READ vector: the blocks of each group its transfer moves, as the
    # schedulers decide them.
    windows = scheduler_windows(rel, p, d, h, mla) if hybrid == "sliding" and read else None
    extra: dict[str, Any] = {"ppp": ppp, "dpp": dpp}
    if hybrid and rel.hma:
        extra["hybrid"] = hybrid
    got = _flow(rel, read, p, d, h, mla, pdp, ddp, backend, {}, **extra)
    votes = got.pop("_votes", {})
    if any(v == 0 for v in votes.values()):
        got = _flow(rel, read, p, d, h, mla, pdp, ddp, backend, votes, **extra)
        got.pop("_votes", None)
    if windows is not None:
        got["windows"] = windows
    return got


def _error(e: BaseException) -> list[Any]:
    tb = e.__traceback__
    where = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith("<vllm"):
            where.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    kind = "hang" if isinstance(e, Hang) else type(e).__name__
    return [kind, "" if isinstance(e, Hang) else str(e), where]


def _flow(
    rel: Release,
    read: bool,
    p: int,
    d: int,
    h: int,
    mla: bool,
    pdp: int,
    ddp: int,
    backend: str,
    votes: dict[Any, int],
    ppp: int = 1,
    dpp: int = 1,
    hybrid: str = "",
) -> dict[str, Any]:
    """``hybrid``: ``sliding`` runs a second, sliding-window attention group beside the full
    one under the hybrid KV-cache manager (its blocks as their own group's list)."""
    global DRIVER
    ns = rel.ns
    ENVS.values = {"VLLM_MORIIO_CONNECTOR_READ_MODE": read}
    drv = DRIVER = Driver(ns)
    drv.hybrid = hybrid
    drv.votes = dict(votes)
    drv.lost = []
    drv.received = collections.defaultdict(list)
    DIST.votes = {}
    CLOCK.now = 1000.0
    Worker = ns["MoRIIOConnectorWorker"]
    # 1. every rank's worker, by its own __init__ (ports as the release binds them). A
    # pipeline stage's ranks have the TP ranks of the first stage's (vLLM's TP group is per
    # stage) on the side's one host.
    stages: list[Any] = []
    for side, tp, dp, pp in (("prefill", p, pdp, ppp), ("decode", d, ddp, dpp)):
        for k in range(dp):
            for stage in range(pp):
                for r in range(tp):
                    rank = Rank(side, tp, r, dp, k)
                    drv.current = rank
                    w = Worker.__new__(Worker)
                    w._flow_rank = rank
                    cfg = rel.config(side, tp, dp, k, h, mla, read, backend, pp, hma=bool(hybrid))
                    with drv.as_rank(w):
                        init_worker(Worker, w, cfg, side, ns, mla, hybrid)
                        attach_kv_state(w, tp, h, mla, ns, hybrid)
                    if stage == 0:
                        drv.workers[(side, k, r)] = w
                    else:
                        stages.append((side, w))
    # Each rank's handshake listener binds its side_channel_port before the engine starts
    # (register_kv_caches waits for it): a second rank on one port never gets its bind, and
    # the engine start waits forever. The notify ports use the same offsets.
    everyone = [(s, w) for (s, _, _), w in drv.workers.items()] + stages
    for side in ("prefill", "decode"):
        ports = collections.Counter(
            drv.port_of(w, "side_channel_port") for s, w in everyone if s == side
        )
        clash = sorted(port for port, n in ports.items() if n > 1)
        if clash:
            return {"verdict": ["engine_start", "hang", side, clash]}
    if stages:
        raise HarnessError("pipeline stages on distinct ports: the driver runs one stage")
    # 2. requests: for each prefill DP rank, two requests it prefilled (P where one decode rank
    # may rotate its source over the P prefill ranks), routed to the decode DP ranks in turn;
    # one new request per decode step.
    reqs = []
    # (WRITE has no per-request source: two requests per prefill DP rank.)
    n = max(p, 2) if d == 1 and read else 2
    for k in range(pdp):
        for _ in range(n):
            i = len(reqs)
            # vLLM's proxy names requests "cmpl-..."; 0.14-0.24 accept only such acks.
            consts = ns["MoRIIOConstants"]
            xp = getattr(consts, "TRANSFER_PREFIX", getattr(consts, "COMPLETION_PREFIX", ""))
            reqs.append({"id": f"cmpl-req-{i}", "xfer": f"{xp}-xfer-{i}", "pdp": k, "ddp": i % ddp})
    if not read:
        return _write_requests(rel, drv, reqs, p, d, h, mla, pdp, ddp, backend)
    meta_cls = ns["MoRIIOConnectorMetadata"]
    out: dict[str, Any] = {"verdict": ["ok"], "requests": []}
    for req in reqs:
        k, e = req["pdp"], req["ddp"]
        # The prefill side's step: its workers learn the transfer id (start_load_kv).
        for r in range(p):
            w = drv.workers[("prefill", k, r)]
            pm = meta_cls()
            _set_meta(pm, req, producer=True)
            with drv.as_rank(w):
                w.start_load_kv(pm)
        reads: list[Any] = []
        for r in range(d):
            w = drv.workers[("decode", e, r)]
            dm = meta_cls()
            _set_meta(dm, req, producer=False, rel=rel, p=p, pdp=pdp)
            before = len(w.moriio_wrapper.__dict__.get("_flow_reads", []))
            sent_before = len(drv.sent)
            with drv.as_rank(w):
                try:
                    w.start_load_kv(dm)
                    w.get_finished()
                except (Exception, Hang) as ex:
                    # vLLM raises no NameError/AttributeError/TypeError for a layout it
                    # runs: those mean the stand-ins lack something (fix the driver).
                    if isinstance(ex, (HarnessError, NameError, AttributeError, TypeError)):
                        raise HarnessError(f"{type(ex).__name__}: {ex}") from ex
                    if DEBUG:
                        raise
                    stage = _stage(_error(ex)[2])
                    out["verdict"] = [stage, *_error(ex)[:2], r]
                    out["_votes"] = dict(drv.votes_seen)
                    return out
            got = w.moriio_wrapper.__dict__.get("_flow_reads", [])[before:]
            reads.append(
                {
                    "read": sorted({tuple(x) for x in got}),
                    "notified": drv.sent[sent_before:],
                }
            )
        req["decode"] = reads
        # The prefill workers count the acks; the scheduler frees, reaps or keeps the blocks.
        done = []
        acks = []
        for r in range(p):
            w = drv.workers[("prefill", k, r)]
            with drv.as_rank(w):
                sending, _ = w.get_finished()
            done.append(req["id"] in sending)
            acks.append(len(drv.received.pop(("prefill", k, r), [])))
        req["acks"] = acks
        req["sent"] = done
        req["freed"] = "acks" if all(done) else _reaped(rel, req, p, pdp, h, mla, read, backend)
        out["requests"].append(req)
    out["_votes"] = dict(drv.votes_seen)
    out["lost"] = drv.lost
    out["listener_errors"] = sorted({tuple(e) for e in drv.dead.values()})
    return out


def hybrid_start(
    rel: Release, read: bool, p: int, d: int, h: int, mla: bool, hybrid: str
) -> dict[str, Any] | None:
    """A hybrid model's engine start. A release whose MoRIIOConnector lacks SupportsHMA has
    vLLM turn the hybrid KV-cache manager off (vllm/config/vllm.py): sliding-window layers are
    then unified to full attention (the connector sees a dense model: ``None``, run the dense
    flow) and Mamba layers fail vLLM's unification at engine start (the release's own
    ``unify_hybrid_kv_cache_specs`` text, vllm/v1/core/kv_cache_utils.py). A release with it
    builds both sides' workers (registering a Mamba group's caches where the worker has code
    for them), then their schedulers, with the hybrid KV-cache groups: what they raise, else
    ``started`` (:func:`flow_vector` drives a sliding-window group on from there)."""
    global DRIVER
    if not rel.hma:
        if hybrid == "sliding":
            return None
        if rel.unify_error is None:
            # No refusal found in the release's unification: what the Mamba groups meet
            # next is not modelled (never golden data).
            raise HarnessError(f"{rel.version}: no unify_hybrid_kv_cache_specs refusal")
        return {"verdict": ["engine_start", "ValueError", rel.unify_error, 0]}
    ns = rel.ns
    ENVS.values = {"VLLM_MORIIO_CONNECTOR_READ_MODE": read, "VLLM_SSM_CONV_STATE_LAYOUT": None}
    drv = DRIVER = Driver(ns)
    Worker = ns["MoRIIOConnectorWorker"]
    sched_cls = ns["MoRIIOConnectorScheduler"]
    # vLLM's engine start: each worker builds its connector and registers its KV caches
    # (vllm/v1/worker/gpu_worker.py `initialize_from_config`, run by the engine core's
    # `_initialize_kv_caches`) before the engine core builds its scheduler and with it the
    # connector's scheduler side (0.31.0 vllm/v1/engine/core.py:151, then :168).
    for side, tp in (("prefill", p), ("decode", d)):
        rank = Rank(side, tp, 0, 1, 0)
        w = Worker.__new__(Worker)
        w._flow_rank = rank
        cfg = rel.config(side, tp, 1, 0, h, mla, read, "rdma", 1, hma=True)
        kvc = kv_cache_config(ns, mla, hybrid)
        with drv.as_rank(w):
            try:
                params = Worker.__init__.__code__.co_varnames[
                    1 : Worker.__init__.__code__.co_argcount
                ]
                kwargs = {"vllm_config": cfg, "engine_id": side, "kv_cache_config": kvc}
                Worker.__init__(w, **{k: v for k, v in kwargs.items() if k in params})
            except Exception as ex:
                if isinstance(ex, (HarnessError, NameError, AttributeError, TypeError)):
                    raise HarnessError(f"{type(ex).__name__}: {ex}") from ex
                return {"verdict": ["engine_start", *_error(ex)[:2], 0]}
        if hybrid == "mamba" and hasattr(Worker, "_is_mamba_layer"):
            # A release whose worker registers Mamba layers (0.31.0 on) runs its real
            # register_kv_caches with the attention layer's cache and the Mamba layer's
            # state: what it raises reaches the user at the engine start. Past it, the Mamba
            # state transfer is not driven: a release whose registration passes stops the
            # driver. (0.30.0's worker has no Mamba code: its registration of vLLM's Mamba
            # view is not driven, and the scheduler's refusal below is recorded.)
            started = register_hybrid_caches(rel, w, mla)
            if started is not None:
                return started
        elif hybrid == "mamba":
            # 0.30.0: the worker has no Mamba code, but vLLM hands its register_kv_caches
            # every layer's view, the Mamba layer's too, before the scheduler is built
            # (0.30.0 vllm/v1/engine/core.py:145 `_initialize_kv_caches`, then :162): what
            # that registration raises is what reaches the user.
            started = register_layer_views(rel, w, mla, tp, h)
            if started is not None:
                return started
    for side, tp in (("prefill", p), ("decode", d)):
        rank = Rank(side, tp, 0, 1, 0)
        w = Worker.__new__(Worker)
        w._flow_rank = rank
        cfg = rel.config(side, tp, 1, 0, h, mla, read, "rdma", 1, hma=True)
        with drv.as_rank(w):
            try:
                sched_cls(cfg, side, kv_cache_config(ns, mla, hybrid))
            except Exception as ex:
                if isinstance(ex, (HarnessError, NameError, AttributeError, TypeError)):
                    raise HarnessError(f"{type(ex).__name__}: {ex}") from ex
                return {"verdict": ["engine_start", *_error(ex)[:2], 0]}
    return {"verdict": ["started"]}


def register_hybrid_caches(rel: Release, w: Any, mla: bool) -> dict[str, Any] | None:
    """The worker's own ``register_kv_caches`` on a Mamba vector (vLLM's default
    environment): its refusal as the engine-start verdict."""
    conv = rel.conv_dim_first
    NAMES["is_conv_state_dim_first"] = conv if conv is not None else _Loud("mamba_utils")
    shape = (NUM_BLOCKS, BLOCK_SIZE, 576) if mla else (2, NUM_BLOCKS, BLOCK_SIZE, 1, 128)
    caches = {LAYER: _KVTensor(shape), LAYER_2: _KVTensor((NUM_BLOCKS, 3 * 1024 + 8 * 64 * 64))}
    with DRIVER.as_rank(w):
        try:
            w.register_kv_caches(caches)
        except Exception as ex:
            if isinstance(ex, (HarnessError, NameError, AttributeError, TypeError)):
                raise HarnessError(f"{type(ex).__name__}: {ex}") from ex
            return {"verdict": ["engine_start", *_error(ex)[:2], 0]}
    raise HarnessError(f"{rel.version}: a Mamba group registers; its transfer is not driven")


# The Mamba-2 layer of a hybrid vector: conv state (3, 1024) and SSM state (8, 64, 64), 2-byte
# elements (kv_cache_config's MambaSpec).
MAMBA_STATE_BYTES = (3 * 1024 + 8 * 64 * 64) * 2


def register_layer_views(rel: Release, w: Any, mla: bool, tp: int, h: int) -> dict[str, Any] | None:
    """A release whose worker has no Mamba code (0.30.0): its real ``register_kv_caches`` with
    the per-layer views vLLM's allocator gives it (0.30.0 ``vllm/v1/worker/utils.py:389``
    ``allocate_kv_cache``: every spec with layer views, MambaSpec among them, is viewed as
    ``[B, H, N, C]``, ``vllm/v1/kv_cache_interface.py:289`` and ``:347``): the attention layer
    as ``(blocks, KV heads, block_size, K+V head bytes / 2)`` in its dtype, the Mamba layer as
    ``(blocks, num_heads 1, 1 state, state bytes)`` of the int8 backing (MambaSpec has no
    ``dtype``). Its refusal is the engine-start verdict; a registration that passes leaves
    the scheduler's ``__init__`` to decide (``None``)."""
    src = rel.files.get(KV_CACHE_INTERFACE, "")
    if (
        "def create_kv_cache_views" not in src
        or "def compute_layer_kv_cache_shape_bytes" not in src
    ):
        raise HarnessError(f"{rel.version}: no [B, H, N, C] layer views to register")
    heads = 1 if mla else max(1, h // tp)
    attn = w.layer_to_spec[LAYER]
    attn.block_size, attn.num_states = BLOCK_SIZE, BLOCK_SIZE
    attn.num_heads, attn.num_kv_heads = heads, heads
    attn.head_size = 576 if mla else 128
    attn.state_content_size_bytes = (576 if mla else 256) * 2
    shape = (NUM_BLOCKS, heads, BLOCK_SIZE, 576 if mla else 256)
    caches = {
        LAYER: _KVTensor(shape),
        LAYER_2: _KVTensor((NUM_BLOCKS, 1, 1, MAMBA_STATE_BYTES), element_size=1),
    }
    with DRIVER.as_rank(w):
        try:
            w.register_kv_caches(caches)
        except Exception as ex:
            if isinstance(ex, (HarnessError, NameError, AttributeError, TypeError)):
                raise HarnessError(f"{type(ex).__name__}: {ex}") from ex
            return {"verdict": ["engine_start", *_error(ex)[:2], 0]}
    return None


def make_scheduler(
    rel: Release, side: str, tp: int, dp: int, k: int, h: int, mla: bool, read: bool, backend: str
) -> Any:
    """The release's MoRIIOConnectorScheduler of one side's DP rank ``k``."""
    sched_cls = rel.ns["MoRIIOConnectorScheduler"]
    cfg = rel.config(side, tp, dp, k, h, mla, read, backend)
    code = sched_cls.__init__.__code__
    if "kv_cache_config" in code.co_varnames[: code.co_argcount]:
        return sched_cls(cfg, side, kv_cache_config(rel.ns, mla))
    return sched_cls(cfg, side)


def _request(rid: str, params: dict[str, Any]) -> Any:
    """A vLLM Request as the connector's scheduler reads it: one block of prompt."""
    return _Config(
        request_id=rid,
        status=_RequestStatus.WAITING,
        kv_transfer_params=params,
        num_computed_tokens=0,
        num_tokens=BLOCK_SIZE,
        num_prompt_tokens=BLOCK_SIZE,
        prompt_token_ids=[0] * BLOCK_SIZE,
        sampling_params=_Config(extra_args={"kv_transfer_params": params}),
        is_finished=lambda: False,
    )


def _scheduler_output(rid: str) -> Any:
    """The step scheduling request ``rid``'s whole prompt (one chunk, no cached requests)."""
    return _Config(
        scheduled_new_reqs=[],
        scheduled_cached_reqs=_Config(req_ids=[], new_block_ids=[]),
        num_scheduled_tokens={rid: BLOCK_SIZE},
        finished_req_ids=set(),
    )


class _Blocks:
    """KVCacheBlocks: one block per KV-cache group (``groups``: the block ids per group)."""

    def __init__(self, grouped: bool, groups: Any = None):
        self.grouped = grouped
        self.groups = groups

    def get_block_ids(self, *a: Any, **k: Any) -> Any:
        if self.groups is not None:
            return tuple(list(g) for g in self.groups)
        return ([1],)


# A sliding-window vector's request for the schedulers' block windows: WINDOW_BLOCKS blocks
# in every KV-cache group (more than the window's SLIDING_WINDOW // BLOCK_SIZE = 256).
WINDOW_BLOCKS = 300


def scheduler_windows(rel: Release, p: int, d: int, h: int, mla: bool) -> list[list[Any]]:
    """Which blocks of each KV-cache group a READ transfer moves, as the two schedulers
    decide it: the prefill scheduler's real ``request_finished`` on a request of
    WINDOW_BLOCKS blocks per group (the ``remote_block_ids`` it hands the decode), then the
    decode scheduler's ``get_num_new_matched_tokens``, ``update_state_after_alloc`` (its
    own freshly allocated WINDOW_BLOCKS blocks per group) and ``build_connector_meta``: the
    request's ``ReqMeta`` as the decode worker gets it. Per group: [local blocks, remote
    blocks, the local ones are the allocation's last, the remote ones the prefill's last].
    A release without the hybrid KV-cache manager for MoRIIO sees one (unified) group."""
    global DRIVER
    ns = rel.ns
    ENVS.values = {"VLLM_MORIIO_CONNECTOR_READ_MODE": True, "VLLM_SSM_CONV_STATE_LAYOUT": None}
    drv = DRIVER = Driver(ns)
    hybrid = "sliding" if rel.hma else ""
    drv.hybrid = hybrid
    n_groups = 2 if hybrid else 1
    sched_cls = ns["MoRIIOConnectorScheduler"]
    Worker = ns["MoRIIOConnectorWorker"]

    def scheduler(side: str, tp: int) -> Any:
        rank = Rank(side, tp, 0, 1, 0)
        w = Worker.__new__(Worker)
        w._flow_rank = rank
        drv.current = rank
        cfg = rel.config(side, tp, 1, 0, h, mla, True, "rdma", 1, hma=bool(hybrid))
        code = sched_cls.__init__.__code__
        with drv.as_rank(w):
            if "kv_cache_config" in code.co_varnames[: code.co_argcount]:
                return w, sched_cls(cfg, side, kv_cache_config(ns, mla, hybrid))
            return w, sched_cls(cfg, side)

    prompt = WINDOW_BLOCKS * BLOCK_SIZE
    prefill_blocks = [
        list(range(1000 * g + 1, 1000 * g + 1 + WINDOW_BLOCKS)) for g in range(n_groups)
    ]
    decode_blocks = [
        list(range(5000 * (g + 1), 5000 * (g + 1) + WINDOW_BLOCKS)) for g in range(n_groups)
    ]
    # The router's request id, embedding both sides' MoRIIO addresses (0.20.0-0.24.0's
    # schedulers read the peer's from it).
    rid = router_request_id(0)
    pw, ps = scheduler("prefill", p)
    with drv.as_rank(pw):
        request = _Config(
            request_id=rid,
            status=_RequestStatus.FINISHED_LENGTH_CAPPED,
            kv_transfer_params={"do_remote_decode": True, "transfer_id": "tx-window-0"},
            num_computed_tokens=prompt,
            num_tokens=prompt,
            num_prompt_tokens=prompt,
            prompt_token_ids=[0] * prompt,
            is_finished=lambda: True,
        )
        grouped = "BlockIds" in str(sched_cls.request_finished.__annotations__.get("block_ids"))
        blocks = tuple(prefill_blocks) if grouped else prefill_blocks[0]
        _, params = ps.request_finished(request, blocks)
    if not params:
        raise HarnessError("request_finished returned no kv_transfer_params")
    dw, ds = scheduler("decode", d)
    with drv.as_rank(dw):
        # The proxy forwards the prefill's params, adding the prefill's addresses it knows
        # from its registration where the release's prefill returns none.
        proxy = {
            "remote_host": "10.0.0.1",
            "remote_port": HANDSHAKE_PORT["prefill"],
            "remote_handshake_port": HANDSHAKE_PORT["prefill"],
            "remote_notify_port": NOTIFY_PORT["prefill"],
            "remote_dp_rank": 0,
            "remote_dp_size": 1,
            "tp_size": p,
        }
        params = {**proxy, **params, "transfer_id": "tx-window-0"}
        dreq = _request(rid, params)
        dreq.num_tokens = dreq.num_prompt_tokens = prompt
        dreq.prompt_token_ids = [0] * prompt
        n, _ = ds.get_num_new_matched_tokens(dreq, 0)
        ds.update_state_after_alloc(dreq, _Blocks(True, decode_blocks), n)
        out = _scheduler_output(rid)
        out.num_scheduled_tokens = {rid: 1}
        meta = ds.build_connector_meta(out)
    req_meta = meta.reqs_to_recv[rid]
    local, remote = req_meta.local_block_ids, req_meta.remote_block_ids
    if not rel.grouped_blocks:
        local, remote = [local], [remote]
    got = []
    for g in range(n_groups):
        lo, re_ = list(local[g]), list(remote[g])
        got.append(
            [
                len(lo),
                len(re_),
                lo == decode_blocks[g][len(decode_blocks[g]) - len(lo) :],
                re_ == prefill_blocks[g][len(prefill_blocks[g]) - len(re_) :],
            ]
        )
    return got


def run_writer(w: Any) -> list[Any]:
    """Run the prefill rank's write worker thread (``MoRIIOWriter._write_worker_loop``, as
    the release wrote it) until it would wait for work; an exception that escapes it ends the
    thread (logged by Python's thread hook: no later task of that rank runs)."""
    writer = getattr(w, "_writer", None)
    if writer is None or getattr(w, "_flow_writer_dead", None):
        return []
    try:
        writer._write_worker_loop()
    except _LoopExit:
        return []
    except HarnessError:
        raise
    except Exception as e:
        if isinstance(e, (NameError, AttributeError, TypeError)):
            raise HarnessError(f"{type(e).__name__}: {e}") from e
        w._flow_writer_dead = _error(e)[:2]
        return w._flow_writer_dead
    return []


def router_request_id(i: int) -> str:
    """Request ``i``'s id as vLLM's MoRIIO router names it (the server prefixes ``cmpl-``):
    both sides' MoRIIO addresses embedded."""
    return (
        f"cmpl-___prefill_addr_host:10.0.0.1,handshake:{HANDSHAKE_PORT['prefill']},"
        f"notify:{NOTIFY_PORT['prefill']}___decode_addr_host:10.0.1.1,"
        f"handshake:{HANDSHAKE_PORT['decode']},notify:{NOTIFY_PORT['decode']}_{i:032x}"
    )


def _write_requests(
    rel: Release,
    drv: Driver,
    reqs: list[dict[str, Any]],
    p: int,
    d: int,
    h: int,
    mla: bool,
    pdp: int,
    ddp: int,
    backend: str,
) -> dict[str, Any]:
    """MoRIIO WRITE: for each request, the decode scheduler allocates its blocks and sends
    the block notices to the prefill ranks (``update_state_after_alloc``); the prefill
    scheduler puts it in ``reqs_to_save``; each prefill rank runs the forward's
    ``save_kv_layer`` (its handshake with the decode, then the write task), ``wait_for_save``
    and its write worker; each decode rank reports what it received (``get_finished``); the
    prefill ranks report what they sent, then again past the deferred-write timeout (the
    tasks of ranks no notice reached expire and are marked done)."""
    ns = rel.ns
    meta_cls = ns["MoRIIOConnectorMetadata"]
    out: dict[str, Any] = {"verdict": ["ok"], "requests": []}
    scheds: dict[tuple[str, int], Any] = {}
    errors: list[Any] = []

    def sched(side: str, k: int) -> Any:
        if (side, k) not in scheds:
            tp, dp = (p, pdp) if side == "prefill" else (d, ddp)
            with drv.as_rank(drv.workers[(side, k, 0)]):
                scheds[(side, k)] = make_scheduler(rel, side, tp, dp, k, h, mla, False, backend)
        return scheds[(side, k)]

    def fail(ex: BaseException, rank: int) -> dict[str, Any]:
        if isinstance(ex, (HarnessError, NameError, AttributeError, TypeError)):
            raise HarnessError(f"{type(ex).__name__}: {ex}") from ex
        if DEBUG:
            raise ex
        out["verdict"] = [_stage(_error(ex)[2]), *_error(ex)[:2], rank]
        return out

    def sent_now(w: Any, rid: str) -> tuple[bool, int]:
        acks = len(getattr(w.moriio_wrapper, "done_req_ids", []))
        sending, _ = w.get_finished()
        return rid in sending, acks

    for req in reqs:
        k, e = req["pdp"], req["ddp"]
        # The router's request id embeds both sides' MoRIIO addresses (vLLM's server prefixes
        # `cmpl-`): releases whose WRITE scheduler reads them from it (0.16.0-0.24.0) need it.
        req["id"] = router_request_id(int(req["id"].rsplit("-", 1)[1]))
        blocks = _Blocks(rel.grouped_blocks)
        # The proxy sends the request to both sides at once, each naming the other.
        dparams = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "transfer_id": req["xfer"],
            "remote_engine_id": "prefill",
            "remote_block_ids": [1],
            "remote_host": "10.0.0.1",
            "remote_port": HANDSHAKE_PORT["prefill"],
            "remote_handshake_port": HANDSHAKE_PORT["prefill"],
            "remote_notify_port": NOTIFY_PORT["prefill"],
            "remote_dp_rank": k,
            "remote_dp_size": pdp,
            "tp_size": p,
        }
        pparams = {
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "transfer_id": req["xfer"],
            "remote_engine_id": "decode",
            "remote_block_ids": [1],
            "remote_host": "10.0.1.1",
            "remote_port": HANDSHAKE_PORT["decode"],
            "remote_handshake_port": HANDSHAKE_PORT["decode"],
            "remote_notify_port": NOTIFY_PORT["decode"],
            "remote_dp_rank": e,
            "remote_dp_size": ddp,
            "tp_size": d,
        }
        sent_before = len(drv.sent)
        with drv.as_rank(drv.workers[("decode", e, 0)]):
            try:
                ds = sched("decode", e)
                dreq = _request(req["id"], dparams)
                ds.get_num_new_matched_tokens(dreq, 0)
                ds.update_state_after_alloc(dreq, blocks, BLOCK_SIZE)
                dmeta = ds.build_connector_meta(_scheduler_output(req["id"]))
            except (Exception, Hang) as ex:
                return fail(ex, 0)
        notified = drv.sent[sent_before:]
        with drv.as_rank(drv.workers[("prefill", k, 0)]):
            try:
                ps = sched("prefill", k)
                ps.update_state_after_alloc(_request(req["id"], pparams), blocks, 0)
                pmeta = ps.build_connector_meta(_scheduler_output(req["id"]))
            except (Exception, Hang) as ex:
                return fail(ex, 0)
        if not isinstance(pmeta, meta_cls):
            raise HarnessError("build_connector_meta")
        writes = []
        for r in range(p):
            w = drv.workers[("prefill", k, r)]
            before = len(w.moriio_wrapper.__dict__.get("_flow_writes", []))
            with drv.as_rank(w):
                try:
                    w.start_load_kv(pmeta)
                    w.save_kv_layer(pmeta, LAYER, w.kv_caches[LAYER], None)
                    if hasattr(w, "wait_for_save"):  # 0.14.0-: the connector's is a no-op
                        w.wait_for_save(pmeta)
                    dead = run_writer(w)
                except (Exception, Hang) as ex:
                    return fail(ex, r)
            if dead:
                errors.append(dead)
            got = w.moriio_wrapper.__dict__.get("_flow_writes", [])[before:]
            writes.append(sorted({json.dumps(x) for x in got}))
        writes = [[json.loads(x) for x in ws] for ws in writes]

        def decode_done(e: int, dmeta: Any, rid: str) -> list[bool]:
            done = []
            for r in range(d):
                w = drv.workers[("decode", e, r)]
                with drv.as_rank(w):
                    w.start_load_kv(dmeta)
                    _, recving = w.get_finished()
                done.append(rid in recving)
            return done

        try:
            recv = decode_done(e, dmeta, req["id"])
            state = []
            acks = []
            for r in range(p):
                w = drv.workers[("prefill", k, r)]
                with drv.as_rank(w):
                    sent, n = sent_now(w, req["id"])
                state.append("w" if sent else "-")
                acks.append(n)
            # Past the deferred-write timeout: the write worker expires what never ran.
            CLOCK.now += 7200.0
            for r in range(p):
                w = drv.workers[("prefill", k, r)]
                with drv.as_rank(w):
                    dead = run_writer(w)
                    if dead:
                        errors.append(dead)
                    sent, n = sent_now(w, req["id"])
                if sent and state[r] == "-":
                    state[r] = "x"
                acks[r] += n
            again = decode_done(e, dmeta, req["id"])
            recv = [a or b for a, b in zip(recv, again, strict=True)]
        except (Exception, Hang) as ex:
            return fail(ex, 0)
        if all(s == "w" for s in state):
            freed = "acks"
        elif all(s != "-" for s in state):
            freed = "timeout"
        else:
            freed = _reaped(rel, req, p, pdp, h, mla, False, backend)
        req["write"] = [writes, notified, recv, acks, state, freed]
        out["requests"].append(req)
    out["lost"] = drv.lost
    out["listener_errors"] = sorted({tuple(x) for x in [*drv.dead.values(), *errors]})
    return out


def _stage(where: list[str]) -> str:
    if any("handshake" in f for f in where):
        return "handshake"
    return "first_transfer"


def _set_meta(m: Any, req: dict[str, Any], producer: bool, **k: Any) -> None:
    m.transfer_id_to_request_id = {req["xfer"]: req["id"]}
    if producer:
        m.reqs_to_recv = {}
        m.reqs_to_send = {req["id"]: CLOCK.now + 3600}
        return
    rel, p, pdp = k["rel"], k["p"], k["pdp"]
    cls = rel.ns["ReqMeta"]
    groups = [[1], [1]] if DRIVER.hybrid else [[1]]
    fields = {
        "transfer_id": req["xfer"],
        "local_block_ids": groups if rel.grouped_blocks else [1],
        "remote_block_ids": groups if rel.grouped_blocks else [1],
        "remote_engine_id": "prefill",
        "remote_host": "10.0.0.1",
        "remote_port": HANDSHAKE_PORT["prefill"],
        "remote_handshake_port": HANDSHAKE_PORT["prefill"],
        "remote_notify_port": NOTIFY_PORT["prefill"],
        "tp_size": p,
        "remote_dp_size": pdp,
        "remote_dp_rank": req["pdp"],
    }
    import dataclasses
    import inspect

    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls)]
    else:
        names = list(inspect.signature(cls).parameters)
    m.reqs_to_recv = {req["id"]: cls(**{n: fields[n] for n in names if n in fields})}
    m.reqs_to_send = {}


def _reaped(
    rel: Release, req: dict[str, Any], p: int, pdp: int, h: int, mla: bool, read: bool, backend: str
) -> str:
    """The prefill scheduler's real request_finished, then update_connector_output past any
    deadline: ``timeout`` if it frees the request, else ``never``."""
    ns = rel.ns
    sched_cls = ns["MoRIIOConnectorScheduler"]
    if not hasattr(sched_cls, "update_connector_output"):
        return "never"
    drv = DRIVER
    cfg = rel.config("prefill", p, pdp, req["pdp"], h, mla, read, backend, hma=bool(drv.hybrid))
    w = drv.workers[("prefill", req["pdp"], 0)]
    with drv.as_rank(w):
        code = sched_cls.__init__.__code__
        if "kv_cache_config" in code.co_varnames[: code.co_argcount]:
            s = sched_cls(cfg, "prefill", kv_cache_config(ns, mla, drv.hybrid))
        else:
            s = sched_cls(cfg, "prefill")
        request = _Config(
            request_id=req["id"],
            status=_RequestStatus.FINISHED_LENGTH_CAPPED,
            kv_transfer_params={"do_remote_decode": True, "transfer_id": req["xfer"]},
            num_computed_tokens=BLOCK_SIZE,
            num_tokens=BLOCK_SIZE,
            prompt_token_ids=[0] * BLOCK_SIZE,
            is_finished=lambda: True,
        )
        t0 = CLOCK.now
        # Block ids per KV-cache group where the release's scheduler takes them so.
        grouped = "BlockIds" in str(sched_cls.request_finished.__annotations__.get("block_ids"))
        blocks = ([1], [1]) if drv.hybrid else ([1],)
        delay, _ = s.request_finished(request, blocks if grouped else [1])
        if not delay:
            raise HarnessError("request_finished did not defer the free")
        output = _Config(finished_sending=set(), finished_recving=set())
        CLOCK.now = t0 + 7200.0
        s.update_connector_output(output)
        CLOCK.now = t0
        return "timeout" if req["id"] in (output.finished_sending or set()) else "never"


def kv_cache_config(ns: dict[str, Any], mla: bool, hybrid: str = "") -> Any:
    """One attention (or MLA) layer in one KV-cache group; ``hybrid``: a second group of a
    Mamba-2 layer (conv and SSM states) or of a sliding-window attention layer."""
    spec = ns["MLAAttentionSpec"] if mla else ns["FullAttentionSpec"]

    def attn() -> Any:
        sp = spec()
        sp.dcp_sharded = False
        return sp

    groups = [_Config(layer_names=[LAYER], kv_cache_spec=attn(), enable_kv_transfer=True)]
    if hybrid == "mamba":
        m = ns["MambaSpec"]()
        m.shapes, m.dtypes = ((3, 1024), (8, 64, 64)), ("bfloat16", "bfloat16")
        m.num_speculative_blocks, m.mamba_type = 0, "mamba2"
        groups.append(_Config(layer_names=[LAYER_2], kv_cache_spec=m, enable_kv_transfer=True))
    elif hybrid == "sliding":
        sw = ns["SlidingWindowMLASpec" if mla else "SlidingWindowSpec"]()
        sw.sliding_window, sw.dcp_sharded = SLIDING_WINDOW, False
        groups.append(_Config(layer_names=[LAYER_2], kv_cache_spec=sw, enable_kv_transfer=True))
    return _Config(
        kv_cache_groups=groups,
        transfer_group_index_by_layer={n: i for i, g in enumerate(groups) for n in g.layer_names},
        transfer_groups=groups,
        num_blocks=NUM_BLOCKS,
        kv_cache_tensors=[],
        transfer_group_ids=tuple(range(len(groups))),
        select_transfer_block_ids=lambda ids: tuple(ids),
    )


def init_worker(
    Worker: Any, w: Any, cfg: Any, side: str, ns: dict[str, Any], mla: bool, hybrid: str = ""
) -> None:
    params = list(Worker.__init__.__code__.co_varnames[1 : Worker.__init__.__code__.co_argcount])
    kwargs: dict[str, Any] = {"vllm_config": cfg, "engine_id": side}
    if "kv_cache_config" in params:
        kwargs["kv_cache_config"] = kv_cache_config(ns, mla, hybrid)
    Worker.__init__(w, **{k: v for k, v in kwargs.items() if k in params})


class _KVTensor:
    """The facts of a KV-cache tensor the offset code reads (shape, strides, element size)."""

    def __init__(self, shape: tuple[int, ...], element_size: int = 2):
        self.shape = shape
        self.dtype = "bfloat16" if element_size == 2 else "int8"
        self._element_size = element_size
        self.device = types.SimpleNamespace(index=0, type="cuda")

    def stride(self, dim: int | None = None) -> Any:
        out, acc = [], 1
        for n in reversed(self.shape):
            out.append(acc)
            acc *= n
        st = tuple(reversed(out))
        return st if dim is None else st[dim]

    def element_size(self) -> int:
        return self._element_size

    def data_ptr(self) -> int:
        return 0

    def numel(self) -> int:
        return int(__import__("math").prod(self.shape))

    def is_contiguous(self) -> bool:
        return True


NUM_BLOCKS = 64
SLIDING_WINDOW = 4096  # tokens: a hybrid vector's sliding-window layer


def head_layout(ns: dict[str, Any], heads: int) -> Any:
    """vLLM's HeadLayout of a dense [2, blocks, block_size, heads, head_dim] cache."""
    hb = 128 * 2
    return ns["HeadLayout"](
        num_heads=heads,
        num_tokens=BLOCK_SIZE,
        head_bytes=hb,
        block_stride=BLOCK_SIZE * heads * hb,
        head_stride=hb,
        token_stride=heads * hb,
        plane_offsets=(0, NUM_BLOCKS * BLOCK_SIZE * heads * hb),
    )


def heads_covered(w: Any, offsets: Any, sizes: Any) -> list[int]:
    """The rank-local KV heads (first, last) the byte ranges cover in ``w``'s cache of
    :func:`attach_kv_state` ([2, blocks, block_size, heads, 128] of 2-byte elements: a head
    is 256 bytes, a token all heads): a range of a token or more covers every head."""
    heads = w._flow_heads
    token = heads * 256
    lo, hi = heads, -1
    for o, n in zip(offsets, sizes, strict=True):
        o, n = int(o), int(n)
        if n <= 0:
            continue
        if w._flow_mla or n >= token:
            a, b = 0, heads - 1
        else:
            a, b = (o % token) // 256, ((o + n - 1) % token) // 256
            if b < a:
                a, b = 0, heads - 1
        lo, hi = min(lo, a), max(hi, b)
    return [lo, hi]


def attach_kv_state(
    w: Any, tp: int, h: int, mla: bool, ns: dict[str, Any], hybrid: str = ""
) -> None:
    """What register_kv_caches leaves: one layer (``hybrid="sliding"``: and a sliding-window
    layer of the same shape), memory descriptors naming the rank."""
    heads = 1 if mla else max(1, h // tp)
    w._flow_heads, w._flow_mla = heads, mla
    shape = (NUM_BLOCKS, BLOCK_SIZE, 576) if mla else (2, NUM_BLOCKS, BLOCK_SIZE, heads, 128)
    if mla and ns.get("_flow_standard_mla"):
        shape = (NUM_BLOCKS, 1, BLOCK_SIZE, 576)  # 0.33.0: the standardized [B, H, N, C] view
    layers = [LAYER, LAYER_2] if hybrid == "sliding" else [LAYER]
    w.layer_name_to_local_kv_cache_metadata = {n: [["mem", w.dp_rank, w.tp_rank]] for n in layers}
    w.moriio_wrapper.local_memory_registered = True
    w.kv_caches = {n: _KVTensor(shape) for n in layers}
    w.kv_cache_shape = shape
    w.layer_to_spec = {}
    for n in layers:
        # The sliding-window layer's spec: vLLM's SlidingWindowSpec (SlidingWindowMLASpec).
        full = n == LAYER
        if mla:
            spec = ns["MLAAttentionSpec"] if full else ns["SlidingWindowMLASpec"]
        else:
            spec = ns["FullAttentionSpec"] if full else ns["SlidingWindowSpec"]
        sp = spec()
        sp.num_heads, sp.num_states, sp.state_content_size_bytes = 1, BLOCK_SIZE, 576 * 2
        if not full:
            sp.sliding_window = SLIDING_WINDOW
        w.layer_to_spec[n] = sp
    w.layer_names = list(layers)
    w.kv_layer_mr_offset = {}
    if "HeadLayout" in ns and not mla:
        w.kv_head_layouts = {n: head_layout(ns, heads) for n in layers}
    elif "HeadLayout" in ns:
        w.kv_head_layouts = {}
    w.attention_block_sizes = {n: BLOCK_SIZE for n in layers}
    w.mamba_state_layouts = {}
    w._flow_meta_extra = {
        "num_blocks": NUM_BLOCKS,
        "kv_head_layouts": {k: v.to_wire() for k, v in getattr(w, "kv_head_layouts", {}).items()},
        "attention_block_sizes": {},
    }


# ---------------------------------------------------------------- grid, encoding, main


def loads(h: int, tp: int, mla: bool) -> bool:
    """A TP size loads the model's KV heads (vLLM's QKV split): vectors where a side does
    not load never reach the connector."""
    return mla or (tp % h == 0 if tp >= h else h % tp == 0)


def xgmi_vector(mode: str, p: int, d: int, h: int, mla: bool, pdp: int, ddp: int) -> bool:
    """The vectors also run on MoRI's ``xgmi`` backend. No release reads the backend outside
    the engine's creation, except 0.33.0's READ source choice (:func:`backend_readers`,
    checked per release): READ's one-rank MLA decode (the round-robin it gates) runs on
    both; WRITE, whose code never reads it past the engine's creation, runs on both where a
    backend could change the mapping if it did (MLA with D = 1, P > D with D <= 2, and the
    data-parallel layouts with 8 KV heads). The test asks each such vector's outcome to be
    the ``rdma`` one's."""
    if mode == "read":
        return mla and d == 1 and pdp == ddp == 1
    if (pdp, ddp) != (1, 1):
        return h == 8
    return (mla and d == 1) or (p > d and d <= 2)


# Where the MoRIIO modules may read the backend (``kv_connector_extra_config["backend"]``,
# ``MoRIIOConfig.backend``, ``BackendType.XGMI``): parsing it, creating the engine with it,
# and (0.33.0) READ's choice of a rotating source.
BACKEND_READERS = {
    "moriio_common.py:MoRIIOConfig.from_vllm_config",
    "moriio_connector.py:MoRIIOConnectorWorker.__init__",
    "moriio_engine.py:MoRIIOWrapper.set_backend_type",
    "moriio_connector.py:MoRIIOConnectorWorker._spreads_replicated_reads",
}
# The READ-only functions that may call the READ source choice: the decode's source per
# request and its eager handshake (0.33.0 `start_load_kv` returns before it in WRITE mode,
# moriio_connector.py:3287).
READ_SOURCE_CALLERS = {"_resolve_read_source", "_eager_handshake_all_dp_ranks"}


def backend_readers(files: dict[str, str]) -> dict[str, list[int]]:
    """Every function of the release's MoRIIO modules that reads the backend, with the
    lines: ``module:Class.function`` -> lines. Checked by :class:`Release` against
    :data:`BACKEND_READERS` (a new reader stops the driver: the ``xgmi`` grid would then be
    too small), and the callers of ``_spreads_replicated_reads`` against
    :data:`READ_SOURCE_CALLERS`."""
    out: dict[str, list[int]] = {}
    for name, src in sorted(files.items()):
        if not name.startswith(MORIIO):
            continue

        def visit(node: ast.AST, qual: list[str], module: str) -> None:
            for ch in ast.iter_child_nodes(node):
                if isinstance(ch, ast.ClassDef):
                    visit(ch, [*qual, ch.name], module)
                elif isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    hits = [
                        n.lineno
                        for n in ast.walk(ch)
                        if (isinstance(n, ast.Attribute) and n.attr in ("backend", "XGMI"))
                        or (isinstance(n, ast.Constant) and n.value in ("xgmi", "backend"))
                    ]
                    if hits:
                        out[f"{module}:{'.'.join([*qual, ch.name])}"] = sorted(set(hits))
                    visit(ch, [*qual, ch.name], module)

        visit(ast.parse(src), [], name.rsplit("/", 1)[1])
    return out


def check_backend_readers(version: str, files: dict[str, str]) -> None:
    readers = backend_readers(files)
    extra = set(readers) - BACKEND_READERS
    if extra:
        raise HarnessError(f"{version}: the backend is read in {sorted(extra)}")
    callers = set()
    for name, src in files.items():
        if name.startswith(MORIIO):
            for fn in ast.walk(ast.parse(src)):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for n in ast.walk(fn):
                        if (
                            isinstance(n, ast.Attribute)
                            and n.attr == "_spreads_replicated_reads"
                            and fn.name != "_spreads_replicated_reads"
                        ):
                            callers.add(fn.name)
    if callers - READ_SOURCE_CALLERS:
        raise HarnessError(f"{version}: the READ source choice is called by {sorted(callers)}")


def grid() -> list[tuple[Any, ...]]:
    """(mode, P, D, H, MLA, prefill DP, decode DP, backend) of every vector."""
    out = []
    for mode in ("read", "write"):
        for mla in (False, True):
            heads = (
                [(h, TP_SIZES) for h in MLA_HEADS]
                if mla
                else [
                    *((h, TP_SIZES) for h in KV_HEADS),
                    *((h, FULL_TP) for h in FULL_HEADS),
                ]
            )
            for h, sizes in heads:
                for p in sizes:
                    for d in sizes:
                        if loads(h, p, mla) and loads(h, d, mla):
                            out.append((mode, p, d, h, mla, 1, 1, "rdma"))
                            if xgmi_vector(mode, p, d, h, mla, 1, 1):
                                out.append((mode, p, d, h, mla, 1, 1, "xgmi"))
            for h in DP_HEADS:
                for pdp, ddp in DP_LAYOUTS:
                    if (pdp, ddp) == (1, 1):
                        continue
                    for p in DP_TP:
                        for d in DP_TP:
                            if loads(h, p, mla) and loads(h, d, mla):
                                out.append((mode, p, d, h, mla, pdp, ddp, "rdma"))
                                if xgmi_vector(mode, p, d, h, mla, pdp, ddp):
                                    out.append((mode, p, d, h, mla, pdp, ddp, "xgmi"))
        # Pipeline stages on either side, and hybrid models (Mamba-2 or sliding-window
        # layers beside full attention): (..., prefill PP, decode PP, hybrid kind).
        for ppp, dpp in PP_LAYOUTS:
            for p, d in PP_TP:
                out.append((mode, p, d, 8, False, 1, 1, "rdma", ppp, dpp, ""))
        for kind in ("mamba", "sliding"):
            for mla in (False, True):
                for p, d in HYBRID_TP:
                    out.append((mode, p, d, 8, mla, 1, 1, "rdma", 1, 1, kind))
    return out


def template(message: str, args: tuple[int, ...]) -> str:
    from vllm_golden import template as tpl

    return tpl(message, args)


def compact(v: tuple[Any, ...], got: dict[str, Any]) -> list[Any]:
    """One vector's outcome, compact: [verdict, requests] where each request is
    [prefill DP rank, decode DP rank, reads, notified, acks, sent, freed]; reads and notified
    list, per decode rank, the (DP rank, TP rank) pairs."""
    _, p, d, h = v[:4]
    verdict = got["verdict"]
    if verdict[0] not in ("ok", "engine_start", "started") and verdict[1] != "hang":
        verdict = [verdict[0], verdict[1], template(verdict[2], (p, d, h)), verdict[3]]
    if v[0] == "write":
        reqs = [[r["pdp"], r["ddp"], *r["write"]] for r in got.get("requests", [])]
        errors = [[c, template(m, (p, d, h))] for c, m in got.get("listener_errors", [])]
        return [verdict, reqs, errors]
    reqs = [
        [
            r["pdp"],
            r["ddp"],
            [x["read"] for x in r["decode"]],
            [x["notified"] for x in r["decode"]],
            r["acks"],
            r["sent"],
            r["freed"],
        ]
        for r in got.get("requests", [])
    ]
    # Exceptions a prefill rank's notify listener died of (logged only: vLLM's
    # `_async_wait`), as (class, message) pairs.
    errors = [[c, template(m, (p, d, h))] for c, m in got.get("listener_errors", [])]
    if "windows" in got:
        # A sliding-window vector: per KV-cache group the blocks its transfer moves
        # (:func:`scheduler_windows`).
        return [verdict, reqs, errors, got["windows"]]
    return [verdict, reqs, errors]


def moriio_files(path: Path) -> dict[str, str]:
    """The MoRIIO modules of one release (an unpacked tree or a wheel)."""
    import zipfile

    files: dict[str, str] = {}
    if path.is_dir():
        for f in (path / MORIIO).glob("*.py"):
            files[MORIIO + f.name] = f.read_text()
        for extra in (KV_CACHE_UTILS, MAMBA_UTILS, KV_CACHE_INTERFACE):
            if (path / extra).exists():
                files[extra] = (path / extra).read_text()
    else:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if (name.startswith(MORIIO) and name.endswith(".py")) or name in (
                    KV_CACHE_UTILS,
                    MAMBA_UTILS,
                    KV_CACHE_INTERFACE,
                ):
                    files[name] = z.read(name).decode()
    return files


def wheel_sha256(version: str, path: Path) -> str:
    """The sha256 of the release's wheel: of the file itself, or (an unpacked tree) the one
    pip resolves for ``vllm==version`` (``pip install --dry-run --report``: no download)."""
    import subprocess

    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--no-deps",
                "--ignore-installed",
                "--only-binary",
                ":all:",
                "--quiet",
                "--report",
                str(report),
                f"vllm=={version}",
            ],
            check=True,
        )
        (item,) = json.loads(report.read_text())["install"]
        return str(item["download_info"]["archive_info"]["hashes"]["sha256"])


def generate(
    version: str, files: dict[str, str], reuse: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The release's data over :func:`grid`. ``reuse``: outcomes by vector (its JSON) taken
    from the release's data as it stands instead of rerunning them (``--reuse``); hybrid
    vectors always run."""
    rel = Release(version, files)
    vectors = grid()
    table: list[Any] = []
    index: dict[str, int] = {}
    codes = []
    for v in vectors:
        mode, p, d, h, mla, pdp, ddp, backend = v[:8]
        ppp, dpp, hybrid = v[8:] if len(v) > 8 else (1, 1, "")
        key = json.dumps(list(v))
        if reuse is not None and not hybrid and key in reuse:
            item = reuse[key]
        else:
            got = flow_vector(
                rel, mode == "read", p, d, h, mla, pdp, ddp, backend, ppp, dpp, hybrid
            )
            item = compact(v, got)
        key = json.dumps(item, sort_keys=True)
        if key not in index:
            index[key] = len(table)
            table.append(item)
        codes.append(index[key])
    return {
        "format": 1,
        "part": "flow-moriio",
        "vectors": [list(v) for v in vectors],
        "outcomes": table,
        "codes": codes,
    }


def stored_outcomes(out: Path, name: str | None) -> dict[str, Any]:
    """A data file's outcomes by vector (its JSON)."""
    if not name or not (out / name).exists():
        return {}
    import gzip

    with gzip.open(out / name, "rt") as f:
        data = json.loads(f.read())
    return {
        json.dumps(v): data["outcomes"][c]
        for v, c in zip(data["vectors"], data["codes"], strict=True)
    }


def source_digest(files: dict[str, str]) -> str:
    """The digest of what the driver reads of one release (releases that share it share
    their outcomes)."""
    read = [files[k] for k in sorted(files) if k.startswith(MORIIO)]
    read.append(unify_error(files.get(KV_CACHE_UTILS, "")) or "")
    mamba_src = files.get(MAMBA_UTILS, "")
    read.append(
        "\n".join(
            ast.unparse(n)
            for n in ast.parse(mamba_src).body
            if isinstance(n, ast.FunctionDef)
            and n.name in ("get_conv_state_layout", "is_conv_state_dim_first")
        )
        if mamba_src
        else ""
    )
    # and whether the release views every layer's cache as [B, H, N, C] (a Mamba layer's
    # registration on a worker without Mamba code, :func:`register_layer_views`).
    views = files.get(KV_CACHE_INTERFACE, "")
    read.append(str("def create_kv_cache_views" in views))
    return hashlib.sha256("\n".join(read).encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", help="comma-separated releases (default: every MoRIIO release)")
    ap.add_argument(
        "--source", action="append", default=[], help="VERSION=PATH: an unpacked wheel or a .whl"
    )
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "pdtp-vllm-wheels"))
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--jobs", type=int, default=1, help="releases run at once (processes)")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="take the outcomes of vectors the release's data already has (hybrid vectors "
        "rerun): only for a grid that grew, with the driver unchanged for the others",
    )
    args = ap.parse_args(argv)
    versions = args.versions.split(",") if args.versions else RELEASES
    sources = dict(s.split("=", 1) for s in args.source)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    runs = index.setdefault("flow-moriio", {})
    # Provenance: the wheel each release's MoRIIO source was read from.
    wheels = index.setdefault("flow-moriio-wheel-sha256", {})
    # What the driver reads, per release: the MoRIIO modules, the core's unification error
    # text and the release's conv-state layout functions (a Mamba group's registration).
    # Releases that read the same run once; the runs go to --jobs processes (one release's run
    # is one process: ~2-3 minutes of the grid's 13,915 vectors).
    todo: dict[str, str] = {}  # source digest -> the first release that has it
    digests: dict[str, str | None] = {}
    done: dict[str, str] = {}  # source digest -> golden file
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {}
        for v in versions:
            path = Path(sources[v]) if v in sources else fetch(v, Path(args.cache))
            files = moriio_files(path)
            if not any(f.endswith("moriio_connector.py") for f in files):
                digests[v] = None
                print(f"flow-moriio {v}: no MoRIIO in this release", flush=True)
            else:
                digests[v] = dg = source_digest(files)
                if dg not in todo:
                    todo[dg] = v
                    reuse = stored_outcomes(out, runs.get(v)) if args.reuse else None
                    futures[pool.submit(generate, v, files, reuse)] = dg
            # Hashing a wheel reads all of it: done while the pool runs.
            wheels[v] = wheel_sha256(v, path)
        for fut in concurrent.futures.as_completed(futures):
            data = fut.result()
            data["source_digest"] = futures[fut]
            done[futures[fut]] = write_flow_data(out, "flow-moriio", data)
            print(f"flow-moriio {todo[futures[fut]]}: {done[futures[fut]]}", flush=True)
    for v, dg in digests.items():
        runs[v] = done[dg] if dg is not None else None
    index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    used = {n for part in index.values() for n in part.values() if n}
    for f in out.glob("flow-*.json.gz"):
        if f.name not in used:
            f.unlink()


if __name__ == "__main__":
    main()
