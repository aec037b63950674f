"""Refresh tests/data/vllm-architectures.json and tests/data/hf-class-defaults.json.

    pip download vllm==0.33.0 --no-deps -d /tmp/w && unzip -q /tmp/w/vllm-*.whl \\
        'vllm/model_executor/models/registry.py' -d /tmp/w
    python -m venv /tmp/tv && /tmp/tv/bin/pip install transformers==5.24.0   # no torch needed
    /tmp/tv/bin/python tools/hf_config_defaults.py /tmp/w/vllm/model_executor/models/registry.py

vllm-architectures.json: the decoder architectures of vLLM's model registry (text generation,
multimodal, Transformers-backend text models) with the module vLLM loads for each.
hf-class-defaults.json: for each of them that transformers has a config class for, that
class's default config (its flagship checkpoint's shape), as ``config.to_dict()``.
pdtp never imports transformers or vLLM; this script is the only place they are read.
"""

from __future__ import annotations

import ast
import json
import pathlib
import sys
import warnings

DATA = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data"
GROUPS = ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS", "_TRANSFORMERS_SUPPORTED_MODELS")
# Keys of no use to pdtp that make the file large (label maps, vision/audio towers).
DROP = {
    "id2label",
    "label2id",
    "vision_config",
    "audio_config",
    "talker_config",
    "code2wav_config",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "problem_type",
    "_name_or_path",
    "transformers_version",
    "tokenizer_class",
    "task_specific_params",
}


def registry(path: pathlib.Path) -> dict[str, dict[str, str]]:
    tree = ast.parse(path.read_text())
    out: dict[str, dict[str, str]] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id in GROUPS:
            for k, v in zip(node.value.keys, node.value.values):  # type: ignore[union-attr]
                if k is not None:
                    out[k.value] = {
                        "group": target.id.strip("_").lower(),
                        "module": v.elts[0].value,
                    }
    return out


def strip(x: object) -> object:
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in DROP}
    return x


def main(registry_py: str) -> None:
    warnings.filterwarnings("ignore")
    import transformers
    import transformers.models.auto.configuration_auto as ca
    import transformers.models.auto.modeling_auto as ma

    archs = registry(pathlib.Path(registry_py))
    arch_to_type: dict[str, str] = {}
    for name in dir(ma):
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES"):
            for mt, cls in getattr(ma, name).items():
                for c in cls if isinstance(cls, list | tuple) else [cls]:
                    arch_to_type.setdefault(c, mt)
    defaults = {}
    for arch in sorted(archs):
        mt = arch_to_type.get(arch)
        if mt is None:
            continue
        try:
            cfg = ca.CONFIG_MAPPING[mt]().to_dict()
        except Exception:  # a config class that needs arguments has no defaults to use
            continue
        cfg["architectures"] = [arch]
        defaults[arch] = strip(cfg)
    (DATA / "vllm-architectures.json").write_text(
        json.dumps({"vllm": "0.33.0", "architectures": archs}, indent=1, sort_keys=True) + "\n"
    )
    (DATA / "hf-class-defaults.json").write_text(
        json.dumps(
            {"transformers": transformers.__version__, "defaults": defaults},
            sort_keys=True,
            separators=(",", ":"),
        )
        + "\n"
    )
    print(f"{len(archs)} architectures, {len(defaults)} with transformers defaults")


if __name__ == "__main__":
    main(sys.argv[1])
