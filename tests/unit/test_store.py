"""Store: latest object per key, named indexes (ports of thread_safe_store_test.go cases)."""

from __future__ import annotations

from dataclasses import dataclass

from configmirror.client.store import Store


@dataclass(frozen=True)
class Obj:
    name: str
    tags: tuple[str, ...] = ()
    version: int = 1


def by_tag(o: Obj) -> tuple[str, ...]:
    return o.tags


def test_upsert_returns_the_replaced_object_and_get_sees_the_latest() -> None:
    store: Store[Obj] = Store()
    assert store.upsert("a", Obj("a")) is None
    assert store.upsert("a", Obj("a", version=2)) == Obj("a")
    assert store.get("a") == Obj("a", version=2)
    assert store.delete("a") == Obj("a", version=2)
    assert store.delete("a") is None
    assert len(store) == 0


def test_multi_value_index_and_empty_sets_are_removed() -> None:
    store: Store[Obj] = Store({"tag": by_tag})
    store.upsert("a", Obj("a", ("x", "y")))
    store.upsert("b", Obj("b", ("y",)))
    assert sorted(o.name for o in store.by_index("tag", "y")) == ["a", "b"]
    assert store.index_keys("tag", "x") == ["a"]
    store.upsert("a", Obj("a", ("y",)))  # no longer x
    assert store.by_index("tag", "x") == []
    assert sorted(store.index_values("tag")) == ["y"], "an empty index set must be removed"
    store.delete("b")
    store.delete("a")
    assert store.index_values("tag") == []


def test_replace_reports_deleted_and_changed_only() -> None:
    store: Store[Obj] = Store({"tag": by_tag})
    store.upsert("same", Obj("same"))
    store.upsert("changed", Obj("changed"))
    store.upsert("gone", Obj("gone", ("t",)))
    deleted, changed = store.replace({
        "same": Obj("same"), "changed": Obj("changed", version=2), "new": Obj("new", ("t",))})
    assert deleted == {"gone": Obj("gone", ("t",))}
    assert changed == {"changed": (Obj("changed"), Obj("changed", version=2)),
                       "new": (None, Obj("new", ("t",)))}
    assert store.index_keys("tag", "t") == ["new"]
    assert sorted(store.keys()) == ["changed", "new", "same"]
