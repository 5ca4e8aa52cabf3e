"""Which keys a watch event wakes: pure functions of the event and the caches.

Event handlers only map objects to keys; deciding whether work is needed is reconcile's job.
A key is cheap (a reconcile with nothing to do reads the cache and writes nothing), so these
functions may wake a key that turns out to be in sync, but must never miss one that is not.
A namespace event wakes only the targets whose wanted-ness it flips, decided by the same
predicate the planner uses (`plan.wants`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from configmirror.model import CachedObject, Key, Namespace, source_key, target_key
from configmirror.plan import wants
from configmirror.spec import Scope


def object_keys(old: CachedObject | None, new: CachedObject | None,
                sources_named: Callable[[str], Iterable[CachedObject]]) -> set[Key]:
    """The keys a ConfigMap event wakes: (None, new) added, (old, new) changed or resynced,
    (old, None) deleted.

    - A source (before or after): its source key, which plans its targets.
    - A replica (before or after): its target key, so drift is repaired and an orphan removed.
    - Any object that appears, changes or goes where a same-named source may want a replica:
      its target key (a foreign object blocks a replica; its deletion frees the place).
    """
    keys: set[Key] = set()
    for obj in (old, new):
        if obj is None:
            continue
        if obj.source is not None:
            keys.add(source_key(obj.namespace, obj.name))
        if obj.replica_of is not None or any(
                s.namespace != obj.namespace for s in sources_named(obj.name)):
            keys.add(target_key(obj.namespace, obj.name))
    return keys


def namespace_keys(old: Namespace | None, new: Namespace | None,
                   sources: Iterable[CachedObject], scope: Scope) -> set[Key]:
    """The target keys a namespace event wakes: where a source's wish for a replica flipped.

    A deleted namespace wakes nothing: its objects go with it, and their own delete events
    arrive through the object informer.
    """
    if new is None:
        return set()
    if old is not None and old.labels == new.labels and old.terminating == new.terminating:
        return set()  # nothing targeting depends on has changed
    return {target_key(new.name, s.name) for s in sources
            if (old is not None and wants(s, old, scope)) != wants(s, new, scope)}
