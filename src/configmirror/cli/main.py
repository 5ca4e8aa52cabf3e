"""The `configmirror` command: `run`, `plan`, `status`, `wait`, `migrate`, `version` (also as
`kubectl configmirror ...`: the `kubectl-configmirror` entry point is the same program).

Flags follow the Go tools (`flags`): booleans as `--flag`, `--flag=true|false`, `--no-flag`;
durations as `90s`, `10m`, `1h30m`; every flag but those choosing what to show (`-n`,
`--target-namespace`) also an environment variable (`--max-retries` is
CONFIGMIRROR_MAX_RETRIES), the command line winning. A source is named as
in the pull annotation, `[KIND/]NS/NAME`, or as kubectl names it, `-n NS
[KIND/]NAME`. Mistakes a user can make (bad flags, no kubeconfig, unreachable cluster) end in
one line on stderr and exit code 1 (`wait`: 3), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, overload

import kubernetes
import yaml

from configmirror import __version__
from configmirror.allocator import fix_mmap_threshold
from configmirror.cli.flags import (
    UNSET,
    Choice,
    Parser,
    UsageError,
    adopt_from,
    boolean,
    duration,
    env_name,
    integer,
    number,
    resolve,
)
from configmirror.client.kube import ApiError, ConfigError, Kube, load_configuration
from configmirror.operator import policy
from configmirror.operator.caches import (
    ClusterInformers,
    KindInformers,
    Replicated,
    discovery,
    replicated_kinds,
)
from configmirror.operator.settings import Settings, format_duration
from configmirror.replication.plan import Grace, ReplicationPlan, plan_source
from configmirror.replication.spec import InvalidSpec, ReplicaRules
from configmirror.replication.status import (
    Failure,
    KindView,
    SourceStatus,
    namespace_status,
    source_status,
)
from configmirror.vocabulary import (
    CONFIGMAP,
    CUSTOM_SYNTAX,
    EVENTS,
    OPTIONAL,
    SECRET,
    SHORT_NAMES,
    Kind,
)

_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
EXIT_OUT_OF_SYNC = 2      # plan: changes to make
EXIT_TIMED_OUT = 1        # wait: not in sync when the timeout passed
EXIT_NO_SUCH_SOURCE = 2   # wait: the source does not exist
EXIT_WAIT_ERROR = 3       # wait: anything else (bad flags, no cluster): never a timeout's 1
_ERROR_EXIT = {"wait": EXIT_WAIT_ERROR}  # a command's exit code for an error, if not 1
# kubectl's names (case does not matter), each to the kind's name in --kinds.
_KINDS = {"configmap": "configmap", "configmaps": "configmap", "cm": "configmap",
          "secret": "secret", "secrets": "secret",
          **{name: kind.flag for kind in OPTIONAL.values()
             for name in (kind.flag, kind.plural, *SHORT_NAMES.get(kind.flag, ()))}}
_OUTPUT = ("text", "json", "yaml")
_CONVENTIONS = """\
flags: booleans as --flag, --flag=true|false or --no-flag; durations as 90s, 10m, 1h30m,
300ms (a bare number is seconds); each flag but -n and --target-namespace also an
environment variable, CONFIGMIRROR_ and its name (--max-retries: CONFIGMIRROR_MAX_RETRIES),
the command line winning.
"""
_REFERENCE = ("[KIND/]NS/NAME as in the configmirror.io/pull annotation, or with -n NS, "
              "[KIND/]NAME as kubectl takes it; KIND is configmap (cm, configmaps; the "
              "default), secret (secrets), or a kind --kinds turns on (networkpolicy, "
              "netpol, ...; a custom resource as KIND.GROUP or PLURAL.GROUP, "
              "widget.example.com)")
_NAMESPACE = ("the namespace of the sources: with a source named, its namespace; without, "
              "only the sources in this namespace (the same for plan, status and wait)")


def _add(parser: Parser, flag: str, default: Any, help: str,
         kind: Callable[[str], Any] = str, choices: Sequence[str] | None = None, *,
         short: str | None = None, env: bool = True) -> None:
    """A flag (flags.Parser.flag) whose value may come from its environment variable; the
    builtin types stand for the Go-style parsers of that type."""
    builtin: dict[Any, Callable[[str], Any]] = {int: integer, float: number, bool: boolean}
    parse = builtin.get(kind, kind)
    if choices is not None:
        parse = Choice(tuple(choices))
    parser.flag(flag, default, help, parse, short=short, env=env)


def _epilog(codes: Sequence[tuple[int, str]], conventions: bool = True) -> str:
    """Exit codes, one a line, then the flag conventions."""
    said = "exit codes:\n" + "".join(f"  {code}  {meaning}\n" for code, meaning in codes)
    return said + ("\n" + _CONVENTIONS if conventions else "")


def _parser() -> argparse.ArgumentParser:
    d = Settings()
    parser = Parser(prog=_prog(), description="Keeps ConfigMaps (and named Secrets) "
                    "replicated across namespaces. See README.md.", epilog=_CONVENTIONS,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"configmirror {__version__}")
    commands = parser.add_subparsers(dest="command",
                                     metavar="{run,plan,status,wait,migrate,version}")
    commands.required = True

    def command(name: str, help: str, codes: Sequence[tuple[int, str]],
                conventions: bool = True) -> Parser:
        made: Parser = commands.add_parser(
            name, help=help, description=help, epilog=_epilog(codes, conventions),
            formatter_class=argparse.RawDescriptionHelpFormatter,
            error_code=_ERROR_EXIT.get(name, 1))
        return made

    def cluster_flags(p: Parser) -> None:
        _add(p, "--kubeconfig", d.kubeconfig, "kubeconfig file; without it $KUBECONFIG (a "
             "list of files, merged), then in a pod its service account, then ~/.kube/config")
        _add(p, "--context", d.context, "kubeconfig context (default: its current-context)")
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
        p.flag("--kinds", d.kinds, "the kinds replicated, comma-separated (the flag may be "
               f"repeated): configmap always, and {', '.join(OPTIONAL)}, or a namespaced "
               f"custom resource as {CUSTOM_SYNTAX} (resolved through discovery at start), "
               "each only when named (otherwise it is never read: RBAC comes per kind); a "
               "custom resource's replicas copy its spec (or the top-level fields named after "
               "it, each after a colon), never its status; sources of every "
               "kind only where --source-namespaces and --source-namespace-selector allow",
               repeat=True)
        _add(p, "--bindable-roles", d.bindable_roles, "the roles (names, comma-separated) a "
             "replicated RoleBinding may reference; the operator's RBAC grants bind on these "
             "only; a RoleBinding source binding any other is an InvalidSpec (default: none)")
        _add(p, "--drop-labels", d.drop_labels, "label keys never copied to a replica (globs, "
             "! excludes; replaces the default list, which holds the keys by which Argo CD, "
             "Flux, Helm and cert-manager claim objects; '' drops nothing)")
        _add(p, "--drop-annotations", d.drop_annotations, "annotation keys never copied to a "
             "replica (globs; replaces the default list, the same as --drop-labels's)")
        _add(p, "--delete-grace", d.delete_grace, "how long every removal of "
             "a replica waits after its cause is first seen (a source deleted or no longer "
             "annotated, a namespace that stops matching); if the cause goes within it, "
             "nothing is written. 0s removes at once", duration)
        _add(p, "--adopt-from", d.adopt_from, "take over the mirrors this tool made of every "
             "source, in place (reflector or kubernetes-replicator; a source's own "
             "configmirror.io/adopt also does; default '': none)", adopt_from)
        _add(p, "--log-format", d.log_format, "log format", choices=("text", "json"))
        p.flag("--log-level", d.log_level, "log level",
               Choice(("debug", "info", "warning", "error"), (("warn", "warning"),)))

    run = command("run", "run the operator until SIGTERM/SIGINT",
                  [(0, "stopped by SIGTERM or SIGINT, in-flight work drained"),
                   (1, "error (bad flags, no cluster, lost leadership)")])
    cluster_flags(run)
    _add(run, "--workers", d.workers, "reconcile worker threads", int)
    _add(run, "--max-retries", d.max_retries, "attempts per change before giving up", int)
    _add(run, "--resync-period", d.resync_period,
         "how often every source is checked again from the cache (0: never)", duration)
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
         "how long in-flight reconciles may take to finish on SIGTERM", duration)
    _add(run, "--dry-run", d.dry_run, "decide and log every write, perform none", bool)
    _add(run, "--source-metrics", d.source_metrics, "export configmirror_source_replicas"
         "{kind,source,state}: each source's replicas by state (a series per source: off by "
         "default)", bool)
    _add(run, "--kube-api-qps", d.kube_api_qps, "requests per second to the API server, "
         "shared by every request (0: no client-side limit)", float)
    _add(run, "--kube-api-burst", d.kube_api_burst, "requests allowed above --kube-api-qps "
         "in a burst", int)

    def selection_flags(p: Parser, required: bool = False) -> None:
        p.add_argument("source", nargs=None if required else "?", metavar="[KIND/]NS/NAME",
                       help=f"{'the' if required else 'only this'} source, {_REFERENCE}")
        _add(p, "--namespace", None, _NAMESPACE, short="-n", env=False)
        _add(p, "--kind", None, "deprecated: name the kind in the source, secret/NS/NAME",
             choices=("configmap", "secret", *OPTIONAL))
        _add(p, "--output", "text", "output format", choices=_OUTPUT, short="-o")
        _add(p, "--operator-namespace", "", "judge with the policy the operator in this "
             "namespace publishes (default: look it up); a policy flag given here overrides it")

    plan = command("plan", "print what run would change, change nothing",
                   [(0, "in sync"), (EXIT_OUT_OF_SYNC, "not in sync: changes to make, or "
                                     "problems"),
                    (1, "error (bad flags, no cluster, no such source)")])
    cluster_flags(plan)
    selection_flags(plan)

    status = command("status", "per source: targets, in sync, pending, problems (the same "
                     "decision as run); change nothing",
                     [(0, "shown (in sync or not)"),
                      (1, "error (bad flags, no cluster, no such source or namespace)")])
    cluster_flags(status)
    selection_flags(status)
    _add(status, "--target-namespace", None, "what this namespace holds and pulls, and the "
         "sources of those", env=False)

    wait = command("wait", "wait until every target of a source is in sync",
                   [(0, "in sync"),
                    (EXIT_TIMED_OUT, "not in sync when --timeout passed (what is pending "
                                     "is printed)"),
                    (EXIT_NO_SUCH_SOURCE, "no such source"),
                    (EXIT_WAIT_ERROR, "error (bad flags, no cluster)")])
    cluster_flags(wait)
    selection_flags(wait, required=True)
    _add(wait, "--timeout", 300.0, "how long to wait", duration)

    _add_migrate(commands)
    version = command("version", "print the version", [(0, "printed")], conventions=False)
    _add(version, "--output", "text", "output format", choices=_OUTPUT, short="-o")
    return parser


def _prog() -> str:
    """How the user called us: `kubectl configmirror` as a kubectl plugin (kubectl runs the
    `kubectl-configmirror` executable), else `configmirror`."""
    return "kubectl configmirror" if os.path.basename(sys.argv[0]).startswith(
        "kubectl-configmirror") else "configmirror"


def main(argv: Sequence[str] | None = None) -> int:
    command: str | None = None
    try:
        args = _parser().parse_args(argv)
        command = args.command
        given = _given(args)
        resolve(args)  # the environment variables of this command only
        if args.command == "version":
            return _version(args)
        _setup_logging(args.log_format, args.log_level)
        args.given = given
        commands = {"run": _run, "plan": _plan, "status": _status, "wait": _wait,
                    "migrate": _migrate}
        return commands[args.command](args)
    except (UsageError, ConfigError) as err:
        print(f"{_prog()}: {err}", file=sys.stderr)
        code = err.code if isinstance(err, UsageError) else None
        return code if code is not None else _ERROR_EXIT.get(command or "", 1)
    except KeyboardInterrupt:
        return 130


def _version(args: argparse.Namespace) -> int:
    if args.output == "text":
        print(f"configmirror {__version__}")
    else:
        print(_dump({"version": __version__, "python": platform.python_version(),
                     "kubernetes_client": kubernetes.__version__}, args.output), end="")
    return 0


def _dump(doc: dict[str, Any], output: str) -> str:
    """`doc` as -o json or -o yaml prints it (ending in a newline)."""
    if output == "yaml":
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    return json.dumps(doc, indent=2) + "\n"


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


def _given(args: argparse.Namespace) -> dict[str, str]:
    """Each policy setting the user set, and how: its flag on the command line, or its
    CONFIGMIRROR_* variable (a default is not set). Read before resolve() fills the rest."""
    given = {}
    for field in policy.POLICY:
        option = policy.flag(field)
        if getattr(args, field, UNSET) is not UNSET:
            given[field] = option
        elif env_name(option) in os.environ:
            given[field] = env_name(option)
    return given


def _followed(args: argparse.Namespace, settings: Settings) -> Settings:
    """`settings` with the running operator's policy wherever the user set none
    (DESIGN.md, Behaviour 12); says on stderr which operator, and each override."""
    kube = _connect(settings, pool_size=1, limited=False)
    try:
        found = policy.find(kube, args.operator_namespace or None)
        settings, notices = policy.judge_with(found, settings, args.given,
                                              args.operator_namespace)
    except ApiError as err:
        raise UsageError(f"cannot look up the operator: cannot list {err}") from None
    except policy.PolicyError as err:
        raise UsageError(str(err)) from None
    finally:
        kube.close()
    for notice in notices:
        print(f"{_prog()}: {notice}", file=sys.stderr)
    return settings


def _kinds(settings: Settings, kube: Kube | None = None) -> list[Replicated]:
    """The kinds replicated (ConfigMaps, and Secrets when named), or the flag at fault. With
    `kube`, the custom resources --kinds names too, through discovery (without, only their
    form is checked)."""
    if settings.secrets and not settings.secret_source_namespaces.strip():
        raise UsageError("--secret-names needs --secret-source-namespaces (which namespaces "
                         "may hold those Secrets as sources)")
    for name in settings.secrets:
        if not _DNS_NAME.fullmatch(name):
            raise UsageError(f"--secret-names: {name!r} is not a Secret name")
    try:
        return replicated_kinds(settings, None if kube is None else discovery(kube))
    except InvalidSpec as err:
        raise UsageError(str(err)) from None


def _rules(settings: Settings) -> ReplicaRules:
    try:
        return ReplicaRules.from_flags(settings.drop_labels, settings.drop_annotations,
                                       settings.bindable_roles)
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
    from configmirror.operator.manager import (
        Manager,  # the plan command does not need the machinery
    )

    settings = _settings(args)
    # Before any list page is read: a relist's freed pages are returned, not kept (allocator).
    fixed = fix_mmap_threshold()
    logging.getLogger("configmirror").debug("glibc's mmap threshold %s",
                                            "fixed" if fixed else "left as it is")
    kube = _connect(settings, pool_size=settings.workers + 4)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("configmirror").info("%s: draining in-flight work and stopping",
                                               signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        manager = Manager(settings, kube)
    except InvalidSpec as err:  # a kind --kinds names that discovery does not resolve
        kube.close()
        raise UsageError(str(err)) from None
    return manager.run(stop)


@overload
def _listed(settings: Settings) -> ClusterInformers: ...
@overload
def _listed(settings: Settings,
            failures: Literal[True]) -> tuple[ClusterInformers, list[Failure]]: ...


def _listed(settings: Settings, failures: bool = False
            ) -> ClusterInformers | tuple[ClusterInformers, list[Failure]]:
    """The operator's own caches, listed once (Secrets one name at a time, as it watches
    them), and with `failures` the ReplicationFailed Events it recorded on sources."""
    kube = _connect(settings, pool_size=2, limited=False)
    found: list[Failure] = []
    try:
        cache = ClusterInformers(kube, _kinds(settings, kube), _rules(settings))
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


def _plans(cached: KindInformers, settings: Settings,
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
    settings = _followed(args, _settings(args))
    named = _source(args, settings)
    cache = _listed(settings)
    source = _known(named, cache)
    plans = [p for kind, cached in cache.kinds.items()
             for p in _plans(cached, settings, _only(kind, source, args.namespace))]
    if source is not None and not plans:
        raise UsageError(f"there is no {source[0].name} source {source[1]} (nor a replica "
                         "of one)")
    in_sync = all(p.in_sync for p in plans)
    if args.output != "text":
        print(_dump({"in_sync": in_sync, "plans": [p.to_json() for p in plans]}, args.output),
              end="")
    else:
        _print_plans(plans, _said(cache))
    return 0 if in_sync else EXIT_OUT_OF_SYNC


def _status(args: argparse.Namespace) -> int:
    settings = _followed(args, _settings(args))
    named = _source(args, settings)
    cache, failures = _listed(settings, failures=True)
    source = _known(named, cache)
    views = {k.name: KindView(c.caches, c.scope, c.names,
                              _plans(c, settings, _only(k, source, args.namespace)))
             for k, c in cache.kinds.items()}
    sources = [source_status(p, view, failures) for view in views.values() for p in view.plans]
    namespace = None
    if source is not None and (not sources or not sources[0].exists):
        raise UsageError(f"there is no {source[0].name} source {source[1]}")
    if args.target_namespace is not None:
        namespace = namespace_status(args.target_namespace, views,
                                     frozenset(k.pull_name for k in cache.kinds))
        if not namespace["exists"]:
            raise UsageError(f"there is no namespace {args.target_namespace}")
        related = {(h["kind"], h["replica_of"]) for h in namespace["holds"]} | {
            (v, p.source) for v, view in views.items() for p in view.plans
            if args.target_namespace in p.targets or args.target_namespace in p.pullers}
        sources = [s for s in sources if (s.kind, s.source) in related]
    if args.output != "text":
        doc: dict[str, Any] = {"sources": [s.to_json() for s in sources]}
        if namespace is not None:
            doc["namespace"] = namespace
        print(_dump(doc, args.output), end="")
    else:
        _print_status(sources, namespace, _said(cache))
    return 0


def _wait(args: argparse.Namespace) -> int:
    settings = _followed(args, _settings(args))
    named = _reference_of(args, settings)
    kube = _connect(settings, pool_size=2, limited=False)
    changed = threading.Event()
    try:
        cache = ClusterInformers(kube, _kinds(settings, kube), _rules(settings),
                             on_object=lambda *_: changed.set(),
                             on_namespace=lambda *_: changed.set())
        kind, key = _known(named, cache)
    except BaseException:
        kube.close()
        raise
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
                    raise UsageError(f"there is no {kind.name} source {key}",
                                     EXIT_NO_SUCH_SOURCE)
                if last.done:
                    if args.output != "text":
                        print(_dump({"in_sync": True, "source": last.to_json()}, args.output),
                              end="")
                    else:
                        print(f"{key}: in sync in {last.targets} target namespace(s)")
                    return 0
            left = deadline - time.monotonic()
            if left <= 0:
                print(f"{_prog()}: {key} not in sync after {format_duration(args.timeout)}",
                      file=sys.stderr)
                if last is not None and args.output != "text":
                    print(_dump({"in_sync": False, "source": last.to_json()}, args.output),
                          end="")
                elif last is not None:
                    _print_status([last], None, _said(cache))
                return EXIT_TIMED_OUT
            changed.wait(min(left, 1.0))
            changed.clear()
    finally:
        cache.stop()
        kube.close()


# A source a command names: its kind (a custom resource's as the command names it, until
# discovery resolves it: `_known`) and its key NS/NAME.
_Named = tuple[Kind | str, str]


def _source(args: argparse.Namespace, settings: Settings) -> _Named | None:
    """The source the command names, or None when it names none."""
    return None if args.source is None else _reference_of(args, settings)


@overload
def _known(named: _Named, cache: ClusterInformers) -> tuple[Kind, str]: ...
@overload
def _known(named: None, cache: ClusterInformers) -> None: ...


def _known(named: _Named | None, cache: ClusterInformers) -> tuple[Kind, str] | None:
    """A named source with its kind resolved among those the cache holds: a custom resource
    by KIND.GROUP or PLURAL.GROUP."""
    if named is None:
        return None
    word, key = named
    if isinstance(word, Kind):
        return word, key
    for kind in cache.kinds:
        if kind.custom and word in (kind.flag, f"{kind.plural}.{kind.resource.group}"):
            return kind, key
    custom = sorted(str(k.resource.api_version + "/" + k.name) for k in cache.kinds
                    if k.custom)
    raise UsageError(f"{word!r}: the operator's --kinds names no such custom resource (it "
                     f"names {', '.join(custom)})")


def _reference_of(args: argparse.Namespace, settings: Settings) -> _Named:
    said, key = _reference(args.source, args.namespace)
    if args.kind is not None:  # the deprecated --kind
        if said is not None and said != args.kind:
            raise UsageError(f"{args.source!r} is a {said}, --kind says {args.kind}")
        print(f"{_prog()}: warning: --kind is deprecated: write {args.kind}/{key}",
              file=sys.stderr)
        said = args.kind
    return _kind_of(said or "configmap", settings), key


def _reference(text: str, namespace: str | None) -> tuple[str | None, str]:
    """A source as `[KIND/]NS/NAME` (the pull annotation's form) or, with -n NS,
    `[KIND/]NAME` (kubectl's): its kind, as named in `_KINDS` (None: not said), and its
    key NS/NAME."""
    parts = text.split("/")
    kind: str | None = None
    if namespace is None and len(parts) in (2, 3):
        if len(parts) == 3:
            kind = parts.pop(0)
        space, name = parts
    elif namespace is not None and len(parts) in (1, 2, 3):
        if len(parts) > 1:
            kind = parts.pop(0)
        if len(parts) == 2 and parts[0] != namespace:
            raise UsageError(f"{text!r} is in namespace {parts[0]}, -n says {namespace}")
        space, name = namespace, parts[-1]
    else:
        raise UsageError(f"{text!r} is not [KIND/]NAMESPACE/NAME" if namespace is None
                         else f"{text!r} is not [KIND/]NAME (with -n {namespace})")
    custom = kind is not None and "." in kind and bool(_DNS_NAME.fullmatch(kind.lower()))
    if kind is not None and kind.lower() not in _KINDS and not custom:
        raise UsageError(f"{text!r}: {kind!r} is not a kind (configmap, cm, configmaps, "
                         f"secret, secrets, {', '.join(OPTIONAL)}, or kubectl's names of "
                         f"those; a custom resource as KIND.GROUP or PLURAL.GROUP)")
    if not _DNS_LABEL.fullmatch(space):
        raise UsageError(f"{text!r}: {space!r} is not a namespace name")
    if not _DNS_NAME.fullmatch(name) or len(name) > 253:
        raise UsageError(f"{text!r}: {name!r} is not an object name")
    word = None if kind is None else _KINDS.get(kind.lower(), kind.lower())
    return word, f"{space}/{name}"


def _only(kind: Kind, source: tuple[Kind, str] | None,
          namespace: str | None) -> Callable[[str], bool]:
    """Which source keys of `kind` a command is about: the source it names, or those of
    -n's namespace, or all."""
    if source is not None:
        return lambda key: kind is source[0] and key == source[1]
    return lambda key: namespace is None or key.split("/", 1)[0] == namespace


def _kind_of(kind: str, settings: Settings) -> Kind | str:
    """The kind a command's reference names; a custom resource's name as said (`_known`
    resolves it once discovery has)."""
    if kind == "secret":
        if not settings.secrets:
            raise UsageError("a secret source needs the operator's --secret-names and "
                             "--secret-source-namespaces (only those Secrets are ever read)")
        return SECRET
    if kind in OPTIONAL:
        if kind not in settings.kind_names:
            raise UsageError(f"a {kind} source needs the operator's --kinds to name {kind} "
                             f"(it is off, and never read, otherwise)")
        return OPTIONAL[kind]
    if kind != "configmap":
        if not any("/" in name for name in settings.kind_names):
            raise UsageError(f"a {kind} source needs the operator's --kinds to name {kind} "
                             f"(as {CUSTOM_SYNTAX}; it is off, and never read, otherwise)")
        return kind
    return CONFIGMAP


def _said(cache: ClusterInformers) -> dict[str, str]:
    """How the commands name each kind the cache holds, by its name: `networkpolicy`,
    `widget.example.com` (what `plan` and `status` print, so it can be pasted back)."""
    return {kind.name: kind.flag for kind in cache.kinds}


def _print_status(sources: list[SourceStatus], namespace: dict[str, Any] | None,
                  said: Mapping[str, str]) -> None:
    if namespace is not None:
        print(f"namespace {namespace['name']}:")
        for hold in namespace["holds"]:
            print(f"  holds  {said.get(hold['kind'], hold['kind'].lower())} {hold['name']}  "
                  f"replica of {hold['replica_of']} ({hold['state']})")
        for pull in namespace["pulls"]:
            why = f": {pull['reason']}" if pull["reason"] else ""
            print(f"  pulls  {pull['entry']}  {pull['state']}{why}")
        if not namespace["holds"] and not namespace["pulls"]:
            print("  no replicas, no pulls")
    if not sources and namespace is None:
        print("no sources")
    for status in sources:
        print(f"{said.get(status.kind, status.kind.lower())} {status.source}: "
              f"{status.in_sync}/{status.targets} "
              f"target(s) in sync" + ("" if status.exists else " (the source is gone)")
              + (f", {status.adopting} to adopt" if status.adopting else ""))
        for p in status.pending:
            when = f"in {format_duration(p['due_in'])}: " if p["due_in"] else ""
            print(f"  pending  {p['action']} {p['namespace']}/{p['name']}  ({when}{p['why']})")
        for problem in status.problems:
            print(f"  problem  {problem.type}: {problem.message}")
    if sources:
        pending = sum(len(s.pending) for s in sources)
        problems = sum(len(s.problems) for s in sources)
        adopting = sum(s.adopting for s in sources)
        print(f"{len(sources)} source(s): {pending} pending"
              + (f" ({adopting} adoption(s))" if adopting else "")
              + f", {problems} problem(s)")


def _print_plans(plans: list[ReplicationPlan], said: Mapping[str, str]) -> None:
    if not plans:
        print("no sources")
    for plan in plans:
        # A Secret (any kind) says so; a ConfigMap is the default and needs no word.
        name = plan.source if plan.kind == "ConfigMap" else \
            f"{said.get(plan.kind, plan.kind.lower())} {plan.source}"
        if plan.invalid is not None:
            print(f"{name}: invalid spec: {plan.invalid} (nothing will change)")
            continue
        if plan.not_allowed is not None:
            print(f"{name}: not allowed: {plan.not_allowed}")
        state = "in sync" if plan.in_sync else "out of sync"
        print(f"{name}: {state}, {len(plan.targets)} target namespace(s)")
        if plan.content is not None and "fields" in plan.content:  # a kind of no data keys
            print(f"  content  {', '.join(plan.content['fields']) or 'no fields'}; hash "
                  f"{plan.content['hash']}")
        elif plan.content is not None:  # key names, sizes and a hash: never a value
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


# -- migrate: kubernetes-reflector's or kubernetes-replicator's annotations as ours ------------

EXIT_NEEDS_A_HUMAN = 3


def _add_migrate(commands: Any) -> None:
    d = Settings()
    codes = [(0, "every source converts exactly"),
             (1, "error (bad flags, no cluster)"),
             (EXIT_NEEDS_A_HUMAN, "some need a human (listed)")]
    help = ("print the configmirror annotations that mean what kubernetes-reflector's or "
            "kubernetes-replicator's do; change nothing")
    migrate: Parser = commands.add_parser(
        "migrate", help=help, description=help, epilog=_epilog(codes),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    migrate.add_argument("--from", dest="tool", required=True,
                         choices=("reflector", "kubernetes-replicator"),
                         help="the tool whose annotations to convert")
    _add(migrate, "--kubeconfig", d.kubeconfig, "kubeconfig file; without it $KUBECONFIG (a "
         "list of files, merged), then in a pod its service account, then ~/.kube/config")
    _add(migrate, "--context", d.context, "kubeconfig context (default: its current-context)")
    _add(migrate, "--exclude-namespaces", d.exclude_namespaces, "the operator's "
         "--exclude-namespaces: a target there today is reported, configmirror never writes "
         "there")
    _add(migrate, "--output", "text", "text, or yaml: partial objects for kubectl apply "
         "(--server-side) or Git", choices=("text", "yaml"), short="-o")
    _add(migrate, "--log-format", d.log_format, "log format", choices=("text", "json"))
    migrate.flag("--log-level", d.log_level, "log level",
                 Choice(("debug", "info", "warning", "error"), (("warn", "warning"),)))


def _migrate(args: argparse.Namespace) -> int:
    from configmirror.replication import migrate

    settings = Settings(kubeconfig=args.kubeconfig, context=args.context)
    kube = _connect(settings, pool_size=2, limited=False)
    prefix = migrate.PREFIXES[args.tool]
    found: list[migrate.Found] = []
    unread = False  # Secrets we may not list: not converted, so not exact
    try:
        namespaces = [migrate.Namespace(str(m.get("name", "")), m.get("labels") or {},
                                        m.get("annotations") or {})
                      for m in _metadata(kube, "/api/v1/namespaces")]
        for kind, path in (("ConfigMap", "/api/v1/configmaps"), ("Secret", "/api/v1/secrets")):
            try:  # Secrets' values are read (one page at a time) and dropped at once
                found += [migrate.Found(kind, str(m.get("namespace", "")),
                                        str(m.get("name", "")), m["annotations"])
                          for m in _metadata(kube, path)
                          if any(k.startswith(prefix) for k in m.get("annotations") or ())]
            except ApiError as err:
                if kind != "Secret" or err.status != 403:
                    raise
                unread = True
                print(f"{_prog()}: note: cannot list Secrets ({err.status} {err.reason}): "
                      f"Secret sources are not converted", file=sys.stderr)
    except ApiError as err:
        raise UsageError(f"cannot list {err}") from None
    finally:
        kube.close()
    try:
        result = migrate.migrate(args.tool, found, namespaces, args.exclude_namespaces)
    except InvalidSpec as err:
        raise UsageError(str(err)) from None
    print(result.yaml() if args.output == "yaml" else result.text(), end="")
    return 0 if result.exact and not unread else EXIT_NEEDS_A_HUMAN


def _metadata(kube: Kube, path: str) -> list[dict[str, Any]]:
    """The metadata of every object at `path`, listed 500 at a time."""
    query: dict[str, Any] = {"limit": 500}
    found: list[dict[str, Any]] = []
    while True:
        body = kube.request("list", path, query)
        found += [item.get("metadata") or {} for item in body.get("items") or ()]
        if not (token := (body.get("metadata") or {}).get("continue")):
            return found
        query["continue"] = token


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
