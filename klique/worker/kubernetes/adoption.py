"""After a daemon restart: the pods an earlier daemon with this tag left (``recover``), followed
again for the tasks the control plane hands back and deleted for those the daemon drops
(``adopt``); another pool's, under the same hostname, are left alone."""

import json
import logging

import urllib3
from kubernetes.client.rest import ApiException

from klique.worker.kubernetes.api import API_TIMEOUT_S
from klique.worker.kubernetes.deletes import KILL_GRACE_S, grace_seconds
from klique.worker.kubernetes.pods import POOL, TASK, WORKER, PodSeen, Work, node_count, pod_name, summarise
from klique.worker.runs import StartFailed

log = logging.getLogger("klique.worker")


class Adopting:
    """``recover`` and ``adopt`` of ``KubernetesRunner``: a part of it."""

    def recover(self) -> dict[int, str]:
        """The pods an earlier daemon with this tag left (every namespace when the service account
        may list them, else the default namespace): task id -> the pool label of its pods."""
        selector = f"{WORKER}={self.tag}"
        try:
            listed = self.api.list_pod_for_all_namespaces(
                label_selector=selector, _preload_content=False, _request_timeout=API_TIMEOUT_S
            )
        except ApiException as error:
            if error.status != 403:
                raise
            listed = self.api.list_namespaced_pod(
                self.namespace,
                label_selector=selector,
                _preload_content=False,
                _request_timeout=API_TIMEOUT_S,
            )
        self.recovered = {}
        for pod in json.loads(listed.data)["items"]:
            labels = pod["metadata"].get("labels") or {}
            if labels.get(TASK, "").isdigit():
                self.recovered.setdefault(int(labels[TASK]), []).append(pod)
        return {
            task_id: (pods[0]["metadata"].get("labels") or {}).get(POOL, "")
            for task_id, pods in sorted(self.recovered.items())
        }

    def adopt(self, tasks: list[dict], drop: list[int]) -> None:
        """Follow the pods of ``tasks`` again; delete those of ``drop`` (and nothing else: what
        ``recover`` found of another pool under the same tag is that pool's)."""
        dropped = {int(task_id) for task_id in drop}
        for task in tasks:
            task_id = int(task["id"])
            if task_id in dropped:
                continue
            runtime = task.get("runtime") or {}
            namespace = runtime.get("namespace") or self.namespace
            pods = self.recovered.get(task_id) or self.task_pods(namespace, task_id)
            if pods:
                namespace = pods[0]["metadata"]["namespace"]
            try:
                nodes = node_count(task)
            except StartFailed:
                nodes = max(1, len(pods))
            work = Work(
                task_id,
                namespace,
                {pod_name(task_id, i): PodSeen() for i in range(nodes)},
                self.clock(),
                grace=grace_seconds(runtime),
            )
            work.service = nodes > 1
            for pod in pods:
                if pod["metadata"]["name"] in work.pods:
                    work.pods[pod["metadata"]["name"]] = summarise(pod)
            for seen in work.pods.values():
                seen.deleted = seen.deleted or not seen.uid
            self.works[task_id] = work
            self.follow(namespace)
        for task_id in sorted(dropped & set(self.recovered)):
            pods = self.recovered[task_id]
            namespace = pods[0]["metadata"]["namespace"]
            names = [pod["metadata"]["name"] for pod in pods]
            ids = {pod["metadata"]["name"]: pod["metadata"].get("uid") or "" for pod in pods}
            self.remove(namespace, task_id, names, False, grace=KILL_GRACE_S, uids=ids)
            self.sweep(namespace, task_id)  # its Service, and any pod not seen
            log.info(
                "deleted pods of a task not ours",
                extra={"fields": {"task": task_id, "pods": ",".join(names)}},
            )
        self.recovered = {}

    def task_pods(self, namespace: str, task_id: int) -> list[dict]:
        """The pods of a task in ``namespace`` (for one ``recover`` could not see: a namespace of
        its group, without the right to list pods in every namespace)."""
        try:
            answer = self.api.list_namespaced_pod(
                namespace,
                label_selector=f"{WORKER}={self.tag},{TASK}={task_id}",
                _preload_content=False,
                _request_timeout=API_TIMEOUT_S,
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            return []
        return json.loads(answer.data)["items"]
