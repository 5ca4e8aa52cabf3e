"""`cluster`: the member clusters of this home cluster (replication/clusters.py), as the
operator's inventory holds them: Secrets labelled configmirror.io/cluster in its namespace.

- `cluster add NAME --context CTX` installs the member side in the member, through the
  caller's kubeconfig context CTX with admin rights there (as `argocd cluster add` does):
  namespace configmirror, ServiceAccount configmirror-member, a ClusterRole granting exactly
  the writes of the kinds the home operator replicates (`member_rules`, from one table),
  its binding, and a Role that lets the account renew its own token and nothing else. Then it
  mints a token with the TokenRequest API and writes the cluster's Secret at home
  (`--home-context`): a kubeconfig of one context, the member's server and CA and that token.
  Every step creates or updates, so running it again repairs the member side and renews the
  token.
- `cluster list` shows each cluster Secret: the cluster, its labels, its server, whether it
  answers through its own kubeconfig, when its token expires and how many replicas of this
  home it holds (`replicas_in`); an unusable Secret with its fault.
- `cluster remove NAME` deletes the cluster's Secret (the operator then leaves the member and
  its replicas there as they are); `--uninstall` also deletes the member side.

`--context` always names the member, `--home-context` the home cluster (default: the
kubeconfig's current-context). What the member must allow is the running operator's
published policy (cli.settings.followed), which --kinds and --secret-names override.
"""

from __future__ import annotations

import argparse
import base64
import json
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from configmirror import __version__
from configmirror.cli.arguments import add_command, add_flag
from configmirror.cli.connect import connect
from configmirror.cli.flags import Choice, Parser, UsageError, boolean, duration
from configmirror.cli.output import FORMATS, dump, prog
from configmirror.cli.settings import followed
from configmirror.client.kube import (
    ApiError,
    ConfigError,
    Kube,
    configuration_from_text,
    load_configuration,
)
from configmirror.client.tokens import request_token, token_times
from configmirror.operator.caches import Discovery, discovery
from configmirror.operator.settings import Settings
from configmirror.replication.clusters import (
    CLUSTER_LABEL,
    DEFAULT_HOME,
    KUBECONFIG_KEYS,
    MEMBER_ACCOUNT,
    MEMBER_NAMESPACE,
    InvalidCluster,
    Member,
    inventory,
    member_of,
    valid_name,
)
from configmirror.replication.model import REPLICA_LABEL
from configmirror.replication.selector import SelectorError, parse_selector
from configmirror.replication.spec import IGNORE_LABEL, SOURCE_CLUSTER
from configmirror.vocabulary import (
    CONFIGMAP,
    CUSTOM_SYNTAX,
    LIMITRANGE,
    NETWORKPOLICY,
    OPTIONAL,
    RESOURCEQUOTA,
    ROLE,
    ROLEBINDING,
    SECRET,
    SECRETS,
    SERVICEACCOUNT,
    Kind,
    Resource,
    custom_kind,
    custom_name,
)

ACTIONS = ("add", "list", "remove")
SECRET_PREFIX = "cluster-"          # the home Secret of cluster NAME: cluster-NAME
TOKEN_ROLE = MEMBER_ACCOUNT + "-token"  # the Role and RoleBinding that renew the token
# On every object of the member side (and on the namespace when `add` created it, which is how
# `remove --uninstall` knows it may delete it).
MEMBER_LABELS = {"app.kubernetes.io/name": "configmirror",
                 "app.kubernetes.io/part-of": "configmirror",
                 "app.kubernetes.io/component": "member"}
# A week: the operator renews it with a third of that left (56 h), so the alert on a token
# that expires within a day fires only when renewal has failed for over a day.
DEFAULT_TOKEN_DURATION = 7 * 24 * 3600.0
MIN_TOKEN_DURATION = 600.0  # the TokenRequest API's own minimum
PROBE_TIMEOUT = 5.0         # seconds `list` gives a member to answer GET /version
PROBES = 8                  # members `list` asks at once

# -- what the member side grants -----------------------------------------------------------------

RBAC = "rbac.authorization.k8s.io"
# The verbs the operator uses on every object of a kind it replicates (list and watch: the
# informer, no get: the cache answers every read; update: a PUT with a resourceVersion; patch:
# releasing a replica; create, delete), as deploy/rbac.yaml and deploy/components/<kind>/
# grant them at home.
WRITE = ("list", "watch", "create", "update", "patch", "delete")
SECRET_BY_NAME = ("list", "watch", "update", "patch", "delete")


@dataclass(frozen=True)
class Grant:
    """One rule the member side grants for a kind: `names` is "" (no resourceNames), or the
    setting that lists them (a grant whose list is empty is left out: a rule without
    resourceNames would grant every name)."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    names: str = ""


def _write(kind: Kind) -> Grant:
    return Grant(kind.resource.group, (kind.plural,), WRITE)


# THE table: per kind as --kinds names it, the rules deploy/ grants the operator for it at
# home (deploy/rbac.yaml for ConfigMaps, deploy/components/<kind>/rbac.yaml for the others;
# tests/unit/test_cluster_cli.py keeps them equal). Never Events (the operator writes none in
# a member), never get, never a Secret beyond the names. A custom resource is `_write(kind)`.
GRANTS: dict[str, tuple[Grant, ...]] = {
    CONFIGMAP.flag: (_write(CONFIGMAP),
                     Grant("", ("namespaces",), ("list", "watch"))),  # every member
    SECRET.flag: (Grant("", (SECRETS.plural,), SECRET_BY_NAME, names="secret_names"),
                  Grant("", (SECRETS.plural,), ("create",))),  # RBAC cannot name a create
    NETWORKPOLICY.flag: (_write(NETWORKPOLICY),),
    LIMITRANGE.flag: (_write(LIMITRANGE),),
    RESOURCEQUOTA.flag: (_write(RESOURCEQUOTA),),
    ROLE.flag: (_write(ROLE),),
    ROLEBINDING.flag: (_write(ROLEBINDING),
                       Grant(RBAC, ("clusterroles", "roles"), ("bind",), names="bindable_roles")),
    SERVICEACCOUNT.flag: (_write(SERVICEACCOUNT),),
}


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def member_rules(kinds: Sequence[Kind], secret_names: Sequence[str] = (),
                 bindable_roles: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The ClusterRole rules of the member side: ConfigMaps and namespaces always, Secrets
    by name when `secret_names` lists some, and each of `kinds` (the other kinds the operator
    replicates, custom resources resolved), in the API's form."""
    named = {"secret_names": list(secret_names), "bindable_roles": list(bindable_roles)}
    flags = [CONFIGMAP.flag, *([SECRET.flag] if secret_names else [])]
    grants = [g for flag in flags for g in GRANTS[flag]]
    for kind in kinds:
        if kind.custom:
            grants.append(_write(kind))
        elif kind.flag not in (CONFIGMAP.flag, SECRET.flag):
            grants += GRANTS[kind.flag]
    rules: list[dict[str, Any]] = []
    for grant in grants:
        rule: dict[str, Any] = {"apiGroups": [grant.group], "resources": list(grant.resources)}
        if grant.names:
            if not named[grant.names]:
                continue
            rule["resourceNames"] = list(named[grant.names])
        rule["verbs"] = list(grant.verbs)
        if rule not in rules:
            rules.append(rule)
    return rules


def resolve_kinds(settings: Settings, discover: Discovery | None) -> list[Kind]:
    """The kinds besides ConfigMaps and Secrets that `settings` (--kinds) replicates, each
    custom resource resolved through `discover` (the member's discovery); UsageError naming
    one that is no kind configmirror replicates, or that the member does not serve."""
    kinds: list[Kind] = []
    for name in settings.kind_names:
        if name == CONFIGMAP.flag:
            continue
        try:
            custom = custom_name(name)
        except ValueError as err:
            raise UsageError(f"--kinds: {name!r} is {err}") from None
        if custom is not None:
            if discover is None:
                continue
            try:
                kinds.append(custom_kind(custom, discover(custom.group, custom.version)))
            except ApiError as err:
                raise UsageError(f"--kinds: {custom}: cannot look it up in the member: "
                                 f"{err}") from None
            except ValueError as err:
                raise UsageError(f"--kinds: in the member: {err}") from None
            continue
        kind = OPTIONAL.get(name)
        if kind is None:
            raise UsageError(f"--kinds: {name!r} is not a kind configmirror replicates "
                             f"(configmap, {', '.join(OPTIONAL)}, or a custom resource as "
                             f"{CUSTOM_SYNTAX})" + ("; Secrets are turned on by name, with "
                                                    "--secret-names" if name == SECRET.flag
                                                    else ""))
        kinds.append(kind)
    return kinds


# -- the member side's objects --------------------------------------------------------------------

@dataclass(frozen=True)
class _Api:
    """Where the API keeps objects of one kind the member side holds, and the fields that
    make one what it must be (compared before an update)."""

    root: str
    plural: str
    said: str  # as kubectl names the kind in its output
    fields: tuple[str, ...] = ()

    def collection(self, namespace: str | None) -> str:
        return f"{self.root}/namespaces/{namespace}/{self.plural}" if namespace \
            else f"{self.root}/{self.plural}"

    def item(self, namespace: str | None, name: str) -> str:
        return f"{self.collection(namespace)}/{name}"


_RBAC_ROOT = f"/apis/{RBAC}/v1"
_APIS = {
    "Namespace": _Api("/api/v1", "namespaces", "namespace"),
    "ServiceAccount": _Api("/api/v1", "serviceaccounts", "serviceaccount"),
    "ClusterRole": _Api(_RBAC_ROOT, "clusterroles", f"clusterrole.{RBAC}", ("rules",)),
    "ClusterRoleBinding": _Api(_RBAC_ROOT, "clusterrolebindings", f"clusterrolebinding.{RBAC}",
                               ("roleRef", "subjects")),
    "Role": _Api(_RBAC_ROOT, "roles", f"role.{RBAC}", ("rules",)),
    "RoleBinding": _Api(_RBAC_ROOT, "rolebindings", f"rolebinding.{RBAC}",
                        ("roleRef", "subjects")),
}
TOKEN_RULES = [{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                "resourceNames": [MEMBER_ACCOUNT], "verbs": ["create"]}]


def member_side(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The member side's objects, in the order `add` creates them (`remove --uninstall`
    deletes them in reverse): the namespace, the ServiceAccount, the ClusterRole of `rules`
    and its binding, and the Role (and binding) that lets the account mint its own token,
    no other account's (TokenRequest on serviceaccounts/token, by name)."""
    subjects = [{"kind": "ServiceAccount", "name": MEMBER_ACCOUNT, "namespace": MEMBER_NAMESPACE}]

    def meta(name: str, namespaced: bool = True) -> dict[str, Any]:
        return {"name": name, **({"namespace": MEMBER_NAMESPACE} if namespaced else {}),
                "labels": dict(MEMBER_LABELS)}

    def role_ref(kind: str, name: str) -> dict[str, str]:
        return {"apiGroup": RBAC, "kind": kind, "name": name}

    rbac = f"{RBAC}/v1"
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": MEMBER_NAMESPACE,
                      "labels": {**MEMBER_LABELS, IGNORE_LABEL: "true"}}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(MEMBER_ACCOUNT)},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": meta(MEMBER_ACCOUNT, False),
         "rules": rules},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding",
         "metadata": meta(MEMBER_ACCOUNT, False),
         "roleRef": role_ref("ClusterRole", MEMBER_ACCOUNT), "subjects": subjects},
        {"apiVersion": rbac, "kind": "Role", "metadata": meta(TOKEN_ROLE),
         "rules": TOKEN_RULES},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": meta(TOKEN_ROLE),
         "roleRef": role_ref("Role", TOKEN_ROLE), "subjects": subjects},
    ]


def _said(obj: Mapping[str, Any], done: str = "") -> str:
    """`kind/name` as kubectl says it, what was `done` to it, and its namespace."""
    meta = obj["metadata"]
    where = f" (namespace {meta['namespace']})" if meta.get("namespace") else ""
    return f"{_APIS[obj['kind']].said}/{meta['name']}{f' {done}' if done else ''}{where}"


def apply(kube: Kube, obj: dict[str, Any]) -> str:
    """Create `obj`, or update the one there to it: "created", "configured" or "unchanged".
    An existing namespace is left as it is (it may be another's: the home operator's own).
    Raises ApiError."""
    api = _APIS[obj["kind"]]
    meta = obj["metadata"]
    namespace = meta.get("namespace")
    try:
        kube.request("create", api.collection(namespace), body=obj)
        return "created"
    except ApiError as err:
        if err.status != 409:
            raise
    if obj["kind"] == "Namespace":
        return "unchanged"
    current = kube.request("get", api.item(namespace, meta["name"]))
    labels = dict((current.get("metadata") or {}).get("labels") or {})
    if all(_same(current.get(f), obj.get(f)) for f in api.fields) and \
            labels.items() >= meta["labels"].items():
        return "unchanged"
    current.update({f: obj[f] for f in api.fields})
    current["metadata"]["labels"] = {**labels, **meta["labels"]}
    kube.request("update", api.item(namespace, meta["name"]), body=current)
    return "configured"


def _same(there: Any, wanted: Any) -> bool:
    """Whether a field holds what it must; a list (rules, subjects) in any order."""
    if isinstance(there, list) and isinstance(wanted, list):
        def key(item: Any) -> str:
            return json.dumps(item, sort_keys=True)
        return sorted(map(key, there)) == sorted(map(key, wanted))
    return bool(there == wanted)


def uninstall(kube: Kube) -> Iterator[str]:
    """Delete the member side, in the reverse of the order `add` made it; one line per object.
    The namespace goes only when `add` created it (it carries MEMBER_LABELS). Raises ApiError."""
    for obj in reversed(member_side([])):
        api = _APIS[obj["kind"]]
        meta = obj["metadata"]
        path = api.item(meta.get("namespace"), meta["name"])
        if obj["kind"] == "Namespace":
            try:
                labels = (kube.request("get", path).get("metadata") or {}).get("labels") or {}
            except ApiError as err:
                if err.status != 404:
                    raise
                yield _said(obj, "not found")
                continue
            if not labels.items() >= MEMBER_LABELS.items():
                yield _said(obj, "kept: `cluster add` did not create it")
                continue
        try:
            kube.request("delete", path)
            yield _said(obj, "deleted")
        except ApiError as err:
            if err.status != 404:
                raise
            yield _said(obj, "not found")


# -- the home Secret --------------------------------------------------------------------------

def member_kubeconfig(name: str, server: str, token: str, ca_data: bytes | None = None,
                      insecure: bool = False, tls_server_name: str | None = None) -> str:
    """The kubeconfig the operator reaches member `name` with: one context, its server and
    CA (none when `insecure`: client-go refuses both), and the token."""
    cluster: dict[str, Any] = {"server": server}
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    elif ca_data:
        cluster["certificate-authority-data"] = base64.b64encode(ca_data).decode()
    if tls_server_name:
        cluster["tls-server-name"] = tls_server_name
    doc = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": name, "cluster": cluster}],
           "users": [{"name": MEMBER_ACCOUNT, "user": {"token": token}}],
           "contexts": [{"name": name, "context": {"cluster": name, "user": MEMBER_ACCOUNT,
                                                   "namespace": MEMBER_NAMESPACE}}],
           "current-context": name, "preferences": {}}
    return yaml.safe_dump(doc, sort_keys=False)


def cluster_secret(name: str, namespace: str, labels: Mapping[str, str],
                   kubeconfig: str) -> dict[str, Any]:
    """The home Secret of member `name`: labelled with its name and its `labels`, holding
    `kubeconfig` (replication.clusters reads it)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": SECRET_PREFIX + name, "namespace": namespace,
                         "labels": {**labels, CLUSTER_LABEL: name}},
            "data": {KUBECONFIG_KEYS[0]: base64.b64encode(kubeconfig.encode()).decode()}}


def parse_labels(text: str) -> dict[str, str]:
    """`--label` as given, `KEY=VALUE` entries joined by commas: the labels, or UsageError.
    Not the cluster's name (the Secret's own label) nor a key twice."""
    if not text.strip():
        return {}
    try:
        selector = parse_selector(text)
    except SelectorError as err:
        raise UsageError(f"--label {text!r}: {err}") from None
    labels: dict[str, str] = {}
    for requirement in selector.requirements:
        if requirement.operator != "=" or len(requirement.values) != 1:
            raise UsageError(f"--label {text!r}: each label is KEY=VALUE")
        if requirement.key == CLUSTER_LABEL:
            raise UsageError(f"--label: {CLUSTER_LABEL} is the cluster's name, NAME")
        if requirement.key in labels:
            raise UsageError(f"--label: {requirement.key} is given twice")
        labels[requirement.key] = requirement.values[0]
    return labels


def _context_parts(kubeconfig: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cluster and user entries of a one-context kubeconfig (check_kubeconfig passed)."""
    doc = yaml.safe_load(kubeconfig)
    context = doc["contexts"][0].get("context") or {}

    def named(part: str) -> dict[str, Any]:
        entry = next(e for e in doc.get(part + "s") or () if e.get("name") == context[part])
        return dict(entry.get(part) or {})

    return named("cluster"), named("user")


def token_expiry(kubeconfig: str) -> datetime | None:
    """When the token of a member's kubeconfig expires: its JWT `exp` claim, read without
    checking the signature (client.tokens, as the operator reads it to renew it); None for a
    credential that is no such token (a client certificate, an exec plugin, a static token)."""
    times = token_times(kubeconfig)
    return None if times is None else _moment(times[1])


def _moment(seconds: float) -> datetime | None:
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def server_of(kubeconfig: str) -> str:
    cluster, _ = _context_parts(kubeconfig)
    return str(cluster.get("server", ""))


# -- the commands' parsers ------------------------------------------------------------------------

_ABOUT = ("member clusters: add one (install its member side, write its Secret at home), "
          "list them, remove one")
_KUBECONFIG = ("kubeconfig file; without it $KUBECONFIG (a list of files, merged), then "
               "~/.kube/config")
_HOME_CONTEXT = ("the kubeconfig context of the home cluster, where the operator runs and "
                 "keeps the cluster Secrets (default: its current-context)")
_OPERATOR_NAMESPACE = ("the home operator's namespace, where the cluster Secrets are "
                       "(default: the namespace of the operator found through its published "
                       "policy, else configmirror)")
_CLUSTER_NAME = ("the home cluster's name, the operator's --cluster-name; given, it "
                 "overrides the one the running operator publishes, if it does")


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`cluster` and its actions: add, list, remove."""
    cluster = add_command(commands, "cluster", _ABOUT, "done (list: shown, whether the "
                          "members answer or not)", errors="error: bad flags or input, a "
                          "cluster that cannot be reached or changed, no such cluster")
    actions = cluster.add_subparsers(dest="action", metavar="{" + ",".join(ACTIONS) + "}")
    actions.required = True
    _add_parser(actions)
    _list_parser(actions)
    _remove_parser(actions)


def _home_flags(p: Parser, policy: bool = True) -> None:
    d = Settings()
    add_flag(p, "--kubeconfig", d.kubeconfig, _KUBECONFIG)
    add_flag(p, "--home-context", None, _HOME_CONTEXT, env=False)
    add_flag(p, "--operator-namespace", "", _OPERATOR_NAMESPACE)
    if policy:
        add_flag(p, "--cluster-name", DEFAULT_HOME, _CLUSTER_NAME)
        p.flag("--kinds", d.kinds, "the kinds the home operator replicates, comma-separated, "
               "as run takes them (the flag may be repeated); given, it overrides the running "
               "operator's", repeat=True)
        add_flag(p, "--secret-names", d.secret_names, "the Secrets the home operator "
                 "replicates, as run takes them; given, it overrides the running operator's")
        add_flag(p, "--bindable-roles", d.bindable_roles, "the roles a replicated RoleBinding "
                 "may bind, as run takes them; given, it overrides the running operator's")


def _log_flags(p: Parser) -> None:
    d = Settings()
    add_flag(p, "--log-format", d.log_format, "log format", choices=("text", "json"))
    p.flag("--log-level", d.log_level, "log level",
           Choice(("debug", "info", "warning", "error"), (("warn", "warning"),)))


def _describe(parser: Parser, *paragraphs: str) -> None:
    """A longer description than the one line the command list shows, wrapped."""
    parser.description = "\n\n".join(textwrap.fill(p, 88, break_on_hyphens=False)
                                      for p in (parser.description or "", *paragraphs))


def _add_parser(actions: argparse._SubParsersAction[Parser]) -> None:
    add = add_command(
        actions, "add", "install the member side in cluster NAME (--context, admin rights "
        "there) and write its Secret at home; creates or updates: run again, it repairs and "
        "renews", "added: every step done", errors="error: bad flags or input, a context "
        "that does not exist, no admin rights in the member, NAME the home's own")
    _describe(add, f"In the member: namespace {MEMBER_NAMESPACE}, ServiceAccount "
              f"{MEMBER_ACCOUNT}, a ClusterRole (and binding) granting exactly the writes of "
              "the kinds the home operator replicates (its published policy, or --kinds and "
              "--secret-names), and a Role (and binding) that lets the account renew its own "
              "token, no other. Then a token (TokenRequest, --token-duration), and at home "
              f"secret {SECRET_PREFIX}NAME in the operator's namespace, labelled "
              f"{CLUSTER_LABEL}=NAME and --label, holding a kubeconfig of the member's "
              "server (--server), its CA and that token. The operator renews the token "
              "before it expires and writes it back there.")
    add.add_argument("name", metavar="NAME", help="the cluster's name, a DNS label (the "
                     "configmirror.io/cluster label; sources' replicate-to-clusters name it)")
    add_flag(add, "--context", None, "the kubeconfig context of the member cluster, with "
             "admin rights there (required)", env=False)
    _home_flags(add)
    add.flag("--label", "", "a label of the cluster, KEY=VALUE (the flag may be repeated; "
             "sources' replicate-to-clusters-matching select by them)", env=False,
             metavar="KEY=VALUE", repeat=True)
    add_flag(add, "--server", "", "the member's API server URL as the operator reaches it, "
             "when it differs from the member context's", env=False)
    add_flag(add, "--token-duration", DEFAULT_TOKEN_DURATION, "how long the token is valid "
             "(the operator renews it before then; the API server may shorten it; at least "
             "10m)", duration, env=False)
    _log_flags(add)


def _list_parser(actions: argparse._SubParsersAction[Parser]) -> None:
    listing = add_command(
        actions, "list", "list the member clusters: labels, server, whether each answers, "
        "when its token expires, its replicas of this home; an unusable Secret with its "
        "fault", "shown (whether the members answer or not)",
        errors="error: bad flags, the home cluster cannot be reached")
    _describe(listing, f"Every Secret labelled {CLUSTER_LABEL} in the operator's namespace. "
              f"REACHABLE: GET /version through the Secret's kubeconfig answered within "
              f"{PROBE_TIMEOUT:g} s (-o json says why not). TOKEN EXPIRY: its token's exp "
              "claim (none for a credential that is no token). REPLICAS: the objects there "
              f"labelled {REPLICA_LABEL}=true whose {SOURCE_CLUSTER} is this home's name, of "
              "every kind the home operator replicates.")
    _home_flags(listing)
    add_flag(listing, "--output", "text", "output format", choices=FORMATS, short="-o",
             env=False)
    _log_flags(listing)


def _remove_parser(actions: argparse._SubParsersAction[Parser]) -> None:
    remove = add_command(
        actions, "remove", "delete cluster NAME's Secret at home (its replicas in the member "
        "stay); --uninstall also deletes the member side", "removed",
        errors="error: bad flags, no such cluster, a cluster that cannot be reached or "
        "changed")
    _describe(remove, f"Every Secret labelled {CLUSTER_LABEL}=NAME in the operator's "
              "namespace is deleted: the operator stops replicating into the member and "
              "leaves what it wrote there as it is. With --uninstall, then, through --context: "
              f"the member side `cluster add` installed (namespace {MEMBER_NAMESPACE} only if "
              "`cluster add` created it).")
    remove.add_argument("name", metavar="NAME", help="the cluster's name")
    _home_flags(remove, policy=False)
    add_flag(remove, "--uninstall", False, "also delete the member side in the member",
             boolean, env=False)
    add_flag(remove, "--context", None, "the kubeconfig context of the member cluster, for "
             "--uninstall", env=False)
    _log_flags(remove)


# -- the commands ---------------------------------------------------------------------------------

def command(args: argparse.Namespace) -> int:
    """Run `cluster ACTION`."""
    action = {"add": add, "list": list_clusters, "remove": remove}[args.action]
    return action(args)


def _home(args: argparse.Namespace) -> Settings:
    """The settings of the home operator: the flags, and its published policy where the user
    set none (which also says its namespace)."""
    d = Settings()
    settings = Settings(kubeconfig=args.kubeconfig, context=args.home_context,
                        operator_namespace=args.operator_namespace or d.operator_namespace,
                        cluster_name=getattr(args, "cluster_name", d.cluster_name),
                        kinds=getattr(args, "kinds", d.kinds),
                        secret_names=getattr(args, "secret_names", d.secret_names),
                        bindable_roles=getattr(args, "bindable_roles", d.bindable_roles))
    settings = followed(args, settings)
    if not valid_name(settings.cluster_name):
        raise UsageError(f"--cluster-name: {settings.cluster_name!r} is not a cluster name (a "
                         "DNS label)")
    return settings


def _where(context: str | None) -> str:
    return f"context {context}" if context else "the current context"


def _failed(what: str, err: ApiError) -> UsageError:
    return UsageError(f"{what}: {_reason(err)}")


def add(args: argparse.Namespace) -> int:
    """Install the member side, mint a token, write the Secret at home."""
    name = args.name
    if not valid_name(name):
        raise UsageError(f"{name!r} is not a cluster name (a DNS label: lower-case letters, "
                         "digits and '-', at most 63)")
    if not args.context:
        raise UsageError("cluster add needs --context: the member cluster's context")
    if args.token_duration < MIN_TOKEN_DURATION:
        raise UsageError("--token-duration must be at least 10m (the TokenRequest API's "
                         "minimum)")
    if args.server and not args.server.startswith(("https://", "http://")):
        raise UsageError(f"--server {args.server!r} is not an https:// URL")
    labels = parse_labels(args.label)
    # Both contexts exist, before either cluster is asked anything.
    load_configuration(args.kubeconfig, args.context, 1)
    load_configuration(args.kubeconfig, args.home_context, 1)
    settings = _home(args)
    home_name = settings.cluster_name
    if name == home_name:
        raise UsageError(f"cluster {name} is the home cluster's own name (--cluster-name)")
    namespace = settings.operator_namespace
    home = connect(settings, pool_size=1, limited=False)
    try:
        _check_home(home, name, namespace)
        member = connect(Settings(kubeconfig=args.kubeconfig, context=args.context),
                         pool_size=1, limited=False)
        try:
            kinds = resolve_kinds(settings, discovery(member))
            rules = member_rules(kinds, settings.secrets, _names(settings.bindable_roles))
            server = args.server or str(member.configuration.host)
            resources = ", ".join(dict.fromkeys(r for rule in rules for r in rule["resources"]))
            print(f"cluster {name}: the member side in {_where(args.context)} "
                  f"({member.configuration.host}), for {resources}")
            for obj in member_side(rules):
                try:
                    done = apply(member, obj)
                except ApiError as err:
                    raise _failed(f"{_where(args.context)}: cannot create or update "
                                  f"{_said(obj)}", err) from None
                print(_said(obj, done))
            token, expires = _mint(member, args.token_duration, args.context)
            print(f"token of serviceaccount {MEMBER_NAMESPACE}/{MEMBER_ACCOUNT} minted, "
                  f"expires {expires}")
            kubeconfig = member_kubeconfig(name, server, token, *_tls_of(member.configuration))
        finally:
            member.close()
        secret = cluster_secret(name, namespace, labels, kubeconfig)
        try:
            member_of(secret, home_name)
        except InvalidCluster as err:
            raise UsageError(f"the Secret it would write is unusable: {err}") from None
        done = _write_secret(home, secret)
    finally:
        home.close()
    print(f"secret/{secret['metadata']['name']} {done} in namespace {namespace} of the home "
          f"cluster ({_where(args.home_context)}): cluster {name}, server {server}")
    return 0


def _check_home(home: Kube, name: str, namespace: str) -> None:
    """Before the member is touched: the operator's namespace exists at home, and no other
    Secret names cluster `name` (the operator would refuse both)."""
    try:
        home.request("get", f"/api/v1/namespaces/{namespace}")
    except ApiError as err:
        if err.status == 404:
            raise UsageError(f"the home cluster has no namespace {namespace} (the operator's: "
                             "--operator-namespace)") from None
        if err.status != 403:  # may not read namespaces: the write will say
            raise _failed(f"the home cluster: cannot read namespace {namespace}", err) from None
    try:
        found = home.request("list", SECRETS.collection(namespace),
                             {"labelSelector": f"{CLUSTER_LABEL}={name}"})
    except ApiError as err:
        raise _failed(f"the home cluster: cannot list the Secrets in namespace {namespace}",
                      err) from None
    others = sorted(str((s.get("metadata") or {}).get("name")) for s in found.get("items") or ()
                    if (s.get("metadata") or {}).get("name") != SECRET_PREFIX + name)
    if others:
        raise UsageError(f"cluster {name} is named already by secret {', '.join(others)} in "
                         f"namespace {namespace}: remove it first (`{prog()} cluster remove "
                         f"{name}` removes every Secret naming it)")


def _mint(member: Kube, seconds: float, context: str) -> tuple[str, str]:
    """A token of the member's ServiceAccount (TokenRequest) and when it expires."""
    try:
        token, expires = request_token(member, MEMBER_NAMESPACE, MEMBER_ACCOUNT, int(seconds))
    except ApiError as err:
        raise _failed(f"{_where(context)}: cannot mint a token of serviceaccount "
                      f"{MEMBER_NAMESPACE}/{MEMBER_ACCOUNT}", err) from None
    when = _moment(expires)
    return token, "at an unknown time" if when is None else _iso(when)


def _tls_of(configuration: Any) -> tuple[bytes | None, bool, str | None]:
    """The member context's CA (read from the file the kubeconfig names, or the file the
    client wrote its certificate-authority-data to), whether it skips TLS verification, and
    its tls-server-name."""
    ca: bytes | None = None
    if configuration.ssl_ca_cert:
        with open(configuration.ssl_ca_cert, "rb") as file:
            ca = file.read()
    elif configuration.ca_cert_data:
        data = configuration.ca_cert_data
        ca = data if isinstance(data, bytes) else str(data).encode()
    return ca, not configuration.verify_ssl, configuration.tls_server_name or None


def _write_secret(home: Kube, secret: dict[str, Any]) -> str:
    """Create the cluster Secret, or replace the one there (its data and labels)."""
    meta = secret["metadata"]
    what = f"the home cluster: cannot write secret {meta['namespace']}/{meta['name']}"
    try:
        home.request("create", SECRETS.collection(meta["namespace"]), body=secret)
        return "created"
    except ApiError as err:
        if err.status != 409:
            raise _failed(what, err) from None
    try:
        current = home.request("get", SECRETS.item(meta["namespace"], meta["name"]))
        current["metadata"]["labels"] = meta["labels"]
        current["data"] = secret["data"]
        current.pop("stringData", None)
        home.request("update", SECRETS.item(meta["namespace"], meta["name"]), body=current)
    except ApiError as err:
        raise _failed(what, err) from None
    return "configured"


# -- list -----------------------------------------------------------------------------------------

@dataclass
class Row:
    """One cluster Secret as `list` shows it."""

    name: str
    secret: str
    labels: dict[str, str]
    server: str = ""
    reachable: bool | None = None  # None: not asked (an unusable Secret)
    reason: str | None = None      # why it is not reachable
    version: str | None = None
    token_expiry: datetime | None = None
    replicas: int | None = None
    replicas_error: str | None = None
    fault: str | None = None       # why the Secret is unusable

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "secret": self.secret, "labels": self.labels,
                "server": self.server, "reachable": self.reachable, "reason": self.reason,
                "version": self.version,
                "token_expiry": None if self.token_expiry is None else _iso(self.token_expiry),
                "replicas": self.replicas, "replicas_error": self.replicas_error,
                "fault": self.fault}


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextmanager
def member_client(member: Member, pool_size: int = 1) -> Iterator[Kube]:
    """A client of a member through its Secret's kubeconfig (never written to a file).
    Raises ConfigError."""
    configuration = configuration_from_text(member.kubeconfig, f"cluster {member.name}",
                                            pool_size)
    kube = Kube(configuration, user_agent=f"configmirror/{__version__}")
    try:
        yield kube
    finally:
        kube.close()


def replicated(settings: Settings, kinds: Sequence[Kind]) -> list[tuple[Resource, tuple[str, ...]]]:
    """What a member may hold replicas of: each resource the home operator replicates, and the
    only names it replicates (none: every name)."""
    found: list[tuple[Resource, tuple[str, ...]]] = [(CONFIGMAP.resource, ())]
    if settings.secrets:
        found.append((SECRETS, tuple(settings.secrets)))
    found += [(kind.resource, ()) for kind in kinds]
    return found


def replicas_in(kube: Kube, resources: Sequence[tuple[Resource, tuple[str, ...]]],
                home: str) -> int:
    """How many replicas of home cluster `home` a member holds: its objects labelled
    configmirror.io/replica=true whose configmirror.io/source-cluster is `home`, of each
    resource (by name where names are given: what the member side may list). Raises
    ApiError."""
    count = 0
    for resource, names in resources:
        for name in names or (None,):
            query: dict[str, Any] = {"labelSelector": f"{REPLICA_LABEL}=true", "limit": 500,
                                     "fieldSelector": None if name is None
                                     else f"metadata.name={name}"}
            while True:
                body = kube.request("list", resource.collection(), query, timeout=PROBE_TIMEOUT)
                count += sum(1 for item in body.get("items") or ()
                             if ((item.get("metadata") or {}).get("annotations") or {})
                             .get(SOURCE_CLUSTER) == home)
                if not (token := (body.get("metadata") or {}).get("continue")):
                    break
                query["continue"] = token
    return count


def probe(member: Member, settings: Settings, row: Row) -> Row:
    """Fill `row` with what the member says through its own kubeconfig."""
    try:
        with member_client(member) as kube:
            try:
                row.version = str(kube.request("get", "/version", timeout=PROBE_TIMEOUT)
                                  .get("gitVersion", ""))
            except ApiError as err:
                row.reachable, row.reason = False, _reason(err)
                return row
            row.reachable = True
            try:
                kinds = resolve_kinds(settings, discovery(kube))
                row.replicas = replicas_in(kube, replicated(settings, kinds),
                                           settings.cluster_name)
            except ApiError as err:
                row.replicas_error = _reason(err)
            except UsageError as err:
                row.replicas_error = str(err)
    except ConfigError as err:
        row.reachable, row.reason = False, str(err)
    return row


def _reason(err: ApiError) -> str:
    return f"{err.status} {err.reason}: {err.message}" if err.status \
        else f"{err.reason}: {err.message}"


def list_clusters(args: argparse.Namespace) -> int:
    """Print every cluster Secret, and what each member says."""
    settings = _home(args)
    namespace = settings.operator_namespace
    home = connect(settings, pool_size=1, limited=False)
    try:
        found = home.request("list", SECRETS.collection(namespace),
                             {"labelSelector": CLUSTER_LABEL})
    except ApiError as err:
        raise _failed(f"the home cluster: cannot list the Secrets in namespace {namespace}",
                      err) from None
    finally:
        home.close()
    secrets = list(found.get("items") or ())
    members, faults = inventory(secrets, settings.cluster_name)
    by_secret = {m.secret: m for m in members.values()}
    rows: list[Row] = []
    for secret in secrets:
        meta = secret.get("metadata") or {}
        secret_name = str(meta.get("name", ""))
        labels = dict(meta.get("labels") or {})
        cluster = labels.pop(CLUSTER_LABEL, "")
        row = Row(cluster, secret_name, labels, fault=faults.get(secret_name))
        if secret_name in by_secret:
            member = by_secret[secret_name]
            row.server = server_of(member.kubeconfig)
            row.token_expiry = token_expiry(member.kubeconfig)
        rows.append(row)
    rows.sort(key=lambda r: (r.name, r.secret))
    with ThreadPoolExecutor(max_workers=PROBES) as pool:
        for _ in pool.map(lambda r: probe(by_secret[r.secret], settings, r),
                          [r for r in rows if r.secret in by_secret]):
            pass
    if args.output != "text":
        print(dump({"home": settings.cluster_name, "namespace": namespace,
                    "clusters": [r.to_json() for r in rows]}, args.output), end="")
    else:
        print_rows(rows, namespace, datetime.now(UTC))
    return 0


def print_rows(rows: Sequence[Row], namespace: str, now: datetime) -> None:
    """The clusters as a table, then each unusable Secret's fault."""
    if not rows:
        print(f"no member clusters (no Secret labelled {CLUSTER_LABEL} in namespace "
              f"{namespace})")
        return
    table = [("NAME", "LABELS", "SERVER", "REACHABLE", "TOKEN EXPIRY", "REPLICAS")]
    for r in rows:
        labels = ",".join(f"{k}={v}" for k, v in sorted(r.labels.items())) or "<none>"
        if r.fault is not None:
            table.append((r.name or "-", labels, "-", "invalid", "-", "-"))
            continue
        reachable = "yes" if r.reachable else "no"
        expiry = "none" if r.token_expiry is None else (
            f"{_iso(r.token_expiry)} ({_until(r.token_expiry, now)})")
        replicas = "-" if r.replicas is None else str(r.replicas)
        table.append((r.name, labels, r.server, reachable, expiry, replicas))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
              .rstrip())
    for r in rows:
        if r.fault is not None:
            print(f"secret/{r.secret}: {r.fault}")
        elif r.reachable is False:
            print(f"cluster {r.name}: not reachable: {r.reason}")
        elif r.replicas_error is not None:
            print(f"cluster {r.name}: replicas not counted: {r.replicas_error}")


def _until(when: datetime, now: datetime) -> str:
    seconds = int((when - now).total_seconds())
    if seconds <= 0:
        return "expired"
    hours, rest = divmod(seconds, 3600)
    return f"in {hours}h{rest // 60}m" if hours else f"in {rest // 60}m{rest % 60}s"


# -- remove ---------------------------------------------------------------------------------------

def remove(args: argparse.Namespace) -> int:
    """Delete the cluster's Secret(s) at home; with --uninstall, the member side too."""
    name = args.name
    if not valid_name(name):
        raise UsageError(f"{name!r} is not a cluster name (a DNS label)")
    if args.uninstall and not args.context:
        raise UsageError("--uninstall needs --context: the member cluster's context")
    if args.context and not args.uninstall:
        raise UsageError("--context names the member for --uninstall; without it, remove "
                         "touches the home cluster only (--home-context)")
    if args.uninstall:
        load_configuration(args.kubeconfig, args.context, 1)
    settings = _home(args)
    namespace = settings.operator_namespace
    home = connect(settings, pool_size=1, limited=False)
    try:
        found = home.request("list", SECRETS.collection(namespace),
                             {"labelSelector": f"{CLUSTER_LABEL}={name}"})
        secrets = sorted(str((s.get("metadata") or {}).get("name"))
                         for s in found.get("items") or ())
        if not secrets:
            raise UsageError(f"there is no cluster {name} (no Secret labelled "
                             f"{CLUSTER_LABEL}={name} in namespace {namespace})")
        for secret in secrets:
            home.request("delete", SECRETS.item(namespace, secret))
            print(f"secret/{secret} deleted from namespace {namespace} (cluster {name}; its "
                  "replicas in the member stay)")
    except ApiError as err:
        raise _failed(f"the home cluster: cannot remove cluster {name} from namespace "
                      f"{namespace}", err) from None
    finally:
        home.close()
    if args.uninstall:
        member = connect(Settings(kubeconfig=args.kubeconfig, context=args.context),
                         pool_size=1, limited=False)
        try:
            for line in uninstall(member):
                print(line)
        except ApiError as err:
            raise _failed(f"{_where(args.context)}: cannot delete the member side", err) \
                from None
        finally:
            member.close()
    return 0
