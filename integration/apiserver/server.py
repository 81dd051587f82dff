"""A stand-in Kubernetes API server over HTTPS: the REST paths, object shapes, watch stream
and error Status objects of the real one, for any group/version/resource a test registers.

- paths: ``/api/v1/<resource>[/<name>]``, ``/api/v1/namespaces/<ns>/<resource>[/<name>]``,
  ``/apis/<group>/<version>/...`` alike;
- verbs: get, list (``fieldSelector`` ``metadata.name=``/``metadata.namespace=``), watch
  (``?watch=1&resourceVersion=&timeoutSeconds=``: newline-delimited ``{"type","object"}``
  events in a chunked 200 response; no or ``0`` resourceVersion starts with an ADDED event per
  object; a compacted one gets an ERROR event holding a 410 ``Expired`` Status, as the real
  server sends it), create (POST), update (PUT, 409 ``Conflict`` on a stale
  resourceVersion), patch (JSON merge patch), delete;
- bearer tokens (401 without a known one) and the rule table of ``rbac`` (403);
- ValidatingAdmissionPolicies (``policies``: the chart's, as rendered) run on every write with
  the token's user and extra, a refusal answered 403 as the real server words it;
- field selectors a kind declares (``Kind.selectable``: ResourceSlices' ``spec.nodeName``);
- feature gates that change what is stored (``features``: ``DRADeviceTaints``);
- ``stop()``/``start()`` on the same port keep the store (a restart; ``compact`` makes the
  old resourceVersions expire as a fresh watch cache would).
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from integration.apiserver.certs import ServingCerts
from integration.apiserver.features import DEFAULTS, admit
from integration.apiserver.rbac import Authorizer
from integration.apiserver.store import (
    AlreadyExists,
    Conflict,
    Expired,
    Kind,
    NotFound,
    Store,
)

NODES = Kind("", "v1", "nodes", "Node", namespaced=False)
RESOURCE_SLICES = Kind(
    "resource.k8s.io",
    "v1",
    "resourceslices",
    "ResourceSlice",
    namespaced=False,
    selectable=("spec.nodeName", "spec.driver", "spec.pool.name"),
)


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``Status`` object, as the API server answers every error."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _fields_match(obj: dict[str, Any], selected: dict[str, str]) -> bool:
    """Whether ``obj`` has the value of each selected field path (``spec.nodeName``)."""
    for path, value in selected.items():
        if "." not in path:
            continue  # name and namespace: matched by key
        found: Any = obj
        for part in path.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        if str(found or "") != value:
            return False
    return True


class _Route:
    def __init__(self, kind: Kind, namespace: str, name: str) -> None:
        self.kind, self.namespace, self.name = kind, namespace, name


class APIServer:
    """One server: ``start()`` listens on 127.0.0.1 (a free port, then the same one after a
    restart), ``stop()`` closes the listener and every open connection, watches included."""

    def __init__(self, certs: ServingCerts, store: Store | None = None) -> None:
        self.certs = certs
        self.store = store or Store()
        self.auth = Authorizer()
        self.kinds: dict[tuple[str, str, str], Kind] = {}
        # feature gates that change what is stored (integration.apiserver.features)
        self.features = dict(DEFAULTS)
        # what the server's defaulting adds to an object before it is stored (callables
        # taking the kind and the object), as a newer API server fills fields a client left out
        self.defaults: list[Callable[[Kind, dict[str, Any]], None]] = []
        # seconds between storing a create or update and answering it: a slow answer, which
        # watchers (and other writers) overtake
        self.answer_delay = 0.0
        # ValidatingAdmissionPolicy objects (with a Deny binding each) judging every write
        self.policies: list[dict[str, Any]] = []
        # called (kind, namespace, name) before a write is applied: another writer overtaking
        self.before_write: Callable[[Kind, str, str], None] | None = None
        self.port = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.add_kind(NODES)

    def add_kind(self, kind: Kind) -> None:
        self.kinds[(kind.group, kind.version, kind.resource)] = kind

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = self

        class Handler(_Handler):
            api = server

        httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler, bind_and_activate=False)
        httpd.allow_reuse_address = True
        httpd.daemon_threads = True
        httpd.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        httpd.server_bind()
        httpd.server_activate()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.certs.cert), str(self.certs.key))
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        self.port = httpd.server_address[1]
        self._stopping.clear()
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()
        with self.store.changed:
            self.store.changed.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            for conn in list(self._conns):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            self._conns.clear()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def restart(self, *, compact: bool = False) -> None:
        """Stop, optionally forget the event history (old resourceVersions expire), start
        again on the same port."""
        self.stop()
        if compact:
            self.store.compact()
        self.start()

    # the test's own view of the cluster, without a token
    def put_node(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        body = {"metadata": {"name": name, "labels": labels or {}}, "spec": {}, "status": {}}
        return self.store.create(NODES, "", body)

    def set_node_labels(self, name: str, labels: dict[str, str | None]) -> dict[str, Any]:
        node = self.store.get(NODES, "", name)
        node["metadata"]["labels"] = merge_patch(node["metadata"].get("labels", {}), labels)
        node["metadata"].pop("resourceVersion")
        return self.store.update(NODES, "", node)

    # connection bookkeeping for stop()
    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)

    def route(self, path: str) -> _Route | None:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not 1 <= len(rest) <= 2:
            return None
        kind = self.kinds.get((group, version, rest[0]))
        if kind is None:
            return None
        return _Route(kind, namespace, rest[1] if len(rest) == 2 else "")


class _Handler(BaseHTTPRequestHandler):
    api: APIServer
    protocol_version = "HTTP/1.1"
    _raw = b""
    # As Go's net/http (the real server): headers and body go out as two writes, and with
    # Nagle on the body waits for the client's delayed ACK, 40 ms per request on keep-alive.
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        # as Go's servers: a response's headers and body are two writes, which Nagle's
        # algorithm and the client's delayed ACK would hold back 40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.api._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.api._track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _fail(self, code: int, reason: str, message: str) -> None:
        self._send(code, status(code, reason, message))

    def _body(self) -> Any:
        return json.loads(self._raw or b"{}")

    def _authorize(self, verb: str, route: _Route) -> str | None:
        header = self.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else None
        user = self.api.auth.user(token)
        if user is None or token is None:
            self._fail(401, "Unauthorized", "Unauthorized")
            return None
        kind = route.kind
        if not self.api.auth.check(token, verb, kind.group, kind.resource):
            scope = (
                f"in the namespace {route.namespace!r}"
                if route.namespace
                else "at the cluster scope"
            )
            self._fail(
                403,
                "Forbidden",
                f'{kind.resource} is forbidden: User "{user}" cannot {verb} resource '
                f'"{kind.resource}" in API group "{kind.group}" {scope}',
            )
            return None
        return token

    def _dispatch(self, method: str) -> None:
        # read the body first: a request refused before it is read (404, 401, 403) would
        # leave it in the kept-alive connection, where it would garble the next request
        self._raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        route = self.api.route(url.path)
        if route is None:
            self._fail(404, "NotFound", "the server could not find the requested resource")
            return
        watching = query.get("watch") in ("1", "true")
        verb = {
            "GET": "get" if route.name else ("watch" if watching else "list"),
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete",
        }[method]
        token = self._authorize(verb, route)
        if token is None:
            return
        kind, store = route.kind, self.api.store
        name = f'{kind.resource} "{route.name}"'
        if verb in ("create", "update", "patch", "delete") and self.api.before_write:
            self.api.before_write(kind, route.namespace, route.name)
        try:
            if verb == "get":
                self._send(200, store.get(kind, route.namespace, route.name))
            elif verb in ("list", "watch"):
                selected = self._selector(query.get("fieldSelector", ""), route)
                if selected is None:
                    return
                if verb == "watch":
                    self._watch(route, selected, query)
                else:
                    self._list(route, selected)
            elif verb == "create":
                body = self._defaulted(kind, admit(kind, self._body(), self.api.features))
                if self._admitted(token, route, "CREATE", body, None):
                    self._send(201, self._stored(store.create(kind, route.namespace, body)))
            elif verb == "update":
                body = self._defaulted(kind, admit(kind, self._body(), self.api.features))
                if body.get("metadata", {}).get("name") != route.name:
                    self._fail(400, "BadRequest", "the name of the object does not match the URL")
                    return
                current = store.get(kind, route.namespace, route.name)
                if self._admitted(token, route, "UPDATE", body, current):
                    self._send(200, self._stored(store.update(kind, route.namespace, body)))
            elif verb == "patch":
                current = store.get(kind, route.namespace, route.name)
                patched = admit(kind, merge_patch(current, self._body()), self.api.features)
                if self._admitted(token, route, "UPDATE", patched, current):
                    self._send(200, store.update(kind, route.namespace, patched))
            else:
                current = store.get(kind, route.namespace, route.name)
                if self._admitted(token, route, "DELETE", None, current):
                    self._send(200, store.delete(kind, route.namespace, route.name))
        except NotFound:
            self._fail(404, "NotFound", f"{name} not found")
        except AlreadyExists:
            self._fail(409, "AlreadyExists", f"{name} already exists")
        except Conflict:
            self._fail(
                409,
                "Conflict",
                f"Operation cannot be fulfilled on {name}: the object has been modified; "
                "please apply your changes to the latest version and try again",
            )
        except ValueError as err:
            self._fail(422, "Invalid", f"{kind.kind} is invalid: {err}")

    def _admitted(
        self,
        token: str,
        route: _Route,
        operation: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
    ) -> bool:
        """Run ``policies`` on the write; answer the first refusal as the API server does."""
        from integration.apiserver.admission import judges, refusals

        kind = route.kind
        request = {"operation": operation, "userInfo": self.api.auth.user_info(token)}
        for policy in self.api.policies:
            if not judges(policy, kind.group, kind.resource, operation):
                continue
            said = refusals(policy, obj, route.namespace, request=request, old=old)
            if said:
                policy_name = policy["metadata"]["name"]
                self._fail(
                    403,
                    "Forbidden",
                    f'{kind.resource} "{route.name}" is forbidden: ValidatingAdmissionPolicy '
                    f"'{policy_name}' with binding '{policy_name}' denied request: {said[0]}",
                )
                return False
        return True

    def _defaulted(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        for default in self.api.defaults:
            default(kind, obj)
        return obj

    def _stored(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A write's answer, ``answer_delay`` after it was stored (and watchers told)."""
        if self.api.answer_delay:
            time.sleep(self.api.answer_delay)
        return obj

    def _selector(self, text: str, route: _Route) -> dict[str, str] | None:
        """``metadata.name=X,metadata.namespace=Y`` as a dict; anything else is 400 (a real
        server supports more fields per kind; the stand-in refuses rather than ignore)."""
        selected = {"namespace": route.namespace, "name": ""}
        for term in filter(None, text.split(",")):
            key, sep, value = term.partition("=")
            field = key.rstrip("=")
            if field in route.kind.selectable:
                selected[field] = value.lstrip("=")
                continue
            if not sep or field not in ("metadata.name", "metadata.namespace"):
                self._fail(400, "BadRequest", f'"{term}" is not a known field selector')
                return None
            selected[field.split(".")[1]] = value.lstrip("=")
        return selected

    def _list(self, route: _Route, selected: dict[str, str]) -> None:
        rv, items = self.api.store.list(route.kind, selected["namespace"], selected["name"])
        items = [item for item in items if _fields_match(item, selected)]
        for item in items:  # list items carry no kind/apiVersion, as the real server's
            item.pop("kind", None)
            item.pop("apiVersion", None)
        kind = route.kind
        self._send(
            200,
            {
                "kind": f"{kind.kind}List",
                "apiVersion": kind.api_version,
                "metadata": {"resourceVersion": str(rv)},
                "items": items,
            },
        )

    def _chunk(self, event: dict[str, Any]) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, route: _Route, selected: dict[str, str], query: dict[str, str]) -> None:
        store, kind = self.api.store, route.kind
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout

        def wanted(key: tuple[str, str], obj: dict[str, Any]) -> bool:
            ns, name = key
            return (
                (not selected["namespace"] or ns == selected["namespace"])
                and (not selected["name"] or name == selected["name"])
                and _fields_match(obj, selected)
            )

        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        asked = query.get("resourceVersion", "")
        if asked in ("", "0"):
            rv, items = store.list(kind, selected["namespace"], selected["name"])
            for item in items:
                if _fields_match(item, selected):
                    self._chunk({"type": "ADDED", "object": item})
        else:
            rv = int(asked)
        try:
            while not self.api._stopping.is_set() and time.monotonic() < deadline:
                with store.changed:
                    try:
                        events = store.events_after(kind, rv)
                    except Expired:
                        newest = store.revision
                        self._chunk(
                            {
                                "type": "ERROR",
                                "object": status(
                                    410, "Expired", f"too old resource version: {rv} ({newest})"
                                ),
                            }
                        )
                        break
                    if not events:
                        store.changed.wait(min(0.5, max(0.0, deadline - time.monotonic())))
                        continue
                for event in events:
                    rv = event.rv
                    if wanted(event.key, event.obj):
                        self._chunk({"type": event.type, "object": event.obj})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")
