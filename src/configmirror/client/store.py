"""A thread-safe cache of the latest object per key, with named indexes (client-go's Indexer).

The informer writes it; reconcile reads it. Values are whatever the informer's transform
makes of the raw JSON (for us small frozen dataclasses), so the cache holds only what
reconcile needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")

IndexFunc = Callable[[T], Iterable[str]]
_NONE: frozenset[str] = frozenset()


class Store(Generic[T]):
    """Objects by key, plus indexes: index name -> indexed value -> keys."""

    def __init__(self, indexers: dict[str, IndexFunc[T]] | None = None) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, T] = {}
        self._indexers: dict[str, IndexFunc[T]] = dict(indexers or {})
        # For every indexer: value -> keys of the objects that produce it. Empty sets are
        # removed, so a value with no objects is absent (not an empty entry).
        self._indexes: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}

    def upsert(self, key: str, obj: T) -> T | None:
        """Store `obj` under `key`; return the object it replaced, if any."""
        with self._lock:
            old = self._items.get(key)
            self._items[key] = obj
            self._reindex(key, old, obj)
            return old

    def delete(self, key: str) -> T | None:
        """Forget `key`; return the object it held, if any."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._reindex(key, old, None)
            return old

    def replace(self, items: dict[str, T]) -> tuple[dict[str, T], dict[str, tuple[T | None, T]]]:
        """Make the store hold exactly `items` (a relist).

        Returns (deleted, changed): the objects that are gone, and (old, new) pairs for keys
        that are new (old None) or whose object is not equal to the one cached.
        """
        with self._lock:
            deleted = {k: v for k, v in self._items.items() if k not in items}
            changed: dict[str, tuple[T | None, T]] = {}
            for key, obj in items.items():
                old = self._items.get(key)
                if old != obj:
                    changed[key] = (old, obj)
            self._items = dict(items)
            self._indexes = {name: {} for name in self._indexers}
            for key, obj in self._items.items():
                self._reindex(key, None, obj)
            return deleted, changed

    def get(self, key: str) -> T | None:
        # No lock: one dict lookup is atomic (under the GIL) whether the informer is setting
        # or deleting a key in place (upsert, delete) or rebinding `_items` to a new dict (a
        # relist's replace). The lock keeps the indexes consistent with the items, which a
        # single read never sees. Reconcile reads here several times per key.
        return self._items.get(key)

    def values(self) -> list[T]:
        with self._lock:
            return list(self._items.values())

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def by_index(self, index: str, value: str) -> list[T]:
        """The objects whose index function produced `value`."""
        with self._lock:
            return [self._items[k] for k in self._indexes[index].get(value, ())]

    def index_keys(self, index: str, value: str) -> list[str]:
        with self._lock:
            return list(self._indexes[index].get(value, ()))

    def index_values(self, index: str) -> list[str]:
        """Every value `index` currently holds."""
        with self._lock:
            return list(self._indexes[index])

    def _reindex(self, key: str, old: T | None, new: T | None) -> None:
        for name, func in self._indexers.items():
            index = self._indexes[name]
            old_values = set(func(old)) if old is not None else _NONE
            new_values = set(func(new)) if new is not None else _NONE
            if old_values == new_values:  # the common update: the same index values
                continue
            for value in old_values - new_values:
                keys = index[value]
                keys.discard(key)
                if not keys:
                    del index[value]
            for value in new_values - old_values:
                index.setdefault(value, set()).add(key)


class StoresByName(Generic[T]):
    """A read-only view over stores that each hold the objects of one name.

    Secrets are watched one name at a time (a watch with a metadata.name field selector is
    what RBAC's resourceNames can authorize), each by its own informer into its own store;
    the domain reads them as one cache.
    """

    def __init__(self, stores: dict[str, Store[T]]) -> None:
        self._stores = dict(stores)

    def get(self, key: str) -> T | None:
        store = self._stores.get(key.rsplit("/", 1)[-1])
        return store.get(key) if store is not None else None

    def by_index(self, index: str, value: str) -> list[T]:
        return [obj for store in self._stores.values() for obj in store.by_index(index, value)]

    def index_values(self, index: str) -> list[str]:
        return sorted({v for store in self._stores.values() for v in store.index_values(index)})

    def values(self) -> list[T]:
        return [obj for store in self._stores.values() for obj in store.values()]

    def __len__(self) -> int:
        return sum(len(store) for store in self._stores.values())
