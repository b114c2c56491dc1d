"""The wheels step's choice (kit/hostcheck/wheels.py): a carried wheel goes in only where the host
lacks its distribution or has it older, so nothing the host's own packages rely on is shadowed."""

from __future__ import annotations

import pytest

from kit.hostcheck.wheels import version_key, wheel_name_version, wheels_to_install


@pytest.mark.parametrize(
    ("wheel", "expected"),
    [
        (
            "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
            ("pydantic-core", "2.50.5"),
        ),
        ("py_spy-0.4.3-py2.py3-none-manylinux1_x86_64.manylinux_2_5_x86_64.whl", ("py-spy", "0.4.3")),
        ("typing_extensions-4.16.0-py3-none-any.whl", ("typing-extensions", "4.16.0")),
        ("not-a-wheel.tar.gz", None),
    ],
)
def test_wheel_names(wheel, expected):
    assert wheel_name_version(wheel) == expected


def test_versions_compare_by_their_numbers_not_their_text():
    assert version_key("4.12.2") < version_key("4.16.0") < version_key("4.100.0")
    assert version_key("2026.10.19.post1") < version_key("2027.1.1")


def test_a_wheel_goes_in_only_where_the_host_lacks_it_or_has_it_older():
    wheels = [
        "pydantic-2.14.4-py3-none-any.whl",
        "typing_extensions-4.16.0-py3-none-any.whl",
        "idna-3.20-py3-none-any.whl",
        "certifi-2026.10.19.post1-py3-none-any.whl",
    ]
    installed = {"pydantic": None, "typing-extensions": "4.12.2", "idna": "3.20", "certifi": "2027.1.1"}
    take, skip = wheels_to_install(wheels, installed)
    assert take == ["pydantic-2.14.4-py3-none-any.whl", "typing_extensions-4.16.0-py3-none-any.whl"]
    assert [s.split(" ")[0] for s in skip] == [
        "certifi-2026.10.19.post1-py3-none-any.whl",
        "idna-3.20-py3-none-any.whl",
    ]
    assert skip[0].endswith("(certifi 2027.1.1 is here)")
