"""Flags as the Go tools take them (configmirror.cli.flags), on the commands' own parser:
booleans with =true|false and --no-, Go durations, environment variables read for the
command run only and named in errors."""

from __future__ import annotations

import argparse
import sys

import pytest

from configmirror import __version__
from configmirror.cli import flags
from configmirror.cli import main as cli
from configmirror.operator.settings import parse_duration
from configmirror_testing.commands import parsed


@pytest.fixture(autouse=True)
def clean_environment(cli_environment: None) -> None:
    """No CONFIGMIRROR_* variable of the caller's leaks in (tests/unit/conftest.py)."""


def refused(*argv: str) -> str:
    with pytest.raises(flags.UsageError) as raised:
        parsed(*argv)
    return str(raised.value)


@pytest.mark.parametrize(("argv", "value"), [
    ((), False), (("--leader-elect",), True), (("--leader-elect=true",), True),
    (("--leader-elect=false",), False), (("--no-leader-elect",), False),
    (("--leader-elect=True",), True), (("--leader-elect=0",), False),
    (("--leader-elect", "--no-leader-elect"), False),  # the last one wins, as in Go
])
def test_a_boolean_flag_is_flag_flag_equals_true_or_false_or_no_flag(
        argv: tuple[str, ...], value: bool) -> None:
    assert parsed("run", *argv).leader_elect is value


def test_every_boolean_flag_takes_an_equals_value() -> None:
    run = parsed("run", "--dry-run=true", "--source-metrics=true", "--leader-elect=true")
    assert (run.dry_run, run.source_metrics, run.leader_elect) == (True, True, True)


def test_a_boolean_flag_with_a_bad_value_is_refused_naming_both() -> None:
    assert refused("run", "--leader-elect=ture") == (
        "argument --leader-elect: 'ture' is not a boolean (true or false)")
    assert refused("run", "--no-leader-elect=true") == (
        "argument --no-leader-elect: takes no value (write --leader-elect=true)")


@pytest.mark.parametrize(("text", "value"), [
    ("true", True), ("false", False), ("1", True), ("0", False), ("yes", True), ("no", False),
    ("TRUE", True), (" No ", False)])
def test_a_boolean_variable_is_true_false_1_0_yes_or_no(
        monkeypatch: pytest.MonkeyPatch, text: str, value: bool) -> None:
    monkeypatch.setenv("CONFIGMIRROR_LEADER_ELECT", text)
    assert parsed("run").leader_elect is value


def test_a_boolean_variable_that_is_no_boolean_is_refused_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFIGMIRROR_LEADER_ELECT", "ture")
    assert refused("run") == ("CONFIGMIRROR_LEADER_ELECT='ture' (for --leader-elect) is not a "
                              "boolean (true or false)")


def test_the_command_line_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFIGMIRROR_LEADER_ELECT", "true")
    monkeypatch.setenv("CONFIGMIRROR_WORKERS", "not even a number")  # never read: given
    run = parsed("run", "--no-leader-elect", "--workers", "3")
    assert (run.leader_elect, run.workers) == (False, 3)


def test_a_list_flag_given_more_than_once_is_every_value_joined() -> None:
    """A kustomize component per kind appends its own --kinds."""
    run = parsed("run", "--kinds=networkpolicy", "--kinds", "limitrange,resourcequota")
    assert run.kinds == "networkpolicy,limitrange,resourcequota"
    assert parsed("run").kinds == "configmap"


DURATIONS = [("90s", 90.0), ("10m", 600.0), ("1h30m", 5400.0), ("1.5s", 1.5),
             ("300ms", 0.3), ("60", 60.0), ("0", 0.0), ("2m30.5s", 150.5)]
DURATION_FLAGS = [("run", "--resync-period"), ("run", "--drain-timeout"),
                  ("run", "--delete-grace"), ("plan", "--delete-grace"),
                  ("status", "--delete-grace"), ("wait", "--timeout")]


@pytest.mark.parametrize(("command", "flag"), DURATION_FLAGS)
@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_every_duration_flag_takes_gos_syntax_and_bare_seconds(
        command: str, flag: str, text: str, seconds: float) -> None:
    source = ("ns/name",) if command == "wait" else ()
    dest = flag[2:].replace("-", "_")
    assert getattr(parsed(command, *source, f"{flag}={text}"), dest) == pytest.approx(seconds)
    assert getattr(parsed(command, *source, flag, text), dest) == pytest.approx(seconds)


@pytest.mark.parametrize(("command", "flag"), DURATION_FLAGS)
def test_a_duration_variable_takes_gos_syntax(
        monkeypatch: pytest.MonkeyPatch, command: str, flag: str) -> None:
    monkeypatch.setenv(flags.env_name(flag), "1h30m")
    source = ("ns/name",) if command == "wait" else ()
    assert getattr(parsed(command, *source), flag[2:].replace("-", "_")) == 5400.0


@pytest.mark.parametrize("text", ["10x", "1d", "5 m", "", "m", "1.5.5s", "-"])
def test_a_bad_duration_is_refused_naming_the_flag_and_the_text(text: str) -> None:
    assert refused("run", f"--resync-period={text}") == (
        f"argument --resync-period: {text!r} is not a duration (Go's syntax: 90s, 10m, "
        "1h30m, 1.5s, 300ms; a bare number is seconds)")


def test_a_negative_duration_is_refused() -> None:
    assert refused("run", "--delete-grace=-5s") == (
        "argument --delete-grace: '-5s' is a negative duration")


def test_a_bad_duration_variable_is_refused_naming_the_variable_and_the_flag(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFIGMIRROR_DRAIN_TIMEOUT", "soon")
    assert refused("run").startswith(
        "CONFIGMIRROR_DRAIN_TIMEOUT='soon' (for --drain-timeout) is not a duration")


def test_a_bad_variable_breaks_only_the_commands_that_have_its_flag(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CONFIGMIRROR_WORKERS", "many")       # run's only
    monkeypatch.setenv("CONFIGMIRROR_LOG_LEVEL", "loud")     # every command's but version's
    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out == f"configmirror {__version__}\n"
    assert cli.main(["run"]) == 1
    assert "CONFIGMIRROR_" in capsys.readouterr().err
    monkeypatch.delenv("CONFIGMIRROR_LOG_LEVEL")
    assert parsed("plan").log_level == "info", "plan has no --workers: its variable is not read"


def test_a_variable_outside_its_flags_choices_is_refused_naming_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFIGMIRROR_LOG_FORMAT", "xml")
    assert refused("status").startswith("CONFIGMIRROR_LOG_FORMAT='xml' (for --log-format) is "
                                        "not one of text, json")


@pytest.mark.parametrize("command", ["plan", "status", "migrate", "version"])
def test_output_has_no_variable_so_one_set_for_a_command_breaks_no_other(
        monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    monkeypatch.setenv("CONFIGMIRROR_OUTPUT", "json")
    extra = ("--from", "reflector") if command == "migrate" else ()
    assert parsed(command, *extra).output == "text"


@pytest.mark.parametrize(("given", "level"), [
    ("warn", "warning"), ("warning", "warning"), ("WARN", "warning"), ("debug", "debug"),
    ("error", "error")])
def test_log_level_warn_is_warning(monkeypatch: pytest.MonkeyPatch, given: str,
                                   level: str) -> None:
    assert parsed("run", "--log-level", given).log_level == level
    monkeypatch.setenv("CONFIGMIRROR_LOG_LEVEL", given)
    assert parsed("run").log_level == level


# -- the machinery on a parser of its own ------------------------------------------------------


def toy() -> flags.Parser:
    parser = flags.Parser(prog="toy")
    parser.flag("--on", False, "a boolean", flags.boolean)
    parser.flag("--wait", 30.0, "a duration", flags.duration)
    parser.flag("--count", 2, "an integer", flags.integer)
    parser.flag("--rate", 1.5, "a number", flags.number)
    parser.flag("--mode", "a", "a choice", flags.Choice(("a", "b"), (("c", "b"),)))
    parser.flag("--name", None, "a string", short="-N", env=False)
    parser.add_argument("rest", nargs="*")
    return parser


def toyed(*argv: str) -> argparse.Namespace:
    return flags.resolve(toy().parse_args(argv))


def test_the_defaults_are_the_flags_own_when_nothing_is_given() -> None:
    got = toyed()
    assert (got.on, got.wait, got.count, got.rate, got.mode, got.name, got.rest) == (
        False, 30.0, 2, 1.5, "a", None, [])


def test_each_parser_reads_its_own_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, text in (("ON", "yes"), ("WAIT", "2m"), ("COUNT", "7"), ("RATE", "0.25"),
                       ("MODE", "C"), ("NAME", "from-env")):
        monkeypatch.setenv(f"CONFIGMIRROR_{name}", text)
    got = toyed()
    assert (got.on, got.wait, got.count, got.rate, got.mode, got.name) == (
        True, 120.0, 7, 0.25, "b", None), "--name has no variable"


@pytest.mark.parametrize(("argv", "message"), [
    (("--count", "2.5"), "argument --count: '2.5' is not an integer"),
    (("--rate", "nan"), "argument --rate: 'nan' is not a number"),
    (("--rate", "inf"), "argument --rate: 'inf' is not a number"),
    (("--rate", "fast"), "argument --rate: 'fast' is not a number"),
    (("--mode", "d"), "argument --mode: 'd' is not one of a, b, c"),
    (("--on=maybe",), "argument --on: 'maybe' is not a boolean (true or false)"),
    (("--wa", "1s"), "unrecognized arguments: --wa"),  # no abbreviations, as in Go
])
def test_a_bad_value_is_refused_naming_the_flag_and_the_value(
        argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(flags.UsageError) as raised:
        toyed(*argv)
    assert str(raised.value) == message


def test_a_boolean_value_apart_from_its_flag_is_an_argument_as_in_go() -> None:
    got = toyed("--on", "false")
    assert (got.on, got.rest) == (True, ["false"])


def test_after_dash_dash_nothing_is_read_as_a_flag() -> None:
    got = toyed("--on=false", "--", "--on=true", "--no-on=x")
    assert (got.on, got.rest) == (False, ["--on=true", "--no-on=x"])


def test_a_short_flag_is_the_long_one() -> None:
    assert toyed("-N", "x").name == toyed("--name=x").name == "x"


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90.0), ("10m", 600.0), ("1h30m", 5400.0), ("1.5s", 1.5), ("300ms", 0.3),
    ("2h45m30.5s", 9930.5), ("1m.5s", 60.5), (".5s", 0.5), ("1.s", 1.0), ("+5s", 5.0),
    ("-0", 0.0), ("0", 0.0), ("60", 60.0), ("0.25", 0.25), (" 5m ", 300.0),
    ("1500us", 0.0015), ("1500\u00b5s", 0.0015), ("1500\u03bcs", 0.0015), ("2000000ns", 0.002),
])
def test_a_duration_reads_as_go_reads_it(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "why"), [
    ("", "not a duration"), ("s", "not a duration"), ("1d", "not a duration"),
    ("1e5s", "not a duration"), ("1e5", "not a duration"), ("nan", "not a duration"),
    ("inf", "not a duration"), ("1 m", "not a duration"), ("5m-3s", "not a duration"),
    ("\u0661s", "not a duration"), ("\u0661", "not a duration"),  # a digit, not an ASCII one
    ("-5s", "a negative duration"), ("-5", "a negative duration"),
    ("1" * 400, "too long a duration"), ("1" * 400 + "h", "too long a duration"),
])
def test_a_duration_go_would_refuse_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_duration(text)


@pytest.mark.parametrize(("seconds", "shown"), [
    (0.0, "0s"), (25.0, "25s"), (0.5, "0.5s"), (60.0, "1m0s"), (90.0, "1m30s"),
    (600.0, "10m0s"), (3600.0, "1h0m0s"), (5430.5, "1h30m30.5s")])
def test_help_shows_a_duration_default_as_go_prints_it(seconds: float, shown: str) -> None:
    parser = flags.Parser(prog="toy")
    parser.flag("--wait", seconds, "a duration", flags.duration)
    assert f"(default: {shown})" in " ".join(parser.format_help().split())


def test_help_shows_no_default_for_none_or_empty_and_bools_in_lower_case() -> None:
    parser = flags.Parser(prog="toy")
    parser.flag("--a", None, "first")
    parser.flag("--b", "", "second")
    parser.flag("--c", True, "third", flags.boolean)
    text = " ".join(parser.format_help().split())
    assert "first [env CONFIGMIRROR_A]" in text and "second [env CONFIGMIRROR_B]" in text
    assert "third (default: true) [env CONFIGMIRROR_C]" in text
    assert "100%" in flags.Parser(prog="toy", epilog="100%").format_help()


def test_help_may_say_percent() -> None:
    parser = flags.Parser(prog="toy")
    parser.flag("--share", 50, "a share in %")
    assert "a share in % (default: 50)" in " ".join(parser.format_help().split())


def test_a_no_flag_with_a_value_of_a_flag_that_is_no_boolean_is_no_flag_at_all() -> None:
    with pytest.raises(flags.UsageError) as raised:
        toyed("--no-count=3")
    assert str(raised.value) == "unrecognized arguments: --no-count=3"


def test_help_names_a_choices_words() -> None:
    assert "--mode {a,b,c}" in toy().format_help()


def test_without_arguments_the_command_line_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["toy", "--on=true", "x"])
    got = flags.resolve(toy().parse_args())
    assert (got.on, got.rest) == (True, ["x"])
