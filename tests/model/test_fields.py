"""A config read from JSON or YAML: unknown names and wrong types are refused by name; numbers YAML read as text
become floats (model/fields.py, shared by ModelConfig and TrainConfig)."""

from __future__ import annotations  # the field types as text, as in the configs typed_fields reads

from dataclasses import dataclass

import pytest

from aiayn.model.fields import typed_fields


@dataclass
class Example:
    lr: float = 1e-3
    steps: int = 10
    name: str = "run"
    limit: int | None = None
    fast: bool = False


def test_values_of_the_right_type_pass_and_numbers_become_floats():
    data = {"lr": "2e-3", "steps": 5, "name": "a", "limit": None, "fast": True}
    assert typed_fields(Example, data) == {"lr": 2e-3, "steps": 5, "name": "a", "limit": None, "fast": True}
    assert typed_fields(Example, {"lr": 3})["lr"] == 3.0 and isinstance(typed_fields(Example, {"lr": 3})["lr"], float)


@pytest.mark.parametrize("data, message", [
    ({"speed": 1}, "unknown field(s) speed; known: lr, steps, name, limit, fast"),
    ({"lr": "fast"}, "field lr must be a number, got 'fast'"),
    ({"lr": True}, "field lr must be a number"),
    ({"steps": 1.5}, "field steps must be of type int, got 1.5"),
    ({"steps": True}, "field steps must be of type int"),
    ({"limit": "3"}, "field limit must be of type int"),
    ({"name": None}, "field name must be of type str"),
])
def test_unknown_names_and_wrong_types_are_refused_by_name(data, message):
    with pytest.raises(ValueError) as err:
        typed_fields(Example, data)
    assert message in str(err.value)
