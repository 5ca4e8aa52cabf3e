"""Which keys a watch event wakes: pure functions of the event and the caches.

Event handlers only map objects to keys; deciding whether work is needed is reconcile's job.
A key is cheap (a reconcile with nothing to do reads the cache and writes nothing), so these
functions may wake a key that turns out to be in sync, but must never miss one that is not.
A namespace event wakes only the targets whose wanted-ness it flips, decided by the same
predicates the planner uses (`plan.wants`, `plan.honoured`), and the sources that live in it
when whether it may hold sources flips.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from configmirror.replication.model import (
    CachedObject,
    Key,
    Namespace,
    pull_key,
    source_key,
    target_key,
)
from configmirror.replication.plan import honoured, wants
from configmirror.replication.spec import Scope
from configmirror.vocabulary import Kind


def object_keys(kind: Kind, old: CachedObject | None, new: CachedObject | None,
                sources_named: Callable[[str], Iterable[CachedObject]],
                home: bool = True) -> set[Key]:
    """The keys an object event wakes: (None, new) added, (old, new) changed or resynced,
    (old, None) deleted. Objects and keys are of one `kind`.

    - A source (before or after): its source key, which plans its targets.
    - A replica (before or after): its target key, so drift is repaired and an orphan removed.
    - Any object that appears, changes or goes where a same-named source may want a replica:
      its target key (a foreign object blocks a replica; its deletion frees the place).
      In the home cluster (`home`), not in the source's own namespace, which never gets one;
      in a member, a namespace of that name is another namespace.
    """
    keys: set[Key] = set()
    for obj in (old, new):
        if obj is None:
            continue
        if obj.compiled is not None:
            keys.add(source_key(kind, obj.namespace, obj.name))
        if obj.replica_of is not None or any(
                not home or s.namespace != obj.namespace for s in sources_named(obj.name)):
            keys.add(target_key(kind, obj.namespace, obj.name))
    return keys


def resync_keys(kind: Kind, obj: CachedObject,
                get: Callable[[str], CachedObject | None],
                sources_named: Callable[[str], Iterable[CachedObject]],
                home: bool = True) -> set[Key]:
    """The keys a sweep of every cached object wakes for `obj` (the periodic resync, and the
    first list before any worker runs): `object_keys` of (obj, obj), less the target key of a
    replica whose source is cached with a valid spec. The same sweep wakes that source, and
    `plan_source` decides every replica a source has, as its target's reconcile would, and
    wakes each one that needs work. Waking it here as well decided each replica twice per
    sweep (docs/hot-path.md). A replica of a source that is gone, no longer a source, or has
    a typo in its spec (whose plan changes nothing) is still woken itself."""
    keys = object_keys(kind, obj, obj, sources_named, home)
    if obj.compiled is None and obj.replica_of is not None:
        source = get(obj.replica_of)
        if source is not None and source.compiled is not None and \
                source.compiled.invalid is None:
            keys.discard(target_key(kind, obj.namespace, obj.name))
    return keys


def namespace_keys(kind: Kind, old: Namespace | None, new: Namespace | None,
                   sources: Iterable[CachedObject],
                   home_of: Callable[[str], Namespace | None], scope: Scope) -> set[Key]:
    """The keys a namespace event wakes among the sources of one `kind`.

    - Sources that live in it, when it appears or whether it may hold sources flips (in the
      home cluster: `scope.home`; a member's namespaces hold none).
    - Targets in it of the other honoured sources, where their wish for a replica flipped
      (by its name, its labels, or what it pulls).
    - Its pull key, when it pulls anything (or did), to say which pulls get nothing.
    A deleted namespace wakes nothing: its objects go with it, and their own delete events
    arrive through the object informer.
    """
    if new is None:
        return set()
    if old is not None and old.labels == new.labels and old.terminating == new.terminating \
            and old.pulls == new.pulls:
        return set()  # nothing targeting depends on has changed
    keys: set[Key] = set()
    if new.pulls or (old is not None and old.pulls):
        keys.add(pull_key(kind, new.name))
    for source in sources:
        if scope.home and source.namespace == new.name:
            if old is None or scope.honours(old) != scope.honours(new):
                keys.add(source_key(kind, source.namespace, source.name))
        elif ((old is not None and wants(source, old, scope)) != wants(source, new, scope)
              and honoured(source, home_of(source.namespace), scope)):
            keys.add(target_key(kind, new.name, source.name))
    return keys
