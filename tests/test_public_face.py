"""The planner's public face: every name the command line and the operator use, loaded lazily."""

from __future__ import annotations

import subprocess
import sys

import planner


def test_all_lists_exactly_the_names_the_face_can_load() -> None:
    assert sorted(planner.__all__) == sorted(planner._MODULE_OF)


def test_every_public_name_resolves_to_its_home() -> None:
    for name in planner.__all__:
        value = getattr(planner, name)
        home = planner._MODULE_OF[name]
        assert getattr(sys.modules[home], name) is value, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        planner.no_such_thing  # noqa: B018
    except AttributeError as e:
        assert "no_such_thing" in str(e)
    else:
        raise AssertionError("planner.no_such_thing resolved")


def test_importing_the_package_loads_no_module_of_it() -> None:
    code = "import sys, planner; print(sorted(m for m in sys.modules if m.startswith('planner.')))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"
