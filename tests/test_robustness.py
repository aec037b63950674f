"""Whatever Python values reach the public API, callers get TypeError, ValueError,
OverflowError or a PdtpError — never a Rust panic (``PanicException``) or a crash."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pdtp

ALLOWED = (TypeError, ValueError, OverflowError, pdtp.PdtpError)

anything = st.one_of(
    st.integers(min_value=-3, max_value=70),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([0, -1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 2**70]),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, 1.0, 4.0, -0.0]),
    st.none(),
    st.text(max_size=5),
    st.sampled_from(["4", "moriio", "nixl", ""]),
    st.lists(st.integers(), max_size=2),
)

CALLS = [
    ("remote_tp_rank", 3),
    ("validate_kv_heads", 4),
    ("expected_ack_count", 2),
    ("check", 3),
    ("transfer_map", 2),
]


def call(name: str, args: list[object], extra: dict[str, object]) -> None:
    if name == "check":
        shape_args = args[:1] * 2
        try:
            shape = pdtp.ModelShape(*shape_args)  # type: ignore[arg-type]
        except ALLOWED:
            shape = pdtp.ModelShape(64, 8)
        pdtp.check(shape, args[1], args[2], **extra)  # type: ignore[arg-type]
    elif name == "transfer_map":
        pdtp.transfer_map(args[0], args[1], **extra)  # type: ignore[arg-type]
    else:
        getattr(pdtp, name)(*args)


@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    which=st.sampled_from(CALLS),
    args=st.lists(anything, min_size=4, max_size=4),
    kw=st.dictionaries(
        st.sampled_from(["connector", "max_acks", "kv_heads", "is_mla"]), anything, max_size=3
    ),
)
def test_no_panic_on_any_input(which, args, kw):
    name, arity = which
    extra = dict(kw)
    if name == "check":
        extra.pop("kv_heads", None)
        extra.pop("is_mla", None)
    elif name == "transfer_map":
        extra.pop("max_acks", None)
        extra.setdefault("kv_heads", args[2])
    else:
        extra = {}
    try:
        call(name, list(args[:arity]) if name not in ("check", "transfer_map") else args, extra)
    except ALLOWED:
        pass
    # Anything else (PanicException is a BaseException) fails the test by propagating.


# ---- the planning API: same promise, fewer examples (each call does more work) ----------

planning_values = st.one_of(
    st.integers(min_value=-2, max_value=600),
    st.sampled_from([0, 2**31, 2**63, 2**70, -(2**63)]),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.sampled_from(["", "8", "h100", "llama-3.1-8b", "nixl"]),
)
PLANNING_MODELS = ["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "gemma-2b"]


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    which=st.sampled_from(["solve", "evaluate", "predict_prefill", "predict_decode", "size_for"]),
    model=st.sampled_from(PLANNING_MODELS),
    gpu=st.sampled_from(["mi300x", "h100", "b200", "tpu", 3]),
    values=st.lists(planning_values, min_size=6, max_size=6),
)
def test_planning_api_never_panics(which, model, gpu, values):
    a, b, c, d, e, f = values
    try:
        if which == "solve":
            pdtp.solve(
                model,
                a,
                gpu=gpu,
                max_tp=b,
                max_acks=c,
                time_limit_s=1.0,
                gpu_memory_utilization=d if isinstance(d, float) else 0.9,
                workload={"isl": e, "osl": f} if e is not None else None,
            )
        elif which == "evaluate":
            pdtp.evaluate(
                model,
                gpu=gpu,
                prefill_tp=a,
                prefill_instances=b,
                decode_tp=c,
                decode_instances=d,
                workload={"isl": e, "osl": f},
            )
        elif which == "predict_prefill":
            pdtp.predict_prefill(model, gpu=gpu, tp=a, isl=b)
        elif which == "predict_decode":
            pdtp.predict_decode(model, gpu=gpu, tp=a, isl=b, osl=c, batch=d)
        else:
            pdtp.size_for(model, a, max_gpus=b, gpu=gpu)
    except ALLOWED:
        pass


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "num_attention_heads",
                "num_key_value_heads",
                "hidden_size",
                "num_hidden_layers",
                "intermediate_size",
                "vocab_size",
                "head_dim",
                "num_local_experts",
                "num_experts_per_tok",
                "kv_lora_rank",
                "model_type",
                "torch_dtype",
                "quantization_config",
                "text_config",
                "layer_types",
            ]
        ),
        planning_values,
        max_size=12,
    )
)
def test_config_parser_only_raises_config_errors(cfg):
    base = {
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "intermediate_size": 14336,
        "vocab_size": 128256,
    }
    try:
        m = pdtp.Model.from_hf_config({**base, **cfg})
    except pdtp.ConfigError:
        return
    # Whatever parsed must be plannable without a crash.
    try:
        pdtp.check(m, 1, 1)
        pdtp.solve(m, 8, gpu="h100", method="enumerate")
    except ALLOWED:
        pass
