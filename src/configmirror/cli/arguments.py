"""What the commands' parsers share: how a command and a flag are added, the help's exit codes
and conventions, and the flags of every command that reads the cluster as the operator does."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from configmirror.cli import reference
from configmirror.cli.flags import Choice, Parser, adopt_from, boolean, duration, integer, number
from configmirror.cli.output import FORMATS
from configmirror.operator import policy
from configmirror.operator.settings import Settings
from configmirror.vocabulary import CUSTOM_SYNTAX, OPTIONAL

CONVENTIONS = """\
flags: booleans as --flag, --flag=true|false or --no-flag; durations as 90s, 10m, 1h30m,
300ms (a bare number is seconds). A flag marked [env NAME] may also be set by that
variable, CONFIGMIRROR_ and its name (--max-retries: CONFIGMIRROR_MAX_RETRIES), the command
line winning; a variable means the same in every command that reads it. The flags that
choose what a command shows (the source, -n, -o, --target-namespace, --from) have none.
"""
POLICY_HELP = "\npolicy: " + textwrap.fill(
    "this command judges with the policy the running operator publishes (see "
    "--operator-namespace). Each policy flag of `run` (" + ", ".join(
        policy.flag(field) for field in policy.POLICY if field != "operator_namespace")
    + ") is taken here too and overrides that field; `run --help` and the flags reference "
    "describe them.", 88, break_on_hyphens=False) + "\n"
NAMESPACE_HELP = ("the namespace of the sources: with a source named, its namespace; without, "
                  "only the sources in this namespace (the same for plan, status and wait)")


# One exit-code scheme for every command, so a script can tell an error from a finding.
EXIT_OK = 0         # success: in sync, shown, done
EXIT_ERROR = 1      # an error: bad flags or input, no cluster, no such source
EXIT_ATTENTION = 2  # needs attention: plan has changes, wait timed out, migrate needs a human
ERROR_MEANING = "error: bad flags or input, no cluster, no such source"


def add_command(commands: argparse._SubParsersAction[Parser], name: str, help: str,
                ok: str, attention: str | None = None, *, errors: str = ERROR_MEANING,
                conventions: bool = True) -> Parser:
    """The parser of command `name`: its help, then its exit codes: EXIT_OK meaning `ok`,
    EXIT_ERROR meaning `errors`, and (for a command that has one) EXIT_ATTENTION meaning
    `attention`."""
    codes = [(EXIT_OK, ok), (EXIT_ERROR, errors)]
    if attention is not None:
        codes.append((EXIT_ATTENTION, attention))
    made: Parser = commands.add_parser(
        name, help=help, description=help, epilog=_epilog(codes, conventions),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    return made


def add_flag(parser: Parser, flag: str, default: Any, help: str,
             kind: Callable[[str], Any] = str, choices: Sequence[str] | None = None, *,
             short: str | None = None, env: bool = True, hidden: bool = False) -> None:
    """A flag (flags.Parser.flag) whose value may come from its environment variable; the
    builtin types stand for the Go-style parsers of that type."""
    builtin: dict[Any, Callable[[str], Any]] = {int: integer, float: number, bool: boolean}
    parse = builtin.get(kind, kind)
    if choices is not None:
        parse = Choice(tuple(choices))
    parser.flag(flag, default, help, parse, short=short, env=env, hidden=hidden)


def _epilog(codes: Sequence[tuple[int, str]], conventions: bool = True) -> str:
    """Exit codes, one a line, then the flag conventions."""
    said = "exit codes:\n" + "".join(f"  {code}  {meaning}\n" for code, meaning in codes)
    return said + ("\n" + CONVENTIONS if conventions else "")


def add_cluster_flags(p: Parser, policy_shown: bool = True) -> None:
    """The flags that say which cluster, and what the operator replicates there (run, plan,
    status and wait judge with the same). Without `policy_shown` (plan, status, wait) the
    policy's flags are taken but left out of --help, whose epilog points to run's."""
    d = Settings()
    hidden = not policy_shown
    if hidden:
        p.epilog = (p.epilog or "") + POLICY_HELP
    add_flag(p, "--kubeconfig", d.kubeconfig, "kubeconfig file; without it $KUBECONFIG (a "
             "list of files, merged), then in a pod its service account, then ~/.kube/config")
    add_flag(p, "--context", d.context, "kubeconfig context (default: its current-context)")
    add_flag(p, "--source-namespaces", d.source_namespaces,
             "namespaces whose sources are honoured (globs, ! excludes)", hidden=hidden)
    add_flag(p, "--source-namespace-selector", d.source_namespace_selector,
             "honour sources only in namespaces whose labels match this selector, e.g. "
             "configmirror.io/source=true as deploy/ and the Helm chart set it; empty: every "
             "namespace --source-namespaces allows, the default for `run` on a laptop",
             hidden=hidden)
    add_flag(p, "--exclude-namespaces", d.exclude_namespaces,
             "namespaces that never receive replicas (globs)", hidden=hidden)
    add_flag(p, "--secret-names", d.secret_names, "Secrets with these exact names (comma-"
             "separated) may be sources; the only Secrets ever read (default: none, Secrets "
             "are off)", hidden=hidden)
    add_flag(p, "--secret-source-namespaces", d.secret_source_namespaces, "namespaces whose "
             "Secrets of those names are sources (globs, ! excludes); needed with "
             "--secret-names", hidden=hidden)
    p.flag("--kinds", d.kinds, "the kinds replicated, comma-separated (the flag may be "
           f"repeated): configmap always, and {', '.join(OPTIONAL)}, or a namespaced "
           f"custom resource as {CUSTOM_SYNTAX} (resolved through discovery at start), "
           "each only when named (otherwise it is never read: RBAC comes per kind); a "
           "custom resource's replicas copy its spec (or the top-level fields named after "
           "it, each after a colon), never its status; sources of every "
           "kind only where --source-namespaces and --source-namespace-selector allow",
           repeat=True, hidden=hidden)
    add_flag(p, "--bindable-roles", d.bindable_roles, "the roles (names, comma-separated) a "
             "replicated RoleBinding may reference; the operator's RBAC grants bind on these "
             "only; a RoleBinding source binding any other is an InvalidSpec (default: none)",
             hidden=hidden)
    add_flag(p, "--drop-labels", d.drop_labels, "label keys never copied to a replica (globs, "
             "! excludes; replaces the default list, which holds the keys by which Argo CD, "
             "Flux, Helm and cert-manager claim objects; '' drops nothing)", hidden=hidden)
    add_flag(p, "--drop-annotations", d.drop_annotations, "annotation keys never copied to a "
             "replica (globs; replaces the default list, the same as --drop-labels's)",
             hidden=hidden)
    add_flag(p, "--delete-grace", d.delete_grace, "how long every removal of "
             "a replica waits after its cause is first seen (a source deleted or no longer "
             "annotated, a namespace that stops matching); if the cause goes within it, "
             "nothing is written. 0s removes at once", duration, hidden=hidden)
    add_flag(p, "--adopt-from", d.adopt_from, "take over the mirrors this tool made of every "
             "source, in place (reflector or kubernetes-replicator; a source's own "
             "configmirror.io/adopt also does; default '': none)", adopt_from, hidden=hidden)
    add_flag(p, "--cluster-name", d.cluster_name, "this (the home) cluster's name, as sources' "
             "configmirror.io/replicate-to-clusters and the replicas in member clusters name "
             "it", hidden=hidden)
    add_flag(p, "--member-clusters", d.member_clusters, "replicate into the member clusters "
             "an admin adds (Secrets labelled configmirror.io/cluster in the operator's "
             "namespace, which the operator then reads; RBAC: deploy/components/fleet)", bool,
             hidden=hidden)
    add_flag(p, "--log-format", d.log_format, "log format", choices=("text", "json"))
    p.flag("--log-level", d.log_level, "log level",
           Choice(("debug", "info", "warning", "error"), (("warn", "warning"),)))


def add_selection_flags(p: Parser, required: bool = False) -> None:
    """The source (`required`: one must be named), -n, -o and the operator whose policy to
    judge with: what plan, status and wait are about and how they print it."""
    p.add_argument("source", nargs=None if required else "?", metavar="[KIND/]NS/NAME",
                   help=f"{'the' if required else 'only this'} source, {reference.HELP}")
    add_flag(p, "--namespace", None, NAMESPACE_HELP, short="-n", env=False)
    add_flag(p, "--kind", None, "deprecated: name the kind in the source, secret/NS/NAME",
             choices=("configmap", "secret", *OPTIONAL), env=False)
    add_flag(p, "--output", "text", "output format", choices=FORMATS, short="-o", env=False)
    add_flag(p, "--cluster", None, "only this cluster: the home cluster (its --cluster-name) "
             "or a member cluster (default: every cluster the operator replicates into)",
             env=False)
    add_flag(p, "--operator-namespace", "", "judge with the policy the operator in this "
             "namespace publishes (default: look it up); a policy flag given here overrides it")
