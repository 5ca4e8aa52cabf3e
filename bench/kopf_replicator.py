"""A minimal kopf operator doing configmirror's job (bench only, for bench_kopf.py).

It is what a kopf user would write: one handler on create/update/resume of an annotated
ConfigMap that lists namespaces, then creates (or replaces) the copy in each one that
matches the `configmirror.io/replicate-to` glob. Sync handlers run on kopf's thread pool,
sized like configmirror's workers (KOPF_BENCH_WORKERS).
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any

import kopf
import kubernetes

kubernetes.config.load_kube_config(os.environ["KUBECONFIG"])
_client = kubernetes.client.ApiClient()
_client.user_agent = "kopf-bench-handler"
core = kubernetes.client.CoreV1Api(_client)
ANNOTATION = "configmirror.io/replicate-to"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.execution.max_workers = int(os.environ.get("KOPF_BENCH_WORKERS", "4"))
    settings.posting.level = 100  # no Events: configmirror posts one per reconcile; close enough


@kopf.on.resume("configmaps", annotations={ANNOTATION: kopf.PRESENT})
@kopf.on.create("configmaps", annotations={ANNOTATION: kopf.PRESENT})
@kopf.on.update("configmaps", annotations={ANNOTATION: kopf.PRESENT})
def replicate(body: kopf.Body, name: str, namespace: str, **_: Any) -> None:
    pattern = body.metadata.annotations[ANNOTATION]
    targets = [ns.metadata.name for ns in core.list_namespace().items
               if fnmatch.fnmatchcase(ns.metadata.name, pattern) and ns.metadata.name != namespace]
    for target in targets:
        replica = kubernetes.client.V1ConfigMap(
            metadata=kubernetes.client.V1ObjectMeta(
                name=name, namespace=target,
                labels={"configmirror.io/replica": "true"},
                annotations={"configmirror.io/replica-of": f"{namespace}/{name}"}),
            data=dict(body.get("data") or {}))
        try:
            core.create_namespaced_config_map(target, replica)
        except kubernetes.client.ApiException as err:
            if err.status != 409:
                raise
            core.replace_namespaced_config_map(name, target, replica)
