"""A small JSON transport over the ``kubernetes`` client's connection.

Notes
-----
The operator works on plain dicts: the planner reads NodeLists and PodLists as JSON, the renderer
returns manifests as dicts, and server-side apply takes a manifest as it is. Going through the
generated typed models would convert every object twice (and drop fields the models do not
know), so this class borrows only the client's configuration, authentication, TLS and connection
pool, and speaks JSON paths directly. Errors are the client's own
:class:`kubernetes.client.exceptions.ApiException`, raised for every non-2xx answer, so callers
never mistake a failure for success. A request that gets no answer at all (the API server
restarting, a connection reset) is an :class:`ApiException` too, with status 0 as the client
itself uses for TLS failures, so it takes the same retry path as a 5xx and never escapes as a
urllib3 error that no caller expects.

One instance is built at start-up (kept in kopf's ``memo``) and shared by the handler threads
and the apply's writer threads; urllib3's pool is thread-safe. :class:`KubeApi` is the interface
the rest of the operator needs, so a test's in-memory API server stands in without type-ignore comments.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import quote, urlencode

import msgspec
import urllib3.exceptions
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

JSON = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


# every answer and watch event is decoded here: msgspec's decoder takes 40-60% of the time the
# standard library's does for the API server's JSON (a 1.5 KB event, a 240 KB plan), the same
# values; an event stream during a thousand-pod deploy is about 100 MB
_decode = msgspec.json.Decoder().decode
POOL_SIZE = 32  # connections kept: up to three plans' writes (8 each) and a gate release (8) at once


def load_api_client(
    pool_size: int = POOL_SIZE, kubeconfig: str | None = None, context: str | None = None
) -> client.ApiClient:
    """In-cluster credentials when running in a pod, else ``$KUBECONFIG``/``~/.kube/config``."""
    configuration = client.Configuration()
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        # read $KUBECONFIG now: the client library reads it once, at import time
        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=configuration
        )
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


def _query_value(value: Any) -> Any:
    return str(value).lower() if isinstance(value, bool) else value


def api_error_message(error: ApiException) -> str:
    """The API server's own one-line message (``Status.message``) rather than headers and all.

    Status 0 is the client's word for "no answer at all" (refused, reset, timed out).
    """
    if not error.status:
        return str(error.reason)
    try:
        body = json.loads(error.body or "")
        if isinstance(body, dict) and body.get("message"):
            return f"{error.status} {body.get('reason') or error.reason}: {body['message']}"
    except ValueError:
        pass
    return f"{error.status} {error.reason}"


def path_for(api_version: str, plural: str, name: str | None = None, namespace: str | None = None) -> str:
    """``/api/v1/...`` for the core group, ``/apis/<group>/<version>/...`` for the others."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    if name:
        base += f"/{quote(name, safe='')}"
    return base


class KubeApi(Protocol):
    """What the operator asks of an API server: JSON reads, merge patches, applies and deletes."""

    def get(self, path: str, **query: Any) -> JSON: ...

    def get_or_none(self, path: str) -> JSON | None: ...

    def merge_patch(self, path: str, body: Mapping[str, Any], field_manager: str) -> JSON: ...

    def json_patch(self, path: str, ops: list[dict[str, Any]], field_manager: str) -> JSON: ...

    def apply(self, path: str, manifest: Mapping[str, Any], field_manager: str) -> JSON: ...

    def create(self, path: str, manifest: Mapping[str, Any], field_manager: str) -> JSON: ...

    def delete(self, path: str, propagation: str = "Background") -> bool: ...


class WriteObserver(Protocol):
    """Told about every write (fault injection in tests: die right after the N-th one)."""

    def before_write(self) -> None: ...

    def after_write(self, accepted: bool) -> None: ...


class RestVerbs:
    """The operator's verbs on one ``request`` method: the real transport, or a test's fake server."""

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        raise NotImplementedError

    def get(self, path: str, **query: Any) -> JSON:
        return self.request("GET", path, query=query)

    def get_or_none(self, path: str) -> JSON | None:
        try:
            return self.get(path)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def merge_patch(self, path: str, body: Mapping[str, Any], field_manager: str) -> JSON:
        return self.request(
            "PATCH", path, body=body, content_type=MERGE_PATCH, query={"fieldManager": field_manager}
        )

    def json_patch(self, path: str, ops: list[dict[str, Any]], field_manager: str) -> JSON:
        """An RFC 6902 patch: its ``test`` operations make it all-or-nothing against a changed object."""
        return self.request(
            "PATCH", path, body=ops, content_type=JSON_PATCH, query={"fieldManager": field_manager}
        )

    def apply(self, path: str, manifest: Mapping[str, Any], field_manager: str) -> JSON:
        """Server-side apply; ``force`` takes over fields another manager set on our objects."""
        return self.request(
            "PATCH",
            path,
            body=manifest,
            content_type=APPLY_PATCH,
            query={"fieldManager": field_manager, "force": True},
        )

    def create(self, path: str, manifest: Mapping[str, Any], field_manager: str) -> JSON:
        """Create (POST to the collection ``path``); 409 when the name is taken."""
        return self.request("POST", path, body=manifest, query={"fieldManager": field_manager})

    def delete(self, path: str, propagation: str = "Background") -> bool:
        """Delete; False when it was already gone."""
        try:
            self.request("DELETE", path, body={"propagationPolicy": propagation})
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True


class Kube(RestVerbs):
    """JSON requests with the client's credentials; an optional observer sees every write."""

    def __init__(
        self, api_client: client.ApiClient, timeout: float = 30.0, observer: WriteObserver | None = None
    ) -> None:
        self.api = api_client
        self.timeout = timeout
        self.observer = observer
        self.writes = 0  # accepted writes, for logs and tests
        self._count = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        """One request; the decoded JSON answer, or :class:`ApiException` for non-2xx."""
        url = self.api.configuration.host + path
        params = {k: v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urlencode({k: _query_value(v) for k, v in params.items()})
        headers = dict(self.api.default_headers)
        headers["Accept"] = "application/json"
        headers["Content-Type"] = content_type
        self.api.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        observed = self.observer if method != "GET" else None
        if observed is not None:
            observed.before_write()
        accepted = False
        try:
            try:
                # the REST layer serialises a dict as JSON for JSON and structured-YAML content types
                response = self.api.rest_client.request(  # type: ignore[no-untyped-call]
                    method, url, headers=headers, body=body, _request_timeout=self.timeout
                )
                data = response.read()
            except urllib3.exceptions.HTTPError as e:  # refused, reset, timed out: no answer
                reason = f"{method} {path}: no answer from the API server ({e})"
                raise ApiException(status=0, reason=reason) from e
            if not 200 <= response.status <= 299:
                raise ApiException(http_resp=response, body=data.decode("utf-8", "replace"), data=None)
            accepted = True
            if method != "GET":
                with self._count:
                    self.writes += 1
        finally:
            if observed is not None:
                observed.after_write(accepted)
        return _decode(data) if data else {}

    def stream(self, path: str, query: Mapping[str, Any], read_timeout: float) -> Iterator[JSON]:
        """A watch: one decoded JSON object per line of the answer, as it arrives.

        A stream that says nothing for ``read_timeout`` seconds raises :class:`WatchSilent`; a
        refused or broken connection raises :class:`ApiException` (status 0), as a request does.
        """
        url = self.api.configuration.host + path
        if query:
            url += "?" + urlencode({k: _query_value(v) for k, v in query.items() if v is not None})
        headers = dict(self.api.default_headers)
        headers["Accept"] = "application/json"
        self.api.update_params_for_auth(headers, [], ["BearerToken"], path, "GET", None)
        try:
            answer = self.api.rest_client.request(  # type: ignore[no-untyped-call]
                "GET", url, headers=headers, _request_timeout=(10.0, read_timeout)
            )
        except urllib3.exceptions.HTTPError as e:
            raise ApiException(status=0, reason=f"GET {path}: no answer from the API server ({e})") from e
        response = answer.response  # the urllib3 response, its body not read yet
        try:
            if not 200 <= answer.status <= 299:
                data = answer.read()
                raise ApiException(http_resp=answer, body=data.decode("utf-8", "replace"), data=None)
            pending = b""
            for chunk in response.stream(65536, decode_content=True):
                pending += chunk
                if b"\n" not in chunk:
                    continue
                *lines, pending = pending.split(b"\n")  # a 64 KB chunk holds a dozen pods' events
                for line in lines:
                    if line.strip():
                        yield _decode(line)
        except urllib3.exceptions.ReadTimeoutError as e:
            raise WatchSilent(f"GET {path}: silent for {read_timeout:.0f}s") from e
        except urllib3.exceptions.HTTPError as e:
            raise ApiException(status=0, reason=f"GET {path}: watch broken ({e})") from e
        finally:
            response.release_conn()


class WatchSilent(Exception):
    """A watch stream said nothing for longer than it may (it is dead, whatever the socket says)."""
