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
