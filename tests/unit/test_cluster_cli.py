"""`configmirror cluster`'s pure parts: the member side's rules from one table (equal to what
deploy/ grants the operator at home, kind by kind, and to deploy/components/member), the
kubeconfig and Secret `add` writes (which replication.clusters reads back), a token's expiry,
`--label`, the table `list` prints, and the mistakes that end in exit code 1 before any
cluster is asked."""

from __future__ import annotations

import argparse
import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from configmirror.cli import cluster
from configmirror.cli import main as cli
from configmirror.cli.flags import UsageError
from configmirror.operator.settings import Settings
from configmirror.replication.clusters import (
    CLUSTER_LABEL,
    MEMBER_ACCOUNT,
    MEMBER_NAMESPACE,
    check_kubeconfig,
    member_of,
)
from configmirror.vocabulary import OPTIONAL, ROLEBINDING, Kind, Resource

REPO = Path(__file__).resolve().parents[2]
COMPONENTS = REPO / "deploy" / "components"
WIDGET = Kind(Resource("widgets", "Widget", "example.com"), ("spec",), custom=True)


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def cluster_role_rules(path: Path) -> list[dict[str, Any]]:
    (role,) = [d for d in docs(path) if d["kind"] == "ClusterRole"]
    return list(role["rules"])


# The rules deploy/rbac.yaml grants the operator at home that a member needs: ConfigMaps'
# and namespaces' (not Events: the operator writes those at home only).
BASE = [rule for rule in cluster_role_rules(REPO / "deploy" / "rbac.yaml")
        if rule["resources"] != ["events"]]


# -- the rules: one table, equal to deploy/'s grants ----------------------------------------------

def test_configmaps_and_namespaces_are_always_granted_as_deploy_grants_them() -> None:
    assert [r["resources"] for r in BASE] == [["configmaps"], ["namespaces"]]
    assert cluster.member_rules([]) == BASE


@pytest.mark.parametrize("flag", sorted(OPTIONAL))
def test_each_kind_gets_exactly_the_rules_its_component_grants_at_home(flag: str) -> None:
    component = cluster_role_rules(COMPONENTS / flag / "rbac.yaml")
    roles = ("view",) if flag == ROLEBINDING.flag else ()  # what the component's bind names
    assert cluster.member_rules([OPTIONAL[flag]], bindable_roles=roles) == BASE + component


def test_secrets_by_name_plus_create_as_the_secrets_component_grants_them() -> None:
    component = cluster_role_rules(COMPONENTS / "secrets" / "rbac.yaml")
    (named,) = [r for r in component if "resourceNames" in r]
    assert cluster.member_rules([], named["resourceNames"]) == BASE + component


def test_a_custom_resource_gets_the_rules_of_the_example_component() -> None:
    component = cluster_role_rules(COMPONENTS / "custom-resource-example" / "rbac.yaml")
    assert cluster.member_rules([WIDGET]) == BASE + component


def test_nothing_is_granted_by_name_without_names_and_nothing_read_with_get() -> None:
    everything = cluster.member_rules([*OPTIONAL.values(), WIDGET])
    assert not any("secrets" in r["resources"] for r in everything), "Secrets are off"
    assert not any("bind" in r["verbs"] for r in everything), "no bindable roles: no bind"
    with_names = cluster.member_rules([*OPTIONAL.values(), WIDGET], ["tls"], ["view"])
    assert not any(v in r["verbs"] for r in with_names for v in ("get", "escalate", "*"))
    assert not any("events" in r["resources"] for r in with_names)
    for rule in with_names:  # a rule over secrets or roles without names is create alone
        if rule["resources"] in (["secrets"], ["clusterroles", "roles"]) and \
                "resourceNames" not in rule:
            assert rule["verbs"] == ["create"], rule


def test_kinds_are_granted_in_the_order_given_and_each_once() -> None:
    rules = cluster.member_rules([OPTIONAL["role"], OPTIONAL["limitrange"], OPTIONAL["role"]])
    assert [r["resources"] for r in rules] == [["configmaps"], ["namespaces"], ["roles"],
                                               ["limitranges"]]


def test_kinds_resolve_from_the_flag_custom_ones_through_the_members_discovery() -> None:
    served = {"resources": [{"name": "widgets", "kind": "Widget", "namespaced": True,
                             "verbs": ["list", "watch", "create", "update", "patch", "delete",
                                       "get"]}]}
    settings = Settings(kinds="configmap,networkpolicy,example.com/v1/Widget")
    kinds = cluster.resolve_kinds(settings, lambda group, version: served)
    assert [k.flag for k in kinds] == ["networkpolicy", "widget.example.com"]
    assert kinds[1].resource == Resource("widgets", "Widget", "example.com")
    assert [k.flag for k in cluster.resolve_kinds(settings, None)] == ["networkpolicy"]


@pytest.mark.parametrize(("kinds", "said"), [
    ("pods", "'pods' is not a kind configmirror replicates"),
    ("secret", "Secrets are turned on by name, with --secret-names"),
    ("example.com/v1/Gadget", "in the member: example.com/v1/Gadget: the API server serves no"),
    ("example.com/v1", "is not GROUP/VERSION/Kind"),
])
def test_a_kind_that_cannot_be_granted_is_an_error_naming_it(kinds: str, said: str) -> None:
    with pytest.raises(UsageError, match=said.replace("(", r"\(")):
        cluster.resolve_kinds(Settings(kinds=kinds), lambda group, version: None)


# -- the member side and deploy/components/member -------------------------------------------------

def test_the_member_component_is_what_add_installs_for_configmaps() -> None:
    member = COMPONENTS / "member"
    kustomization = yaml.safe_load((member / "kustomization.yaml").read_text())
    written = [d for name in kustomization["resources"] for d in docs(member / name)]
    assert written == cluster.member_side(cluster.member_rules([]))


def test_the_member_side_lets_its_account_mint_its_own_token_and_nothing_else() -> None:
    objects = {o["kind"]: o for o in cluster.member_side(BASE)}
    assert set(objects) == {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                            "Role", "RoleBinding"}
    assert objects["Role"]["rules"] == [{
        "apiGroups": [""], "resources": ["serviceaccounts/token"],
        "resourceNames": [MEMBER_ACCOUNT], "verbs": ["create"]}]
    subject = {"kind": "ServiceAccount", "name": MEMBER_ACCOUNT, "namespace": MEMBER_NAMESPACE}
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        assert objects[binding]["subjects"] == [subject]
    assert objects["ClusterRole"]["rules"] == BASE
    assert objects["Namespace"]["metadata"]["labels"]["configmirror.io/ignore"] == "true"


@pytest.mark.parametrize(("there", "wanted", "same"), [
    ([{"a": 1}, {"b": [1, 2]}], [{"b": [1, 2]}, {"a": 1}], True),  # rules in another order
    ([{"b": [2, 1]}], [{"b": [1, 2]}], False),                      # verbs are compared as such
    ([{"a": 1}], [{"a": 1}, {"a": 1}], False),
    ({"kind": "ClusterRole"}, {"kind": "ClusterRole"}, True),
    (None, [], False),
])
def test_an_object_there_is_unchanged_when_its_lists_hold_the_same_in_any_order(
        there: Any, wanted: Any, same: bool) -> None:
    assert cluster._same(there, wanted) is same


# -- the kubeconfig and the Secret add writes -----------------------------------------------------

def jwt(claims: dict[str, Any]) -> str:
    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256', 'kid': 'k'})}.{part(claims)}.c2lnbmF0dXJl"


def test_the_secret_add_writes_is_a_member_the_operator_reads_back() -> None:
    token = jwt({"iat": 1_899_913_600, "exp": 1_900_000_000,
                 "sub": f"system:serviceaccount:{MEMBER_NAMESPACE}:x"})
    text = cluster.member_kubeconfig("east", "https://east.example:6443", token,
                                     b"-----BEGIN CERTIFICATE-----\n...\n")
    check_kubeconfig(text, "written")
    secret = cluster.cluster_secret("east", "configmirror", {"env": "prod"}, text)
    assert secret["metadata"]["name"] == "cluster-east"
    assert secret["metadata"]["labels"] == {"env": "prod", CLUSTER_LABEL: "east"}
    member = member_of(secret, "local")
    assert (member.name, dict(member.labels), member.kubeconfig, member.key) == (
        "east", {"env": "prod"}, text, "kubeconfig")
    assert cluster.server_of(text) == "https://east.example:6443"
    assert cluster.token_expiry(text) == datetime.fromtimestamp(1_900_000_000, UTC)
    (entry,) = yaml.safe_load(text)["clusters"]
    assert base64.b64decode(entry["cluster"]["certificate-authority-data"]).startswith(
        b"-----BEGIN CERTIFICATE")
    (context,) = yaml.safe_load(text)["contexts"]
    assert context["context"]["namespace"] == MEMBER_NAMESPACE
    with pytest.raises(Exception, match="home cluster's own name"):
        member_of(secret, "east")


def test_a_context_that_skips_tls_verification_is_copied_without_its_ca() -> None:
    text = cluster.member_kubeconfig("east", "https://10.0.0.1", "t", b"CA", insecure=True,
                                     tls_server_name="east.internal")
    (entry,) = yaml.safe_load(text)["clusters"]
    assert entry["cluster"] == {"server": "https://10.0.0.1", "insecure-skip-tls-verify": True,
                                "tls-server-name": "east.internal"}
    check_kubeconfig(text, "written")


@pytest.mark.parametrize(("claims", "expires"), [
    ({"iat": 1_799_996_400, "exp": 1_800_000_000}, datetime.fromtimestamp(1_800_000_000, UTC)),
    ({"iat": 1, "exp": 1_800_000_000.5}, datetime.fromtimestamp(1_800_000_000.5, UTC)),
    ({"iat": 1, "sub": "no exp"}, None),
    ({"iat": 1, "exp": "soon"}, None),
    ({"iat": 1, "exp": True}, None),
    ({"iat": 1, "exp": 10**20}, None),
])
def test_a_tokens_expiry_is_its_exp_claim(claims: dict[str, Any],
                                          expires: datetime | None) -> None:
    text = cluster.member_kubeconfig("east", "https://east", jwt(claims))
    assert cluster.token_expiry(text) == expires


@pytest.mark.parametrize("token", ["a-static-token", "not.base64!.sig",
                                   "bm90IGpzb24.bm90IGpzb24.sig"])
def test_a_token_that_is_no_jwt_has_no_expiry(token: str) -> None:
    assert cluster.token_expiry(cluster.member_kubeconfig("east", "https://east", token)) is None


def test_a_credential_that_is_no_token_has_no_expiry() -> None:
    doc = yaml.safe_load(cluster.member_kubeconfig("east", "https://east", "t"))
    doc["users"][0]["user"] = {"client-certificate-data": "Y2VydA==",
                               "client-key-data": "a2V5"}
    assert cluster.token_expiry(yaml.safe_dump(doc)) is None


@pytest.mark.parametrize(("given", "labels"), [
    ("", {}),
    ("env=prod", {"env": "prod"}),
    ("env=prod,example.com/region=eu-west", {"env": "prod", "example.com/region": "eu-west"}),
    ("tier=", {"tier": ""}),
])
def test_labels_are_key_value_pairs(given: str, labels: dict[str, str]) -> None:
    assert cluster.parse_labels(given) == labels


@pytest.mark.parametrize(("given", "said"), [
    ("env", "each label is KEY=VALUE"),
    ("env!=prod", "each label is KEY=VALUE"),
    ("env in (a,b)", "each label is KEY=VALUE"),
    ("Bad Key=x", "--label"),
    ("env=no spaces", "--label"),
    (f"{CLUSTER_LABEL}=x", "is the cluster's name"),
    ("env=a,env=b", "env is given twice"),
])
def test_a_bad_label_is_an_error_naming_it(given: str, said: str) -> None:
    with pytest.raises(UsageError, match=said.replace("(", r"\(")):
        cluster.parse_labels(given)


# -- list's table ---------------------------------------------------------------------------------

def test_the_table_shows_each_cluster_and_then_what_is_wrong(
        capsys: pytest.CaptureFixture[str]) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    rows = [
        cluster.Row("east", "cluster-east", {"env": "prod"}, "https://east", True,
                    token_expiry=now + timedelta(hours=23, minutes=59), replicas=3),
        cluster.Row("west", "cluster-west", {}, "https://west", False,
                    reason="0 ConnectionError: timed out", token_expiry=now - timedelta(1)),
        cluster.Row("", "cluster-broken", {}, fault="label configmirror.io/cluster: '' is not"),
    ]
    cluster.print_rows(rows, "configmirror", now)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "LABELS", "SERVER", "REACHABLE", "TOKEN", "EXPIRY",
                              "REPLICAS"]
    assert out[1].split() == ["east", "env=prod", "https://east", "yes",
                              "2030-01-01T23:59:00Z", "(in", "23h59m)", "3"]
    assert out[2].split() == ["west", "<none>", "https://west", "no", "2029-12-31T00:00:00Z",
                              "(expired)", "-"]
    assert out[3].split() == ["-", "<none>", "-", "invalid", "-", "-"]
    assert out[4:] == ["cluster west: not reachable: 0 ConnectionError: timed out",
                       "secret/cluster-broken: label configmirror.io/cluster: '' is not"]


def test_no_cluster_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    cluster.print_rows([], "ops", datetime.now(UTC))
    assert capsys.readouterr().out == (f"no member clusters (no Secret labelled {CLUSTER_LABEL} "
                                       "in namespace ops)\n")


def test_a_row_in_json_says_every_field() -> None:
    row = cluster.Row("east", "cluster-east", {"env": "prod"}, "https://east", False,
                      reason="401 Unauthorized: ", token_expiry=datetime(2030, 1, 1, tzinfo=UTC))
    assert row.to_json() == {
        "name": "east", "secret": "cluster-east", "labels": {"env": "prod"},
        "server": "https://east", "reachable": False, "reason": "401 Unauthorized: ",
        "version": None, "token_expiry": "2030-01-01T00:00:00Z", "replicas": None,
        "replicas_error": None, "fault": None}


# -- the command line -----------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "moved"), [
    (["-o", "json", "cluster", "list"], ["cluster", "list", "-o", "json"]),
    (["--context", "east", "cluster", "add", "east"],
     ["cluster", "add", "--context", "east", "east"]),
    (["--kubeconfig=k", "cluster", "remove", "east"], ["cluster", "remove", "--kubeconfig=k",
                                                       "east"]),
    (["cluster", "-o", "json"], ["cluster", "-o", "json"]),
])
def test_global_flags_before_cluster_go_after_its_action(argv: list[str],
                                                         moved: list[str]) -> None:
    assert cli.command_first(argv) == moved


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def helps() -> dict[str, str]:
    group = _commands(cli.parser())["cluster"]
    return {"": group.format_help(),
            **{name: p.format_help() for name, p in _commands(group).items()}}


@pytest.mark.parametrize("action", ["", *cluster.ACTIONS])
def test_each_help_says_its_exit_codes_and_each_default_once(action: str) -> None:
    text = helps()[action]
    codes = text.split("exit codes:\n")[1].split("\n\n")[0].splitlines()
    assert [line.split()[0] for line in codes] == ["0", "1"]
    assert "None" not in text and "(default: )" not in text
    for paragraph in text.split("\n  -"):
        assert paragraph.count("(default:") <= 1, paragraph


def test_flags_have_variables_only_where_they_mean_what_they_do_elsewhere() -> None:
    said = {name: " ".join(text.split()) for name, text in helps().items()}
    for variable in ("CONFIGMIRROR_KUBECONFIG", "CONFIGMIRROR_OPERATOR_NAMESPACE",
                     "CONFIGMIRROR_KINDS", "CONFIGMIRROR_SECRET_NAMES"):
        assert variable in said["add"], variable
    for variable in ("CONFIGMIRROR_CONTEXT", "CONFIGMIRROR_HOME_CONTEXT", "CONFIGMIRROR_LABEL",
                     "CONFIGMIRROR_SERVER", "CONFIGMIRROR_TOKEN_DURATION",
                     "CONFIGMIRROR_UNINSTALL", "CONFIGMIRROR_OUTPUT"):
        assert all(variable not in text for text in said.values()), variable


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig of one context, `home`, whose server nobody serves."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "home",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "home", "context": {"cluster": "c", "user": "u"}}]}))
    return path


@pytest.mark.usefixtures("cli_environment")
@pytest.mark.parametrize(("argv", "said"), [
    (["cluster", "add", "East", "--context", "home"], "'East' is not a cluster name"),
    (["cluster", "add", "east"], "cluster add needs --context"),
    (["cluster", "add", "east", "--context", "home", "--token-duration", "5m"],
     "--token-duration must be at least 10m"),
    (["cluster", "add", "east", "--context", "home", "--token-duration", "soon"],
     "'soon' is not a duration"),
    (["cluster", "add", "east", "--context", "home", "--server", "east:6443"],
     "--server 'east:6443' is not an https:// URL"),
    (["cluster", "add", "east", "--context", "home", "--label", "env"],
     "each label is KEY=VALUE"),
    (["cluster", "add", "east", "--context", "nope"], "context 'nope' is not in"),
    (["cluster", "add", "east", "--context", "home", "--home-context", "nope"],
     "context 'nope' is not in"),
    (["cluster", "remove", "east", "--uninstall"], "--uninstall needs --context"),
    (["cluster", "remove", "east", "--context", "home"], "--context names the member"),
    (["cluster", "remove", "East"], "'East' is not a cluster name"),
    (["cluster", "list", "-o", "table"], "argument -o/--output"),
    (["cluster", "list", "--context", "home"], "unrecognized arguments: --context"),
    (["cluster", "add", "east", "--context", "home"], "cannot reach the API server at "
                                                      "https://127.0.0.1:1"),
])
def test_a_mistake_is_one_line_and_exit_code_1(
        argv: list[str], said: str, kubeconfig: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*argv, "--kubeconfig", str(kubeconfig)]) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("configmirror: ") and said in line, line
    assert captured.out == ""


@pytest.mark.usefixtures("cli_environment")
def test_cluster_without_an_action_names_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cluster"]) == 1
    assert "required: {add,list,remove}" in capsys.readouterr().err
