"""Custom resources turned on by --kinds GROUP/VERSION/Kind: the flag's form, what discovery
answers (pure logic: the APIResourceList as the API server returns it), and a custom
resource through the same pipeline as every kind, its spec copied and never its status.
Against the real API server: tests/integration/test_kinds.py (a CRD it installs)."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from configmirror.cli import flags, reference
from configmirror.client.kube import ApiError, resource_of
from configmirror.operator.caches import Discovery, replicated_kinds
from configmirror.operator.settings import Settings
from configmirror.replication.model import DEFAULT_RULES, object_from_json
from configmirror.replication.plan import (
    Grace,
    decide,
    desired_body,
    pulls_of,
    unserved_pulls,
    wants,
)
from configmirror.replication.spec import PULL_ALLOWED, REPLICATE_TO, InvalidSpec, parse_pulls
from configmirror.vocabulary import (
    CONFIGMAP,
    NETWORKPOLICY,
    CustomName,
    custom_kind,
    custom_name,
)
from configmirror_testing.builders import SCOPE, ns, world
from configmirror_testing.commands import parsed
from configmirror_testing.objects import KIND_CONTENTS, WIDGET, cached, of_kind

AT_ONCE = Grace.from_now(0.0)
WIDGETS = CustomName("example.com", "v1", "Widget")


def resource_list(*resources: dict[str, Any]) -> dict[str, Any]:
    """/apis/example.com/v1 as the API server answers it."""
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "example.com/v1",
            "resources": list(resources)}


def widgets(**overrides: Any) -> dict[str, Any]:
    return {"name": "widgets", "singularName": "widget", "namespaced": True,
            "kind": "Widget", "verbs": ["delete", "deletecollection", "get", "list", "patch",
                                        "create", "update", "watch"], **overrides}


STATUS = {"name": "widgets/status", "singularName": "", "namespaced": True, "kind": "Widget",
          "verbs": ["get", "patch", "update"]}


@pytest.mark.parametrize(("text", "name"), [
    ("example.com/v1/Widget", WIDGETS),
    ("apps.example.com/v2beta1/WidgetSet", CustomName("apps.example.com", "v2beta1",
                                                       "WidgetSet")),
    ("example.com/v1/Widget:spec", WIDGETS),
    ("example.com/v1/Widget:spec:settings", CustomName("example.com", "v1", "Widget",
                                                       ("settings", "spec"))),
    ("example.com/v1/Widget:settings:spec:settings", CustomName("example.com", "v1", "Widget",
                                                                ("settings", "spec"))),
    ("example.com/v1/Widget:config", CustomName("example.com", "v1", "Widget", ("config",))),
    ("networkpolicy", None),  # a built-in kind's name
])
def test_a_custom_resource_is_named_group_version_kind(text: str,
                                                       name: CustomName | None) -> None:
    assert custom_name(text) == name


@pytest.mark.parametrize("text", [
    "example.com/Widget", "example.com/v1/Widget/x", "example/v1/Widget",  # no dot: core's
    "example.com/1/Widget", "Example.com/v1/Widget", "example.com/v1/", "/v1/Widget",
    "example.com/v1/Wid-get", "example.com/v1:spec/Widget",
])
def test_anything_else_with_a_slash_is_refused_saying_the_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"^not GROUP/VERSION/Kind\[:FIELD\.\.\.\], e\.g\. "
                                         r"example\.com/v1/Widget or example\.com/v1/Widget:spec:"
                                         r"settings$"):
        custom_name(text)


@pytest.mark.parametrize("field", ["", "1st", "spec.x", "sp ec", "spéc"])
def test_a_field_that_is_no_top_level_name_is_refused_naming_it(field: str) -> None:
    with pytest.raises(ValueError, match=f"^not GROUP/VERSION/Kind.*: {re.escape(repr(field))} "
                                         "is no top-level field name$"):
        custom_name(f"example.com/v1/Widget:spec:{field}")


@pytest.mark.parametrize("field", ["status", "metadata", "apiVersion", "kind"])
def test_a_field_a_replica_never_copies_is_refused_naming_it(field: str) -> None:
    with pytest.raises(ValueError, match=f"^naming {field}, which a replica never copies"):
        custom_name(f"example.com/v1/Widget:spec:{field}")


def test_a_custom_resource_naming_fields_copies_those_and_no_spec() -> None:
    named = custom_name("example.com/v1/Widget:settings:config")
    assert named is not None
    kind = custom_kind(named, resource_list(widgets()))
    assert kind.payload == ("config", "settings")
    body = {**raw("src", {"spec": {"a": 1}, "settings": {"b": 2}, "config": "c"},
                  {REPLICATE_TO: "*"}), "status": {"ready": True}}
    src = cached(body, kind)
    assert src.compiled is not None and src.compiled.invalid is None
    replica = desired_body(src, "team")
    assert {k: v for k, v in replica.items() if k not in ("apiVersion", "kind", "metadata")} \
        == {"settings": {"b": 2}, "config": "c"}


def test_kinds_keeps_a_custom_resources_case_and_lowers_a_built_in_kinds() -> None:
    assert Settings(kinds="NetworkPolicy, example.com/v1/Widget,").kind_names == [
        "networkpolicy", "example.com/v1/Widget"]


def test_discovery_resolves_the_kind_its_plural_and_copies_spec_only() -> None:
    kind = custom_kind(WIDGETS, resource_list(STATUS, widgets()))
    assert (kind.name, kind.plural, kind.resource.api_version, kind.payload, kind.fixed) == (
        "Widget", "widgets", "example.com/v1", ("spec",), None)
    assert kind.flag == "widget.example.com" and kind.pull_name == "widget.example.com"
    assert kind.resource.item("a", "b") == "/apis/example.com/v1/namespaces/a/widgets/b"
    # The flag need not spell the kind's case: the server's is used.
    assert custom_kind(CustomName("example.com", "v1", "widget"),
                       resource_list(widgets())).name == "Widget"


@pytest.mark.parametrize(("resources", "message"), [
    (None, "example.com/v1/Widget: the API server serves no example.com/v1 (is its "
           "CustomResourceDefinition installed?)"),
    (resource_list(widgets(kind="Gadget", name="gadgets")),
     "example.com/v1/Widget: example.com/v1 has no kind Widget"),
    (resource_list(STATUS), "example.com/v1/Widget: example.com/v1 has no kind Widget"),
    (resource_list(widgets(namespaced=False)),
     "example.com/v1/Widget: widgets.example.com is cluster-scoped; configmirror replicates "
     "namespaced kinds only"),
    (resource_list(widgets(verbs=["get", "list", "watch"])),
     "example.com/v1/Widget: widgets.example.com does not support create, delete, patch, "
     "update"),
])
def test_a_missing_cluster_scoped_or_read_only_kind_is_an_error_naming_it(
        resources: dict[str, Any] | None, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        custom_kind(WIDGETS, resources)
    assert str(raised.value) == message


def test_a_custom_kind_named_as_a_built_in_one_is_refused() -> None:
    with pytest.raises(ValueError, match="its kind Role is the name of a kind configmirror "
                                         "has built in"):
        custom_kind(CustomName("example.com", "v1", "Role"),
                    resource_list(widgets(kind="Role", name="roles")))


def answers(**by_group_version: dict[str, Any]) -> Discovery:
    """Discovery that serves these group/versions only."""
    def discover(group: str, version: str) -> dict[str, Any] | None:
        return by_group_version.get(f"{group}/{version}")
    return discover


def test_replicated_kinds_resolves_each_custom_resource_through_discovery() -> None:
    settings = Settings(kinds="networkpolicy,example.com/v1/Widget,example.com/v1/Widget")
    kinds = replicated_kinds(settings, answers(**{"example.com/v1": resource_list(widgets())}))
    assert [k.kind.name for k in kinds] == ["ConfigMap", "NetworkPolicy", "Widget"]
    assert kinds[2].kind.custom and kinds[2].names == ()
    # Before connecting (flags checked): its form only, and it is left out.
    assert [k.kind for k in replicated_kinds(settings)] == [CONFIGMAP, NETWORKPOLICY]


@pytest.mark.parametrize(("kinds", "message"), [
    ("other.example.com/v1/Widget", "--kinds: other.example.com/v1/Widget: the API server "
                                    "serves no other.example.com/v1"),
    ("example.com/Widget", "--kinds: 'example.com/Widget' is not GROUP/VERSION/Kind"),
    ("example.com/v1/Widget,example.com/v2/Widget",
     "--kinds: example.com/v2/Widget: example.com/v1/Widget is replicated too; "
     "configmirror replicates one kind of each name"),
])
def test_a_custom_resource_that_does_not_resolve_is_an_invalid_spec_naming_it(
        kinds: str, message: str) -> None:
    found = answers(**{"example.com/v1": resource_list(widgets()),
                       "example.com/v2": resource_list(widgets())})
    with pytest.raises(InvalidSpec) as raised:
        replicated_kinds(Settings(kinds=kinds), found)
    assert str(raised.value).startswith(message)


def test_a_discovery_request_that_fails_is_an_invalid_spec_naming_the_kind() -> None:
    def forbidden(group: str, version: str) -> dict[str, Any] | None:
        raise ApiError(403, "Forbidden", "no", "get", f"/apis/{group}/{version}")
    with pytest.raises(InvalidSpec, match=r"^--kinds: example.com/v1/Widget: cannot look it "
                                          r"up on the API server: get /apis/example.com/v1: "
                                          r"403 Forbidden"):
        replicated_kinds(Settings(kinds="example.com/v1/Widget"), forbidden)


def test_requests_are_counted_under_a_discovered_plural_and_no_other_path_name() -> None:
    custom = frozenset({"widgets"})
    assert resource_of(WIDGET.resource.collection(), custom) == "widgets"
    assert resource_of(WIDGET.resource.collection("a"), custom) == "widgets"
    assert resource_of(WIDGET.resource.item("a", "namespaces"), custom) == "widgets"
    # Not started with: a namespaced path is counted as it always was, never under a name
    # the path alone brings.
    assert resource_of(WIDGET.resource.item("a", "b")) == "namespaces"
    assert resource_of("/apis/example.com/v1/namespaces/a/gadgets/b", custom) == "namespaces"


def raw(namespace: str, fields: dict[str, Any], annotations: dict[str, str] | None = None,
        rv: str = "10") -> dict[str, Any]:
    body = of_kind(WIDGET, "w", fields, annotations, namespace=namespace)
    body["metadata"].update(uid=f"u-{namespace}", resourceVersion=rv, generation=3,
                            creationTimestamp="2026-01-01T00:00:00Z",
                            managedFields=[{"manager": "kubectl"}])
    return body


def test_a_replica_copies_spec_never_status_nor_the_servers_metadata() -> None:
    content, _ = KIND_CONTENTS[WIDGET.flag]
    src = cached({**raw("src", content, {REPLICATE_TO: "*"}),
                  "status": {"ready": True, "observedGeneration": 3}}, WIDGET)
    assert src.compiled is not None and src.compiled.invalid is None
    body = desired_body(src, "team")
    assert (body["apiVersion"], body["kind"]) == ("example.com/v1", "Widget")
    assert {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata")} \
        == content
    for owned in ("uid", "resourceVersion", "generation", "creationTimestamp",
                  "managedFields"):
        assert owned not in body["metadata"]
    # A status the source's controller sets is no change of content: no write.
    restated = cached({**raw("src", content, {REPLICATE_TO: "*"}, rv="12"),
                       "status": {"ready": False}}, WIDGET)
    assert restated.compiled is not None
    assert restated.compiled.content_hash == src.compiled.content_hash
    replica = object_from_json({**body, "metadata": {**body["metadata"], "uid": "r",
                                                     "resourceVersion": "11"},
                                "status": {"ready": True}}, DEFAULT_RULES, WIDGET)
    w = world([restated, replica], [ns("src"), ns("team")], WIDGET)
    assert decide("team", "w", replica, w, SCOPE, AT_ONCE).action is None


def test_a_namespace_pulls_a_custom_resource_by_kind_dot_group() -> None:
    pulls = parse_pulls("Widget.example.com/platform/w, platform/ca")
    assert pulls.entries == {("widget.example.com", "platform/w"),
                             ("ConfigMap", "platform/ca")}
    src = cached(raw("platform", KIND_CONTENTS[WIDGET.flag][0], {PULL_ALLOWED: "*"}), WIDGET)
    team = ns("team")
    team = type(team)(team.name, team.labels, team.terminating, team.resource_version,
                      pulls=parse_pulls("widget.example.com/platform/w"))
    assert pulls_of(WIDGET, team) == ["platform/w"]
    assert wants(src, team, SCOPE)
    (refusal,) = unserved_pulls(team, frozenset({"ConfigMap"}))
    assert ("the operator replicates no widget.example.com objects (its --kinds does not "
            "name widget.example.com as GROUP/VERSION/Kind)") in refusal.message
    assert unserved_pulls(team, frozenset({"ConfigMap", WIDGET.pull_name})) == []


def test_a_command_names_a_custom_resource_as_kind_or_plural_dot_group() -> None:
    on = Settings(kinds="example.com/v1/Widget")
    for said in ("widget.example.com", "widgets.example.com", "Widget.example.com"):
        assert reference.named_in(parsed("status", f"{said}/ns/w"), on) == (
            said.lower(), "ns/w")
    with pytest.raises(flags.UsageError, match=r"a widget\.example\.com source needs the "
                                               r"operator's --kinds to name widget\.example"):
        reference.named_in(parsed("status", "widget.example.com/ns/w"), Settings())
    with pytest.raises(flags.UsageError, match="'widget/ns/w': 'widget' is not a kind"):
        reference.named_in(parsed("status", "widget/ns/w"), on)


def test_once_discovery_has_resolved_it_a_command_finds_the_kind_by_either_name() -> None:
    cache: Any = SimpleNamespace(kinds={CONFIGMAP: None, NETWORKPOLICY: None, WIDGET: None})
    for said in ("widget.example.com", "widgets.example.com"):
        assert reference.known((said, "ns/w"), cache) == (WIDGET, "ns/w")
    assert reference.known((NETWORKPOLICY, "ns/p"), cache) == (NETWORKPOLICY, "ns/p")
    assert reference.known(None, cache) is None
    with pytest.raises(flags.UsageError, match=r"^'gadget\.example\.com': the operator's --kinds "
                                               r"names no such custom resource \(it names "
                                               r"example\.com/v1/Widget\)$"):
        reference.known(("gadget.example.com", "ns/w"), cache)
    # What plan and status print: the kind as a command takes it back.
    assert reference.kind_words(cache) == {
        "ConfigMap": "configmap", "NetworkPolicy": "networkpolicy", "Widget": "widget.example.com"}
