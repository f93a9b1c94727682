"""The built-in operator catalog and resource model: the image fence product's ten operators.

Notes
-----
The product runs ten operators, each with a key strategy: feature extraction is compute-bound
(``service``: spread over many machines to use their CPUs), 1:N search is IO-bound (``machine``:
few large instances), stream analysis runs one card per instance (``single``), and
``face_image_flow`` becomes ``special`` whenever the user fixes its machine count. Image and video
flows both need the face surveillance retrieval service; it is listed under both and the renderer
emits it once.
"""

from __future__ import annotations

from planner.base.strategies import Strategy
from planner.base.vocab import GPU_TYPE_LABEL
from planner.model.spec import LinkStrategy, OperatorSpec, ResourceKind, ResourceType

SHARE_ALL = LinkStrategy("share", 0, 0)


def _op(
    name: str,
    strategy: Strategy,
    key: str,
    links: tuple[str, ...] = (),
    link: LinkStrategy = SHARE_ALL,
) -> OperatorSpec:
    return OperatorSpec(
        name=name, key_strategy=strategy, link_strategy=link, key_service=key, link_services=links
    )


BUILTIN_OPERATORS: tuple[OperatorSpec, ...] = (
    _op(
        "face_feature_extract",
        Strategy.SERVICE,
        "face-feature-extract",
        ("face-feature-extract-anno",),
    ),
    _op(
        "body_feature_extract",
        Strategy.SERVICE,
        "body-feature-extract",
        ("body-feature-extract-anno",),
    ),
    _op("vehicle_feature_extract", Strategy.SERVICE, "vehicle-feature-extract"),
    _op("face_1vn", Strategy.MACHINE, "face-1vn-retrieval"),
    _op("body_1vn", Strategy.MACHINE, "body-1vn-retrieval"),
    _op("vehicle_1vn", Strategy.MACHINE, "vehicle-1vn-retrieval"),
    _op("non_motor_vehicle_1vn", Strategy.MACHINE, "non-motor-vehicle-1vn-retrieval"),
    _op(
        "face_image_flow",
        Strategy.SERVICE,
        "face-image-flow",
        ("face-surveillance-retrieval",),
        LinkStrategy("detach", 4, 1),
    ),
    _op(
        "face_video",
        Strategy.SINGLE,
        "face-video",
        ("face-surveillance-retrieval",),
    ),
    _op("security_pass", Strategy.SINGLE, "security-pass"),
)


def default_resources() -> tuple[ResourceType, ...]:
    """The resource model used when a plan names none: P4 and T4 cards, and CPU nodes.

    CPU requests go to the nodes labelled as CPU nodes; on a cluster where no node carries that
    label, they go to the free ``cpu`` of every schedulable node (GPU nodes included), so a
    configuration that asks for a few cores plans on a cluster that never labelled CPU nodes.
    """
    return (
        ResourceType("P4", ResourceKind.GPU, "nvidia.com/gpu", ((GPU_TYPE_LABEL, "P4"),)),
        ResourceType("T4", ResourceKind.GPU, "nvidia.com/gpu", ((GPU_TYPE_LABEL, "T4"),)),
        ResourceType(
            "CPU", ResourceKind.CPU, "cpu", ((GPU_TYPE_LABEL, "CPU"),), any_node_when_unlabelled=True
        ),
    )
