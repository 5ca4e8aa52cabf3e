"""What the README and the documentation tell a user to type is what the CLI takes: every
`configmirror ...` and `kubectl configmirror ...` command line in their code blocks goes through
the CLI's own parser, a flag quoted in prose is one of its flags (or a named other tool's), and
the exit-code table is the one each command's --help prints."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from configmirror.cli import main as cli
from configmirror.cli import reference
from configmirror.cli.flags import UsageError, resolve

REPO = Path(__file__).resolve().parents[2]
# The development pages quote the benchmarks' and the test tools' flags: only the pages a user
# reads are held to the CLI's (their commands are still parsed).
DEVELOPMENT = {"docs/development.md", "docs/architecture.md", "docs/hot-path.md",
               "docs/benchmarks.md"}
# Flags of other tools that user pages quote, each with its tool.
FOREIGN = {
    "--create-namespace": "helm install", "--set": "helm", "--set-string": "helm",
    "--plain-http": "helm push/pull", "--allow-http-registry": "cosign",
    "--max-requests-inflight": "kube-apiserver", "--watch-cache": "kube-apiserver",
    "--reload-on-delete": "Reloader", "--allow-all": "kubernetes-replicator",
    "--flag": "the CLI's conventions (a boolean as --flag)",
    "--no-flag": "the CLI's conventions (a boolean as --no-flag)",
}
# Where a command may start in a shell line: the line's start, or after a separator.
_SEGMENT = re.compile(r"(?:^|\|\||&&|[|;]|\$\()\s*")
_PROGRAM = re.compile(r"^(?:\S*/)?(?:kubectl\s+configmirror|kubectl-configmirror|configmirror)"
                      r"(?=\s|$)")
_COMMAND_WORD = re.compile(r"^(?:-\S*|[a-z][a-z0-9-]*)?$")
_ASSIGNMENTS = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+")  # CI=1 configmirror ...
_PLACEHOLDER = re.compile(r"[A-Z<>${}]|\.\.\.")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Line:
    path: str
    number: int
    text: str
    inline: bool = False  # a command named in prose, perhaps without its required arguments

    def __str__(self) -> str:
        return f"{self.path}:{self.number}: {self.text.strip()}"


def code_lines(path: str, text: str) -> Iterator[Line]:
    """The lines inside fenced code blocks, continuation lines (`\\`) joined; and outside
    them, each inline code span that is a configmirror command (`configmirror status ...`)."""
    inside, pending, start = False, "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.lstrip().startswith("```"):
            inside, pending = not inside, ""
            continue
        if not inside:
            for span in re.findall(r"`([^`\n]+)`", raw):
                if _PROGRAM.match(span):
                    yield Line(path, number, span, inline=True)
            continue
        if not pending:
            start = number
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        yield Line(path, start, pending + raw)
        pending = ""


def prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return "".join(part for i, part in enumerate(re.split(r"^\s*```.*$", text, flags=re.M))
                   if i % 2 == 0)


def commands(line: Line) -> Iterator[list[str]]:
    """Each configmirror command line the shell line runs: its words after the program."""
    text = re.sub(r"^\s*[$#>]\s+", "", line.text)  # a prompt
    text = re.split(r"\s#\s", " " + text, maxsplit=1)[0]  # a comment
    # A synopsis: `[-o text|json|yaml]` is one of the choices, given.
    text = re.sub(r"(?<=\w)(?:\|[\w-]+)+", "", text).replace("[", "").replace("]", "")
    text = re.sub(r"\{([\w-]+)(?:,[\w-]+)+\}", r"\1", text)  # {add,list,remove}: one of them
    for written in _SEGMENT.split(text):
        segment = _ASSIGNMENTS.sub("", written.strip())
        found = _PROGRAM.match(segment)
        if found is None:
            continue
        rest = segment[found.end():]
        if not _COMMAND_WORD.match(rest.split(maxsplit=1)[0] if rest.strip() else ""):
            continue  # output or prose ("configmirror writes: 5000"), not a command line
        rest = re.split(r"\s(?:>|2>|<)", rest, maxsplit=1)[0]  # a redirection
        try:
            yield shlex.split(rest)
        except ValueError as err:
            raise AssertionError(f"{line}: cannot split as a shell would: {err}") from None


def _subparser(command: str) -> argparse.ArgumentParser | None:
    [sub] = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    chosen: argparse.ArgumentParser | None = sub.choices.get(command)
    return chosen


def fault(argv: list[str], inline: bool = False) -> str | None:
    """What is wrong with `configmirror ARGV` as the CLI reads it, or None. `inline`: named
    in prose, where a required argument may be left out."""
    words: list[str] = []
    for word in argv:
        if word == "...":  # `--from ...`: a value left to the reader
            if words and words[-1].startswith("-"):
                words.pop()
        elif word not in ("-h", "--help"):
            words.append(word)
    if not words or words == ["--version"]:
        return None
    try:
        args = resolve(cli.parser().parse_args(cli.command_first(words)))
    except UsageError as err:
        if inline and str(err).startswith("the following arguments are required"):
            return None
        return str(err)
    parser = _subparser(args.command)
    assert parser is not None
    for word in words:
        option = word.partition("=")[0]
        for action in parser._actions:
            if option in action.option_strings and (action.help or "").startswith("deprecated"):
                return f"{option} is deprecated: {action.help}"
    source = getattr(args, "source", None)
    if source is not None and not _PLACEHOLDER.search(source):
        namespace = args.namespace if args.namespace and not _PLACEHOLDER.search(
            args.namespace) else ("ns" if args.namespace else None)
        try:
            reference.parse(source, namespace)
        except UsageError as err:
            return str(err)
    return None


def stale_commands(path: str, text: str) -> list[str]:
    """`path`'s command lines the CLI refuses, each as FILE:LINE: the line: why."""
    found = []
    for line in code_lines(path, text):
        for argv in commands(line):
            why = fault(argv, line.inline)
            if why is not None:
                found.append(f"{line}: {why}")
    return found


def every_command() -> list[tuple[Line, list[str]]]:
    return [(line, argv) for path in documents()
            for line in code_lines(str(path.relative_to(REPO)), path.read_text())
            for argv in commands(line)]


def test_the_documents_hold_command_lines_to_check() -> None:
    """The parser of lines finds the commands the pages show (so a test of none cannot pass)."""
    found = every_command()
    said = {argv[0] for _, argv in found if argv}
    assert {"plan", "status", "wait", "migrate", "run"} <= said, said
    assert len(found) >= 40, len(found)
    assert any(line.path == "README.md" for line, _ in found)


def test_every_command_line_in_the_readme_and_docs_is_one_the_cli_takes() -> None:
    stale = [finding for path in documents()
             for finding in stale_commands(str(path.relative_to(REPO)), path.read_text())]
    assert not stale, "\n".join(stale)


@pytest.mark.parametrize(("line", "why"), [
    ("configmirror status --namespace platform --kind secret platform/tls",
     "--kind is deprecated"),
    ("$ kubectl configmirror status --no-such-flag", "unrecognized arguments: --no-such-flag"),
    ("configmirror wait configmap/ns/name/extra --timeout 1m", "is not [KIND/]NAMESPACE/NAME"),
    ("kubectl get ns && configmirror diff ns/cfg", "invalid choice: 'diff'"),
    ("configmirror plan -o table  # what it would change", "argument -o/--output"),
    ("CI=1 configmirror wait NS/NAME \\\n  --timeout=soon", "'soon' is not"),
])
def test_a_planted_stale_line_fails_naming_the_file_the_line_and_the_fault(
        line: str, why: str) -> None:
    page = f"# A page\n\nText.\n\n```sh\nkubectl get pods\n{line}\n```\n"
    (finding,) = stale_commands("docs/planted.md", page)
    assert finding.startswith("docs/planted.md:7: ") and why in finding, finding


@pytest.mark.parametrize("line", [
    "configmirror status --target-namespace team-a -o json",
    "kubectl configmirror -n platform status shared-ca",
    "configmirror -o json wait secret/platform/tls --timeout 5m",
    "configmirror plan NS/NAME",
    "configmirror migrate --from reflector -o yaml > annotations.yaml",
    "configmirror: warning: --delete-grace=0s overrides the operator's 60s",  # output
    "helm install configmirror ./charts/configmirror --namespace configmirror",
])
def test_a_line_the_cli_takes_or_that_runs_no_configmirror_passes(line: str) -> None:
    assert stale_commands("docs/planted.md", f"```\n{line}\n```\n") == []


def test_a_command_quoted_in_prose_is_checked_too() -> None:
    page = "# A page\n\nSee `configmirror status --namespace NS` and `kubectl get cm`.\n"
    assert stale_commands("docs/planted.md", page) == []
    page = "# A page\n\nTo see what a namespace holds: `configmirror status --holds NS`.\n"
    (finding,) = stale_commands("docs/planted.md", page)
    assert finding.startswith("docs/planted.md:3: ") and "--holds" in finding, finding


def _options(parser: argparse.ArgumentParser | None = None) -> set[str]:
    """Every flag of the CLI: of each command, and of each action of a command that has
    some (`cluster add`)."""
    parser = parser or cli.parser()
    options = {o for a in parser._actions for o in a.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                options |= _options(command)
    return options


def quoted_flags(text: str) -> set[str]:
    """The flags prose quotes as code: `--flag`, `--flag=value`, and those of a configmirror
    command quoted whole (`configmirror status --target-namespace NS`)."""
    found = set()
    for span in re.findall(r"`([^`\n]+)`", prose(text)):
        if span.startswith("--"):
            found.add(re.split(r"[=\s\[]", span, maxsplit=1)[0])
        elif _PROGRAM.match(span):
            found |= set(re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", span))
    return found


def test_every_flag_a_user_page_quotes_is_the_clis_or_a_named_other_tools() -> None:
    options = _options()
    unknown = {f"{path.relative_to(REPO)}: {flag}" for path in documents()
               if str(path.relative_to(REPO)) not in DEVELOPMENT
               for flag in quoted_flags(path.read_text())
               if flag not in options and flag not in FOREIGN}
    assert not unknown, sorted(unknown)


def test_a_planted_flag_no_command_has_is_found() -> None:
    assert quoted_flags("Run `configmirror status --namespace-of NS`.\n\n```\n--x\n```\n") \
        == {"--namespace-of"}
    assert "--namespace-of" not in _options()


def _table(text: str, heading: str) -> list[list[str]]:
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    return [rows[0], *rows[2:]]


def test_the_exit_code_table_is_what_each_commands_help_says() -> None:
    header, *rows = _table((REPO / "docs" / "concepts.md").read_text(), "Exit codes")
    said = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    for column in header[2:]:
        command = column.strip("`")
        parser = _subparser(command)
        assert parser is not None, column
        codes = re.findall(r"^  (\d+)  ", (parser.epilog or "").split("\n\n")[0], re.M)
        documented = [code for code, row in said.items() if row[column] not in ("never", "")]
        assert documented == codes, (command, documented, codes)
