"""Adoption against the real API server: the switch from kubernetes-reflector or
kubernetes-replicator without a gap (issue 41, "Done when").

The old tool's sources are annotated as its users annotate them, and its mirrors written in
50 namespaces exactly as it writes them (configmirror_testing.othertools: each tool's marks
and content, at the file and line of its source that writes them); the old tool itself is
stopped, as the guide says (docs/migration.md). Then `configmirror migrate -o yaml` is
applied, and an operator that adopts from that tool (`configmirror.io/adopt` on the source,
or `--adopt-from`) takes every mirror over: one merge patch each, the object (its uid) kept,
never a DELETED event for it, `configmirror wait` exits 0, and none of the old tool's marks
is left.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from configmirror.replication.adoption import RF, RP
from configmirror.replication.spec import ADOPT
from configmirror_testing import othertools
from configmirror_testing.cluster import Cluster, Namespaces, unique_name
from configmirror_testing.e2e import Operators, events, operator_writes
from configmirror_testing.objects import configmap
from configmirror_testing.wait import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.operator_process]

MIRRORS = 50
SOURCE_ANNOTATIONS = {
    # kubernetes-reflector: Annotations.cs, lines 9-14 (auto-reflection needs both pairs:
    # MirroringPropertiesExtensions.cs, CanBeAutoReflectedToNamespace).
    "reflector": lambda base: {RF + "reflection-allowed": "true",
                               RF + "reflection-allowed-namespaces": f"{base}-t.*",
                               RF + "reflection-auto-enabled": "true",
                               RF + "reflection-auto-namespaces": f"{base}-t.*"},
    # kubernetes-replicator: consts.go, line 11.
    "kubernetes-replicator": lambda base: {RP + "replicate-to": f"{base}-t.*"},
}


class Deletions:
    """A watch of every ConfigMap named `name`, in every namespace, from `since`: the
    DELETED events it sees, and how many events in all (a thread of the test's own,
    stopped and joined by it)."""

    def __init__(self, core: client.CoreV1Api, name: str, since: str) -> None:
        self.deleted: list[str] = []
        self.modified: set[str] = set()
        self._core, self._name, self._since = core, name, since
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="deletions-watch")

    def __enter__(self) -> Deletions:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the watch did not stop"

    def _run(self) -> None:
        while not self._stop.is_set():
            stream = watch.Watch()
            for event in stream.stream(
                    self._core.list_config_map_for_all_namespaces,
                    field_selector=f"metadata.name={self._name}", resource_version=self._since,
                    timeout_seconds=2, _request_timeout=10):
                meta = event["object"].metadata
                self._since = meta.resource_version
                where = f"{meta.namespace}/{meta.name}"
                if event["type"] == "DELETED":
                    self.deleted.append(where)
                elif event["type"] == "MODIFIED":
                    self.modified.add(meta.namespace)
                if self._stop.is_set():
                    stream.stop()


def configmirror(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "configmirror", *args,
                           "--kubeconfig", str(cluster.kubeconfig)],
                          capture_output=True, text=True, timeout=120, check=False)


def marks_left(cm: client.V1ConfigMap, tool: str) -> list[str]:
    prefix = othertools.marks(tool)
    return [k for k in (cm.metadata.annotations or {}) if k.startswith(prefix)]


@pytest.mark.parametrize(("tool", "by"), [("reflector", "annotation"),
                                          ("kubernetes-replicator", "flag")])
def test_the_switch_keeps_every_mirror_and_patches_each_once(
        cluster: Cluster, namespaces: Namespaces, operators: Operators, tool: str,
        by: str) -> None:
    base = unique_name("adopt")
    home = namespaces(name=f"{base}-platform")
    targets = namespaces.many(MIRRORS, names=[f"{base}-t{i:02d}" for i in range(MIRRORS)])
    core = cluster.core
    notes = SOURCE_ANNOTATIONS[tool](base)
    if by == "annotation":
        notes[ADOPT] = tool
    source = core.create_namespaced_config_map(home, configmap(
        "ca", notes, data={"ca.crt": "pem", "mode": "strict"}, labels={"team": "platform"}))
    body = cluster.core.api_client.sanitize_for_serialization(source)
    made = (othertools.reflector_mirror if tool == "reflector" else othertools.replicator_copy)
    uids = {ns: core.create_namespaced_config_map(ns, made(body, ns)).metadata.uid
            for ns in targets}
    since = core.list_config_map_for_all_namespaces(
        field_selector="metadata.name=ca").metadata.resource_version

    with Deletions(core, "ca", since) as watched:
        flags = [f"--adopt-from={tool}"] if by == "flag" else []
        operator = operators(*flags)
        migrated = configmirror(cluster, "migrate", "--from", tool, "-o", "yaml")
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        assert [d for d in yaml.safe_load_all(migrated.stdout) if d], migrated.stdout
        cluster.require_plane().kubectl("apply", "--server-side", "-f", "-",
                                        input=migrated.stdout)
        waited = configmirror(cluster, "wait", f"{home}/ca", "--timeout=60s", *flags)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        operator.wait_idle()
        # The watch saw the switch: every mirror changed once it was watching.
        wait_for(lambda: watched.modified >= set(targets), timeout=10,
                 what="the watch to see every adoption")
    assert watched.deleted == [], "a mirror went missing during the switch"

    for ns in targets:
        cm = core.read_namespaced_config_map("ca", ns)
        assert cm.metadata.uid == uids[ns], f"{ns}/ca was recreated"
        assert marks_left(cm, tool) == [], f"{ns}/ca keeps {tool}'s marks"
        assert cm.metadata.annotations["configmirror.io/replica-of"] == f"{home}/ca"
        assert cm.data == {"ca.crt": "pem", "mode": "strict"}
    writes = operator_writes(cluster, targets)
    assert sorted((w["verb"], w["objectRef"]["namespace"]) for w in writes) == [
        ("patch", ns) for ns in sorted(targets)], "one patch per mirror, nothing else"
    assert operator.metric("configmirror_replica_writes_total", action="adopt") == MIRRORS
    assert operator.writes() == MIRRORS
    said = " ".join(e.message for e in events(cluster, home, "ca", "Replicated"))
    assert "adopted" in said, said
    assert not events(cluster, home, "ca", "TargetConflict")


def test_plan_says_adopt_a_stale_mirror_is_updated_a_foreign_and_an_ambiguous_one_left(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    base = unique_name("adopt2")
    home, other = namespaces(name=f"{base}-platform"), namespaces(name=f"{base}-other")
    same, stale, foreign, shared = (namespaces(name=f"{base}-{n}")
                                    for n in ("same", "stale", "mine", "both"))
    core = cluster.core
    tool = "kubernetes-replicator"
    push = {"configmirror.io/replicate-to": f"{base}-same,{base}-stale,{base}-mine,{base}-both",
            ADOPT: tool}
    source = core.create_namespaced_config_map(home, configmap("ca", push, data={"k": "new"}))
    # Another source of the name that also targets `shared`: either could have made its copy.
    core.create_namespaced_config_map(other, configmap(
        "ca", {"configmirror.io/replicate-to": f"{base}-both"}, data={"k": "new"}))
    body: dict[str, Any] = cluster.core.api_client.sanitize_for_serialization(source)
    old = {**body, "data": {"k": "old"}}
    uid = core.create_namespaced_config_map(stale, othertools.replicator_copy(old, stale)
                                            ).metadata.uid
    core.create_namespaced_config_map(foreign, configmap("ca", data={"k": "mine"}))
    core.create_namespaced_config_map(shared, othertools.replicator_copy(body, shared))
    kept = core.create_namespaced_config_map(same, othertools.replicator_copy(body, same)
                                             ).metadata.uid
    planned = configmirror(cluster, "plan", f"{home}/ca")
    assert planned.returncode != 0, planned.stdout + planned.stderr
    assert f"  adopt    {same}/ca  (" in planned.stdout, planned.stdout
    assert f"  update   {stale}/ca  (adopts {tool}'s mirror" in planned.stdout, planned.stdout
    status = configmirror(cluster, "status", f"{home}/ca", "-o", "json")
    assert yaml.safe_load(status.stdout)["sources"][0]["adopting"] == 2, status.stdout
    operator = operators()

    def updated() -> client.V1ConfigMap | None:
        cm = core.read_namespaced_config_map("ca", stale)
        return cm if cm.data == {"k": "new"} else None
    cm = wait_for(updated, what="the stale copy to be adopted")
    assert cm.metadata.uid == uid and marks_left(cm, tool) == []
    operator.wait_idle()
    adopted = core.read_namespaced_config_map("ca", same)
    assert adopted.metadata.uid == kept and marks_left(adopted, tool) == []
    assert core.read_namespaced_config_map("ca", foreign).data == {"k": "mine"}
    assert marks_left(core.read_namespaced_config_map("ca", shared), tool)
    writes = operator_writes(cluster, [same, stale, foreign, shared])
    assert sorted((w["verb"], w["objectRef"]["namespace"]) for w in writes) == [
        ("patch", same), ("update", stale)]
    for where in (home, other):
        said = [e.message for e in events(cluster, where, "ca", "TargetConflict")]
        assert any("could each have made it" in m for m in said), said
    said = [e.message for e in events(cluster, home, "ca", "TargetConflict")]
    assert any(f"{foreign}/ca exists and is not a replica" in m for m in said), said
