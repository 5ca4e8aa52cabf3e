"""What admission made of a replica: memory that `plan`, `status`, `wait` and a restart read.

A mutating webhook or policy engine may store a replica other than configmirror wrote it.
`run` must not write it again (it would be changed again, forever), and the commands must
call it in sync as `run` does, before and after a restart: so what decides it is on the
replica itself, never in the operator's memory.

- Fields configmirror does not write are not drift: a label or annotation a policy adds (an
  owner, a cost centre, a stamp) leaves the replica in sync. This costs no write at all: for
  a replica that is not exactly as written (its content-hash mark is not its digest), and
  only for such a one, the cache keeps a digest per field it holds (`held`), and it is in
  sync when it holds every field its source writes (`holds`). Its payload (data,
  binaryData, type, immutable) is configmirror's whole: a key added there is drift.
- Fields configmirror writes that admission changed (a data key a policy rewrites, a label
  of the source it overwrites) are named, by name and never by value, in the mark
  `configmirror.io/admitted: "data/KEY, label/KEY"` on the replica: they are admission's, and
  left out of the comparison. The mark costs one merge patch the first time admission
  changes such a field; later writes carry it, so a source edit is one write again, and one
  patch takes it off once admission stops. Our own marks (configmirror.io/*) are never
  admission's, so a source edit (a new content-hash) is always seen.

A hand edit of a field configmirror writes and admission does not own (data, the source's
labels and annotations, our marks) is drift, and repaired. The mark is not part of what a
replica must equal: being no field the source writes, it is never compared.

Why not server-side apply with a field manager: every write (not only the rare admitted
one) would become an apply, and every replica would carry managedFields for us; the same
"fields we do not write are not ours" comes here from the source's own fields at no cost on
the common path, where a replica is held exactly as written and one digest decides.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Collection, Mapping
from typing import Any

from configmirror.replication.spec import PREFIX

ADMITTED = PREFIX + "admitted"
NONE: frozenset[str] = frozenset()


def _entry(name: str, value: Any) -> str:
    # A value is a string, a bool or a sorted list of names, or (a kind other than a
    # ConfigMap or Secret: a NetworkPolicy's spec/ingress) any JSON, its keys sorted.
    blob = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    # Interned: the replicas of one source hold the same entries, once in memory.
    return sys.intern(hashlib.blake2b(name.encode() + b"\0" + blob, digest_size=8).hexdigest())


def field_entries(payload: Mapping[str, Any], labels: Mapping[str, str],
                  annotations: Mapping[str, str]) -> dict[str, str]:
    """A digest per field of a replica, by the field's name: "data/KEY" (and binaryData/),
    "type", "immutable", "label/KEY", "annotation/KEY"."""
    entries: dict[str, str] = {}
    for field, value in payload.items():
        if isinstance(value, Mapping):
            for k, v in value.items():
                entries[f"{field}/{k}"] = _entry(f"{field}/{k}", v)
        else:
            entries[field] = _entry(field, value)
    for prefix, items in (("label/", labels), ("annotation/", annotations)):
        for k, v in items.items():
            entries[prefix + k] = _entry(prefix + k, v)
    return entries


def _in_payload(name: str) -> bool:
    return not name.startswith(("label/", "annotation/"))


def _keys(names: Collection[str], left_out: frozenset[str]) -> str:
    """The entry that names a payload's keys: none added, none taken away."""
    return _entry("#keys", sorted(n for n in names if _in_payload(n) and n not in left_out))


def _ours(name: str) -> bool:
    return name.startswith((f"label/{PREFIX}", f"annotation/{PREFIX}"))


def parse_admitted(mark: str | None) -> frozenset[str]:
    """The field names an `ADMITTED` mark gives admission (never one of our own marks)."""
    if not mark:
        return NONE
    return frozenset(n for n in (p.strip() for p in mark.split(",")) if n and not _ours(n))


def admitted_mark(names: frozenset[str]) -> str:
    """The `ADMITTED` mark naming `names`."""
    return ", ".join(sorted(names))


def held(fields: Mapping[str, str], admitted: frozenset[str]) -> frozenset[str]:
    """What a replica of these `fields` holds, as `holds` reads it: the entry of each field but
    those `admitted`, and of its payload's keys."""
    return frozenset({*(e for n, e in fields.items() if n not in admitted),
                      _keys(fields, admitted)})


def holds(wanted: Mapping[str, str], entries: frozenset[str], admitted: frozenset[str]) -> bool:
    """Whether a replica that holds `entries` has every field of `wanted` (a source's
    `field_entries`) but those `admitted`, and no payload key besides."""
    return _keys(wanted, admitted) in entries and all(
        e in entries for n, e in wanted.items() if n not in admitted)


def changed(wanted: Mapping[str, str], stored: Mapping[str, str]) -> frozenset[str]:
    """The fields of `wanted` that `stored` (both `field_entries`) holds otherwise or not at
    all, and the payload keys it holds besides: what admission changed of our write, but
    our own marks."""
    names = {n for n, e in wanted.items() if stored.get(n) != e}
    names |= {n for n in stored if _in_payload(n) and n not in wanted}
    return frozenset(n for n in names if not _ours(n))
