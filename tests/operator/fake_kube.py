"""An in-memory API server good enough for the operator's service: GET, list, create, merge patch,
JSON patch (test, add, replace, remove), apply, delete.

It speaks the same paths as :class:`gpuplan_operator.kube.Kube` and records every write, so tests
can assert "nothing was written" exactly. Only ``request`` is faked: the verbs on top of it (get,
apply, delete, ...) are the operator's own :class:`~gpuplan_operator.kube.RestVerbs`. Server-side apply is modelled as "replace the object's
fields with the manifest's" (one manager), which is what the operator relies on; ``managedFields`` tell only who
created (an update) and who applied, not which fields each owns.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote

from gpuplan_operator.kube import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, RestVerbs
from kubernetes.client.exceptions import ApiException

_rv = itertools.count(1)


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)
    return target


def _json_patch(target: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """RFC 6902 on ``target``, all or nothing: a failed ``test`` is a 422 and changes nothing."""
    work = copy.deepcopy(target)
    for op in ops:
        *parents, last = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
        at = work
        for key in parents:
            at = at[key]
        if op["op"] == "test":
            if at.get(last) != op["value"]:
                raise ApiException(status=422, reason="test failed")
        elif op["op"] == "add" and isinstance(at, list):  # "-" appends, an index inserts
            at.insert(len(at) if last == "-" else int(last), copy.deepcopy(op["value"]))
        elif op["op"] in ("add", "replace"):
            at[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del at[last]
    target.clear()
    target.update(work)


def _owner(query: Mapping[str, Any], operation: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """A ``managedFields`` entry: who wrote the object, and how (the fields are not modelled)."""
    return {
        "manager": query.get("fieldManager"),
        "operation": operation,
        "apiVersion": body.get("apiVersion"),
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {}},
    }


def _selected(obj: Mapping[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        if "!=" in term:  # also true of an object without the label, as the API server has it
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k) != v:
                return False
        elif term not in labels:
            return False
    return True


class FakeKube(RestVerbs):
    """Objects keyed by their collection path and name."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.fail_on: str | None = None  # a path fragment whose writes answer 500
        self.serves_dra = False  # resource.k8s.io/v1, as a cluster with DRA
        self.serves_nrt = False  # topology.node.k8s.io/v1alpha2, as a cluster with NFD's CRD

    # -- seeding ----------------------------------------------------------------------------

    def put(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(_rv))
        self.objects[(collection, meta["name"])] = obj
        return obj

    def get_obj(self, collection: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((collection, name))

    def items(self, collection: str) -> list[dict[str, Any]]:
        return [o for (c, _), o in sorted(self.objects.items()) if c == collection]

    # -- the Kube interface -----------------------------------------------------------------

    def stream(self, path: str, query: Mapping[str, Any], read_timeout: float) -> Iterator[dict[str, Any]]:
        return no_events(path, query, read_timeout)

    def _split(self, path: str) -> tuple[str, str | None, str | None]:
        sub = None
        if path.endswith("/status"):
            path, sub = path[: -len("/status")], "status"
        parts = path.strip("/").split("/")
        plurals = {"nodes", "pods", "configmaps", "deployments", "priorityclasses", "gpuallocationplans"}
        if self.serves_dra:
            plurals |= {"resourceslices", "resourceclaims", "resourceclaimtemplates"}
        if self.serves_nrt:
            plurals.add("noderesourcetopologies")
        found = [i for i, p in enumerate(parts) if p in plurals]
        if not found:  # an API this fake server does not serve (DRA, unless asked)
            raise ApiException(status=404, reason="Not Found")
        idx = max(found)
        collection = "/".join(parts[: idx + 1])
        name = unquote(parts[idx + 1]) if len(parts) > idx + 1 else None
        return collection, name, sub

    def _cluster_wide(self, collection: str) -> list[dict[str, Any]]:
        plural = collection.rsplit("/", 1)[-1]
        return [o for (c, _), o in sorted(self.objects.items()) if c.rsplit("/", 1)[-1] == plural]

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        collection, name, sub = self._split(path)
        query = dict(query or {})
        if method == "GET":
            if name is None:
                if "/namespaces/" in collection:
                    items = [o for (c, _), o in sorted(self.objects.items()) if c == collection]
                else:
                    items = self._cluster_wide(collection)
                items = [copy.deepcopy(o) for o in items if _selected(o, query.get("labelSelector"))]
                for item in items:  # like the real server: list items carry no apiVersion/kind
                    item.pop("apiVersion", None)
                    item.pop("kind", None)
                if query.get("fieldSelector"):
                    items = [o for o in items if (o.get("spec") or {}).get("nodeName")]
                return {"items": items}
            obj = self.objects.get((collection, name))
            if obj is None:
                raise ApiException(status=404, reason="Not Found")
            return copy.deepcopy(obj)
        if method == "POST":  # a create: recorded with the new object's path, to be told apart
            name = str(body["metadata"]["name"])
            path = f"{path}/{name}"
        assert name is not None
        if self.fail_on and self.fail_on in path:
            raise ApiException(status=500, reason="Injected")
        self.writes.append((method, path))
        if method == "POST":
            if (collection, name) in self.objects:
                raise ApiException(status=409, reason="AlreadyExists")
            created = self.put(collection, body)
            created["metadata"]["managedFields"] = [_owner(query, "Update", body)]
            return copy.deepcopy(created)
        if method == "DELETE":
            if self.objects.pop((collection, name), None) is None:
                raise ApiException(status=404, reason="Not Found")
            return {}
        assert method == "PATCH"
        current = self.objects.get((collection, name))
        if content_type == APPLY_PATCH:
            obj = copy.deepcopy(current) if current else {"metadata": {"uid": f"uid-{name}", "generation": 1}}
            meta = obj["metadata"]
            spec = obj.get("spec")
            obj.update(copy.deepcopy({k: v for k, v in body.items() if k != "metadata"}))
            meta.update(copy.deepcopy(body["metadata"]))
            meta["resourceVersion"] = str(next(_rv))
            owners = meta.setdefault("managedFields", [])
            if not any(
                o["manager"] == query.get("fieldManager") and o["operation"] == "Apply" for o in owners
            ):
                owners.append(_owner(query, "Apply", body))
            if current is not None and obj.get("spec") != spec:  # as the API server counts them
                meta["generation"] = int(meta.get("generation") or 1) + 1
            if obj.get("globalDefault") is False:  # omitempty, as PriorityClasses read back
                del obj["globalDefault"]
            self.objects[(collection, name)] = obj
            return copy.deepcopy(obj)
        if current is None and content_type in (MERGE_PATCH, JSON_PATCH):
            raise ApiException(status=404, reason="Not Found")
        assert current is not None
        if content_type == JSON_PATCH:
            _json_patch(current, body)
            current["metadata"]["resourceVersion"] = str(next(_rv))
            return copy.deepcopy(current)
        assert content_type == MERGE_PATCH
        if sub == "status":
            current["status"] = _merge(current.get("status") or {}, body.get("status") or {})
        else:
            _merge(current, body)
        current["metadata"]["resourceVersion"] = str(next(_rv))
        return copy.deepcopy(current)


def no_events(path: str, query: Mapping[str, Any], read_timeout: float) -> Iterator[dict[str, Any]]:
    """The watch stream of a fake server that never changes on its own (tests re-list instead)."""
    return iter(())
