"""``--format k8s``: one YAML file of Kubernetes objects (``pdtp.deployment.k8s``)."""

from __future__ import annotations

from . import Format

FORMAT = Format(
    "k8s",
    "Kubernetes manifests: a StatefulSet and headless Service per role, the proxy",
    lambda d: {f"{d.k8s_options.name}.yaml": d.manifests_yaml()},
)
