"""SGLang's prefill/decode transfer backends: ``sglang-mooncake``, ``sglang-nixl``,
``sglang-mori``.

SGLang's rules change a lot between releases and differ by backend, so a connector is a name
*and* an SGLang release: ``resolve_sglang_connector("sglang-nixl", sglang_version="0.5.9")``.
The rules are rows of data in the Rust core (``src/connector/sglang.rs``), each proven against
SGLang's own code of every release in its range (``tests/data/sglang_golden.json.gz``, from
``tools/sglang_golden.py``); this module names them and asks the core what a pair does.

Sizes are *attention* TP: TP ÷ DP with ``--enable-dp-attention`` (SGLang pairs ranks by it).
A verdict says what happens and where: ``ok``; ``raises`` (class, SGLang's text, and whether it
kills the decode scheduler, the prefill scheduler, the transfer thread, or fails each request);
``hangs`` (prefill ranks no decode rank joins: until SGLang's bootstrap timeout, or forever);
``corrupts`` (no exception, the decode gets other heads' KV).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ... import _core
from ...errors import ArgumentTypeError, InvalidArgumentError
from ...layout import is_hybrid, loadable_tp_sizes

#: Every SGLang release pdtp's golden data covers, oldest first.
SGLANG_RELEASES: tuple[str, ...] = tuple(_core.sglang_releases())
#: The release ``sglang_version=None`` means: the newest pdtp knows.
DEFAULT_SGLANG_VERSION: str = SGLANG_RELEASES[-1]
#: The state kinds ``check_sglang_pair(state=...)`` takes.
STATE_KINDS: tuple[str, ...] = ("swa", "mamba", "dsa")
#: The connector names (scripts rely on them).
SGLANG_CONNECTORS: tuple[str, ...] = tuple(_core.sglang_connector_names())


@dataclass(frozen=True)
class SglangConnector:
    """One SGLang transfer backend at one SGLang release."""

    name: str
    sglang_version: str
    #: The release whose rules apply (``sglang_version``, or the newest known if newer).
    rules_version: str
    #: ``"sglang-nixl@0.5.23"``: what the core takes.
    key: str
    #: ``--disaggregation-transfer-backend``'s value.
    transfer_backend: str
    #: The only GPU vendor it runs on (MORI: AMD), else ``None``.
    gpu_vendor: str | None
    summary: str
    #: The first release of the rules row that applies.
    rules_since: str

    @property
    def label(self) -> str:
        """``"sglang-nixl, SGLang 0.5.23"``."""
        newer = (
            f" (rules of {self.rules_version}, the newest pdtp knows)"
            if self.rules_version != self.sglang_version
            else ""
        )
        return f"{self.name}, SGLang {self.sglang_version}{newer}"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def is_sglang_connector(name: object) -> bool:
    """True for ``sglang-*`` names and keys (the engine is then SGLang, not vLLM)."""
    return isinstance(name, str) and name.strip().lower().replace("_", "-").startswith("sglang-")


@cache
def _resolve(key: str) -> SglangConnector:
    return SglangConnector(*_core.resolve_sglang_connector(key))


def resolve_sglang_connector(name: Any, sglang_version: str | None = None) -> SglangConnector:
    """The backend ``name`` (``"sglang-mooncake"``, or a key ``"sglang-mooncake@0.5.9"``) at
    ``sglang_version`` (default: the key's, else :data:`DEFAULT_SGLANG_VERSION`).

    >>> resolve_sglang_connector("sglang-mori").gpu_vendor
    'AMD'
    """
    if isinstance(name, SglangConnector):
        if sglang_version is None or sglang_version == name.sglang_version:
            return name
        name = name.name
    if not isinstance(name, str):
        raise ArgumentTypeError(f"connector must be a string, got {type(name).__name__}")
    if sglang_version is not None and not isinstance(sglang_version, str):
        raise ArgumentTypeError(
            f"sglang_version must be a string like '{DEFAULT_SGLANG_VERSION}', got "
            f"{type(sglang_version).__name__} {sglang_version!r}"
        )
    base, _, keyed = name.partition("@")
    if keyed and sglang_version is not None and keyed.strip() != sglang_version.strip():
        raise InvalidArgumentError(
            f"connector {name!r} names SGLang {keyed} but sglang_version={sglang_version!r}: "
            "give one"
        )
    version = sglang_version if sglang_version is not None else (keyed or None)
    base = base.strip().lower().replace("_", "-")
    return _resolve(base if version is None else f"{base}@{version.strip()}")


def check_sglang_pair(
    connector: Any,
    num_kv_heads: int,
    is_mla: bool,
    prefill_tp: int,
    decode_tp: int,
    *,
    prefill_dp: int = 1,
    decode_dp: int = 1,
    prefill_pp: int = 1,
    decode_pp: int = 1,
    sglang_version: str | None = None,
    state: Sequence[str] = (),
) -> dict[str, Any]:
    """What SGLang does with a prefill instance of TP ``prefill_tp`` (DP attention over
    ``prefill_dp`` ranks) and a decode instance of TP ``decode_tp`` (``decode_dp``), for a
    model of ``num_kv_heads`` KV heads. A TP that DP does not divide is pdtp's error (SGLang
    refuses it at start).

    ``state`` names what the model keeps beside its full layers' KV, as SGLang transfers it
    (:data:`STATE_KINDS`): ``"swa"`` (sliding-window layers in SGLang's separate SWA pool),
    ``"mamba"`` (Mamba / linear-attention state), ``"dsa"`` (DeepSeek-V3.2's sparse-index
    cache). Each release's state sender decides (``tests/data/sglang_golden_state.json.gz``).

    >>> check_sglang_pair("sglang-mooncake@0.5.9", 8, False, 4, 2)["verdict"]
    'corrupts'
    >>> check_sglang_pair("sglang-nixl@0.5.21", 8, False, 4, 2, state=["swa"])["error"]
    'RuntimeError'
    """
    conn = resolve_sglang_connector(connector, sglang_version)
    if isinstance(state, str) or not all(isinstance(k, str) for k in state):
        raise ArgumentTypeError(
            f"state must be a list of state kinds among {list(STATE_KINDS)}, got {state!r}"
        )
    sizes = {}
    for side, tp, dp in (("prefill", prefill_tp, prefill_dp), ("decode", decode_tp, decode_dp)):
        for field, v in ((f"{side}_tp", tp), (f"{side}_dp", dp)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ArgumentTypeError(f"{field} must be an int, got {type(v).__name__}")
        if dp < 1 or tp < 1 or tp % dp:
            raise InvalidArgumentError(
                f"{side}_tp={tp} must be a positive multiple of {side}_dp={dp} (DP attention "
                "splits TP into DP groups)"
            )
        sizes[side] = tp // dp
    out: dict[str, Any] = _core.sglang_check_pair(
        conn.key,
        num_kv_heads,
        bool(is_mla),
        sizes["prefill"],
        sizes["decode"],
        prefill_pp,
        decode_pp,
        list(state),
    )
    out["connector"] = conn.label
    return out


def state_kinds(model: Any) -> list[str]:
    """The state kinds of :data:`STATE_KINDS` pdtp knows ``model`` keeps as SGLang transfers
    it: ``"mamba"`` for Mamba-type layers, ``"dsa"`` for a sparse-attention index. Sliding
    layers are not named: whether SGLang keeps them in its SWA pool depends on the
    architecture and release (Gemma-2/3 run with full-size KV, gpt-oss with the pool); pass
    ``state=["swa"]`` to :func:`check_sglang_pair` for a model SGLang runs so."""
    kinds = []
    if is_hybrid(model):
        kinds.append("mamba")
    if any(getattr(g, "index_bytes", 0) for g in getattr(model, "attention_groups", ())):
        kinds.append("dsa")
    return kinds


def gpu_refusal(connector: Any, vendor: str) -> str | None:
    """Why the backend does not run on GPUs of ``vendor`` (MORI is ROCm only), or ``None``."""
    conn = resolve_sglang_connector(connector)
    if conn.gpu_vendor is None or vendor == conn.gpu_vendor:
        return None
    return (
        f"{conn.name} needs {conn.gpu_vendor} GPUs (AMD's MORI is ROCm only), got {vendor}: "
        "use sglang-mooncake or sglang-nixl"
    )


def unequal_pairs_accepted(
    connector: Any,
    models: list[Any],
    sizes: tuple[int, ...] = (1, 2, 4, 8),
    *,
    sglang_version: str | None = None,
) -> tuple[int, int]:
    """(accepted, loadable) over ``models`` and every unequal (P, D) of ``sizes`` that loads on
    both sides: how many SGLang's release runs correctly (verdict ``ok``)."""
    conn = resolve_sglang_connector(connector, sglang_version)
    accepted = loadable = 0
    for m in models:
        ok_sizes = set(loadable_tp_sizes(m, max(sizes)))
        for p in sizes:
            for d in sizes:
                if p == d or p not in ok_sizes or d not in ok_sizes:
                    continue
                loadable += 1
                verdict = _core.sglang_check_pair(
                    conn.key, m.num_kv_heads, m.is_mla, p, d, 1, 1, state_kinds(m)
                )
                accepted += verdict["verdict"] == "ok"
    return accepted, loadable


# ------------------------------------------------------------------ launch lines

#: The first release whose CLI has ``--attn-dp-size`` (DP attention in one flag; before it,
#: and still accepted as deprecated, ``--dp-size N --enable-dp-attention``).
ATTN_DP_SIZE_SINCE = "0.5.22"
#: The first release with ``--pp-size``.
PP_SIZE_SINCE = "0.4.6.post2"
#: The first release whose ``--disaggregation-transfer-backend`` accepts ``mori``.
MORI_SINCE = "0.5.9"


def _release_index(version: str) -> int:
    """Position of ``version`` among the covered releases (newer ones count as the newest)."""
    if version in SGLANG_RELEASES:
        return SGLANG_RELEASES.index(version)
    return len(SGLANG_RELEASES) - 1


def _since(version: str, first: str) -> bool:
    return _release_index(version) >= SGLANG_RELEASES.index(first)


def launch_command(
    side: str,
    connector: Any,
    model_path: str,
    *,
    tp: int,
    dp: int = 1,
    ep: int = 1,
    pp: int = 1,
    host: str = "0.0.0.0",
    port: int = 30000,
    bootstrap_port: int = 8998,
    nnodes: int = 1,
    node_rank: int = 0,
    dist_init_addr: str | None = None,
    kv_cache_dtype: str | None = None,
    quantization: str | None = None,
    served_model_name: str | None = None,
    sglang_version: str | None = None,
    mem_fraction_static: float | None = None,
) -> list[str]:
    """The ``python -m sglang.launch_server`` argv of one SGLang P/D instance (``side``
    ``prefill`` or ``decode``; ``aggregated``: an instance serving both phases, without
    disaggregation flags) for the connector's release; ``dp`` > 1 is DP attention,
    ``pp`` > 1 pipeline stages. An instance over ``nnodes`` nodes is one launch per node
    (``node_rank`` 0 … ``nnodes`` − 1, every one with the whole instance's sizes) meeting at
    ``dist_init_addr`` (``HOST:PORT`` on node rank 0, SGLang's ``--dist-init-addr``); node
    rank 0 serves the API, and a prefill's later nodes register with the bootstrap server on
    that host. ``kv_cache_dtype`` (SGLang's name: ``fp8_e4m3``), ``quantization``
    (``fp8``: online FP8 of a 16-bit checkpoint) and ``served_model_name`` are written when
    given (prefill and decode must agree on the KV dtype), and ``mem_fraction_static`` when
    the plan was sized at another fraction than the release's own. Every flag is one the release
    defines (tests check them against its argument definitions,
    ``tests/data/sglang_launch_flags.json``); join with :func:`shlex.join`.

    >>> " ".join(launch_command("decode", "sglang-nixl", "m", tp=8, dp=8)[-6:])
    '--attn-dp-size 8 --disaggregation-mode decode --disaggregation-transfer-backend nixl'
    """
    conn = resolve_sglang_connector(connector, sglang_version)
    if side not in ("prefill", "decode", "aggregated"):
        raise InvalidArgumentError(
            f"side must be 'prefill', 'decode' or 'aggregated', got {side!r}"
        )
    for field, v in (
        ("tp", tp),
        ("dp", dp),
        ("ep", ep),
        ("pp", pp),
        ("port", port),
        ("bootstrap_port", bootstrap_port),
        ("nnodes", nnodes),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidArgumentError(f"{field} must be a positive int, got {v!r}")
    if isinstance(node_rank, bool) or not isinstance(node_rank, int) or not 0 <= node_rank < nnodes:
        raise InvalidArgumentError(
            f"node_rank must be an int in [0, nnodes={nnodes}), got {node_rank!r}"
        )
    if nnodes > 1 and not (
        isinstance(dist_init_addr, str)
        and dist_init_addr.rpartition(":")[0]
        and dist_init_addr.rpartition(":")[2].isdigit()
    ):
        raise InvalidArgumentError(
            f"an instance over nnodes={nnodes} nodes needs dist_init_addr 'HOST:PORT' (node rank "
            f"0's), got {dist_init_addr!r}"
        )
    for field, text in (
        ("kv_cache_dtype", kv_cache_dtype),
        ("quantization", quantization),
        ("served_model_name", served_model_name),
    ):
        if text is not None and (not isinstance(text, str) or not text or text.startswith("-")):
            raise InvalidArgumentError(
                f"{field} must be a name not starting with '-', got {text!r}"
            )
    if mem_fraction_static is not None and (
        isinstance(mem_fraction_static, bool)
        or not isinstance(mem_fraction_static, (int, float))
        or not 0 < mem_fraction_static <= 1
    ):
        raise InvalidArgumentError(
            f"mem_fraction_static must be a number in (0, 1], got {mem_fraction_static!r}"
        )
    if pp > 1 and not _since(conn.sglang_version, PP_SIZE_SINCE):
        raise InvalidArgumentError(f"pp={pp} needs SGLang {PP_SIZE_SINCE} or newer (--pp-size)")
    if tp % dp:
        raise InvalidArgumentError(f"tp={tp} must be a multiple of dp={dp} (DP attention)")
    if conn.transfer_backend == "mori" and not _since(conn.sglang_version, MORI_SINCE):
        raise InvalidArgumentError(f"sglang-mori needs SGLang {MORI_SINCE} or newer")
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model_path]
    argv += ["--host", host, "--port", str(port), "--tp-size", str(tp)]
    if dp > 1:
        if _since(conn.sglang_version, ATTN_DP_SIZE_SINCE):
            argv += ["--attn-dp-size", str(dp)]
        else:
            argv += ["--dp-size", str(dp), "--enable-dp-attention"]
    if ep > 1:
        argv += ["--ep-size", str(ep)]
    if pp > 1:
        argv += ["--pp-size", str(pp)]
    if nnodes > 1:
        argv += ["--nnodes", str(nnodes), "--node-rank", str(node_rank)]
        argv += ["--dist-init-addr", str(dist_init_addr)]
    if quantization is not None:
        argv += ["--quantization", quantization]
    if kv_cache_dtype is not None:
        argv += ["--kv-cache-dtype", kv_cache_dtype]
    if served_model_name is not None:
        argv += ["--served-model-name", served_model_name]
    if mem_fraction_static is not None:
        argv += ["--mem-fraction-static", f"{mem_fraction_static:g}"]
    if side == "aggregated":  # both phases in one engine: SGLang's default mode, no KV moves
        return argv
    argv += ["--disaggregation-mode", side]
    argv += ["--disaggregation-transfer-backend", conn.transfer_backend]
    if side == "prefill":
        argv += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
    return argv
