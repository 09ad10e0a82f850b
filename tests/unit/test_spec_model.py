"""The spec objects (patcher/specs/model.py) and the validator's models (validate.py) are one
format written twice: the same classes by name, the same fields in the same order with the
same defaults, the same edit ops. A field added to one side only fails here, not in a journal
whose digests moved. And the objects behave as the frozen dataclasses they stand in for."""

from __future__ import annotations

import pickle

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from patcher.specs import model, validate
from patcher.specs.model import (
    EDIT_OPS,
    FrozenError,
    PatchSpec,
    copy_with,
    field_names,
    from_data,
    toml_loads,
)
from tests.support.standin_specs import SPEC_A


def _pairs() -> list[tuple[type[model._Model], type[BaseModel]]]:
    out = []
    for name, cls in vars(validate).items():
        if (
            isinstance(cls, type)
            and issubclass(cls, BaseModel)
            and cls.__module__ == validate.__name__
        ):
            out.append((getattr(model, name), cls))
    return out


PAIRS = _pairs()


def test_every_model_has_its_object_class() -> None:
    """Each pydantic model of validate has its object class of the same name in model, and
    each object class its pydantic model: counted from the modules, so a new edit op is a
    pair more, not a number to change here."""
    names = {m.__name__ for _, m in PAIRS}
    assert {"PatchSpec", "Variant", "Probe", "MetricsThresholds", "_Edit"} <= names
    objects = {
        n
        for n, c in vars(model).items()
        if isinstance(c, type) and issubclass(c, model._Model) and c.__module__ == model.__name__
    }
    assert objects == {o.__name__ for o, _ in PAIRS} == names


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=lambda c: c.__name__)
def test_same_fields_order_and_defaults(ours: type[model._Model], theirs: type[BaseModel]) -> None:
    assert field_names(ours) == tuple(theirs.model_fields)
    defaults = dict(ours._fields)
    for name, info in theirs.model_fields.items():
        if name == "op":  # required there (the union's tag); here it defaults to the tag
            assert (defaults[name],) == info.annotation.__args__  # type: ignore[union-attr]
        elif info.default_factory is not None:
            assert defaults[name].make() == info.default_factory()  # type: ignore[call-arg]
        elif info.default is PydanticUndefined:
            assert defaults[name] is model._Missing, name
        else:
            assert defaults[name] == info.default and type(defaults[name]) is type(info.default)


def test_the_same_edit_ops() -> None:
    tags = {
        m.model_fields["op"].annotation.__args__[0]: n  # type: ignore[union-attr]
        for n, m in ((o.__name__, t) for o, t in PAIRS)
        if "op" in m.model_fields
    }
    assert set(EDIT_OPS) == set(tags) == set(validate.EDIT_OPS)
    for op, name in tags.items():
        assert model.edit_from_json({"op": op, **_required(name)}).op == op


def _required(name: str) -> dict[str, object]:
    cls = getattr(model, name)
    return {n: "x" for n, d in cls._fields if d is model._Missing and n != "op"}


def test_objects_are_frozen_keyword_records() -> None:
    spec = from_data(toml_loads(SPEC_A))
    with pytest.raises(FrozenError):
        spec.id = "other"  # type: ignore[misc]
    with pytest.raises(FrozenError):
        del spec.variant[0].edit[0].scope  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing field 'summary'"):
        PatchSpec(id="a", package="p", variant=[])  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unknown field"):
        model.Probe(name="n", module="m", bogus=1)  # type: ignore[call-arg]
    assert model.Probe(name="n", module="m").timeout == 120.0
    a = PatchSpec(id="a", summary="s", package="p", variant=[])
    b = PatchSpec(id="a", summary="s", package="p", variant=[])
    assert a == b and a.references == [] and a.references is not b.references  # made anew
    assert a != copy_with(a, summary="t") and repr(a).startswith("PatchSpec(id='a', ")
    # pickled (a Ray task's spec) with what it derived
    digest = spec.digest
    back = pickle.loads(pickle.dumps(spec))
    assert back == spec and back.digest == digest and back.__dict__["digest"] == digest
