"""Label selectors, against the syntax Kubernetes documents (equality- and set-based)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from configmirror.replication.selector import SelectorError, parse_selector

LABELS = {"env": "prod", "tier": "a", "team": "x", "app.kubernetes.io/name": "web", "n": "5"}


@pytest.mark.parametrize(("selector", "expected"), [
    ("env=prod", True),
    ("env==prod", True),
    ("env=dev", False),
    ("env!=dev", True),
    ("env!=prod", False),
    ("missing!=x", True),
    ("tier in (a,b)", True),
    ("tier in (b, c)", False),
    ("tier notin (c)", True),
    ("tier notin (a)", False),
    ("missing notin (a)", True),
    ("missing in (a)", False),
    ("team", True),
    ("missing", False),
    ("!legacy", True),
    ("!team", False),
    ("env=prod,tier in (a,b),team,!legacy", True),
    ("env=prod,tier=b", False),
    ("app.kubernetes.io/name=web", True),
    ("  env = prod ,  team  ", True),
    ("n>3", True),
    ("n<3", False),
    ("env>3", False),
    ("empty=", False),
])
def test_selector_matches_like_kubernetes(selector: str, expected: bool) -> None:
    assert parse_selector(selector).matches(LABELS) is expected


def test_key_equals_nothing_matches_the_empty_value() -> None:
    assert parse_selector("flag=").matches({"flag": ""})
    assert not parse_selector("flag=").matches({"flag": "x"})


@pytest.mark.parametrize(("selector", "names"), [
    ("", "empty"),
    ("env in (a", "at the end"),
    ("env in a,b", "expected '(' at 'a'"),
    ("env notin ()", "must not be empty"),
    ("env = = prod", "expected a label value at '='"),
    ("env prod", "expected one of"),
    ("env=prod tier=a", "expected ',' between requirements at 'tier'"),
    ("-bad=x", "invalid label key at '-bad'"),
    ("Bad_Prefix/x=y", "invalid label key at 'Bad_Prefix/x'"),
    ("a/b/c=d", "invalid label key"),
    ("env=" + "v" * 64, "invalid label value"),
    ("env=pro$d", "invalid label value at 'pro$d'"),
    ("n>x", "needs an integer at 'x'"),
    (",", "expected a label key at ','"),
    ("env=prod,", "at the end"),
    ("!", "expected a label key at the end"),
])
def test_invalid_selector_names_the_offending_token(selector: str, names: str) -> None:
    with pytest.raises(SelectorError, match="invalid label selector") as raised:
        parse_selector(selector)
    assert names in str(raised.value)


label_value = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,10}[a-z0-9])?", fullmatch=True)


@given(key=st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True), value=label_value,
       labels=st.dictionaries(st.sampled_from(["a", "b", "env"]), label_value))
def test_equality_and_inequality_are_complements(key: str, value: str,
                                                 labels: dict[str, str]) -> None:
    eq = parse_selector(f"{key}={value}").matches(labels)
    ne = parse_selector(f"{key}!={value}").matches(labels)
    assert eq != ne
    assert parse_selector(f"{key} in ({value})").matches(labels) == eq
