"""Which kinds the operator caches, as its flags say (the informers' wiring is tested against
the real API server: tests/integration/test_caches.py)."""

from __future__ import annotations

from configmirror.operator.caches import replicated_kinds
from configmirror.operator.settings import Settings
from configmirror.vocabulary import CONFIGMAP, SECRET
from configmirror_testing.builders import ns


def test_configmaps_alone_are_replicated_and_every_one_watched_without_secret_names() -> None:
    (configmaps,) = replicated_kinds(Settings())
    assert (configmaps.kind, configmaps.names) == (CONFIGMAP, ())
    assert configmaps.scope.honours(ns("src"))


def test_named_secrets_are_replicated_from_their_own_source_namespaces_only() -> None:
    settings = Settings(secret_names=" tls, creds ,", secret_source_namespaces="platform")
    configmaps, secrets = replicated_kinds(settings)
    assert (configmaps.kind, configmaps.names) == (CONFIGMAP, ())
    assert (secrets.kind, secrets.names) == (SECRET, ("tls", "creds"))
    assert secrets.scope.honours(ns("platform")) and not secrets.scope.honours(ns("src"))
    assert configmaps.scope.honours(ns("src"))
