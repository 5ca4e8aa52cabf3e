"""How the image's pod test turns deploy/'s pod template into `docker run`
(configmirror_testing.pod): every field as a kubelet would run it, any other field refused."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from configmirror_testing.cluster import REPO
from configmirror_testing.pod import PodSpecError, PodTemplate, memory_bytes, milli_cpu

DEPLOYMENT = yaml.safe_load((REPO / "deploy" / "deployment.yaml").read_text())


def template(edit: Any = None, namespace: str = "configmirror") -> PodTemplate:
    doc = copy.deepcopy(DEPLOYMENT)
    doc["metadata"]["namespace"] = namespace
    if edit is not None:
        edit(doc["spec"]["template"]["spec"])
    return PodTemplate.from_manifests([doc], "configmirror")


def run_args(tpl: PodTemplate, writable_root: bool = False) -> list[str]:
    return tpl.docker_run_args("pod-a", "img:1", "65532:65532", {"KUBERNETES_SERVICE_PORT": "1"},
                               {Path("/sa"): "/var/run/secrets/x"}, writable_root)


def flag_values(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


@pytest.mark.parametrize(("quantity", "expected"), [
    ("256Mi", 256 * 2**20), ("1Gi", 2**30), ("1G", 10**9), ("128974848", 128974848),
    ("0.5Gi", 2**29)])
def test_memory_quantities(quantity: str, expected: int) -> None:
    assert memory_bytes(quantity) == expected


@pytest.mark.parametrize(("quantity", "expected"), [("50m", 50), ("1", 1000), ("0.25", 250)])
def test_cpu_quantities(quantity: str, expected: int) -> None:
    assert milli_cpu(quantity) == expected


def test_args_follow_the_image_and_fieldref_env_resolves_to_the_namespace() -> None:
    args = run_args(template(namespace="ops"))
    container = DEPLOYMENT["spec"]["template"]["spec"]["containers"][0]
    image_at = args.index("img:1")
    assert args[image_at + 1:] == container["args"]
    assert "CONFIGMIRROR_LEADER_ELECTION_NAMESPACE=ops" in flag_values(args, "--env")
    assert "KUBERNETES_SERVICE_PORT=1" in flag_values(args, "--env")


def test_security_context_and_limits_become_docker_flags() -> None:
    args = run_args(template())
    assert flag_values(args, "--user") == ["65532:65532"]
    assert "--read-only" in args
    assert flag_values(args, "--cap-drop") == ["ALL"]
    assert flag_values(args, "--security-opt") == ["no-new-privileges"]
    assert flag_values(args, "--memory") == [str(256 * 2**20)]
    assert flag_values(args, "--cpu-shares") == ["51"]  # 50m, as the kubelet computes it
    assert flag_values(args, "--volume") == ["/sa:/var/run/secrets/x:ro"]


def test_writable_root_drops_only_the_read_only_flag() -> None:
    strict, writable = run_args(template()), run_args(template(), writable_root=True)
    assert [a for a in strict if a != "--read-only"] == writable


def test_command_replaces_the_entrypoint() -> None:
    def edit(spec: dict[str, Any]) -> None:
        spec["containers"][0]["command"] = ["python3", "-m", "configmirror"]

    args = run_args(template(edit))
    assert flag_values(args, "--entrypoint") == ["python3"]
    assert args[args.index("img:1") + 1:][:3] == ["-m", "configmirror", "run"]


def test_run_as_non_root_refuses_root() -> None:
    def edit(spec: dict[str, Any]) -> None:
        spec["securityContext"]["runAsUser"] = 0

    with pytest.raises(PodSpecError, match="runAsNonRoot"):
        run_args(template(edit))


@pytest.mark.parametrize("edit", [
    lambda s: s.update(volumes=[{"name": "tmp", "emptyDir": {}}]),
    lambda s: s["containers"][0].update(volumeMounts=[{"name": "tmp", "mountPath": "/tmp"}]),
    lambda s: s["containers"][0]["securityContext"].update(procMount="Unmasked"),
    lambda s: s["containers"][0]["resources"]["limits"].update({"ephemeral-storage": "1Gi"}),
    lambda s: s["containers"][0]["env"].append(
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
    lambda s: s["securityContext"].update(seccompProfile={"type": "Localhost"}),
    lambda s: s.update(automountServiceAccountToken=False),
], ids=["volume", "volumeMount", "procMount", "ephemeral-storage", "podIP", "seccomp-localhost",
        "no-token"])
def test_what_is_not_translated_is_refused(edit: Any) -> None:
    with pytest.raises(PodSpecError):
        run_args(template(edit))
