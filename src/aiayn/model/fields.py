"""A config dataclass read from JSON or YAML: each field's value checked against the field's type (the dataclass's
module has `from __future__ import annotations`: types as text)."""

from __future__ import annotations

import dataclasses


def typed_fields(cls, data: dict) -> dict:
    """``data`` checked against the fields of dataclass ``cls``: unknown names are an error, and so is a
    value of the wrong type; numbers written as text (YAML reads 2e-3 so) convert to float fields."""
    types = {f.name: f.type for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(types))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(types)}")
    return {name: _typed(name, value, types[name]) for name, value in data.items()}


def _typed(name: str, value, annotation: str):
    if value is None and "None" in annotation:
        return None
    kind = annotation.split(" |")[0]
    if kind == "float" and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "tuple[int, ...]" and isinstance(value, (list, tuple)) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    if kind == "tuple[str, ...]" and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    expected = {"int": int, "str": str, "bool": bool, "dict": dict}.get(kind)
    if expected is not None and isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return value
    what = {"float": "a number", "tuple[int, ...]": "a list of whole numbers",
            "tuple[str, ...]": "a list of strings"}.get(kind, f"of type {kind}")
    raise ValueError(f"field {name} must be {what}, got {value!r}")
