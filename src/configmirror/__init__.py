"""configmirror: a Kubernetes operator that keeps ConfigMaps replicated across namespaces."""

__version__ = "0.1.0"
