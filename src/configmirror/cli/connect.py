"""The commands' connection to the API server, through the kubeconfig (or a pod's account)."""

from __future__ import annotations

from configmirror import __version__
from configmirror.cli.flags import UsageError
from configmirror.client.kube import ApiError, Kube, load_configuration
from configmirror.operator.settings import Settings


def connect(settings: Settings, pool_size: int, limited: bool = True) -> Kube:
    """A client of the cluster `settings` name, checked to answer (or a UsageError saying it
    does not); `limited`: under --kube-api-qps and --kube-api-burst."""
    configuration = load_configuration(settings.kubeconfig, settings.context, pool_size)
    kube = Kube(configuration, user_agent=f"configmirror/{__version__}",
                qps=settings.kube_api_qps if limited else 0.0, burst=settings.kube_api_burst)
    try:
        kube.request("get", "/version", timeout=10)
    except ApiError as err:
        kube.close()
        raise UsageError(f"cannot reach the API server at {configuration.host}: "
                         f"{err.message}") from None
    return kube
