"""A small in-memory Kubernetes API server over real HTTP, for developing and testing the worker's
Kubernetes mode where no real kube-apiserver can be installed.

It speaks the real Kubernetes JSON shapes for exactly what the official ``kubernetes`` client calls
in ``klique.worker.kubernetes`` and what a kubelet calls in ``tests/worker/k8s.py``:

- core/v1 namespaces (create, get, list; a namespace a pod names exists on its own), pods (create,
  get, list and watch with labelSelector, delete with gracePeriodSeconds and a uid precondition),
  pods/status (PUT, PATCH: what a kubelet writes), pods/binding, pods/log (tailLines), services
  (create, get, list, delete);
- deletion as a real API server does it: a pod bound to a node and not yet ended, deleted with a
  grace period above 0, gets ``metadata.deletionTimestamp`` and ``deletionGracePeriodSeconds`` and
  stays until its kubelet deletes it with grace 0 (a later delete may only shorten the grace); any
  other pod goes at once; a delete whose ``preconditions.uid`` names another object is 409 Conflict;
- watches: chunked newline-delimited events (ADDED, MODIFIED, DELETED, BOOKMARK when asked), from
  a resourceVersion, ``timeoutSeconds``; a version older than the kept history gets the ERROR event
  with the 410 "too old resource version" Status, as the watch cache answers;
- one resourceVersion counter across all objects; Status objects for errors (404 NotFound, 409
  AlreadyExists, 422 Invalid, 400 BadRequest).

What is not a Kubernetes endpoint lives under ``/klique-dev/`` (for tests and demos):
``PUT /klique-dev/namespaces/<ns>/pods/<name>/log`` sets the text pods/log serves (a kubelet's
container output), ``POST /klique-dev/drop-watches`` cuts every open watch connection mid-stream,
``POST /klique-dev/refuse-watches`` (body ``{"refuse": true|false}``) answers new watches with 503,
``POST /klique-dev/compact`` forgets the event history (a resume from before now gets 410).

No authentication, no admission, no scheduler, no controllers: run it with
``python deploy/k8s-dev/apiserver.py --port 8001`` and point a kubeconfig at ``http://127.0.0.1:8001``.
"""

import argparse
import copy
import json
import re
import socket
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_KEY_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
HISTORY = 10_000
TERMINAL = {"Succeeded", "Failed"}


def truthy(value) -> bool:
    """A boolean query parameter (the Python client sends ``True``)."""
    return str(value).lower() in ("true", "1")


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def not_found(kind: str, name: str) -> ApiError:
    plural = {"pods": "pods", "services": "services", "namespaces": "namespaces"}[kind]
    return ApiError(404, "NotFound", f'{plural} "{name}" not found', {"name": name, "kind": plural})


def invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    text = ", ".join(f"{field}: {message}" for field, message in causes)
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {text}',
        {
            "name": name,
            "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes],
        },
    )


# Label selectors: equality (``a=b``, ``a==b``, ``a!=b``), set (``a in (x,y)``, ``a notin (x)``) and
# existence (``a``, ``!a``) requirements, comma-separated.


def parse_selector(text: str) -> list[tuple[str, str, set[str]]]:
    requirements, depth, current = [], 0, ""
    for char in text or "":
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            requirements.append(current)
            current = ""
        else:
            current += char
    requirements.append(current)
    parsed = []
    for requirement in (part.strip() for part in requirements):
        if not requirement:
            continue
        match = re.match(r"^(\S+)\s+(in|notin)\s+\((.*)\)$", requirement)
        if match:
            values = {value.strip() for value in match.group(3).split(",") if value.strip()}
            parsed.append((match.group(1), match.group(2), values))
        elif "!=" in requirement:
            key, value = requirement.split("!=", 1)
            parsed.append((key.strip(), "notin", {value.strip()}))
        elif "=" in requirement:
            key, value = re.split("==?", requirement, maxsplit=1)
            parsed.append((key.strip(), "in", {value.strip()}))
        elif requirement.startswith("!"):
            parsed.append((requirement[1:].strip(), "!exists", set()))
        else:
            parsed.append((requirement, "exists", set()))
    for key, _, _ in parsed:
        if not LABEL_KEY_NAME.match(key.rsplit("/", 1)[-1]):
            raise ApiError(400, "BadRequest", f"unable to parse requirement: invalid label key {key!r}")
    return parsed


def selects(requirements, labels: dict) -> bool:
    for key, operator, values in requirements:
        present = key in labels
        if operator == "in" and not (present and labels[key] in values):
            return False
        if operator == "notin" and present and labels[key] in values:
            return False
        if operator == "exists" and not present:
            return False
        if operator == "!exists" and present:
            return False
    return True


def merge(target: dict, patch: dict, strategic: bool) -> dict:
    """A JSON merge patch (RFC 7386); ``strategic`` also merges ``conditions`` by type and
    ``containerStatuses`` by name, as the strategic merge patch of a pod's status does."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value, strategic)
        elif strategic and key in ("conditions", "containerStatuses") and isinstance(value, list):
            merge_key = "type" if key == "conditions" else "name"
            merged = {item.get(merge_key): item for item in target.get(key) or []}
            for item in value:
                merged[item.get(merge_key)] = {**merged.get(item.get(merge_key), {}), **item}
            target[key] = list(merged.values())
        else:
            target[key] = copy.deepcopy(value)
    return target


class Store:
    """The objects, the resourceVersion counter and the event history that watches read."""

    def __init__(self, history: int = HISTORY):
        self.lock = threading.Condition()
        self.version = 0
        self.objects: dict[str, dict[tuple[str, str], dict]] = {"pods": {}, "services": {}, "namespaces": {}}
        self.logs: dict[tuple[str, str], str] = {}
        self.events: list[tuple[int, str, str, dict]] = []  # (version, kind, type, object)
        self.oldest = 1  # the oldest version a watch can resume after, less one
        self.history = history
        self.drops = 0
        self.refuse_watches = False

    def bump(self) -> str:
        self.version += 1
        return str(self.version)

    def record(self, kind: str, event_type: str, obj: dict) -> None:
        self.events.append((int(obj["metadata"]["resourceVersion"]), kind, event_type, copy.deepcopy(obj)))
        if len(self.events) > self.history:
            dropped = self.events[: len(self.events) - self.history]
            self.events = self.events[len(dropped) :]
            self.oldest = dropped[-1][0] + 1
        self.lock.notify_all()

    def compact(self) -> None:
        with self.lock:
            self.events = []
            self.oldest = self.version + 1

    def ensure_namespace(self, namespace: str) -> None:
        if not DNS_LABEL.match(namespace) or len(namespace) > 63:
            raise invalid("Namespace", namespace, [("metadata.name", "a lowercase RFC 1123 label")])
        if ("", namespace) not in self.objects["namespaces"]:
            self.create("namespaces", "", {"metadata": {"name": namespace}})

    def create(self, kind: str, namespace: str, body: dict) -> dict:
        obj = copy.deepcopy(body)
        metadata = obj.setdefault("metadata", {})
        name = metadata.get("name") or ""
        if not name and metadata.get("generateName"):
            name = metadata["generateName"] + uuid.uuid4().hex[:5]
        self.validate(kind, name, obj)
        if namespace:
            self.ensure_namespace(namespace)
        if (namespace, name) in self.objects[kind]:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{kind} "{name}" already exists',
                {"name": name, "kind": kind},
            )
        metadata.update(
            name=name,
            uid=str(uuid.uuid4()),
            creationTimestamp=now_text(),
            resourceVersion=self.bump(),
        )
        if namespace:
            metadata["namespace"] = namespace
        metadata.pop("deletionTimestamp", None)
        if kind == "pods":
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            obj["spec"].setdefault("restartPolicy", "Always")
            obj["spec"].setdefault("terminationGracePeriodSeconds", 30)
        elif kind == "namespaces":
            obj["status"] = {"phase": "Active"}
        elif kind == "services":
            obj.setdefault("status", {"loadBalancer": {}})
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", {"pods": "Pod", "services": "Service", "namespaces": "Namespace"}[kind])
        self.objects[kind][(namespace, name)] = obj
        self.record(kind, "ADDED", obj)
        return obj

    def validate(self, kind: str, name: str, obj: dict) -> None:
        causes = []
        if not name:
            causes.append(("metadata.name", "Required value: name or generateName is required"))
        elif len(name) > 253 or not DNS_SUBDOMAIN.match(name):
            causes.append(
                (
                    "metadata.name",
                    f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                    "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                    "character",
                )
            )
        for key, value in (obj["metadata"].get("labels") or {}).items():
            if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
                causes.append((f"metadata.labels[{key}]", f"Invalid value: {value!r}: a valid label value"))
        if kind == "pods":
            containers = (obj.get("spec") or {}).get("containers") or []
            if not containers:
                causes.append(("spec.containers", "Required value"))
            for index, container in enumerate(containers):
                if not container.get("name"):
                    causes.append((f"spec.containers[{index}].name", "Required value"))
                if not container.get("image") or re.search(r"\s", container.get("image", "")):
                    causes.append((f"spec.containers[{index}].image", "Required value"))
                for section, quantities in (container.get("resources") or {}).items():
                    for resource, quantity in (quantities or {}).items():
                        if not QUANTITY.match(str(quantity)):
                            field = f"spec.containers[{index}].resources.{section}[{resource}]"
                            causes.append((field, f'Invalid value: "{quantity}": must be a quantity'))
        if causes:
            raise invalid(
                {"pods": "Pod", "services": "Service", "namespaces": "Namespace"}[kind], name, causes
            )

    def get(self, kind: str, namespace: str, name: str) -> dict:
        try:
            return self.objects[kind][(namespace, name)]
        except KeyError:
            raise not_found(kind, name) from None

    def update(self, kind: str, obj: dict) -> dict:
        obj["metadata"]["resourceVersion"] = self.bump()
        self.record(kind, "MODIFIED", obj)
        return obj

    def delete(self, kind: str, namespace: str, name: str, grace: int | None, uid: str = "") -> dict:
        obj = self.get(kind, namespace, name)
        if uid and obj["metadata"].get("uid") != uid:
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {obj['metadata']['uid']}",
                {"name": name, "kind": kind},
            )
        if kind == "pods":
            if grace is None:
                grace = obj["spec"].get("terminationGracePeriodSeconds", 30)
            graceful = (
                grace > 0 and obj["spec"].get("nodeName") and obj["status"].get("phase") not in TERMINAL
            )
            if graceful:
                metadata = obj["metadata"]
                if "deletionTimestamp" in metadata and metadata["deletionGracePeriodSeconds"] <= grace:
                    return obj
                metadata["deletionTimestamp"] = now_text()
                metadata["deletionGracePeriodSeconds"] = grace
                return self.update(kind, obj)
        del self.objects[kind][(namespace, name)]
        self.logs.pop((namespace, name), None)
        obj["metadata"]["resourceVersion"] = self.bump()
        self.record(kind, "DELETED", obj)
        return obj

    def listing(self, kind: str, namespace: str | None, selector: str) -> tuple[list[dict], str]:
        requirements = parse_selector(selector)
        items = [
            obj
            for (ns, _), obj in sorted(self.objects[kind].items())
            if (namespace is None or ns == namespace)
            and selects(requirements, obj["metadata"].get("labels") or {})
        ]
        return items, str(self.version)


RESOURCES = [
    ("pods", "Pod", True, ["create", "delete", "get", "list", "watch"], ["po"]),
    ("pods/status", "Pod", True, ["get", "patch", "update"], []),
    ("pods/binding", "Binding", True, ["create"], []),
    ("pods/log", "Pod", True, ["get"], []),
    ("services", "Service", True, ["create", "delete", "get", "list", "watch"], ["svc"]),
    ("namespaces", "Namespace", False, ["create", "get", "list"], ["ns"]),
]


def discovery(parts: list[str], url: str) -> dict:
    """The legacy discovery documents, so that kubectl can talk to this server."""
    if parts == ["api"]:
        address = url.removeprefix("http://")
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
        }
    if parts == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
    resources = [
        {"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs}
        | ({"shortNames": short} if short else {})
        for name, kind, namespaced, verbs, short in RESOURCES
    ]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": resources}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go in two writes
    server: "ApiServer"

    def log_message(self, format, *args):  # noqa: A002
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self):  # noqa: N802
        self.dispatch("GET")

    def do_POST(self):  # noqa: N802
        self.dispatch("POST")

    def do_PUT(self):  # noqa: N802
        self.dispatch("PUT")

    def do_PATCH(self):  # noqa: N802
        self.dispatch("PATCH")

    def do_DELETE(self):  # noqa: N802
        self.dispatch("DELETE")

    # Plumbing.

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        if self.path.startswith("/klique-dev/") and self.command == "PUT":
            return raw.decode(errors="replace")
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(400, "BadRequest", "the request body is not JSON") from None

    def send(self, code: int, payload, content_type: str = "application/json") -> None:
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        parts = [part for part in url.path.split("/") if part]
        store = self.server.store
        try:
            body = self.body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
            if parts[:1] == ["klique-dev"]:
                return self.dev(method, parts[1:], body)
            if parts == ["version"]:
                return self.send(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-klique-dev"})
            if method == "GET" and parts in (["api"], ["apis"], ["api", "v1"]):
                return self.send(200, discovery(parts, self.server.url))
            if parts[:2] != ["api", "v1"]:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            rest = parts[2:]
            if rest and rest[0] in ("pods", "services") and len(rest) == 1 and method == "GET":
                return self.collection(rest[0], None, query)
            if rest[:1] != ["namespaces"]:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if len(rest) == 1:
                if method == "GET":
                    return self.collection("namespaces", "", query)
                if method == "POST":
                    with store.lock:
                        return self.send(201, store.create("namespaces", "", body))
            namespace = rest[1]
            if len(rest) == 2 and method == "GET":
                with store.lock:
                    return self.send(200, store.get("namespaces", "", namespace))
            kind = rest[2] if len(rest) > 2 else ""
            if kind not in ("pods", "services"):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if len(rest) == 3:
                if method == "GET":
                    return self.collection(kind, namespace, query)
                if method == "POST":
                    with store.lock:
                        return self.send(201, store.create(kind, namespace, body))
            name = rest[3]
            sub = rest[4] if len(rest) > 4 else ""
            with store.lock:
                if not sub:
                    if method == "GET":
                        return self.send(200, store.get(kind, namespace, name))
                    if method == "DELETE":
                        grace = query.get("gracePeriodSeconds", (body or {}).get("gracePeriodSeconds"))
                        uid = ((body or {}).get("preconditions") or {}).get("uid") or ""
                        grace = None if grace is None else int(grace)
                        obj = store.delete(kind, namespace, name, grace, uid)
                        return self.send(200, obj)
                if kind == "pods" and sub == "status":
                    return self.pod_status(method, namespace, name, body)
                if kind == "pods" and sub == "binding" and method == "POST":
                    return self.bind(namespace, name, body)
                if kind == "pods" and sub == "log" and method == "GET":
                    return self.pod_log(namespace, name, query)
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {url.path}")
        except ApiError as error:
            self.send(error.code, error.status())
        except (ValueError, KeyError, TypeError) as error:
            self.send(400, ApiError(400, "BadRequest", f"bad request: {error}").status())

    def collection(self, kind: str, namespace: str | None, query: dict) -> None:
        store = self.server.store
        if truthy(query.get("watch")):
            return self.watch(kind, namespace, query)
        with store.lock:
            items, version = store.listing(kind, namespace, query.get("labelSelector", ""))
            kind_name = {"pods": "PodList", "services": "ServiceList", "namespaces": "NamespaceList"}[kind]
            payload = {
                "kind": kind_name,
                "apiVersion": "v1",
                "metadata": {"resourceVersion": version},
                "items": items,
            }
            self.send(200, payload)

    # Pods: what a kubelet and the scheduler write.

    def pod_status(self, method: str, namespace: str, name: str, body) -> None:
        store = self.server.store
        pod = store.get("pods", namespace, name)
        if method == "GET":
            return self.send(200, pod)
        if method == "PUT":
            pod["status"] = copy.deepcopy(body.get("status") or {})
        elif method == "PATCH":
            content_type = self.headers.get("Content-Type", "")
            if "json-patch" in content_type or not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "only merge and strategic merge patches are served here")
            merge(pod, {"status": body.get("status") or {}}, "strategic" in content_type)
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} on pods/status")
        self.send(200, store.update("pods", pod))

    def bind(self, namespace: str, name: str, body: dict) -> None:
        store = self.server.store
        pod = store.get("pods", namespace, name)
        node = ((body or {}).get("target") or {}).get("name")
        if not node:
            raise invalid("Binding", name, [("target.name", "Required value")])
        if pod["spec"].get("nodeName"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned '
                f'to node "{pod["spec"]["nodeName"]}"',
            )
        pod["spec"]["nodeName"] = node
        merge(
            pod,
            {
                "status": {
                    "conditions": [
                        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_text()}
                    ]
                }
            },
            strategic=True,
        )
        store.update("pods", pod)
        self.send(
            201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        )

    def pod_log(self, namespace: str, name: str, query: dict) -> None:
        store = self.server.store
        pod = store.get("pods", namespace, name)
        states = [status.get("state") or {} for status in pod["status"].get("containerStatuses") or []]
        if not any("running" in state or "terminated" in state for state in states):
            container = pod["spec"]["containers"][0]["name"]
            raise ApiError(
                400,
                "BadRequest",
                f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating',
            )
        text = store.logs.get((namespace, name), "")
        if "tailLines" in query:
            lines = text.splitlines(keepends=True)
            count = int(query["tailLines"])
            text = "".join(lines[-count:]) if count > 0 else ""
        self.send(200, text, "text/plain")

    # Watches.

    def watch(self, kind: str, namespace: str | None, query: dict) -> None:
        store = self.server.store
        requirements = parse_selector(query.get("labelSelector", ""))
        timeout = float(query.get("timeoutSeconds") or self.server.watch_timeout_s)
        bookmarks = truthy(query.get("allowWatchBookmarks"))
        since = query.get("resourceVersion", "")
        deadline = time.monotonic() + timeout
        with store.lock:
            if store.refuse_watches:
                raise ApiError(503, "ServiceUnavailable", "watches are refused for now (klique-dev)")
            drops = store.drops
            pending: list[dict] = []
            if since in ("", "0"):
                cursor = store.version
                items, _ = store.listing(kind, namespace, query.get("labelSelector", ""))
                pending = [{"type": "ADDED", "object": copy.deepcopy(obj)} for obj in items]
            else:
                cursor = int(since)
                if cursor < store.oldest - 1:
                    message = f"too old resource version: {cursor} ({store.version})"
                    pending = [{"type": "ERROR", "object": ApiError(410, "Expired", message).status()}]
                    deadline = 0
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        last_sent = time.monotonic()
        try:
            while True:
                for event in pending:
                    self.chunk(json.dumps(event) + "\n")
                    last_sent = time.monotonic()
                pending = []
                if time.monotonic() >= deadline:
                    break
                with store.lock:
                    if store.drops != drops:
                        self.cut()
                        return
                    fresh = [event for event in store.events if event[0] > cursor]
                    if not fresh:
                        store.lock.wait(min(0.2, max(0.0, deadline - time.monotonic())))
                        fresh = [event for event in store.events if event[0] > cursor]
                    if store.drops != drops:
                        self.cut()
                        return
                    for version, event_kind, event_type, obj in fresh:
                        cursor = version
                        meta = obj["metadata"]
                        if event_kind != kind or (
                            namespace is not None and meta.get("namespace") != namespace
                        ):
                            continue
                        if selects(requirements, meta.get("labels") or {}):
                            pending.append({"type": event_type, "object": copy.deepcopy(obj)})
                    if not fresh and bookmarks and time.monotonic() - last_sent >= self.server.bookmark_s:
                        cursor = store.version
                        bookmark = {
                            "kind": "Pod",
                            "apiVersion": "v1",
                            "metadata": {"resourceVersion": str(cursor)},
                        }
                        pending.append({"type": "BOOKMARK", "object": bookmark})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def cut(self) -> None:
        """End the watch mid-stream, without the last chunk, as a dropped connection does."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # Development endpoints.

    def dev(self, method: str, parts: list[str], body) -> None:
        store = self.server.store
        with store.lock:
            if method == "PUT" and len(parts) == 5 and parts[0] == "namespaces" and parts[2] == "pods":
                store.get("pods", parts[1], parts[3])
                store.logs[(parts[1], parts[3])] = body if isinstance(body, str) else ""
                return self.send(200, {"status": "Success"})
            if method == "POST" and parts == ["drop-watches"]:
                store.drops += 1
                store.lock.notify_all()
                return self.send(200, {"status": "Success"})
            if method == "POST" and parts == ["refuse-watches"]:
                store.refuse_watches = bool((body or {}).get("refuse", True))
                return self.send(200, {"status": "Success"})
            if method == "POST" and parts == ["compact"]:
                store.compact()
                return self.send(200, {"status": "Success", "oldest": store.oldest})
        raise ApiError(404, "NotFound", "no such klique-dev endpoint")


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address=("127.0.0.1", 0), *, verbose=False, watch_timeout_s=1800.0, bookmark_s=5.0):
        super().__init__(address, Handler)
        self.store = Store()
        self.verbose, self.watch_timeout_s, self.bookmark_s = verbose, watch_timeout_s, bookmark_s

    def handle_error(self, request, client_address):
        """A client that hangs up (closing a pooled connection) is no error of the server's."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "ApiServer":
        """Serve in a background thread (for tests); ``shutdown()`` stops it."""
        threading.Thread(target=self.serve_forever, name="k8s-dev-apiserver", daemon=True).start()
        return self


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    server = ApiServer((args.host, args.port), verbose=args.verbose)
    print(f"k8s-dev API server on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
