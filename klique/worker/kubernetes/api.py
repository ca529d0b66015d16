"""Talking to the Kubernetes API server: the client (in-cluster service account or a kubeconfig),
how long one call may wait, and what a failed call says."""

import json
from pathlib import Path

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

# One API call made on the daemon's thread waits at most this long (connect and answer together),
# well within the control plane's heartbeat timeout (30 s).
API_TIMEOUT_S = 10


def timed_out(error: Exception) -> bool:
    """A call that waited its whole timeout (the API server slow or unreachable)."""
    reason = error.reason if isinstance(error, urllib3.exceptions.MaxRetryError) else error
    return isinstance(reason, (urllib3.exceptions.TimeoutError, TimeoutError))


def api_client(kubeconfig: str = "", context: str = "") -> client.ApiClient:
    """A client from the kubeconfig (and context), or the in-cluster service account."""
    if kubeconfig or context or not _in_cluster():
        return config.new_client_from_config(config_file=kubeconfig or None, context=context or None)
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)


def _in_cluster() -> bool:
    return Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()


def api_message(error: ApiException) -> str:
    try:
        return json.loads(error.body).get("message") or str(error.reason)
    except (TypeError, ValueError, AttributeError):
        return f"{error.status} {error.reason}"
