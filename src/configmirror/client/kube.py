"""Talking to the API server: client configuration, raw JSON requests, watch streams.

The official client loads kubeconfig/in-cluster credentials; `load_configuration` then refuses,
at start and naming the kubeconfig field, anything in them that cannot be honoured (see
`transport` for the wire and its TLS settings). Requests carry raw JSON bodies (no model
objects, which cost about 9x a json.loads on large lists), encoded and decoded by orjson (a
twentieth of json.dumps's CPU for a replica's body, a third of json.loads's for a watch event
or a write's answer), over `transport`'s keep-alive connections. Every request has a
timeout, is counted by verb and code, and passes one client-side rate limit shared by the
whole process (kube-controller-manager's --kube-api-qps/--kube-api-burst). A 429 or 5xx
that carries Retry-After (API Priority and Fairness) is retried after that long, as
client-go does. What a failure means is decided
here, once (`ApiError.failure`); what to do about it is the caller's policy.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any, cast
from urllib.parse import urlencode

import orjson
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.kube_config import (
    ENV_KUBECONFIG_PATH_SEPARATOR,
    ConfigNode,
    KubeConfigMerger,
)

from configmirror.client.tokenbucket import TokenBucketRateLimiter
from configmirror.client.transport import (
    CONNECT_TIMEOUT,
    Connections,
    Stream,
    UnsupportedSetting,
    endpoint,
)
from configmirror.clock import Clock, RealClock

__all__ = ["AUTH_REFRESH", "CONNECT_TIMEOUT", "NAMESPACES", "REQUEST_TIMEOUT",
           "RETRY_AFTER_ATTEMPTS", "RETRY_AFTER_MAX", "ApiError", "ConfigError", "Failure",
           "Kube", "WatchSilent", "WatchStream", "classify",
           "load_configuration", "resource_of"]

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 30.0
RETRY_AFTER_ATTEMPTS = 3     # client-go retries up to 10; a worker should not sit on one call
RETRY_AFTER_MAX = 10.0       # seconds: a longer Retry-After is the caller's to wait, not ours
# Seconds a credential header is reused before the client's loader is asked again. Asking it
# runs its refresh hook, which re-reads the proxy settings of the whole environment: about a
# millisecond, a third of the CPU a replica write cost. The loaders renew a token minutes
# before it expires (in-cluster: the file is re-read every minute), so a second is safe.
AUTH_REFRESH = 1.0


NAMESPACES = "/api/v1/namespaces"


class Failure(Enum):
    """What a failed request says, whoever made it."""

    UNAVAILABLE = "unavailable"  # no answer, 429, 5xx: the server's state, not the object's
    CONFLICT = "conflict"        # 409: our view was stale; a retry sees the new state
    NOT_FOUND = "not found"      # 404: the object (or its namespace) is gone
    REJECTED = "rejected"        # any other 4xx: forbidden, invalid, too large: the object's
                                 # or the permission's fault, no retry fixes it


class ConfigError(Exception):
    """No usable cluster configuration (message says which file/context and why)."""


class ApiError(Exception):
    """A request failed: an HTTP status from the apiserver, or status 0 for no answer at all."""

    def __init__(self, status: int, reason: str, message: str, verb: str, path: str,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{verb} {path}: {status} {reason}: {message}")
        self.verb = verb
        self.path = path
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after  # seconds the server asked us to wait, if it did

    @property
    def failure(self) -> Failure:
        return classify(self.status)

    @property
    def namespace_terminating(self) -> bool:
        return self.status == 403 and "being terminated" in self.message


def load_configuration(kubeconfig: str | None = None, context: str | None = None,
                       pool_size: int = 16) -> k8s_client.Configuration:
    """The cluster configuration, found where client-go and controller-runtime look for it:
    `kubeconfig` (--kubeconfig), else the files $KUBECONFIG lists, else in a pod the
    in-cluster configuration, else ~/.kube/config. `context` picks a context of whichever
    kubeconfig that is; as in controller-runtime, naming one skips the in-cluster step (a
    pod's own configuration has no contexts).

    Raises ConfigError, naming the file, the context and the field, for a configuration that
    cannot be loaded or says something this client cannot honour. Logs one warning when it
    turns TLS verification off.
    """
    configuration = k8s_client.Configuration()
    selected: _Selected | None = None
    found = _kubeconfig(kubeconfig, context)
    if found is None:
        where = "the in-cluster configuration"
        try:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration)
        except (k8s_config.ConfigException, OSError, TypeError, ValueError) as err:
            raise ConfigError(f"cannot load {where}: {err}") from None
    else:
        paths, named = found
        where = f"{named}{f' (context {context})' if context else ''}"
        try:
            config = _merged(paths, named)
            selected = _select(config, context, named)
            where = f"{named} (context {selected.context})"
            _refuse_unsupported(selected, where)
            # From the merged dict, which the official loader never writes back to a file.
            k8s_config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
                config_dict=config, context=selected.context,
                client_configuration=configuration)
        except (k8s_config.ConfigException, OSError, TypeError, ValueError) as err:
            raise ConfigError(f"cannot load cluster configuration from {where}: {err}") from None
        if "exec" in selected.user and not (configuration.api_key or configuration.cert_file):
            raise ConfigError(f"{where}: user {selected.user_name}: the exec plugin gave no "
                              "credential (its error is logged above)")
    return _checked(configuration, selected, where, pool_size)


def configuration_from_text(text: str, where: str, pool_size: int = 16
                            ) -> k8s_client.Configuration:
    """The configuration of a kubeconfig held as text (a member cluster's Secret), its
    current context or its one context; never written to a file. Raises ConfigError naming
    `where` and the field, as load_configuration does."""
    configuration = k8s_client.Configuration()
    try:
        doc = yaml.safe_load(text)
        if not isinstance(doc, dict):
            raise k8s_config.ConfigException("not a kubeconfig (a YAML mapping)")
        contexts = [c.get("name") for c in doc.get("contexts") or () if isinstance(c, dict)]
        context = None if doc.get("current-context") or len(contexts) != 1 else contexts[0]
        selected = _select(ConfigNode(where, doc), context, where)  # type: ignore[no-untyped-call]
        where = f"{where} (context {selected.context})"
        _refuse_unsupported(selected, where)
        k8s_config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
            config_dict=doc, context=selected.context, client_configuration=configuration)
    except (k8s_config.ConfigException, yaml.YAMLError, OSError, TypeError, ValueError,
            AttributeError) as err:
        raise ConfigError(f"cannot load {where}: {err}") from None
    return _checked(configuration, selected, where, pool_size)


def _checked(configuration: k8s_client.Configuration, selected: _Selected | None, where: str,
             pool_size: int) -> k8s_client.Configuration:
    """`configuration` once this client can honour it (ConfigError naming the field)."""
    try:
        target = endpoint(configuration)
    except UnsupportedSetting as err:
        field = _field(err.setting, selected)
        raise ConfigError(f"{where}: {field}: {err}") from None
    if target.tls is not None and not target.verifies_tls:
        log.warning("TLS verification is off for cluster %s, as %s says "
                    "(insecure-skip-tls-verify): the server's identity is not checked",
                    selected.cluster_name if selected else configuration.host, where)
    configuration.connection_pool_maxsize = pool_size
    return configuration


@dataclass(frozen=True)
class _Selected:
    """The context a kubeconfig load uses, and its cluster's and user's fields."""

    context: str
    cluster_name: str
    cluster: dict[str, Any]
    user_name: str
    user: dict[str, Any]


def _select(config: Any, context: str | None, named: str) -> _Selected:
    """Which context, cluster and user a kubeconfig load uses, read as the official loader
    reads them; raises its ConfigException, naming a context the files do not have."""
    name = context or config.safe_get("current-context")
    if not name:
        raise k8s_config.ConfigException("no context given and no current-context set")
    contexts = [str(c["name"]) for c in config.safe_get("contexts") or ()]
    if name not in contexts:
        raise k8s_config.ConfigException(
            f"context {name!r} is not in {named} (its contexts: {', '.join(contexts) or 'none'})")
    chosen = config["contexts"].get_with_name(name)["context"]
    cluster_name = str(chosen.safe_get("cluster") or "")
    user_name = str(chosen.safe_get("user") or "")
    cluster = config["clusters"].get_with_name(cluster_name, safe=True)
    user = config["users"].get_with_name(user_name, safe=True) if user_name else None
    return _Selected(str(name), cluster_name,
                     dict((cluster.safe_get("cluster") or {}) if cluster else {}), user_name,
                     dict((user.safe_get("user") or {}) if user else {}))


def _kubeconfig(kubeconfig: str | None, context: str | None) -> tuple[list[str], str] | None:
    """The kubeconfig files to merge, in order, and how to name them in an error; None for
    the in-cluster configuration. Read from the environment at each call, not at import."""
    if kubeconfig:
        return [os.path.expanduser(kubeconfig)], kubeconfig
    listed = os.environ.get("KUBECONFIG", "")
    if listed:
        paths = [os.path.expanduser(p) for p in listed.split(ENV_KUBECONFIG_PATH_SEPARATOR) if p]
        return paths, f"$KUBECONFIG ({listed})"
    if context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    return [os.path.expanduser(_HOME_KUBECONFIG)], _HOME_KUBECONFIG


_HOME_KUBECONFIG = "~/.kube/config"


def _merged(paths: list[str], named: str) -> Any:
    """The files merged as client-go merges them: the first file that names a cluster, user
    or context, or sets current-context, wins; files that do not exist are skipped (all of
    them missing is an error). The official merger lets the last current-context win, so
    it is set again from the first file that has one."""
    existing = [p for p in paths if os.path.exists(p)]
    if not existing:
        raise k8s_config.ConfigException(
            "no such file (and no --kubeconfig, no $KUBECONFIG, not in a pod)"
            if named == _HOME_KUBECONFIG else "no such file" if len(paths) == 1
            else "none of its files exists")
    merger = KubeConfigMerger("")  # type: ignore[no-untyped-call]
    for path in existing:  # one at a time: a path may hold the list separator
        merger.load_config(path)  # type: ignore[no-untyped-call]
    current = next((c for p in existing
                    if (c := (merger.config_files.get(p) or {}).get("current-context"))), None)
    if current:
        merger.config.value["current-context"] = current
    return merger.config


# What a kubeconfig user may say that the official client's loader ignores (so would we).
_IGNORED_BY_THE_LOADER = {
    "as": "impersonation", "as-uid": "impersonation", "as-groups": "impersonation",
    "as-user-extra": "impersonation"}
_AUTH_PROVIDERS = ("azure", "gcp", "oidc")  # those the official client's loader knows


def _refuse_unsupported(selected: _Selected, where: str) -> None:
    user = f"user {selected.user_name}"
    for key, what in _IGNORED_BY_THE_LOADER.items():
        if key in selected.user:
            raise ConfigError(f"{where}: {user}: `{key}` ({what}) is not supported; use a "
                              "kubeconfig with that identity's own credentials")
    provider = selected.user.get("auth-provider")
    if isinstance(provider, dict) and provider.get("name") not in _AUTH_PROVIDERS:
        raise ConfigError(f"{where}: {user}: auth-provider {provider.get('name')!r} is not "
                          f"supported ({', '.join(_AUTH_PROVIDERS)} are; or use exec)")
    authority = selected.cluster.get("certificate-authority")
    if authority and "certificate-authority-data" not in selected.cluster and \
            os.path.isdir(os.path.expanduser(str(authority))):
        raise ConfigError(f"{where}: cluster {selected.cluster_name}: certificate-authority "
                          f"{authority} is a directory; name the CA file (kubectl and "
                          "client-go read a file too)")


def _field(setting: str, selected: _Selected | None) -> str:
    """The kubeconfig field (or in-cluster file) behind a Configuration setting."""
    if selected is None:
        return {"ssl_ca_cert": "the service account's ca.crt"}.get(setting, setting)
    cluster, user = selected.cluster, selected.user

    def given(name: str) -> str:
        return f"{name}-data" if f"{name}-data" in cluster or f"{name}-data" in user else name

    return {
        "host": f"cluster {selected.cluster_name}: server",
        "ssl_ca_cert": f"cluster {selected.cluster_name}: {given('certificate-authority')}",
        "ca_cert_data": f"cluster {selected.cluster_name}: certificate-authority-data",
        "cert_file": f"user {selected.user_name}: {given('client-certificate')}",
        "key_file": f"user {selected.user_name}: {given('client-key')}",
        "proxy": f"cluster {selected.cluster_name}: proxy-url" if "proxy-url" in cluster
        else "the proxy from the environment (HTTPS_PROXY, HTTP_PROXY or ALL_PROXY)",
    }.get(setting, setting)


def classify(status: int) -> Failure:
    """The one place that decides what an HTTP status (0: no answer) means."""
    if status in {0, 429} or status >= 500:
        return Failure.UNAVAILABLE
    if status == 409:
        return Failure.CONFLICT
    if status == 404:
        return Failure.NOT_FOUND
    return Failure.REJECTED


class Kube:
    """Raw JSON access to one API server, with timeouts, a rate limit and request counters.

    `qps` <= 0 turns the client-side limit off (the server's own limits still apply).
    """

    def __init__(self, configuration: k8s_client.Configuration,
                 user_agent: str = "configmirror", qps: float = 0.0, burst: int = 1,
                 clock: Clock | None = None) -> None:
        self.configuration = configuration
        try:
            target = endpoint(configuration)
        except UnsupportedSetting as err:
            raise ConfigError(f"cluster {configuration.host}: {err.setting}: {err}") from None
        self._connections = Connections(target, configuration.connection_pool_maxsize)
        self._user_agent = user_agent
        self._clock: Clock = clock or RealClock()
        self._limiter = TokenBucketRateLimiter(qps, max(burst, 1), self._clock) \
            if qps > 0 else None
        self._closing = threading.Event()  # set by close(): no more waiting
        self._closed = threading.Condition()  # notified by close(): ends a wait at once
        self._counts: Counter[tuple[str, str, int]] = Counter()
        self._custom: frozenset[str] = frozenset()  # count_custom
        self._lock = threading.Lock()
        # (when it was read, the credential headers): replaced whole, so no lock is needed.
        self._auth: tuple[float, dict[str, str]] | None = None

    def close(self) -> None:
        with self._closed:
            self._closing.set()
            self._closed.notify_all()
        self._connections.close()

    # -- requests -----------------------------------------------------------------------------

    def request(self, verb: str, path: str, query: dict[str, Any] | None = None,
                body: Any = None, timeout: float = REQUEST_TIMEOUT,
                content_type: str = "application/json") -> dict[str, Any]:
        """One request; returns the decoded JSON body or raises ApiError.

        The body of a failed request is never part of the error: only the server's reason and
        message (which the server writes; it does not echo Secret values).
        """
        method = _METHODS[verb]
        target = _target(path, query)
        data = None if body is None else _encode(body)
        for attempt in range(1, RETRY_AFTER_ATTEMPTS + 1):
            self._wait_for_turn()
            try:
                resp = self._connections.request(
                    method, target, data,
                    self._headers(content_type if data is not None else None), timeout)
            except (OSError, http.client.HTTPException) as err:
                self._count(verb, path, 0)
                raise ApiError(0, "ConnectionError", str(err) or type(err).__name__, verb,
                               path) from None
            self._count(verb, path, resp.status)
            if resp.status < 400:
                return _decode(resp.data)
            decoded = _decode(resp.data)
            error = ApiError(resp.status, str(decoded.get("reason", resp.reason)),
                             str(decoded.get("message", "")), verb, path,
                             _retry_after(resp.retry_after))
            # The server said when to come back (APF's 429, an overloaded 5xx): the request
            # was not processed, so any verb may be sent again.
            if (error.retry_after is None or error.failure is not Failure.UNAVAILABLE
                    or attempt == RETRY_AFTER_ATTEMPTS or error.retry_after > RETRY_AFTER_MAX):
                raise error
            if self._wait_out(error.retry_after):
                raise error
        raise AssertionError("unreachable")  # the loop returns or raises

    def watch(self, path: str, query: dict[str, Any], read_timeout: float,
              reuse: float | None = None) -> WatchStream:
        """Open a watch stream; the caller iterates its events and closes it. `read_timeout`
        bounds each wait for the server's next byte. With `reuse`, an idle pooled connection
        is tried first, given that many seconds to answer (transport.Connections.stream)."""
        target = _target(path, {**query, "watch": "true"})
        self._wait_for_turn()
        try:
            stream = self._connections.stream("GET", target, self._headers(None),
                                              min(read_timeout, REQUEST_TIMEOUT), reuse)
        except (OSError, http.client.HTTPException) as err:
            self._count("watch", path, 0)
            raise ApiError(0, "ConnectionError", str(err) or type(err).__name__, "watch",
                           path) from None
        self._count("watch", path, stream.status)
        if stream.status >= 400:
            try:
                decoded = _decode(stream.read_all(REQUEST_TIMEOUT))
            except (OSError, http.client.HTTPException):
                decoded = {}
            finally:
                stream.close()
            raise ApiError(stream.status, str(decoded.get("reason", stream.reason)),
                           str(decoded.get("message", "")), "watch", path,
                           _retry_after(stream.retry_after))
        return WatchStream(stream, read_timeout, path)

    def discard_idle_connections(self) -> int:
        """Close the idle pooled connections (one of their kind was found silent)."""
        return self._connections.discard_idle()

    # -- counters -----------------------------------------------------------------------------

    def counts(self) -> dict[tuple[str, str, int], int]:
        """Requests so far by (verb, resource, status); status 0 means no answer."""
        with self._lock:
            return dict(self._counts)

    def total(self, verbs: frozenset[str] | set[str], resource: str | None = None) -> int:
        """How many requests with one of `verbs` (optionally to `resource`) were sent."""
        with self._lock:
            return sum(n for (verb, res, _), n in self._counts.items()
                       if verb in verbs and (resource is None or res == resource))

    # -- internals ----------------------------------------------------------------------------

    def _wait_for_turn(self) -> None:
        """Block until the client-side rate limit lets one more request through."""
        if self._limiter is not None:
            delay = self._limiter.when(None)
            if delay > 0:
                self._wait_out(delay)

    def _wait_out(self, seconds: float) -> bool:
        """Wait `seconds` of the clock; True when close() cut the wait short."""
        until = self._clock.now() + seconds
        with self._closed:
            while not self._closing.is_set() and self._clock.now() < until:
                self._clock.wait(self._closed, until, None)
        return self._closing.is_set()

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self._user_agent,
                   **self._credentials()}
        if content_type is not None:
            headers["Content-Type"] = content_type
        return headers

    def use_token(self, token: str) -> None:
        """Send this bearer token from the next request on (a renewed member token). The
        kubeconfig loader's refresh hook goes: it would put the loaded token back."""
        self.configuration.refresh_api_key_hook = None
        self.configuration.api_key["BearerToken"] = f"Bearer {token}"
        self.configuration.api_key_prefix.pop("BearerToken", None)
        self._auth = None

    def _credentials(self) -> dict[str, str]:
        """The credential headers, read from the client's configuration at most once per
        AUTH_REFRESH seconds (reading them refreshes an expiring token)."""
        now = self._clock.now()
        cached = self._auth
        if cached is not None and now - cached[0] < AUTH_REFRESH:
            return cached[1]
        headers = {}
        for auth in self.configuration.auth_settings().values():
            setting = cast(dict[str, str], auth)
            if setting["in"] == "header" and setting["value"]:
                headers[setting["key"]] = setting["value"]
        self._auth = (now, headers)
        return headers

    def _count(self, verb: str, path: str, status: int) -> None:
        with self._lock:
            self._counts[(verb, resource_of(path, self._custom), status)] += 1

    def count_custom(self, plurals: frozenset[str]) -> None:
        """Count requests on these custom resources (the plurals discovery resolved at
        start) under their own names."""
        self._custom = frozenset(plurals)


class WatchSilent(Exception):
    """No byte came on a watch within the time asked; the stream can be read on."""


class WatchStream:
    """The events of one watch response, one decoded JSON object per line. A failure while
    reading (a broken connection; when iterated, no byte for the read timeout) raises
    ApiError status 0."""

    def __init__(self, stream: Stream, read_timeout: float, path: str) -> None:
        self._stream = stream
        self._read_timeout = read_timeout
        self._path = path
        self._buffer = b""
        self.connection = stream.connection  # local -> remote address, for log lines

    def next_event(self, timeout: float) -> dict[str, Any] | None:
        """The next event, or None at the end of the stream; raises WatchSilent when no byte
        came for `timeout` seconds."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line, self._buffer = self._buffer[:end], self._buffer[end + 1:]
                if line.strip():
                    return cast(dict[str, Any], orjson.loads(line))
                continue
            try:
                chunk = self._stream.read(timeout)
            except TimeoutError:
                raise WatchSilent(f"watch {self._path}: no byte for {timeout:g} s") from None
            except (OSError, http.client.HTTPException) as err:
                raise ApiError(0, "ConnectionError", str(err) or type(err).__name__, "watch",
                               self._path) from None
            if not chunk:
                rest, self._buffer = self._buffer, b""
                return cast(dict[str, Any], orjson.loads(rest)) if rest.strip() else None
            if not self._buffer and chunk[:1] == b"{" and chunk.find(b"\n") == len(chunk) - 1:
                # One whole event, as the server sends each (a chunk of its own): no copy.
                return cast(dict[str, Any], orjson.loads(chunk))
            self._buffer += chunk

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            try:
                event = self.next_event(self._read_timeout)
            except WatchSilent as err:
                raise ApiError(0, "ConnectionError", str(err), "watch", self._path) from None
            if event is None:
                return
            yield event

    def close(self) -> None:
        """End the stream; safe from another thread, where it also unblocks a pending read."""
        self._stream.close()


def _target(path: str, query: dict[str, Any] | None) -> str:
    """The request target: the path and its query (None values left out)."""
    if not query:
        return path
    return f"{path}?{urlencode({k: v for k, v in query.items() if v is not None})}"


_METHODS = {"get": "GET", "list": "GET", "create": "POST", "update": "PUT", "patch": "PATCH",
            "delete": "DELETE"}


def resource_of(path: str, custom: frozenset[str] = frozenset()) -> str:
    """The resource a path names: /api/v1/namespaces/a/configmaps/b -> configmaps. `custom`:
    the plurals of the custom resources replicated (discovered at start), which a path
    under /apis/GROUP/VERSION/namespaces/NS/ names as well; a label takes no other name
    from a path, so its values stay as few as the kinds started with."""
    parts = [p for p in path.split("/") if p]
    if custom and len(parts) >= 4 and parts[0] == "apis":
        named = parts[5] if parts[3] == "namespaces" and len(parts) >= 6 else parts[3]
        if named in custom:
            return named
    if len(parts) >= 2 and parts[-2] == "namespaces" and len(parts) % 2 == 0:
        return "namespaces"
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in _RESOURCES:
            return parts[i]
    return parts[-1] if parts else ""


_RESOURCES = frozenset({"configmaps", "namespaces", "events", "leases", "secrets",
                        "serviceaccounts", "networkpolicies", "limitranges", "resourcequotas",
                        "roles", "rolebindings"})


def _retry_after(header: str | None) -> float | None:
    """Retry-After in seconds (the API server sends whole seconds; dates are not used)."""
    if header is None:
        return None
    try:
        return max(float(header), 0.0)
    except ValueError:
        return None


def _encode(body: Any) -> bytes:
    """A request body as compact JSON."""
    try:
        return orjson.dumps(body)
    except TypeError:  # what orjson does not take (an int past 64 bits, a Mapping that is no
        return json.dumps(body, separators=(",", ":")).encode()  # dict): json.dumps's rules


def _decode(data: bytes) -> dict[str, Any]:
    if not data:
        return {}
    try:
        decoded = orjson.loads(data)
    except ValueError:
        return {"message": data[:200].decode(errors="replace")}
    return decoded if isinstance(decoded, dict) else {"items": decoded}
