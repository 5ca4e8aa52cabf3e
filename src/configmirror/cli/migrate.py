"""`migrate`: the configmirror annotations that mean what kubernetes-reflector's or
kubernetes-replicator's do, printed; changes nothing."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from configmirror.cli.arguments import EXIT_ATTENTION, add_command, add_flag
from configmirror.cli.connect import connect
from configmirror.cli.flags import Choice, Parser, UsageError
from configmirror.cli.output import prog
from configmirror.client.kube import ApiError, Kube
from configmirror.operator.settings import Settings
from configmirror.replication.spec import InvalidSpec


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`migrate` and its flags: which tool, which cluster, and the output."""
    d = Settings()
    migrate = add_command(
        commands, "migrate", "print the configmirror annotations that mean what "
        "kubernetes-reflector's or kubernetes-replicator's do; change nothing",
        "every source converts exactly", "some need a human (listed)",
        errors="error: bad flags, no cluster")
    migrate.add_argument("--from", dest="tool", required=True,
                         choices=("reflector", "kubernetes-replicator"),
                         help="the tool whose annotations to convert")
    add_flag(migrate, "--kubeconfig", d.kubeconfig, "kubeconfig file; without it $KUBECONFIG "
             "(a list of files, merged), then in a pod its service account, then "
             "~/.kube/config")
    add_flag(migrate, "--context", d.context,
             "kubeconfig context (default: its current-context)")
    add_flag(migrate, "--exclude-namespaces", d.exclude_namespaces, "the operator's "
             "--exclude-namespaces: a target there today is reported, configmirror never "
             "writes there")
    add_flag(migrate, "--output", "text", "text, or yaml: partial objects for kubectl apply "
             "(--server-side) or Git", choices=("text", "yaml"), short="-o", env=False)
    add_flag(migrate, "--log-format", d.log_format, "log format", choices=("text", "json"))
    migrate.flag("--log-level", d.log_level, "log level",
                 Choice(("debug", "info", "warning", "error"), (("warn", "warning"),)))


def command(args: argparse.Namespace) -> int:
    """Print the converted annotations; 0 when every source converts exactly."""
    from configmirror.replication import migrate

    settings = Settings(kubeconfig=args.kubeconfig, context=args.context)
    kube = connect(settings, pool_size=2, limited=False)
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
                print(f"{prog()}: note: cannot list Secrets ({err.status} {err.reason}): "
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
    return 0 if result.exact and not unread else EXIT_ATTENTION


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
