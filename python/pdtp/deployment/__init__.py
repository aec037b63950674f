"""``pdtp deploy``: a plan as something that runs — per-node launch scripts with the proxy,
Kubernetes manifests, or JSON — following the plan's vLLM release, MoRIIO mode and placement.

:func:`pdtp.deploy` makes a :class:`Deployment` of a plan; :func:`pdtp.deploy_diff` lists the
instances to stop and start between two plans. (The package is ``pdtp.deployment`` so that
importing it never replaces the ``pdtp.deploy`` function.)

>>> import pdtp
>>> plan = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x")
>>> d = pdtp.deploy(plan, node_hosts=["10.0.0.1", "10.0.0.2", "10.0.0.3"])
>>> {i.launch.kv_transfer_config["kv_connector_extra_config"]["proxy_ip"] for i in d.instances}
{'10.0.0.1'}
"""

from __future__ import annotations

from .adapter import PlannedInstance, PlanView, view_of
from .build import FORMATS, DeployedInstance, Deployment, K8sOptions, deploy
from .diff import DeployDiff, deploy_diff, replan_diff
from .hosts import HostsNeededError
from .ports import BoundPort, InstancePorts, PortBases
from .versions import NEWEST, OLDEST, Version

__all__ = [
    "FORMATS",
    "NEWEST",
    "OLDEST",
    "BoundPort",
    "DeployDiff",
    "DeployedInstance",
    "Deployment",
    "HostsNeededError",
    "InstancePorts",
    "K8sOptions",
    "PlanView",
    "PlannedInstance",
    "PortBases",
    "Version",
    "deploy",
    "deploy_diff",
    "replan_diff",
    "view_of",
]
