"""``make golden``: rewrite the golden values.yaml files from the current renderer.

Only ever run by hand, never by CI: the golden test compares, and a change to these files is
reviewed as a diff before it is committed.
"""

from __future__ import annotations

from planner.output.render import values_yaml
from tests.test_render import DATA, GOLDEN_CASES, load


def main() -> None:
    for case in GOLDEN_CASES:
        spec, result = load(case)
        target = DATA / case / "values.yaml"
        target.write_text(values_yaml(spec, result))
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
