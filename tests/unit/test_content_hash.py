"""The content digest (configmirror.replication.model.content_hash) is stable across
releases: a replica written by an earlier version carries a content-hash this version
computes too, so an upgrade rewrites nothing. The vectors were computed by the code before
the digest moved to orjson (494891f, json.dumps with sort_keys); the property holds the
fast path to that
serialisation for any strings a ConfigMap, a Secret, their labels and annotations can hold."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from configmirror.replication.model import CONTENT_HASH, content_hash, replica_hash
from configmirror.vocabulary import CONFIGMAP, SECRET

VECTORS: list[tuple[str, dict[str, Any], dict[str, str], dict[str, str], str]] = [
    ("a ConfigMap replica as the benchmarks write it",
     {"data": {"payload": "x" * 900}, "binaryData": {}, "immutable": False},
     {"configmirror.io/replica": "true", "app.kubernetes.io/managed-by": "configmirror"},
     {"configmirror.io/replica-of": "configmirror-bench-sources-000/src-0000"},
     "5f9fe86c3c928aae86bb607aa89bf320"),
    ("keys out of order, several data keys, binaryData, immutable",
     {"data": {"z.yaml": "b: 2\n", "a.yaml": "a: 1\n", "M": ""},
      "binaryData": {"bin": "AAEC/w=="}, "immutable": True},
     {"team": "platform", "app": "ca", "configmirror.io/replica": "true"},
     {"zeta": "last", "alpha": "first", CONTENT_HASH: "ignored",
      "configmirror.io/replica-of": "ns/n"},
     "0bf5efd20fe5189cd8f45ca8242401c4"),
    ("non-ASCII values: Latin-1, CJK, an emoji beyond the BMP",
     {"data": {"greeting": "café, 日本語, 🎉"}, "binaryData": {}, "immutable": False},
     {"l": "v"}, {"note": "naïve — “quoted”"},
     "f4186f128a53146e2ab6c09fa306fade"),
    ("control characters, DEL, quotes, backslashes, slashes, HTML",
     {"data": {"k": "tab\there\nnewline\r\x00nul\x1fus\x7fdel \"q\" \\ / <a>&amp;"},
      "binaryData": {}, "immutable": False},
     {}, {"a": "\u2028\u2029\ufeff"},
     "3a032e13f0302e5754bbe4dd7342879d"),
    ("ASCII but for DEL and a control character",
     {"data": {"k": "ascii but DEL \x7f and \x01"}, "binaryData": {}, "immutable": False},
     {"a": "b"}, {},
     "ea724e0b592bb41ebfe56b1b975eaf21"),
    ("a Secret replica",
     {"data": {"tls.crt": "LS0tLS1CRUdJTg==", "tls.key": "LS0tLS1LRVk="},
      "type": "kubernetes.io/tls", "immutable": False},
     {"configmirror.io/replica": "true"}, {"configmirror.io/replica-of": "platform/wildcard"},
     "7ff5067a0f2f711ffc686810d8d1b022"),
    ("empty everything", {"data": {}, "binaryData": {}, "immutable": False}, {}, {},
     "bf190a472fd90989aa7340eac28524fd"),
]


@pytest.mark.parametrize(("payload", "labels", "annotations", "digest"),
                         [v[1:] for v in VECTORS], ids=[v[0] for v in VECTORS])
def test_the_digest_is_the_one_earlier_versions_wrote(
        payload: dict[str, Any], labels: dict[str, str], annotations: dict[str, str],
        digest: str) -> None:
    assert content_hash(payload, labels, annotations) == digest


def test_a_replica_written_by_an_earlier_version_is_in_sync_as_it_is() -> None:
    _, payload, labels, annotations, digest = VECTORS[1]
    raw = {"metadata": {"labels": labels, "annotations": {**annotations, CONTENT_HASH: digest}},
           **payload}
    assert replica_hash(raw, CONFIGMAP) == digest


def stdlib(payload: dict[str, Any], labels: dict[str, str],
           annotations: dict[str, str]) -> str:
    """The digest as the code before orjson serialised it."""
    doc = [*payload.values(), labels,
           {k: v for k, v in annotations.items() if k != CONTENT_HASH}]
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


TEXT = st.text(st.characters(codec="utf-8"), max_size=30) | st.text("abc\x7f\x00\n\"\\", max_size=8)
KEYS = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/",
               min_size=1, max_size=12)
STRINGS = st.dictionaries(KEYS | TEXT, TEXT, max_size=5)


@given(STRINGS, STRINGS, STRINGS, st.booleans(), st.sampled_from([CONFIGMAP, SECRET]))
def test_the_digest_serialises_as_the_standard_library_did(
        data: dict[str, str], labels: dict[str, str], annotations: dict[str, str],
        immutable: bool, kind: Any) -> None:
    payload: dict[str, Any] = {"data": data, "immutable": immutable}
    payload.update({"binaryData": dict(reversed(data.items()))} if kind is CONFIGMAP
                   else {"type": next(iter(data.values()), "Opaque")})
    assert content_hash(payload, labels, annotations) == stdlib(payload, labels, annotations)
