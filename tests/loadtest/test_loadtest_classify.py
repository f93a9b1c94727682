"""classify: scaling with instances (and CPU at the knee) -> keyStrategy, with evidence."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from loadtest.classify import ClassifyError, Measurement, classify, parse_measurement, render_text

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("points", "strategy", "bound", "confidence"),
    [
        pytest.param(
            [(1, 20, 0.9), (2, 40, 1.8)],
            "service",
            "compute",
            "high",
            id="doubles with two instances and the CPU is busy: spread",
        ),
        pytest.param(
            [(1, 40, 0.05), (2, 40, 0.06)],
            "machine",
            "io",
            "high",
            id="flat with two instances and the CPU idles: concentrate",
        ),
        pytest.param(
            [(1, 20, None), (4, 76, None)],
            "service",
            "compute",
            "medium",
            id="scales without CPU numbers: medium confidence",
        ),
        pytest.param(
            [(1, 100, 0.9), (2, 150, 1.8)],
            "service",
            "compute",
            "low",
            id="half the ideal gain but busy CPU: compute, low confidence",
        ),
        pytest.param(
            [(1, 100, 0.1), (2, 150, 0.2)],
            "machine",
            "io",
            "low",
            id="half the ideal gain and idle CPU: io, low confidence",
        ),
        pytest.param(
            [(1, 40, 0.9), (2, 41, 1.9)],
            "service",
            "compute",
            "low",
            id="flat but busy CPU at every count: compute-bound, what limited it unknown",
        ),
        pytest.param(
            [(1, 40, 0.9), (2, 41, 0.2)],
            "machine",
            "io",
            "high",
            id="busy alone but idle beside a second instance: a shared bottleneck",
        ),
        pytest.param(
            [(2, 40, 1.8), (4, 80, 3.6), (1, 19, 0.9)],
            "service",
            "compute",
            "high",
            id="order does not matter; the smallest count is the baseline",
        ),
    ],
)
def test_classify(
    points: list[tuple[int, float, float | None]], strategy: str, bound: str, confidence: str
) -> None:
    c = classify([Measurement(n, q, cpu) for n, q, cpu in points])
    assert (c.key_strategy, c.bound, c.confidence) == (strategy, bound, confidence), c.reasons
    d = c.to_dict()
    assert d["keyStrategy"] == strategy
    assert d["evidence"]["points"][0]["instances"] == min(n for n, _, _ in points)
    assert "scaling efficiency" in d["reasons"][0]
    assert "keyStrategy: " + strategy in render_text(c)


# The sample service in cpu mode (2 ms of CPU per request) measured on a two-core machine:
# 1.34x at two instances, each instance burning 0.66 cores, the load tester beside them.
SMALL_HOST = [
    Measurement(1, 583.0, 0.7, "1", sender_cpu_cores=(0.55,)),
    Measurement(2, 781.0, 1.32, "2", sender_cpu_cores=(0.6,)),
]


@pytest.mark.parametrize(
    ("points", "extra", "limited_by", "confidence", "said"),
    [
        pytest.param(
            SMALL_HOST,
            {"available_cores": 2},
            "host-cpu",
            "medium",
            "1.92 of the 2 cores",
            id="two instances on two cores beside the load tester: the host's CPU",
        ),
        pytest.param(
            [Measurement(1, 300, 0.5), Measurement(2, 330, 0.95)],
            {"cpu_limit_cores": 1.0, "available_cores": 8},
            "cpu-limit",
            "medium",
            "0.95 of its 1-core CPU limit",
            id="two instances under one 1-core limit: the limit",
        ),
        pytest.param(
            [
                Measurement(1, 300, 0.5, sender_cpu_cores=(0.97,)),
                Measurement(2, 320, 0.9, sender_cpu_cores=(0.98,)),
            ],
            {"available_cores": 16},
            "load-tester",
            "medium",
            "0.98 cores",
            id="a sender at a full core: the load tester's own share",
        ),
        pytest.param(
            SMALL_HOST,
            {},
            "unknown",
            "low",
            "--host-cores",
            id="nothing known to be full: compute-bound all the same, at low confidence",
        ),
    ],
)
def test_busy_instances_that_did_not_double_are_compute_bound(
    points: list[Measurement], extra: dict[str, float], limited_by: str, confidence: str, said: str
) -> None:
    c = classify(points, **extra)
    assert (c.key_strategy, c.bound, c.confidence) == ("service", "compute", confidence), c.reasons
    assert c.evidence["scaling_limited_by"] == limited_by
    text = render_text(c)
    assert f"limited by {limited_by}" in text and said in text, text
    assert "concentrat" not in " ".join(c.reasons).replace("concentrating a compute-bound", "")


@pytest.mark.parametrize(
    ("points", "extra", "strategy", "bound"),
    [
        pytest.param(
            [Measurement(n, 240.0 * n, 0.45 * n) for n in (1, 2, 4)],
            {},
            "service",
            "compute",
            id="cpu sample, each instance in a pod with half a core: scales at 1, 2 and 4",
        ),
        pytest.param(
            [Measurement(1, 583, 0.7), Measurement(2, 781, 1.32), Measurement(4, 800, 1.4)],
            {"available_cores": 1.5},
            "service",
            "compute",
            id="cpu sample on a host full at two instances: still compute at 4",
        ),
        pytest.param(
            [Measurement(n, 40.0, 0.02 * n) for n in (1, 2, 4)],
            {},
            "machine",
            "io",
            id="io sample at 1, 2 and 4 instances: flat and idle",
        ),
    ],
)
def test_the_samples_at_one_two_and_four_instances(
    points: list[Measurement], extra: dict[str, float], strategy: str, bound: str
) -> None:
    c = classify(points, **extra)
    assert (c.key_strategy, c.bound) == (strategy, bound), c.reasons
    assert [p["instances"] for p in c.evidence["points"]] == [1, 2, 4]


def test_busy_is_measured_against_each_pods_cpu_limit() -> None:
    """Pods of a tenth of a core: a compute-bound one burns 0.095 each at the knee - busy for its
    limit, though far below a quarter of a core - and an IO-bound one 0.02, idle for any."""
    cpu = [Measurement(n, 45.0 * n, 0.095 * n, cpu_limit_cores=0.1 * n) for n in (1, 2, 4)]
    io = [Measurement(n, 40.0, 0.02 * n, cpu_limit_cores=0.1 * n) for n in (1, 2, 4)]
    c = classify(cpu)
    assert (c.key_strategy, c.confidence, c.evidence["cpu_busy_at_knee"]) == ("service", "high", True)
    assert [p["busy_cores_per_instance"] for p in c.evidence["points"]] == [0.08, 0.08, 0.08]
    # without the limit the same numbers look idle: scaling alone decides, at low confidence
    unlimited = classify([Measurement(m.instances, m.capacity_qps, m.cpu_cores) for m in cpu])
    assert (unlimited.key_strategy, unlimited.confidence) == ("service", "low")
    i = classify(io)
    assert (i.key_strategy, i.bound, i.confidence) == ("machine", "io", "high"), i.reasons


def test_a_measurement_says_what_it_had_before_the_command_line() -> None:
    own = [replace(m, available_cores=16.0) for m in SMALL_HOST]
    c = classify(own, available_cores=2)
    assert c.evidence["scaling_limited_by"] == "unknown"  # 1.92 of 16 cores is not full


def test_the_best_measurement_per_instance_count_is_used() -> None:
    c = classify([Measurement(1, 20), Measurement(1, 18), Measurement(2, 40)])
    assert c.evidence["points"][0]["capacity_qps"] == 20
    assert c.evidence["efficiency"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("points", "message"),
    [
        pytest.param([Measurement(1, 20)], "two or more instance counts", id="one count only"),
        pytest.param([Measurement(1, 20), Measurement(1, 30)], "two or more", id="same count"),
        pytest.param([Measurement(0, 20), Measurement(2, 30)], "at least 1", id="zero instances"),
        pytest.param([Measurement(1, 0), Measurement(2, 30)], "positive", id="zero capacity"),
    ],
)
def test_classify_refuses_what_it_cannot_judge(points: list[Measurement], message: str) -> None:
    with pytest.raises(ClassifyError, match=message):
        classify(points)


def _result(tmp_path: Path, name: str, **fields: object) -> Path:
    doc = {
        "kind": "gpuplan.loadtest/v1",
        "capacity_qps": 38.8,
        "instances": 2,
        "knee": {"server_cpu_cores": 1.5},
    }
    doc.update(fields)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_parse_measurement_reads_the_senders_and_the_host(tmp_path: Path) -> None:
    f = _result(
        tmp_path, "r.json", knee={"server_cpu_cores": 1.32, "sender_cpu_cores": [0.4, 0.2]}, host={"cpus": 2}
    )
    m = parse_measurement(str(f))
    assert (m.cpu_cores, m.sender_cpu_cores, m.available_cores) == (1.32, (0.4, 0.2), 2.0)


def test_parse_measurement_from_files_and_numbers(tmp_path: Path) -> None:
    f = _result(tmp_path, "r.json")
    assert parse_measurement(str(f)) == Measurement(2, 38.8, 1.5, str(f))
    assert parse_measurement(f"4={f}").instances == 4
    assert parse_measurement("3=120:2.5") == Measurement(3, 120.0, 2.5, "3=120:2.5")
    assert parse_measurement("1=20") == Measurement(1, 20.0, None, "1=20")


@pytest.mark.parametrize(
    ("fields", "arg", "message"),
    [
        pytest.param(
            {"instances": None},
            "{f}",
            "does not say how many instances",
            id="a run without --instances needs N=FILE",
        ),
        pytest.param({"capacity_qps": None}, "{f}", "no rate was held", id="nothing held"),
        pytest.param({}, "x={f}", "instance count", id="N must be a number"),
        pytest.param({}, "2=40:lots", "CPU cores", id="cpu must be a number"),
        pytest.param({}, "{tmp}/missing.json", "no such file", id="missing file"),
    ],
)
def test_parse_measurement_errors(tmp_path: Path, fields: dict[str, object], arg: str, message: str) -> None:
    f = _result(tmp_path, "r.json", **fields)
    with pytest.raises(ClassifyError, match=message):
        parse_measurement(arg.format(f=f, tmp=tmp_path))


def test_parse_measurement_rejects_other_json(tmp_path: Path) -> None:
    other = tmp_path / "plan.json"
    other.write_text('{"allocations": []}')
    with pytest.raises(ClassifyError, match="not a loadtest JSON result"):
        parse_measurement(str(other))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ClassifyError, match="not a loadtest JSON result"):
        parse_measurement(str(broken))
