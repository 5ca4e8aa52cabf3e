"""The `configmirror` command: `run`, `plan`, `status`, `wait`, `version` (also as
`kubectl configmirror ...`: the `kubectl-configmirror` entry point is the same program).

Every flag can also be set by an environment variable: `--max-retries` is
CONFIGMIRROR_MAX_RETRIES. A flag on the command line wins over the environment.
Mistakes a user can make (bad flags, no kubeconfig, unreachable cluster) end in one line on
stderr and exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, NoReturn, overload

from configmirror import __version__
from configmirror.caches import ClusterCache, KindCache, Replicated, replicated_kinds
from configmirror.kube import EVENTS, ApiError, ConfigError, Kube, load_configuration
from configmirror.model import CONFIGMAP, SECRET, Kind
from configmirror.plan import Grace, ReplicationPlan, plan_source
from configmirror.settings import Settings, format_duration, parse_duration
from configmirror.spec import InvalidSpec, ReplicaRules
from configmirror.status import Failure, KindView, SourceStatus, namespace_status, source_status

ENV_PREFIX = "CONFIGMIRROR_"
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
EXIT_OUT_OF_SYNC = 2


class UsageError(Exception):
    """A mistake on the command line or in the environment (one line, exit 1)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _env(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def _add(parser: argparse.ArgumentParser, flag: str, default: Any, help: str,
         kind: Callable[[str], Any] = str, choices: Sequence[str] | None = None) -> None:
    """A flag whose default comes from its environment variable, then from `default`."""
    raw = os.environ.get(_env(flag))
    if kind is bool:
        value = default if raw is None else raw.strip().lower() in ("1", "true", "yes", "on")
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=value,
                            help=f"{help} [env {_env(flag)}]")
        return
    if raw is not None:
        try:
            default = kind(raw)
        except ValueError:
            raise UsageError(f"{_env(flag)}={raw!r} is not a valid {kind.__name__}") from None
    parser.add_argument(flag, type=kind, default=default, choices=choices,
                        help=f"{help} (default: {default}) [env {_env(flag)}]")


def duration(text: str) -> float:
    """A duration flag's value: `60s`, `1m30s`, `0s` (argparse names the type in errors)."""
    return parse_duration(text)


def _parser() -> argparse.ArgumentParser:
    d = Settings()
    parser = _Parser(prog=_prog(), description="Keeps ConfigMaps (and named Secrets) "
                     "replicated across namespaces. See README.md.")
    commands = parser.add_subparsers(dest="command",
                                     metavar="{run,plan,status,wait,version}")
    commands.required = True

    def cluster_flags(p: argparse.ArgumentParser) -> None:
        _add(p, "--kubeconfig", d.kubeconfig, "kubeconfig file (default: in-cluster, then "
             "$KUBECONFIG or ~/.kube/config)")
        _add(p, "--context", d.context, "kubeconfig context")
        _add(p, "--source-namespaces", d.source_namespaces,
             "namespaces whose sources are honoured (globs, ! excludes)")
        _add(p, "--source-namespace-selector", d.source_namespace_selector,
             "honour sources only in namespaces whose labels match this selector, e.g. "
             "configmirror.io/source=true as deploy/ and the Helm chart set it; empty: every "
             "namespace --source-namespaces allows, the default for `run` on a laptop")
        _add(p, "--exclude-namespaces", d.exclude_namespaces,
             "namespaces that never receive replicas (globs)")
        _add(p, "--secret-names", d.secret_names, "Secrets with these exact names (comma-"
             "separated) may be sources; the only Secrets ever read (default: none, Secrets "
             "are off)")
        _add(p, "--secret-source-namespaces", d.secret_source_namespaces, "namespaces whose "
             "Secrets of those names are sources (globs, ! excludes); needed with "
             "--secret-names")
        _add(p, "--drop-labels", d.drop_labels, "label keys never copied to a replica (globs, "
             "! excludes; replaces the default list, which holds the keys by which Argo CD, "
             "Flux, Helm and cert-manager claim objects; '' drops nothing)")
        _add(p, "--drop-annotations", d.drop_annotations, "annotation keys never copied to a "
             "replica (globs; replaces the default list, the same as --drop-labels's)")
        _add(p, "--delete-grace", format_duration(d.delete_grace), "how long every removal of "
             "a replica waits after its cause is first seen (a source deleted or no longer "
             "annotated, a namespace that stops matching); if the cause goes within it, "
             "nothing is written. 0s removes at once", duration)
        _add(p, "--log-format", d.log_format, "log format", choices=("text", "json"))
        _add(p, "--log-level", d.log_level, "log level",
             choices=("debug", "info", "warning", "error"))

    run = commands.add_parser("run", help="run the operator until SIGTERM/SIGINT")
    cluster_flags(run)
    _add(run, "--workers", d.workers, "reconcile worker threads", int)
    _add(run, "--max-retries", d.max_retries, "attempts per change before giving up", int)
    _add(run, "--resync-period", d.resync_period,
         "seconds between re-checks of every source from the cache (0: never)", float)
    _add(run, "--leader-elect", d.leader_elect, "elect a leader among replicas through a Lease",
         bool)
    _add(run, "--leader-election-namespace", d.leader_election_namespace,
         "namespace of the leader-election Lease")
    _add(run, "--leader-election-id", d.leader_election_id, "name of the Lease")
    _add(run, "--metrics-bind-address", d.metrics_bind_address,
         "host:port for /metrics ('0' disables)")
    _add(run, "--health-probe-bind-address", d.health_probe_bind_address,
         "host:port for /healthz and /readyz ('0' disables)")
    _add(run, "--drain-timeout", d.drain_timeout,
         "seconds in-flight reconciles may take to finish on SIGTERM", float)
    _add(run, "--dry-run", d.dry_run, "decide and log every write, perform none", bool)
    _add(run, "--source-metrics", d.source_metrics, "export configmirror_source_replicas"
         "{kind,source,state}: each source's replicas by state (a series per source: off by "
         "default)", bool)
    _add(run, "--kube-api-qps", d.kube_api_qps, "requests per second to the API server, "
         "shared by every request (0: no client-side limit)", float)
    _add(run, "--kube-api-burst", d.kube_api_burst, "requests allowed above --kube-api-qps "
         "in a burst", int)

    plan = commands.add_parser("plan", help="print what run would change, change nothing; "
                               "exit 0 when in sync, 2 when not")
    cluster_flags(plan)
    _add(plan, "--namespace", None, "only sources in this namespace")
    _add(plan, "--output", "text", "output format", choices=("text", "json"))

    status = commands.add_parser("status", help="per source: targets, in sync, pending, "
                                 "problems (the same decision as run); change nothing")
    cluster_flags(status)
    status.add_argument("source", nargs="?", metavar="NS/NAME", help="only this source")
    _add(status, "--kind", "configmap", "the kind of NS/NAME", choices=KIND_CHOICES)
    _add(status, "--namespace", None, "what this namespace holds and pulls, and the sources "
         "of those")
    _add(status, "--output", "text", "output format", choices=("text", "json"))
    status.add_argument("-o", dest="output", choices=("text", "json"), help="--output")

    wait = commands.add_parser("wait", help="exit 0 as soon as every target of a source is "
                               "in sync, 1 when the timeout passes or it does not exist")
    cluster_flags(wait)
    wait.add_argument("source", metavar="NS/NAME", help="the source")
    _add(wait, "--kind", "configmap", "the kind of NS/NAME", choices=KIND_CHOICES)
    _add(wait, "--timeout", "5m", "how long to wait", duration)

    commands.add_parser("version", help="print the version")
    return parser


KIND_CHOICES = ("configmap", "secret")


def _prog() -> str:
    """How the user called us: `kubectl configmirror` as a kubectl plugin (kubectl runs the
    `kubectl-configmirror` executable), else `configmirror`."""
    return "kubectl configmirror" if os.path.basename(sys.argv[0]).startswith(
        "kubectl-configmirror") else "configmirror"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        if args.command == "version":
            print(f"configmirror {__version__}")
            return 0
        _setup_logging(args.log_format, args.log_level)
        commands = {"run": _run, "plan": _plan, "status": _status, "wait": _wait}
        return commands[args.command](args)
    except (UsageError, ConfigError) as err:
        print(f"{_prog()}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings(**{k: v for k, v in vars(args).items()
                           if k in Settings.__dataclass_fields__})
    if settings.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {settings.workers}")
    if settings.max_retries < 1:
        raise UsageError(f"--max-retries must be at least 1, got {settings.max_retries}")
    if settings.resync_period < 0:
        raise UsageError(f"--resync-period must not be negative, got {settings.resync_period}")
    if settings.kube_api_qps < 0:
        raise UsageError(f"--kube-api-qps must not be negative, got {settings.kube_api_qps}")
    if settings.kube_api_burst < 1:
        raise UsageError(f"--kube-api-burst must be at least 1, got {settings.kube_api_burst}")
    for flag in ("metrics_bind_address", "health_probe_bind_address"):
        address = getattr(settings, flag)
        if address not in ("", "0") and not address.rpartition(":")[2].isdigit():
            raise UsageError(f"--{flag.replace('_', '-')} must be host:port or '0', "
                             f"got {address!r}")
    _kinds(settings)
    _rules(settings)
    return settings


def _kinds(settings: Settings) -> list[Replicated]:
    """The kinds replicated (ConfigMaps, and Secrets when named), or the flag at fault."""
    if settings.secrets and not settings.secret_source_namespaces.strip():
        raise UsageError("--secret-names needs --secret-source-namespaces (which namespaces "
                         "may hold those Secrets as sources)")
    for name in settings.secrets:
        if not _DNS_NAME.fullmatch(name):
            raise UsageError(f"--secret-names: {name!r} is not a Secret name")
    try:
        return replicated_kinds(settings)
    except InvalidSpec as err:
        raise UsageError(str(err)) from None


def _rules(settings: Settings) -> ReplicaRules:
    try:
        return ReplicaRules.from_flags(settings.drop_labels, settings.drop_annotations)
    except InvalidSpec as err:
        raise UsageError(str(err)) from None


def _connect(settings: Settings, pool_size: int, limited: bool = True) -> Kube:
    configuration = load_configuration(settings.kubeconfig, settings.context, pool_size)
    kube = Kube(configuration, user_agent=f"configmirror/{__version__}",
                qps=settings.kube_api_qps if limited else 0.0, burst=settings.kube_api_burst)
    try:
        kube.request("get", "/version", timeout=10)
    except ApiError as err:
        kube.close()
        raise UsageError(f"cannot reach the API server at {configuration.host}: "
                         f"{err.message}") from None
    return kube


def _run(args: argparse.Namespace) -> int:
    from configmirror.manager import Manager  # the plan command does not need the machinery

    settings = _settings(args)
    kube = _connect(settings, pool_size=settings.workers + 4)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("configmirror").info("%s: draining in-flight work and stopping",
                                               signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return Manager(settings, kube).run(stop)


@overload
def _listed(settings: Settings) -> ClusterCache: ...
@overload
def _listed(settings: Settings, failures: Literal[True]) -> tuple[ClusterCache, list[Failure]]: ...


def _listed(settings: Settings, failures: bool = False
            ) -> ClusterCache | tuple[ClusterCache, list[Failure]]:
    """The operator's own caches, listed once (Secrets one name at a time, as it watches
    them), and with `failures` the ReplicationFailed Events it recorded on sources."""
    kube = _connect(settings, pool_size=2, limited=False)
    cache = ClusterCache(kube, _kinds(settings), _rules(settings))
    found: list[Failure] = []
    try:
        cache.list_once()
        if failures:
            found = _failures(kube)
    except ApiError as err:
        raise UsageError(f"cannot list {err}") from None
    finally:
        kube.close()
    return (cache, found) if failures else cache


def _failures(kube: Kube) -> list[Failure]:
    """The operator's ReplicationFailed Events (one list for the cluster). Without leave to
    list Events, status says so and goes on without them."""
    query: dict[str, Any] = {"fieldSelector": "reason=ReplicationFailed", "limit": 500}
    found: list[Failure] = []
    while True:
        try:
            body = kube.request("list", EVENTS.collection(), query)
        except ApiError as err:
            print(f"{_prog()}: note: cannot list Events ({err.status} {err.reason}), so "
                  f"failed writes are not shown", file=sys.stderr)
            return []
        found += [Failure(str(o.get("uid", "")), str(o.get("resourceVersion", "")),
                          str(e.get("message", "")))
                  for e in body.get("items") or () if (o := e.get("involvedObject") or {})]
        if not (token := (body.get("metadata") or {}).get("continue")):
            return found
        query["continue"] = token


def _plans(cached: KindCache, settings: Settings,
           only: Callable[[str], bool] = lambda key: True) -> list[ReplicationPlan]:
    """The plan of every source of one kind (and of every source a replica still names).

    No memory of when the operator first saw a removal's cause: each removal is shown with
    the whole grace left, the most it can take."""
    world = cached.caches
    keys = {source.key for source in world.sources()} | set(world.replicated_sources())
    grace = Grace.from_now(settings.delete_grace)
    return [plan_source(key, world, world.get, cached.scope, grace)
            for key in sorted(keys) if only(key)]


def _plan(args: argparse.Namespace) -> int:
    settings = _settings(args)
    cache = _listed(settings)
    plans = [p for cached in cache.kinds.values() for p in _plans(
        cached, settings, lambda key: not args.namespace or key.split("/", 1)[0] == args.namespace)]
    in_sync = all(p.in_sync for p in plans)
    if args.output == "json":
        print(json.dumps({"in_sync": in_sync, "plans": [p.to_json() for p in plans]},
                         indent=2))
    else:
        _print_plans(plans)
    return 0 if in_sync else EXIT_OUT_OF_SYNC


def _status(args: argparse.Namespace) -> int:
    settings = _settings(args)
    kind = _kind_of(args.kind, settings)
    if args.source is not None:
        _source_key(args.source)
    cache, failures = _listed(settings, failures=True)
    views = {k.name: KindView(c.caches, c.scope, c.names, _plans(c, settings))
             for k, c in cache.kinds.items()}
    sources = [source_status(p, view, failures) for view in views.values() for p in view.plans]
    namespace = None
    if args.source is not None:
        sources = [s for s in sources if s.kind == kind.name and s.source == args.source]
        if not sources or not sources[0].exists:
            raise UsageError(f"there is no {kind.name} source {args.source}")
    if args.namespace is not None:
        namespace = namespace_status(args.namespace, views, frozenset(views))
        if not namespace["exists"]:
            raise UsageError(f"there is no namespace {args.namespace}")
        related = {(h["kind"], h["replica_of"]) for h in namespace["holds"]} | {
            (v, p.source) for v, view in views.items() for p in view.plans
            if args.namespace in p.targets or args.namespace in p.pullers}
        sources = [s for s in sources if (s.kind, s.source) in related]
    if args.output == "json":
        doc: dict[str, Any] = {"sources": [s.to_json() for s in sources]}
        if namespace is not None:
            doc["namespace"] = namespace
        print(json.dumps(doc, indent=2))
    else:
        _print_status(sources, namespace)
    return 0


def _wait(args: argparse.Namespace) -> int:
    settings = _settings(args)
    kind = _kind_of(args.kind, settings)
    key = _source_key(args.source)
    kube = _connect(settings, pool_size=2, limited=False)
    changed = threading.Event()
    cache = ClusterCache(kube, _kinds(settings), _rules(settings),
                         on_object=lambda *_: changed.set(), on_namespace=lambda *_: changed.set())
    cached = cache.kinds[kind]
    deadline = time.monotonic() + args.timeout
    cache.start()
    try:
        last: SourceStatus | None = None
        while True:
            if cache.has_synced():
                plans = _plans(cached, settings, lambda k: k == key)
                view = KindView(cached.caches, cached.scope, cached.names, plans)
                last = source_status(plans[0], view, ()) if plans else None
                if last is None or not last.exists:
                    raise UsageError(f"there is no {kind.name} source {key}")
                if last.done:
                    print(f"{key}: in sync in {last.targets} target namespace(s)")
                    return 0
            left = deadline - time.monotonic()
            if left <= 0:
                print(f"{_prog()}: {key} not in sync after {format_duration(args.timeout)}",
                      file=sys.stderr)
                if last is not None:
                    _print_status([last], None)
                return 1
            changed.wait(min(left, 1.0))
            changed.clear()
    finally:
        cache.stop()
        kube.close()


def _kind_of(flag: str, settings: Settings) -> Kind:
    if flag == "secret":
        if not settings.secrets:
            raise UsageError("--kind secret needs the operator's --secret-names and "
                             "--secret-source-namespaces (only those Secrets are ever read)")
        return SECRET
    return CONFIGMAP


def _source_key(text: str) -> str:
    namespace, _, name = text.partition("/")
    if not _DNS_NAME.fullmatch(namespace) or not _DNS_NAME.fullmatch(name):
        raise UsageError(f"{text!r} is not NAMESPACE/NAME")
    return text


def _print_status(sources: list[SourceStatus], namespace: dict[str, Any] | None) -> None:
    if namespace is not None:
        print(f"namespace {namespace['name']}:")
        for hold in namespace["holds"]:
            print(f"  holds  {hold['kind'].lower()} {hold['name']}  replica of "
                  f"{hold['replica_of']} ({hold['state']})")
        for pull in namespace["pulls"]:
            why = f": {pull['reason']}" if pull["reason"] else ""
            print(f"  pulls  {pull['entry']}  {pull['state']}{why}")
        if not namespace["holds"] and not namespace["pulls"]:
            print("  no replicas, no pulls")
    if not sources and namespace is None:
        print("no sources")
    for status in sources:
        print(f"{status.kind.lower()} {status.source}: {status.in_sync}/{status.targets} "
              f"target(s) in sync" + ("" if status.exists else " (the source is gone)"))
        for p in status.pending:
            when = f"in {format_duration(p['due_in'])}: " if p["due_in"] else ""
            print(f"  pending  {p['action']} {p['namespace']}/{p['name']}  ({when}{p['why']})")
        for problem in status.problems:
            print(f"  problem  {problem.type}: {problem.message}")
    if sources:
        pending = sum(len(s.pending) for s in sources)
        problems = sum(len(s.problems) for s in sources)
        print(f"{len(sources)} source(s): {pending} pending, {problems} problem(s)")


def _print_plans(plans: list[ReplicationPlan]) -> None:
    if not plans:
        print("no sources")
    for plan in plans:
        # A Secret says so; a ConfigMap is the default and needs no word.
        name = f"secret {plan.source}" if plan.kind == "Secret" else plan.source
        if plan.invalid is not None:
            print(f"{name}: invalid spec: {plan.invalid} (nothing will change)")
            continue
        if plan.not_allowed is not None:
            print(f"{name}: not allowed: {plan.not_allowed}")
        state = "in sync" if plan.in_sync else "out of sync"
        print(f"{name}: {state}, {len(plan.targets)} target namespace(s)")
        if plan.content is not None:  # key names, sizes and a hash: never a value
            keys = ", ".join(f"{k} ({n} B)" for k, n in plan.content["keys"].items())
            print(f"  content  {keys or 'no keys'}; hash {plan.content['hash']}")
        for action in plan.actions:
            when = f"in {format_duration(action.due_in)}: " if action.due_in > 0 else ""
            print(f"  {action.kind:<8} {action.namespace}/{action.name}  ({when}{action.why})")
        for conflict in plan.conflicts:
            print(f"  conflict {conflict.namespace}/{conflict.name}  ({conflict.message})")
    changes = sum(len(p.actions) for p in plans)
    problems = sum(len(p.conflicts) + (p.invalid is not None) + (p.not_allowed is not None)
                   for p in plans)
    print(f"{len(plans)} source(s): {changes} change(s), {problems} problem(s)")


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name,
            "msg": record.getMessage()}
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def _setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # we log our own view of failures
