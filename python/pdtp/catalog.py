"""The built-in offline catalog of models and GPUs, and name resolution for both.

The JSON files under ``pdtp/data`` are read on first use (never at import time) and every
model entry goes through :meth:`Model.from_hf_config`, the same parser as user configs.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ._gpu import GPU
from ._model import Model
from ._validate import public_api
from .errors import ConfigError, UnknownNameError

__all__ = ["gpu", "gpus", "model", "model_source", "models", "resolve_model"]


@public_api
def model(
    name: str | Model, *, weight_dtype: str | None = None, kv_dtype: str | None = None
) -> Model:
    """A catalog model by short name (``"llama-3.1-70b"``), HF id or alias, case-insensitive.
    A :class:`Model` passes through. ``weight_dtype`` / ``kv_dtype`` serve it another way
    (e.g. ``"fp8"`` for vLLM ``--quantization fp8`` / ``--kv-cache-dtype fp8``).

    An ``org/name`` id outside the catalog is looked up on the Hugging Face Hub when
    ``huggingface_hub`` is installed (``pip install 'pdtp[hub]'``; see :mod:`pdtp.hub`).
    The returned model's ``serve_ref`` is what ``vllm serve`` should load: the HF id as given
    (an instruct alias stays instruct) or, for a short catalog name, the canonical id.
    """
    if isinstance(name, Model):
        found = name
    else:
        if not isinstance(name, str):
            raise UnknownNameError(f"model name must be a string, got {type(name).__name__}")
        found = _named_model(name)
    return found.with_dtypes(weight_dtype=weight_dtype, kv_dtype=kv_dtype)


def _named_model(name: str) -> Model:
    """A catalog entry (serving the HF id exactly as given), else a Hub lookup for an
    ``org/name`` id, else :class:`UnknownNameError`."""
    index = _lookup(_model_index(), name)
    if index is not None:
        found = _catalog_model(index)
        given = name.strip()
        if "/" in given and given != found.serve_ref:
            # An HF id the catalog knows as an alias (e.g. the instruct variant of a base
            # model: same shape): serve exactly that id.
            return replace(
                found,
                serve_ref=given,
                serve_note=f"{given} has the shape of pdtp catalog model {found.name!r}",
            )
        return found
    from . import hub

    if hub.looks_like_hf_id(name.strip()):
        repo_id = name.strip()
        try:
            folder = hub.fetch_config(repo_id)
        except UnknownNameError as exc:  # say what the catalog has as well as why
            raise UnknownNameError(
                f"{_unknown('model', name, _model_index(), _model_names())} {exc}"
            ) from None
        return Model.from_hf_config(
            folder,
            name=repo_id,
            hf_id=repo_id,
            serve_ref=repo_id,
        )
    raise UnknownNameError(_unknown("model", name, _model_index(), _model_names()))


def models() -> list[Model]:
    """Every catalog model, sorted by name."""
    return sorted((_catalog_model(i) for i in range(len(_model_entries()))), key=lambda m: m.name)


def model_source(name: str | Model) -> tuple[str, bool]:
    """Where a catalog model's shape numbers come from, and whether a primary copy of its
    config was found (``False``: only secondary transcriptions)."""
    key = name.name if isinstance(name, Model) else name
    index = _lookup(_model_index(), key)
    if index is None:
        raise UnknownNameError(_unknown("model", key, _model_index(), _model_names()))
    entry = _model_entries()[index]
    return str(entry.get("source", "")), bool(entry.get("verified", True))


@public_api
def gpu(name: str | GPU) -> GPU:
    """A catalog GPU by short name (``"mi300x"``) or alias (``"H100-SXM"``, ``"a100-80gb"``),
    case-insensitive. A :class:`GPU` passes through."""
    if isinstance(name, GPU):
        return name
    if not isinstance(name, str):
        raise UnknownNameError(f"GPU name must be a string, got {type(name).__name__}")
    index = _lookup(_gpu_index(), name)
    if index is None:
        raise UnknownNameError(_unknown("GPU", name, _gpu_index(), [g.name for g in gpus()]))
    return _gpus()[index]


def gpus() -> list[GPU]:
    """Every catalog GPU, sorted by name."""
    return sorted(_gpus(), key=lambda g: g.name)


def resolve_model(
    x: Model | str | os.PathLike[str] | Mapping[str, Any],
    *,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
) -> Model:
    """Whatever a user passes as "model": a :class:`Model`, a catalog name, an HF id, a config
    dict, a path to ``config.json`` or a model folder, or JSON text.

    The result's ``serve_ref`` is what launch lines must serve: the HF id exactly as given,
    the canonical id of a short catalog name (``serve_note`` says so), or the absolute path of
    a local config folder. A path that does not exist is reported as a missing file
    (:class:`ConfigError`), an unknown ``org/name`` is looked up on the Hub when
    ``huggingface_hub`` is installed, anything else is an unknown name.
    """
    if isinstance(x, Model):
        return x.with_dtypes(weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    if isinstance(x, Mapping | os.PathLike):
        return Model.from_hf_config(x, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    if not isinstance(x, str):
        raise ConfigError(
            f"model must be a Model, a catalog name, an HF id, a dict, a path or JSON text; "
            f"got {type(x).__name__}"
        )
    if x.lstrip().startswith("{"):
        return Model.from_hf_config(x, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    if _lookup(_model_index(), x) is None and (os.path.exists(x) or _looks_like_path(x)):
        # Model.from_hf_config reports a missing path as a missing file, not a model name.
        return Model.from_hf_config(x, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    try:
        found = _named_model(x)
    except UnknownNameError as exc:
        from .hub import how_to_pass_the_file, looks_like_hf_id

        if looks_like_hf_id(x.strip()):
            raise
        raise UnknownNameError(
            f"{exc} For a model outside the catalog, " + how_to_pass_the_file("org/name")
        ) from None
    return found.with_dtypes(weight_dtype=weight_dtype, kv_dtype=kv_dtype)


def _looks_like_path(x: str) -> bool:
    """Written as a file or folder rather than a name: ``./x``, ``../x``, ``/x``, ``~/x``,
    ``x.json``, or more than one path separator (an HF id has exactly one '/')."""
    s = x.strip()
    return (
        s.startswith((".", "/", "~"))
        or s.endswith(".json")
        or s.count("/") > 1
        or (os.sep != "/" and os.sep in s)
    )


# --------------------------------------------------------------------------------------------
# Loading (lazy, once per process)
# --------------------------------------------------------------------------------------------


def _read_data(filename: str) -> Any:
    # importlib.resources works from wheels and zips as well as source trees; imported here so
    # that importing pdtp stays cheap.
    from importlib import resources

    text = (
        resources.files(__package__ or "pdtp")
        .joinpath("data", filename)
        .read_text(encoding="utf-8")
    )
    return json.loads(text)


@functools.cache
def _model_entries() -> tuple[Mapping[str, Any], ...]:
    return tuple(_read_data("models.json")["models"])


@functools.cache
def _catalog_model(index: int) -> Model:
    entry = _model_entries()[index]
    label = f"pdtp catalog model {entry['name']!r}"
    hf_id = entry.get("hf_id")
    try:
        found = Model.from_hf_config(
            entry["config"],
            name=entry["name"],
            weight_dtype=entry.get("weight_dtype"),
            hf_id=hf_id,
            aliases=tuple(entry.get("aliases", ())),
            serve_ref=hf_id,
        )
    except ConfigError as exc:  # a broken data file is a bug in pdtp, say where
        raise ConfigError(f"{label}: {exc}") from None
    if hf_id:
        note = f"pdtp catalog model {found.name!r} is the Hugging Face model {hf_id}"
        found = replace(found, serve_note=note)
    return found


def _normalize(name: str) -> str:
    return name.strip().lower()


def _loose(name: str) -> str:
    # "H100_SXM", "h100 sxm" and "h100-sxm" are the same request.
    return _normalize(name).replace("_", "-").replace(" ", "-")


def _build_index(entries: list[tuple[int, list[str]]], kind: str) -> dict[str, int]:
    index: dict[str, int] = {}
    for position, keys in entries:
        for key in keys:
            for form in {_normalize(key), _loose(key)}:
                if index.setdefault(form, position) != position:
                    raise ConfigError(f"pdtp {kind} catalog: {key!r} names two entries")
    return index


@functools.cache
def _model_index() -> dict[str, int]:
    entries = []
    for i, e in enumerate(_model_entries()):
        keys = [e["name"], *e.get("aliases", ())]
        if e.get("hf_id"):
            keys.append(e["hf_id"])
        entries.append((i, keys))
    return _build_index(entries, "model")


@functools.cache
def _model_names() -> list[str]:
    return sorted(e["name"] for e in _model_entries())


@functools.cache
def _gpus() -> tuple[GPU, ...]:
    out = []
    for e in _read_data("gpus.json")["gpus"]:
        out.append(
            GPU(
                name=e["name"],
                display_name=e["display_name"],
                vendor=e["vendor"],
                memory_bytes=int(e["memory_mib"]) * 2**20,
                hbm_bandwidth=_si(e["hbm_bandwidth_tbs"], 12),
                bf16_flops=_si(e["bf16_dense_tflops"], 12),
                fp8_flops=_opt_si(e.get("fp8_dense_tflops"), 12),
                fp4_flops=_opt_si(e.get("fp4_dense_tflops"), 12),
                int8_flops=_opt_si(e.get("int8_dense_tops"), 12),
                link_bandwidth=_si(e["link_bandwidth_gbs"], 9),
                gpus_per_node=int(e["gpus_per_node"]),
                scaleup_gpus=int(e["scaleup_gpus"]),
                scaleout_bandwidth=_si(e["scaleout_bandwidth_gbs"], 9),
                scaleout_latency=float(e["scaleout_latency_us"]) * 1e-6,
                scaleout_source=e["scaleout_source"],
                aliases=tuple(e.get("aliases", ())),
                source=e["source"],
                arch=e.get("arch", ""),
                verified=bool(e.get("verified", True)),
                price_per_hour=(e.get("price") or {}).get("usd_per_gpu_hour"),
                price_source=_price_source(e.get("price")),
            )
        )
    return tuple(out)


def _price_source(price: Any) -> str:
    if not price:
        return ""
    date = price.get("as_of")
    return f"{price.get('source', '')}" + (f" (as of {date})" if date else "")


def _si(value: float, exponent: int) -> float:
    # Parse "2.039e12" rather than multiply 2.039 * 1e12, which is off by a rounding error.
    return float(f"{value!r}e{exponent}")


def _opt_si(value: float | None, exponent: int) -> float | None:
    return None if value is None else _si(value, exponent)


@functools.cache
def _gpu_index() -> dict[str, int]:
    return _build_index(
        [(i, [g.name, g.display_name, *g.aliases]) for i, g in enumerate(_gpus())], "GPU"
    )


def _lookup(index: Mapping[str, int], name: str) -> int | None:
    hit = index.get(_normalize(name))
    return hit if hit is not None else index.get(_loose(name))


def _unknown(kind: str, name: str, index: Mapping[str, int], names: list[str]) -> str:
    import difflib

    # Match against every spelling (HF ids included) but report canonical short names.
    by_position = {pos: n for n, pos in _canonical(index, names).items()}
    close = difflib.get_close_matches(_loose(name), list(index), n=12, cutoff=0.5)
    seen: list[str] = []
    for key in close:
        canon = by_position[index[key]]
        if canon not in seen:
            seen.append(canon)
    if not seen:
        seen = difflib.get_close_matches(_loose(name), names, n=5, cutoff=0.0)
    return (
        f"unknown {kind} {name!r}; closest: {', '.join(seen[:5])} "
        f"(all {len(names)}: pdtp.{'models' if kind == 'model' else 'gpus'}())."
    )


def _canonical(index: Mapping[str, int], names: list[str]) -> dict[str, int]:
    return {n: index[_normalize(n)] for n in names}
