"""The chart's ClusterRoles for plan users, aggregated by the real controller-manager into the
default ``view``, ``edit`` and ``admin`` roles: a user bound to one of those in a namespace gets
exactly the plan rights the role promises there, and never the status subresource.

Notes
-----
The clusterrole-aggregation controller of kube-controller-manager copies the rules of every
ClusterRole labelled ``rbac.authorization.k8s.io/aggregate-to-<role>: "true"`` into ``<role>``.
The test installs the chart's two user roles under a unique release name, binds three users to
the built-in roles with RoleBindings in a fresh namespace, and asks ``kubectl auth can-i`` as each.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from e2e.support import Api, Kubectl, wait_for
from tests.chart.helm import find_helm, render

PLANS = "gpuallocationplans.gpuplan.ragnaros.io"
DEFAULT_ROLES = ("view", "edit", "admin")


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


@pytest.fixture(scope="module")
def where(helm: str, api: Api, kubectl: Kubectl, crd: None) -> Iterator[str]:
    """A namespace where user-<role> has the default role <role>, with the chart's roles installed."""
    suffix = uuid.uuid4().hex[:5]
    ns = f"e2e-users-{suffix}"
    roles = [
        d
        for d in render(helm, release=f"users-{suffix}", namespace=ns)
        if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith(("-view", "-edit"))
    ]
    assert len(roles) == 2
    api.create("v1", "namespaces", {"metadata": {"name": ns}})
    bindings = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"user-{role}", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"user-{role}"}],
        }
        for role in DEFAULT_ROLES
    ]
    try:
        kubectl.apply([*roles, *bindings])
        yield ns
    finally:
        for role in roles:
            kubectl.run("delete", "clusterrole", role["metadata"]["name"], "--ignore-not-found", check=False)
        api.delete("v1", "namespaces", ns)


def can(kubectl: Kubectl, user: str, verb: str, resource: str, ns: str) -> bool:
    resource, _, sub = resource.partition("/")
    args = ["auth", "can-i", verb, resource, f"--as={user}", "-n", ns]
    if sub:
        args.append(f"--subresource={sub}")
    answer = kubectl.run(*args, check=False).stdout.strip()
    assert answer in ("yes", "no"), answer
    return answer == "yes"


# (default role, verb, resource, allowed?)
CASES = [
    ("view", "get", PLANS, True),
    ("view", "list", PLANS, True),
    ("view", "watch", PLANS, True),
    ("view", "create", PLANS, False),
    ("view", "patch", PLANS, False),
    ("view", "delete", PLANS, False),
    ("edit", "list", PLANS, True),
    ("edit", "create", PLANS, True),
    ("edit", "update", PLANS, True),
    ("edit", "patch", PLANS, True),
    ("edit", "delete", PLANS, True),
    ("edit", "deletecollection", PLANS, True),
    ("edit", "patch", f"{PLANS}/status", False),
    ("edit", "update", f"{PLANS}/status", False),
    ("admin", "watch", PLANS, True),
    ("admin", "create", PLANS, True),
    ("admin", "delete", PLANS, True),
    ("admin", "patch", f"{PLANS}/status", False),
]


@pytest.mark.parametrize(
    ("role", "verb", "resource", "allowed"),
    [
        pytest.param(
            *c, id=f"{c[0]} {'may' if c[3] else 'may not'} {c[1]} plans{'/status' if '/' in c[2] else ''}"
        )
        for c in CASES
    ],
)
def test_default_roles_carry_the_plan_rights(
    kubectl: Kubectl, where: str, role: str, verb: str, resource: str, allowed: bool
) -> None:
    user = f"user-{role}"
    if allowed:  # the aggregation controller copies the rules in a moment
        wait_for(
            f"{user} to be allowed to {verb} {resource}", lambda: can(kubectl, user, verb, resource, where)
        )
    else:
        # wait until aggregation took effect for this role, so a "no" is not just "not yet"
        wait_for(f"{role} to carry the plan rules", lambda: can(kubectl, user, "list", PLANS, where))
        assert not can(kubectl, user, verb, resource, where)


def test_no_plan_rights_outside_the_bound_namespace(kubectl: Kubectl, where: str) -> None:
    wait_for("edit to carry the plan rules", lambda: can(kubectl, "user-edit", "create", PLANS, where))
    assert not can(kubectl, "user-edit", "list", PLANS, "default")
