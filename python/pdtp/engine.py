"""What the serving engines choose when a launch line does not say, in one place: vLLM's batch
limits (``EngineArgs.get_batch_defaults``) and memory fraction, SGLang's chunked-prefill size,
running-request cap and ``mem_fraction_static``. The planner, the performance model, the
simulator and calibration all read them here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._version import Version, named_vllm_release

if TYPE_CHECKING:
    from ._gpu import GPU

#: vLLM's default ``--gpu-memory-utilization``.
DEFAULT_UTILIZATION = 0.9
#: vLLM's larger batch defaults need this much device memory (bytes).
VLLM_LARGE_BATCH_MEMORY = 70 * 2**30
#: The first vLLM release with memory-dependent batch defaults; before it, 256 sequences.
VLLM_BATCH_DEFAULTS_SINCE = Version(0, 9)


def vllm_batch_defaults(gpu_name: str, memory_bytes: float) -> tuple[int, int]:
    """``(max_num_seqs, max_num_batched_tokens)`` that ``vllm serve`` picks on this GPU
    (``EngineArgs.get_batch_defaults``, vLLM >= 0.9, OpenAI server): 1024 and 8192 on GPUs
    with at least 70 GiB whose device name does not contain "a100" (vLLM tests the name, so
    an 80 GiB A100 gets the small ones), else 256 and 2048."""
    if memory_bytes >= VLLM_LARGE_BATCH_MEMORY and "a100" not in gpu_name.lower():
        return 1024, 8192
    return 256, 2048


def vllm_max_num_seqs_of_run(engine: Any) -> int | None:
    """The decode-batch cap of a measured run whose engine text names a vLLM before 0.9
    (``"vllm 0.8.5"``): 256 everywhere then; None when the text names no such release."""
    if not isinstance(engine, str):
        return None
    try:
        release = named_vllm_release(engine)
    except ValueError:  # a malformed number: no release named
        return None
    if release is not None and release < VLLM_BATCH_DEFAULTS_SINCE:
        return 256
    return None


def sglang_mem_fraction_static(
    gpu: GPU, *, tp: int = 1, pp: int = 1, dp_attention: bool = False, mla: bool = False
) -> float:
    """SGLang's default ``--mem-fraction-static`` (weights + KV pool over GPU memory) on
    ``gpu`` for a ``tp`` × ``pp`` instance: ``ServerArgs._handle_gpu_memory_settings`` of
    SGLang 0.5.12 (the release of the measured SGLang runs, ``lmsysorg/sglang:v0.5.12``;
    ``pip download sglang==0.5.12 --no-deps``, ``sglang/srt/server_args.py``). It holds back
    an estimate of activations and CUDA graphs in MiB: 512 + 1.5 × the chunked-prefill size
    (2k/4k/8k/16k by GPU memory) + 2 × the CUDA-graph batch (by memory and tp) + tp × pp /
    8 GiB, more for DP attention (tp ranks) and piecewise CUDA graphs (on NVIDIA without
    pp or DP attention), at least 10 GiB on GPUs over 60 GiB. Not modelled: AMD's aiter
    backend (× 0.85 past 8k context), speculative decoding and multimodal models."""
    mem = gpu.memory_bytes / 2**20  # MiB, as SGLang reads it
    if mem < 20 * 1024:
        chunk, graph = 2048, 8
    elif mem < 35 * 1024:
        chunk, graph = 2048, 24 if tp < 4 else 80
    elif mem < 60 * 1024:
        chunk, graph = 4096, 32 if tp < 4 else 160
    elif mem < 160 * 1024:
        chunk, graph = 8192, 256 if tp < 4 else 512
    else:
        chunk, graph = 16384, 512
    reserved = 512 + max(chunk, 2048) * 1.5 + graph * 2 + tp * pp / 8 * 1024
    if dp_attention:  # dp_size = tp: one attention rank per GPU
        reserved += graph * tp * 3 + (graph * tp * 1.5 if graph > 300 else 0.0)
    if gpu.vendor == "NVIDIA" and pp == 1 and not dp_attention:  # piecewise CUDA graphs
        if mla:
            reserved += 1.5 * 1024
        else:
            top = chunk  # capture sizes up to the chunked-prefill size
            sizes = [
                *range(4, 33, 4),
                *range(48, 257, 16),
                *range(288, 513, 32),
                *range(576, 1025, 64),
                *range(1280, 4097, 256),
                *range(4608, top + 1, 512),
            ]
            reserved += 8 * sum(1 for x in sizes if x <= top)
    if mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mem - reserved) / mem, 3)


def engine_defaults(
    engine: str,
    gpu: GPU,
    *,
    tp: int = 1,
    pp: int = 1,
    dp_attention: bool = False,
    mla: bool = False,
) -> dict[str, float]:
    """The engine's own defaults: vLLM's online-serving ``max_num_batched_tokens`` 8192 and
    ``max_num_seqs`` 1024 on GPUs of at least 70 GiB other than A100 (2048 and 256 below),
    ``gpu_memory_utilization`` 0.9; SGLang's ``chunked_prefill_size`` 8192,
    ``max_running_requests`` as memory allows and ``mem_fraction_static`` by GPU memory and
    layout (:func:`sglang_mem_fraction_static`; ``tp`` GPUs per instance, ``pp`` stages,
    ``mla``: the model's attention is MLA)."""
    if engine == "sglang":
        util = sglang_mem_fraction_static(gpu, tp=tp, pp=pp, dp_attention=dp_attention, mla=mla)
        return {"max_num_seqs": 4096, "max_num_batched_tokens": 8192, "util": util}
    seqs, tokens = vllm_batch_defaults(gpu.name, gpu.memory_bytes)
    return {"max_num_seqs": seqs, "max_num_batched_tokens": tokens, "util": DEFAULT_UTILIZATION}


# ---- the engines, one object each ------------------------------------------------------------


@dataclass(frozen=True)
class Engine:
    """One serving engine as pdtp knows it: its name in the data (a connector's ``engine``),
    how output names it, the keyword that names its release, where its releases and its
    deployment (launch lines and what fronts them) live, and its memory default.

    Its connectors are the Rust core's objects whose ``engine`` is :attr:`name`
    (``src/connector/``); :mod:`pdtp.check`, :mod:`pdtp.transfer` and ``pdtp deploy`` ask
    this object, never an engine's name. The attributes naming code (``"module:attr"``)
    are imported when first used, so ``import pdtp`` stays cheap and nothing cycles.
    """

    name: str
    label: str
    #: The keyword (and CLI option, ``-`` for ``_``) naming the release: ``vllm_version``.
    version_option: str
    #: ``"module:attr"``: the engine's releases the golden data covers, oldest first.
    releases_at: str
    #: ``"module:attr"``: ``deploy(view, options) -> deployment`` (one plan, its launch lines).
    deploy_at: str
    #: ``"module:attr"``: ``build(view, placed, options, require_both=) -> deployment`` with
    #: the instances placed as given (what ``deploy_diff`` compares; ``require_both=False``:
    #: a running side may lack a role), through the same launch-line maker as ``deploy``.
    build_at: str
    #: ``"module:attr"``: ``memory_fraction(gpu, release, *, tp, pp, dp_attention, mla,
    #: role)``, the share of GPU memory the engine gives weights and KV cache when the line
    #: names none (``tp``: the GPUs of a pipeline stage).
    memory_fraction_at: str
    #: The fraction depends on the instance's layout and role (SGLang's), so plans size each
    #: kind of instance at its own; False: one value (vLLM's 0.9).
    memory_by_layout: bool = False
    #: The launch flag that states the fraction (``--gpu-memory-utilization``).
    memory_flag: str = "--gpu-memory-utilization"

    @staticmethod
    def _load(at: str) -> Any:
        from importlib import import_module

        module, _, attr = at.partition(":")
        return getattr(import_module(module), attr)

    @property
    def releases(self) -> tuple[str, ...]:
        return tuple(self._load(self.releases_at))

    @property
    def default_version(self) -> str:
        """The release ``<version_option>=None`` means: the newest pdtp knows."""
        return self.releases[-1]

    def deploy(self, view: Any, options: Any) -> Any:
        return self._load(self.deploy_at)(view, options)

    def build(self, view: Any, placed: Any, options: Any, *, require_both: bool = True) -> Any:
        return self._load(self.build_at)(view, placed, options, require_both=require_both)

    def memory_fraction(
        self,
        gpu: GPU,
        release: str | None = None,
        *,
        tp: int = 1,
        pp: int = 1,
        dp_attention: bool = False,
        mla: bool = False,
        role: str = "aggregated",
    ) -> float:
        fn = self._load(self.memory_fraction_at)
        return float(fn(gpu, release, tp=tp, pp=pp, dp_attention=dp_attention, mla=mla, role=role))

    def layout_fraction(
        self, gpu: GPU, release: str | None, layout: Any, role: str, mla: bool
    ) -> float:
        """The fraction of one pdtp layout (``tp`` GPUs per DP rank, ``dp`` ranks, ``pp``
        stages) in ``role``: the engine counts ``tp × dp`` GPUs a stage, DP attention
        when ``dp`` > 1. Where the engine holds back more than the GPU has (SGLang's
        estimate for DP attention over many GPUs), it cannot start: a fraction no weights
        fit in."""
        f = self.memory_fraction(gpu, release, tp=layout.tp * layout.dp, pp=layout.pp,
                                 dp_attention=layout.dp > 1, mla=mla, role=role)  # fmt: skip
        return max(f, MIN_FRACTION)


def _vllm_memory_fraction(gpu: Any, release: Any, **layout: Any) -> float:
    """vLLM's ``--gpu-memory-utilization`` default: 0.9 whatever the GPU and layout."""
    return DEFAULT_UTILIZATION


#: The fraction of an instance the engine cannot start (it holds back all of the GPU).
MIN_FRACTION = 1e-6

#: Every engine pdtp plans for, by name: the one place an engine is registered.
ENGINES: dict[str, Engine] = {
    "vllm": Engine(
        name="vllm",
        label="vLLM",
        version_option="vllm_version",
        releases_at="pdtp.connectors:VLLM_RELEASES",
        deploy_at="pdtp.deployment.build:deploy_vllm",
        build_at="pdtp.deployment.build:build_vllm",
        memory_fraction_at="pdtp.engine:_vllm_memory_fraction",
    ),
    "sglang": Engine(
        name="sglang",
        label="SGLang",
        version_option="sglang_version",
        releases_at="pdtp.deployment.connectors.sglang:SGLANG_RELEASES",
        deploy_at="pdtp.deployment.connectors.sglang_deploy:deploy_plan",
        build_at="pdtp.deployment.connectors.sglang_deploy:build_plan",
        memory_fraction_at="pdtp.deployment.connectors.sglang_memory:mem_fraction_static",
        memory_by_layout=True,
        memory_flag="--mem-fraction-static",
    ),
}
#: The engine a plan or call runs when nothing names another.
DEFAULT_ENGINE = "vllm"


def engine(name: str) -> Engine:
    """The engine named ``name`` (``"vllm"``, ``"sglang"``)."""
    from .errors import UnknownNameError

    try:
        return ENGINES[name]
    except (KeyError, TypeError):
        raise UnknownNameError(
            f"engine must be one of {', '.join(ENGINES)}, got {name!r}"
        ) from None


def register_engine(e: Engine) -> Engine:
    """Add an engine for the rest of the process (its connectors are core objects whose
    ``engine`` is ``e.name``); its name and version keyword must be new."""
    from .errors import InvalidArgumentError

    if e.name in ENGINES or e.version_option in {x.version_option for x in ENGINES.values()}:
        raise InvalidArgumentError(f"engine {e.name!r} or {e.version_option}= is taken")
    ENGINES[e.name] = e
    return e


def version_options() -> tuple[str, ...]:
    """Every engine's release keyword (``vllm_version``, ``sglang_version``)."""
    return tuple(e.version_option for e in ENGINES.values())
