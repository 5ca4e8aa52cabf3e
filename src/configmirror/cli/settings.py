"""The Settings a command runs with: its flags, checked, and for plan, status and wait the
running operator's policy wherever the user set none."""

from __future__ import annotations

import argparse
import os
import sys

from configmirror.cli.connect import connect
from configmirror.cli.flags import UNSET, UsageError, env_name
from configmirror.cli.output import prog
from configmirror.cli.reference import DNS_NAME
from configmirror.client.kube import ApiError, Kube
from configmirror.operator import policy
from configmirror.operator.caches import Replicated, discovery, replicated_kinds
from configmirror.operator.settings import Settings
from configmirror.replication.clusters import valid_name
from configmirror.replication.spec import InvalidSpec, ReplicaRules


def settings_of(args: argparse.Namespace) -> Settings:
    """The Settings of a parsed command's flags, or UsageError naming the flag at fault."""
    # plan, status and wait take --operator-namespace empty to mean "look it up": until a
    # published policy says which, the default namespace is the operator's.
    settings = Settings(**{k: v for k, v in vars(args).items()
                           if k in Settings.__dataclass_fields__
                           and not (k == "operator_namespace" and not v)})
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
    if not valid_name(settings.cluster_name):
        raise UsageError(f"--cluster-name: {settings.cluster_name!r} is not a cluster name (a "
                         "DNS label: lower-case letters, digits and '-')")
    kinds_of(settings)
    rules_of(settings)
    return settings


def given(args: argparse.Namespace) -> dict[str, str]:
    """Each policy setting the user set, and how: its flag on the command line, or its
    CONFIGMIRROR_* variable (a default is not set). Read before resolve() fills the rest."""
    found = {}
    for field in policy.POLICY:
        option = policy.flag(field)
        if getattr(args, field, UNSET) is not UNSET:
            found[field] = option
        elif env_name(option) in os.environ:
            found[field] = env_name(option)
    return found


def followed(args: argparse.Namespace, settings: Settings) -> Settings:
    """`settings` with the running operator's policy wherever the user set none (so a chart
    install is judged by its own flags, not a laptop's defaults: configmirror.operator.policy);
    says on stderr which operator, and each override."""
    kube = connect(settings, pool_size=1, limited=False)
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
        print(f"{prog()}: {notice}", file=sys.stderr)
    return settings


def kinds_of(settings: Settings, kube: Kube | None = None) -> list[Replicated]:
    """The kinds replicated (ConfigMaps, and Secrets when named), or the flag at fault. With
    `kube`, the custom resources --kinds names too, through discovery (without, only their
    form is checked)."""
    if settings.secrets and not settings.secret_source_namespaces.strip():
        raise UsageError("--secret-names needs --secret-source-namespaces (which namespaces "
                         "may hold those Secrets as sources)")
    for name in settings.secrets:
        if not DNS_NAME.fullmatch(name):
            raise UsageError(f"--secret-names: {name!r} is not a Secret name")
    try:
        return replicated_kinds(settings, None if kube is None else discovery(kube))
    except InvalidSpec as err:
        raise UsageError(str(err)) from None


def rules_of(settings: Settings) -> ReplicaRules:
    """What is never copied to a replica and which roles a RoleBinding may bind, from the
    flags, or UsageError."""
    try:
        return ReplicaRules.from_flags(settings.drop_labels, settings.drop_annotations,
                                       settings.bindable_roles)
    except InvalidSpec as err:
        raise UsageError(str(err)) from None
