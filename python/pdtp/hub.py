"""Optional online lookup: a model's ``config.json`` from the Hugging Face Hub.

``pdtp.model("org/name")`` and ``pdtp solve org/name`` use it for ids outside the built-in
catalog. It needs the ``huggingface_hub`` package (``pip install 'pdtp[hub]'``), imported only
here and only when a lookup happens. Downloads land in the Hugging Face cache (``HF_HOME``),
so a second lookup reads the cache, and ``HF_HUB_OFFLINE=1`` is honoured: cached files are
used, nothing is fetched. Without the package, offline with an empty cache, or with no
network, the error says how to pass the file instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any

from ._model import HF_ID_PATTERN
from .errors import UnknownNameError

__all__ = ["SIDECAR_FILES", "fetch_config", "how_to_pass_the_file", "looks_like_hf_id"]

# Files beside config.json that change how pdtp sizes the model (ModelOpt quantization).
SIDECAR_FILES: tuple[str, ...] = ("hf_quant_config.json",)


def looks_like_hf_id(name: str) -> bool:
    """``org/name`` with the Hub's characters, and not a path that exists here."""
    return bool(HF_ID_PATTERN.match(name)) and ".." not in name and not os.path.exists(name)


def how_to_pass_the_file(name: str) -> str:
    return (
        f"pass its config.json instead: `pdtp solve --config path/to/config.json ...` or "
        f"`pdtp.Model.from_hf_config('path/to/config.json')` (download it from "
        f"https://huggingface.co/{name}/blob/main/config.json)"
    )


def fetch_config(repo_id: str, *, revision: str | None = None) -> str:
    """Download (or find in the cache) ``config.json`` and any quantization sidecar of
    ``repo_id``; returns the local folder holding them, for :meth:`Model.from_hf_config`.

    Raises :class:`UnknownNameError` saying why the lookup failed and how to pass the file.
    """
    if not isinstance(repo_id, str) or not HF_ID_PATTERN.match(repo_id):
        raise UnknownNameError(
            f"{repo_id!r} is not a Hugging Face model id (expected 'org/name'); "
            + how_to_pass_the_file("org/name")
        )
    return _fetch(repo_id, revision)


# The exception classes pdtp tells apart, by name. huggingface_hub 0.24 defines most of them
# in ``huggingface_hub.utils`` (its ``errors`` module has only a few); 1.x and 2.x define all
# of them in ``huggingface_hub.errors`` and re-export them from ``utils``.
_ERROR_NAMES = (
    "OfflineModeIsEnabled",
    "LocalEntryNotFoundError",
    "GatedRepoError",
    "RepositoryNotFoundError",
    "RevisionNotFoundError",
    "EntryNotFoundError",
    "HfHubHTTPError",
)


class _NeverRaised(Exception):
    """Stands in for an error class a huggingface_hub release does not define."""


class _HubErrors:
    """The client's error classes by name, found in ``errors`` or ``utils``."""

    def __init__(self, modules: list[Any]) -> None:
        for name in _ERROR_NAMES:
            found = next((getattr(m, name) for m in modules if hasattr(m, name)), _NeverRaised)
            setattr(self, name, found if isinstance(found, type) else _NeverRaised)

    def __getattr__(self, name: str) -> type[BaseException]:  # for mypy: set in __init__
        raise AttributeError(name)


def _hub_api() -> tuple[Any, str, Any]:
    """(``hf_hub_download``, the Hub endpoint, the error classes) from whichever
    huggingface_hub is installed, 0.24 through 2.x. ``import huggingface_hub`` does not load
    its ``constants`` submodule in 2.x (attribute access is lazy and ``constants`` is not in
    its table), so submodules are imported by name."""
    import importlib

    import huggingface_hub

    modules = []
    for sub in ("errors", "utils"):
        with contextlib.suppress(ImportError):
            modules.append(importlib.import_module(f"huggingface_hub.{sub}"))
    try:
        endpoint = str(importlib.import_module("huggingface_hub.constants").ENDPOINT)
    except (ImportError, AttributeError):
        endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    download = getattr(huggingface_hub, "hf_hub_download", None)
    if download is None:
        raise ImportError("huggingface_hub has no hf_hub_download")
    return download, endpoint, _HubErrors(modules)


@functools.lru_cache(maxsize=64)
def _fetch(repo_id: str, revision: str | None) -> str:
    try:
        hf_hub_download, endpoint, hf_errors = _hub_api()
    except Exception:  # not installed, or a build too broken to import
        raise UnknownNameError(
            f"{repo_id!r} is not in pdtp's catalog, and looking it up on the Hugging Face Hub "
            f"needs the huggingface_hub package (pip install 'pdtp[hub]'); "
            + how_to_pass_the_file(repo_id)
        ) from None

    # Offline (HF_HUB_OFFLINE) or with the Hub unreachable, read the cache only: the client's
    # own retries would otherwise stall for half a minute before failing.
    cache_only = _offline() or not _reachable(endpoint)

    def download(filename: str) -> str:
        path = hf_hub_download(repo_id, filename, revision=revision, local_files_only=cache_only)
        if not isinstance(path, str | os.PathLike):
            raise ValueError(f"hf_hub_download returned {type(path).__name__}, not a path")
        return os.fspath(path)

    try:
        config = download("config.json")
    except (hf_errors.OfflineModeIsEnabled, hf_errors.LocalEntryNotFoundError):
        why = (
            "HF_HUB_OFFLINE is set and its config.json is not in the local Hugging Face cache"
            if _offline()
            else "the Hugging Face Hub cannot be reached and its config.json is not cached"
        )
        raise UnknownNameError(
            f"{repo_id!r} is not in pdtp's catalog and {why}; " + how_to_pass_the_file(repo_id)
        ) from None
    except hf_errors.GatedRepoError:
        raise UnknownNameError(
            f"{repo_id!r} is a gated repository on the Hugging Face Hub: accept its license and "
            f"log in (`hf auth login` or HF_TOKEN), or " + how_to_pass_the_file(repo_id)
        ) from None
    except (hf_errors.RepositoryNotFoundError, hf_errors.RevisionNotFoundError):
        raise UnknownNameError(
            f"{repo_id!r} is neither in pdtp's catalog nor a model repository on the Hugging "
            f"Face Hub (check the spelling: ids are 'org/name'); or "
            + how_to_pass_the_file(repo_id)
        ) from None
    except hf_errors.EntryNotFoundError:
        raise UnknownNameError(
            f"{repo_id!r} on the Hugging Face Hub has no config.json (not a transformers "
            f"checkpoint?); " + how_to_pass_the_file(repo_id)
        ) from None
    except Exception as exc:  # HTTP (requests or httpx), OS, a client's own: all one error
        raise UnknownNameError(
            f"{repo_id!r}: looking up config.json on the Hugging Face Hub failed "
            f"({type(exc).__name__}: {_first_line(exc)}); " + how_to_pass_the_file(repo_id)
        ) from None
    for sidecar in SIDECAR_FILES:
        try:
            download(sidecar)  # lands in the same snapshot folder as config.json
        except (hf_errors.EntryNotFoundError, hf_errors.LocalEntryNotFoundError):
            pass  # most checkpoints have none; offline, only a cached one can be used
        except Exception as exc:
            raise UnknownNameError(
                f"{repo_id!r}: fetching {sidecar} from the Hugging Face Hub failed "
                f"({type(exc).__name__}: {_first_line(exc)}), so its quantization is unknown; "
                + how_to_pass_the_file(repo_id)
            ) from None
    return os.path.dirname(config)


def _reachable(endpoint: str, timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub endpoint opens within ``timeout_s``."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint)
    host = parts.hostname
    if not host:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _first_line(exc: Any) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""
