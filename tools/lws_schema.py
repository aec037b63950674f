#!/usr/bin/env python3
"""Regenerate tests/data/lws/leaderworkerset-v1.schema.json: LeaderWorkerSet's OpenAPI schema.

`pdtp deploy --format k8s` writes a LeaderWorkerSet for instances that span nodes. The
Kubernetes schemas (kubernetes-validate) hold only built-in kinds, so the tests validate
LeaderWorkerSets against the CRD's own ``openAPIV3Schema`` (jsonschema), vendored here with
its ``description`` fields dropped (they are prose, a tenth of the size).

Source: kubernetes-sigs/lws, config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml
at the release tag (Apache-2.0).

    python tools/lws_schema.py                  # v0.10.0 from GitHub
    python tools/lws_schema.py --from crd.yaml  # a local copy of the CRD
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from pathlib import Path
from typing import Any

import yaml

TAG = "v0.10.0"
URL = (
    "https://raw.githubusercontent.com/kubernetes-sigs/lws/{tag}/config/crd/bases/"
    "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
)
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "lws"


def strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(x) for x in node]
    return node


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", default=TAG)
    ap.add_argument("--from", dest="local", type=Path, help="a local copy of the CRD YAML")
    args = ap.parse_args()
    if args.local:
        text = args.local.read_text()
    else:
        with urllib.request.urlopen(URL.format(tag=args.tag), timeout=60) as r:
            text = r.read().decode()
    crd = yaml.safe_load(text)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = strip(version["schema"]["openAPIV3Schema"])
    OUT.mkdir(parents=True, exist_ok=True)
    body = {
        "_source": {
            "repository": "https://github.com/kubernetes-sigs/lws",
            "path": "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
            "tag": args.tag,
            "license": "Apache-2.0",
            "group": crd["spec"]["group"],
            "version": "v1",
            "regenerate": "python tools/lws_schema.py",
        },
        "schema": schema,
    }
    path = OUT / "leaderworkerset-v1.schema.json"
    path.write_text(json.dumps(body, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
