"""Following the pods: one watch per namespace in use (label ``klique.io/worker=<tag>``), resumed
from the last resourceVersion after a drop and listed again when the server answers 410 Gone,
each in a background thread that feeds the queue ``poll`` drains (``apply``); and pod 0's log
tail, read as soon as its container ended."""

import json
import logging
import threading
from dataclasses import dataclass, field

import urllib3
from kubernetes import watch
from kubernetes.client.rest import ApiException

from klique.worker.kubernetes.api import API_TIMEOUT_S, api_message
from klique.worker.kubernetes.pods import CONTAINER, NODE_INDEX, TASK, WORKER, pod_name, summarise

log = logging.getLogger("klique.worker")

TAIL_LINES = 200
KEPT_TAILS = 256


@dataclass
class Watcher:
    namespace: str
    thread: threading.Thread
    stop: threading.Event = field(default_factory=threading.Event)
    stream: watch.Watch | None = None
    healthy: bool = False  # listed, and no error since: what the runner knows of the pods is current


class Watching:
    """The watches and log tails of ``KubernetesRunner`` (its ``api``, ``tag``, ``works``,
    ``events``, ``watchers`` and ``tails``): a part of it."""

    def follow(self, namespace: str) -> None:
        """Watch ``namespace`` (once)."""
        if namespace in self.watchers:
            return
        thread = threading.Thread(
            target=self.watch, args=(namespace,), name=f"klique-watch-{namespace}", daemon=True
        )
        self.watchers[namespace] = Watcher(namespace, thread)
        thread.start()

    def watch(self, namespace: str) -> None:
        """List, then watch from the list's resourceVersion; after a drop resume from the last
        version seen; on 410 Gone list again. Each pod event goes to the queue ``poll`` drains,
        with pod 0's log tail read as soon as its container ended."""
        watcher = self.watchers[namespace]
        selector = f"{WORKER}={self.tag}"
        version, failures, tailed = None, 0, set()
        while not watcher.stop.is_set():
            try:
                if version is None:
                    listed_at = self.clock()
                    answer = self.api.list_namespaced_pod(
                        namespace,
                        label_selector=selector,
                        _preload_content=False,
                        _request_timeout=API_TIMEOUT_S,
                    )
                    listing = json.loads(answer.data)
                    for pod in listing["items"]:
                        self.queue_pod(namespace, "MODIFIED", pod, tailed)
                    names = {pod["metadata"]["name"] for pod in listing["items"]}
                    self.events.put(("listed", namespace, names, None, listed_at))
                    version = listing["metadata"]["resourceVersion"]
                    watcher.healthy = True
                watcher.stream = watch.Watch()
                for event in watcher.stream.stream(
                    self.api.list_namespaced_pod,
                    namespace,
                    label_selector=selector,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=int(self.watch_timeout_s),
                    _request_timeout=(API_TIMEOUT_S, self.watch_timeout_s + API_TIMEOUT_S),
                ):
                    pod = event["raw_object"]
                    version = pod["metadata"].get("resourceVersion") or version
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.queue_pod(namespace, event["type"], pod, tailed)
                    # Healthy only once the event is queued: poll would otherwise judge a pending
                    # timeout on what the runner knew before the outage.
                    watcher.healthy = True
                    if watcher.stop.is_set():
                        return
                failures = 0
            except ApiException as error:
                if watcher.stop.is_set():
                    return
                if error.status == 410:
                    log.info("watch expired; listing again", extra={"fields": {"namespace": namespace}})
                    version = None
                    continue
                failures += 1
                watcher.healthy = False
                log.warning(
                    "watch failed", extra={"fields": {"namespace": namespace, "error": api_message(error)}}
                )
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
                if watcher.stop.is_set():
                    return
                failures += 1
                watcher.healthy = False
                log.warning("watch dropped", extra={"fields": {"namespace": namespace, "error": str(error)}})
            if failures:
                watcher.stop.wait(min(10.0, 0.1 * 2 ** min(failures, 7)))

    def confirm_gone(self, namespace: str, task_id: int, name: str, uid: str) -> None:
        """Tell ``poll`` that the pod ``name`` of ``uid`` is gone, if a list of the task's pods lacks
        it (a list, not a read by name: the Role grants no get on pods)."""
        selector = f"{WORKER}={self.tag},{TASK}={task_id}"
        try:
            answer = self.api.list_namespaced_pod(
                namespace, label_selector=selector, _request_timeout=API_TIMEOUT_S
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            return
        if not any(pod.metadata.uid == uid for pod in answer.items):
            self.events.put(("gone", namespace, (name, uid), None))

    def queue_pod(self, namespace: str, event_type: str, pod: dict, tailed: set) -> None:
        labels = pod["metadata"].get("labels") or {}
        seen = summarise(pod)
        tail = None
        key = (pod["metadata"].get("uid"), seen.exit_code)
        ended = seen.exit_code is not None or seen.deleting
        if labels.get(NODE_INDEX, "0") == "0" and ended and event_type != "DELETED" and key not in tailed:
            tail = self.read_tail(namespace, pod["metadata"]["name"])
            if tail is not None:
                if len(tailed) > 10_000:
                    tailed.clear()
                tailed.add(key)
        self.events.put((event_type, namespace, pod, tail))

    def apply(
        self, what: str, namespace: str, payload, tail: str | None = None, listed_at: float = 0
    ) -> None:
        if what == "listed":
            for work in self.works.values():
                if work.namespace != namespace:
                    continue
                for name, seen in work.pods.items():
                    if name in payload or seen.deleted:
                        continue
                    if work.since <= listed_at:
                        seen.deleted = True
                    else:
                        # Created while the list was on its way: listed before it existed, or
                        # deleted before the list was taken, which no watch event then tells. Ask.
                        self.submit(self.confirm_gone, namespace, work.task_id, name, seen.uid)
            return
        if what == "gone":
            name, uid = payload
            for work in self.works.values():
                seen = work.pods.get(name) if work.namespace == namespace else None
                if seen is not None and seen.uid == uid:
                    seen.deleted = True
            return
        event_type, pod = what, payload
        metadata = pod.get("metadata") or {}
        try:
            task_id = int((metadata.get("labels") or {}).get(TASK, ""))
        except ValueError:
            return
        if tail is not None:
            self.keep_tail(task_id, tail)
        work = self.works.get(task_id)
        name = metadata.get("name")
        if work is None or work.namespace != namespace or name not in work.pods:
            return
        known = work.pods[name]
        if known.uid and metadata.get("uid") != known.uid:
            return  # an earlier pod of the same name
        seen = summarise(pod)
        seen.deleted = event_type == "DELETED"
        if known.exit_code is not None and seen.exit_code is None:
            seen.exit_code = known.exit_code
        work.pods[name] = seen

    def log_tail(self, task_id: int) -> str:
        """The last lines of pod 0's log: read now, else the last read (a deleted pod has none)."""
        work = self.works.get(task_id)
        if work is not None:
            tail = self.read_tail(work.namespace, pod_name(task_id, 0))
            if tail is not None:
                self.keep_tail(task_id, tail)
        return self.tails.get(task_id, "")

    def read_tail(self, namespace: str, name: str) -> str | None:
        try:
            return self.fetch_tail(namespace, name)
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            return None

    def fetch_tail(self, namespace: str, name: str) -> str:
        # Raw: client 36 turns a "str" answer into the repr of its bytes.
        answer = self.api.read_namespaced_pod_log(
            name,
            namespace,
            container=CONTAINER,
            tail_lines=TAIL_LINES,
            _preload_content=False,
            _request_timeout=API_TIMEOUT_S,
        )
        return answer.data.decode(errors="replace")

    def keep_tail(self, task_id: int, tail: str) -> None:
        if not tail and self.tails.get(task_id):
            return  # a read before the output came, or after it was gone
        self.tails[task_id] = tail
        self.tails.move_to_end(task_id)
        while len(self.tails) > KEPT_TAILS:
            self.tails.popitem(last=False)
