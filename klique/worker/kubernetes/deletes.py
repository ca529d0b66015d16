"""Deleting what the runner created: a task's pods (each by the uid known of it, with a grace
period, never forced) and its Service, a delete that fails kept and tried again from ``poll``
with a backoff, and the sweep of what a failed start left."""

import json
import logging
import math
from dataclasses import dataclass

import urllib3
from kubernetes.client.rest import ApiException

from klique.worker.kubernetes.api import API_TIMEOUT_S, api_message
from klique.worker.kubernetes.pods import TASK, WORKER

log = logging.getLogger("klique.worker")

# The shortest grace a delete asks for: 0 is a force delete, which forgets the pod at once whether
# or not its kubelet has stopped the container; 1 s has the kubelet SIGKILL it, then remove it.
KILL_GRACE_S = 1
RETRY_MIN_S, RETRY_MAX_S = 0.5, 30.0


@dataclass
class Retry:
    """A delete that failed (the API server unreachable or refusing), tried again from ``poll``.
    ``kind`` "sweep" lists the task's pods and Service carrying this worker's tag and deletes them."""

    kind: str
    namespace: str
    name: str
    task_id: int
    grace: int = KILL_GRACE_S
    uid: str = ""
    failures: int = 0
    due: float = 0.0
    busy: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.namespace, self.name


def grace_seconds(runtime: dict) -> int:
    """The profile's stop grace as whole seconds for a pod (at least ``KILL_GRACE_S``)."""
    try:
        return max(KILL_GRACE_S, math.ceil(float(runtime.get("grace_s"))))
    except (TypeError, ValueError):
        return 30


class Deleting:
    """The deletes of ``KubernetesRunner`` (its ``api``, ``tag``, ``clock``, ``retries`` guarded
    by ``lock``, and ``submit`` to run a call in the background): a part of it."""

    def remove(
        self,
        namespace: str,
        task_id: int,
        names: list[str],
        service: bool,
        *,
        grace: int = KILL_GRACE_S,
        uids: dict[str, str] | None = None,
        reachable: bool = True,
    ) -> None:
        """Delete pods (with ``grace``, each only if it still has the uid known of it) and the
        task's Service. Gone already is fine; a delete that fails is tried again from ``poll`` until
        it succeeds, and once the API server does not answer the rest wait for that too, so one
        call (``API_TIMEOUT_S``) is the most this waits on an unreachable server."""
        retries = [
            Retry("pod", namespace, name, task_id, grace, (uids or {}).get(name, "")) for name in names
        ]
        if service:
            retries.append(Retry("service", namespace, f"klique-{task_id}", task_id, grace))
        for retry in retries:
            if reachable:
                reachable = self.delete(retry) != "unreachable"
            else:
                self.failed(retry, "the API server did not answer")

    def delete(self, retry: Retry) -> str:
        """One delete: "done" (or gone already, or the name is another object's now), "refused"
        or "unreachable" (both kept to retry)."""
        call = self.api.delete_namespaced_pod if retry.kind == "pod" else self.api.delete_namespaced_service
        # The grace goes in the body: a real API server reads a DELETE's options from its body when
        # it has one, and the query's gracePeriodSeconds is then not applied.
        body = {"gracePeriodSeconds": retry.grace}
        if retry.uid:
            body["preconditions"] = {"uid": retry.uid}
        try:
            call(
                retry.name,
                retry.namespace,
                grace_period_seconds=retry.grace,
                body=body,
                _request_timeout=API_TIMEOUT_S,
            )
        except ApiException as error:
            if error.status not in (404, 409):
                self.failed(retry, api_message(error))
                return "refused"
        except (urllib3.exceptions.HTTPError, OSError) as error:
            self.failed(retry, str(error))
            return "unreachable"
        with self.lock:
            known = self.retries.get(retry.key)
            if known is not None and known.grace >= retry.grace:
                del self.retries[retry.key]
        return "done"

    def failed(self, retry: Retry, error: str) -> None:
        """Keep ``retry`` to try again after a backoff (merged with one kept already)."""
        with self.lock:
            kept = self.retries.setdefault(retry.key, retry)
            if kept is not retry:
                kept.grace, kept.uid = min(kept.grace, retry.grace), retry.uid or kept.uid
            kept.failures += 1
            kept.due = self.clock() + min(RETRY_MAX_S, RETRY_MIN_S * 2 ** (kept.failures - 1))
            kept.busy = False
        fields = {"task": retry.task_id, "object": f"{retry.kind}/{retry.name}", "error": error}
        log.warning("delete failed; trying again", extra={"fields": {**fields, "failures": kept.failures}})

    def retry_due(self) -> None:
        """Try the failed deletes whose backoff is over again, in the background."""
        now = self.clock()
        with self.lock:
            due = [retry for retry in self.retries.values() if not retry.busy and retry.due <= now]
            for retry in due:
                retry.busy = True
        for retry in due:
            self.submit(self.try_again, retry)

    def try_again(self, retry: Retry) -> None:
        if retry.kind == "sweep":
            self.sweep(retry.namespace, retry.task_id, retry)
        else:
            self.delete(retry)

    def forget_retries(self, task_id: int) -> None:
        """A new run of ``task_id`` starts here: what an earlier one left is known by uid only."""
        with self.lock:
            for key, retry in list(self.retries.items()):
                if retry.task_id == task_id and not retry.uid:
                    del self.retries[key]

    def sweep(self, namespace: str, task_id: int, retry: Retry | None = None) -> None:
        """Delete the task's pods and Service that carry this worker's tag, each by its uid (never
        by name alone: another worker's object of that name stays); when they cannot be listed,
        try again from ``poll``."""
        retry = retry or Retry("sweep", namespace, str(task_id), task_id, failures=0)
        selector = f"{WORKER}={self.tag},{TASK}={task_id}"
        try:
            found = [
                (kind, item["metadata"])
                for kind, listing in (
                    ("pod", self.api.list_namespaced_pod),
                    ("service", self.api.list_namespaced_service),
                )
                for item in json.loads(
                    listing(
                        namespace,
                        label_selector=selector,
                        _preload_content=False,
                        _request_timeout=API_TIMEOUT_S,
                    ).data
                )["items"]
            ]
        except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            self.failed(retry, f"listing what to delete: {error}")
            return
        with self.lock:
            self.retries.pop(retry.key, None)
        for kind, metadata in found:
            self.delete(
                Retry(kind, namespace, metadata["name"], task_id, KILL_GRACE_S, metadata.get("uid") or "")
            )
        if found:
            fields = {"task": task_id, "deleted": ",".join(metadata["name"] for _, metadata in found)}
            log.info("deleted what a failed start left", extra={"fields": fields})
