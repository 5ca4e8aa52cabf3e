"""The running operator's policy, published so that `plan`, `status` and `wait` judge with it.

The settings that decide what a replica must be and where (`POLICY`: the source namespaces
and their selector, the excluded namespaces, the Secret names and their source namespaces,
the kinds, the drop lists, the delete grace) are flags of `run`. The commands take the same
flags, but a user who runs them against a chart install would otherwise judge with a
laptop's defaults
and say other than `run` does. So the operator that writes publishes them, and the commands use
them unless a flag given on their own command line (or in their environment) overrides one,
which they say in a warning.

Where: a ConfigMap `<lease name>-policy`, labelled configmirror.io/policy=true, beside the
leader-election Lease (in a pod without leader election: the pod's own namespace; a process
outside a cluster without it publishes nothing: its user runs the commands with its flags).
A ConfigMap, not an annotation on the Lease: whoever may run `status` lists ConfigMaps
cluster-wide already, so finding it takes no RBAC the commands lack (the built-in view role
grants no Leases), and the operator's ConfigMap grant already covers writing it.
When: the leader (only it) writes it when it starts leading and every `refresh` seconds
after (an unchanged PUT stores nothing, and a hand edit or deletion is undone), and deletes
it when it stops, on the version it wrote, so a new leader's is never taken away. An operator
uninstalled leaves none behind; one killed leaves its last word until another leads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from configmirror import __version__
from configmirror.backoff import Backoff
from configmirror.client.kube import ApiError, Kube
from configmirror.clock import Clock, RealClock
from configmirror.lifecycle import Deadline, OwnedThread
from configmirror.operator.settings import Settings, format_duration, parse_duration
from configmirror.replication.spec import PREFIX
from configmirror.vocabulary import CONFIGMAPS

log = logging.getLogger(__name__)

# The settings that decide (in Settings' field names); each is published under its flag's
# name without the dashes: --delete-grace is `delete-grace`.
POLICY = ("source_namespaces", "source_namespace_selector", "exclude_namespaces",
          "secret_names", "secret_source_namespaces", "kinds", "bindable_roles", "drop_labels",
          "drop_annotations", "delete_grace", "adopt_from", "operator_namespace",
          "cluster_name", "member_clusters")
POLICY_LABEL = PREFIX + "policy"
PUBLISHED_BY = PREFIX + "published-by"
PUBLISHED_AT = PREFIX + "published-at"
POD_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
REQUEST_TIMEOUT = 5.0
MIN_REQUEST_TIMEOUT = 0.5  # less left of a stop's timeout than this: no withdrawal
REFRESH = 60.0               # seconds between the leader's re-assertions of its policy
RETRY_MIN, RETRY_MAX = 1.0, 30.0


class PolicyError(ValueError):
    """A published policy that cannot be followed (the message names the ConfigMap)."""


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _key(field: str) -> str:
    return field.replace("_", "-")


def _text(field: str, value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return format_duration(value) if field == "delete_grace" else str(value)


def _shown(text: str) -> str:
    return text if text else "''"


def policy_data(settings: Settings) -> dict[str, str]:
    """The published form of `settings`' policy: flag name -> the flag's value."""
    return {_key(f): _text(f, getattr(settings, f)) for f in POLICY}


def policy_name(settings: Settings) -> str:
    return f"{settings.leader_election_id}-policy"


def home(settings: Settings, pod_namespace: Path = POD_NAMESPACE) -> str | None:
    """Where this operator publishes: beside its Lease, else (in a pod) its own namespace,
    else nowhere."""
    if settings.leader_elect:
        return settings.leader_election_namespace
    try:
        return pod_namespace.read_text().strip() or None
    except OSError:
        return None


def own_namespace(settings: Settings, pod_namespace: Path = POD_NAMESPACE) -> str:
    """The operator's namespace: in a pod, the pod's own; else --operator-namespace."""
    try:
        return pod_namespace.read_text().strip() or settings.operator_namespace
    except OSError:
        return settings.operator_namespace


# -- the operator's side ----------------------------------------------------------------------

class Publisher:
    """Publishes the leader's policy while it leads (a thread of its own), withdraws it on stop."""

    def __init__(self, kube: Kube, settings: Settings, namespace: str, identity: str,
                 clock: Clock | None = None) -> None:
        self.namespace = namespace
        self.name = policy_name(settings)
        self._kube = kube
        self._body = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": self.name, "namespace": namespace,
                "labels": {POLICY_LABEL: "true", "app.kubernetes.io/name": "configmirror"},
                "annotations": {
                    PUBLISHED_BY: identity,
                    PUBLISHED_AT: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "app.kubernetes.io/version": __version__}},
            "data": policy_data(settings)}
        self._clock = clock or RealClock()
        self._cond = threading.Condition()  # notified by stop()
        self._stopped = False
        self._thread: OwnedThread | None = None
        self._written = ""  # the resourceVersion of our last write: what stop() deletes
        self._failing = False

    def start(self) -> None:
        """Start publishing, on a thread of its own."""
        self._thread = OwnedThread("policy-publisher", self._run)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop re-asserting; delete what we published, if no one has written it since. All
        within `timeout` seconds; True once the thread has ended."""
        deadline = Deadline(timeout, self._clock)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        ended = self._thread is None or self._thread.join(deadline.left())
        left = min(deadline.left(), REQUEST_TIMEOUT)
        if not self._written or left < MIN_REQUEST_TIMEOUT:
            return ended  # too late to withdraw it: the next leader's replaces it
        try:
            self._kube.request("delete", CONFIGMAPS.item(self.namespace, self.name), body={
                "apiVersion": "v1", "kind": "DeleteOptions",
                "preconditions": {"resourceVersion": self._written}}, timeout=left)
        except ApiError as err:  # 409: another leader's since; 404: gone already
            log.debug("policy %s/%s not withdrawn: %s", self.namespace, self.name, err)
        self._written = ""
        return ended

    def publish(self) -> None:
        """One attempt: replace ours (a write only when it differs), or create it."""
        path = CONFIGMAPS.item(self.namespace, self.name)
        try:
            written = self._kube.request("update", path, body=self._body, timeout=REQUEST_TIMEOUT)
        except ApiError as err:
            if err.status != 404:
                raise
            written = self._kube.request("create", CONFIGMAPS.collection(self.namespace),
                                         body=self._body, timeout=REQUEST_TIMEOUT)
        self._written = str((written.get("metadata") or {}).get("resourceVersion", ""))

    def _run(self) -> None:
        backoff = Backoff(RETRY_MIN, RETRY_MAX)
        while not self._stopped:
            try:
                self.publish()
            except ApiError as err:
                if not self._failing:  # once per outage, not once per attempt
                    log.warning("cannot publish the policy to configmap %s/%s (%s); plan, "
                                "status and wait will not find this operator until it is",
                                self.namespace, self.name, err)
                self._failing = True
                self._pause(backoff.next())
                continue
            if self._failing:
                log.info("published the policy to configmap %s/%s", self.namespace, self.name)
            self._failing = False
            backoff.reset()
            self._pause(REFRESH)

    def _pause(self, seconds: float) -> None:
        """Wait `seconds` of the clock, or until stop()."""
        with self._cond:
            until = self._clock.now() + seconds
            while not self._stopped and self._clock.now() < until:
                self._clock.wait(self._cond, until, None)


# -- the commands' side ---------------------------------------------------------------------

@dataclass(frozen=True)
class Published:
    """One operator's published policy, as a command found it."""

    namespace: str
    name: str
    by: str
    at: str
    values: Mapping[str, str]

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Published:
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        return cls(str(meta.get("namespace", "")), str(meta.get("name", "")),
                   str(annotations.get(PUBLISHED_BY, "")), str(annotations.get(PUBLISHED_AT, "")),
                   {str(k): str(v) for k, v in (obj.get("data") or {}).items()})


def find(kube: Kube, namespace: str | None = None) -> list[Published]:
    """Every published policy (in `namespace`, or in the whole cluster). Raises ApiError."""
    body = kube.request("list", CONFIGMAPS.collection(namespace),
                        {"labelSelector": f"{POLICY_LABEL}=true"}, timeout=REQUEST_TIMEOUT)
    return sorted((Published.from_json(o) for o in body.get("items") or ()),
                  key=lambda p: (p.namespace, p.name))


def judge_with(found: Iterable[Published], settings: Settings, given: Mapping[str, str],
               namespace: str | None = None) -> tuple[Settings, list[str]]:
    """The settings a command judges with, and what to tell its user (one line each).

    `found` is what `find` returned (looked up in `namespace`, or everywhere); `given` maps
    each policy field the user set to how they set it (`--delete-grace`, or
    `CONFIGMIRROR_DELETE_GRACE`). Raises PolicyError when there is no one operator to follow
    or its policy does not parse.
    """
    found = list(found)
    where = f" in namespace {namespace}" if namespace else ""
    if not found:
        return settings, [f"no running operator found (no ConfigMap labelled {POLICY_LABEL}="
                          f"true{where}): judging with this command's flags"]
    if len(found) > 1:
        raise PolicyError(f"{len(found)} operators publish a policy{where} ("
                          f"{', '.join(f'{p.namespace}/{p.name}' for p in found)}): choose "
                          "one with --operator-namespace")
    (operator,) = found
    theirs = _parsed(operator)
    notices = [f"following the operator in namespace {operator.namespace} "
               f"({operator.by or 'unnamed'}, since {operator.at or 'unknown'}; its policy: "
               f"configmap {operator.namespace}/{operator.name})"]
    changes: dict[str, Any] = {}
    for field, value in theirs.items():
        ours = getattr(settings, field)
        if field not in given:
            changes[field] = value
        elif ours != value:
            notices.append(f"warning: {given[field]}={_shown(_text(field, ours))} overrides "
                           f"the operator's {_shown(_text(field, value))}")
    return replace(settings, **changes), notices


def _parsed(operator: Published) -> dict[str, Any]:
    """The policy fields `operator` published (a key it did not publish keeps the command's
    value: an older operator publishes fewer)."""
    values: dict[str, Any] = {}
    for field in POLICY:
        text = operator.values.get(_key(field))
        if text is None:
            continue
        if field == "delete_grace":
            try:
                values[field] = parse_duration(text)
            except ValueError as err:
                raise PolicyError(f"configmap {operator.namespace}/{operator.name}: "
                                  f"{_key(field)}: {err}") from None
        elif isinstance(getattr(Settings, field), bool):
            values[field] = text.strip().lower() == "true"
        else:
            values[field] = text
    return values

