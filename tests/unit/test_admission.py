"""What admission made of a replica, field by field: the entries and the admitted mark that
`plan`, `status`, `wait` and a restarted operator read off the replica."""

from __future__ import annotations

from configmirror.replication.admission import (
    ADMITTED,
    admitted_mark,
    changed,
    field_entries,
    held,
    holds,
    parse_admitted,
)

PAYLOAD = {"data": {"ca.crt": "pem", "mode": "strict"}, "binaryData": {}, "immutable": False}
LABELS = {"team": "x", "configmirror.io/replica": "true"}
ANNOTATIONS = {"configmirror.io/content-hash": "h1", "note": "n"}


def wanted() -> dict[str, str]:
    return field_entries(PAYLOAD, LABELS, ANNOTATIONS)


def test_each_field_has_an_entry_by_name_and_a_value_changes_only_its_own() -> None:
    entries = wanted()
    assert sorted(entries) == ["annotation/configmirror.io/content-hash", "annotation/note",
                               "data/ca.crt", "data/mode", "immutable", "label/configmirror.io/"
                               "replica", "label/team"]
    other = field_entries({**PAYLOAD, "data": {"ca.crt": "pem", "mode": "audit"}}, LABELS,
                          ANNOTATIONS)
    assert {n for n in entries if entries[n] != other[n]} == {"data/mode"}
    assert field_entries(PAYLOAD, {"k": "v"}, {})["label/k"] != \
        field_entries(PAYLOAD, {}, {"k": "v"})["annotation/k"], "a label is no annotation"
    assert field_entries({"data": {"a": "b"}}, {}, {})["data/a"] != \
        field_entries({"binaryData": {"a": "b"}}, {}, {})["binaryData/a"]


def test_a_replica_holding_every_field_and_more_labels_holds_what_is_wanted() -> None:
    stored = field_entries(PAYLOAD, {**LABELS, "owner": "team"},
                           {**ANNOTATIONS, "stamp": "7"})
    assert holds(wanted(), held(stored, frozenset()), frozenset())


def test_a_replica_missing_or_changing_a_field_or_with_a_data_key_more_does_not() -> None:
    for payload, labels, notes in (
            ({**PAYLOAD, "data": {"ca.crt": "pem"}}, LABELS, ANNOTATIONS),
            ({**PAYLOAD, "data": {**PAYLOAD["data"], "extra": "1"}}, LABELS, ANNOTATIONS),
            ({**PAYLOAD, "immutable": True}, LABELS, ANNOTATIONS),
            (PAYLOAD, {"configmirror.io/replica": "true"}, ANNOTATIONS),
            (PAYLOAD, LABELS, {**ANNOTATIONS, "configmirror.io/content-hash": "h2"})):
        stored = field_entries(payload, labels, notes)
        assert not holds(wanted(), held(stored, frozenset()), frozenset()), \
            (payload, labels, notes)


def test_fields_given_to_admission_are_left_out_on_both_sides() -> None:
    admitted = frozenset({"data/mode", "data/policy"})
    stored = field_entries({**PAYLOAD, "data": {"ca.crt": "pem", "mode": "audit",
                                                "policy": "on"}}, LABELS, ANNOTATIONS)
    assert not holds(wanted(), held(stored, frozenset()), frozenset())
    assert holds(wanted(), held(stored, admitted), admitted)
    edited = field_entries({**PAYLOAD, "data": {"ca.crt": "by hand", "mode": "audit"}},
                           LABELS, ANNOTATIONS)
    assert not holds(wanted(), held(edited, admitted), admitted), "the rest is still ours"


def test_what_admission_changed_is_named_and_our_own_marks_never_are() -> None:
    stored = field_entries({**PAYLOAD, "data": {"ca.crt": "pem", "mode": "audit", "new": "1"}},
                           {"team": "y", "owner": "o"},
                           {"note": "n", "configmirror.io/content-hash": "other"})
    assert changed(wanted(), stored) == frozenset({"data/mode", "data/new", "label/team"}), \
        "labels added are not ours to name; our marks are never admission's"
    assert changed(wanted(), wanted()) == frozenset()


def test_the_mark_names_fields_sorted_and_parses_back_without_our_own() -> None:
    names = frozenset({"label/team", "data/mode"})
    assert admitted_mark(names) == "data/mode, label/team"
    assert parse_admitted(admitted_mark(names)) == names
    assert parse_admitted(" data/mode,, label/configmirror.io/replica, annotation/"
                          "configmirror.io/content-hash ,") == frozenset({"data/mode"})
    assert parse_admitted(None) == parse_admitted("") == frozenset()
    assert ADMITTED == "configmirror.io/admitted"
