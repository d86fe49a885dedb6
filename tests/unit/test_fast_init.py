"""`fast_init`: the same constructor as the dataclass's own, only quicker."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest

from core.fast_init import fast_init

# Every module that gives classes the quicker `__init__`.
_MODULES = (
    "core.commands",
    "core.events",
    "core.state",
    "shell.history_rows",
    "shell.history_appends",
    "shell.observer",
    "adapters.host.engine",
)


def _quick_classes() -> list[type]:
    found: list[type] = []
    for name in _MODULES:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and value.__module__ == name
                and hasattr(vars(value).get("__init__"), "dataclass_init")
            ):
                found.append(value)
    return found


QUICK = _quick_classes()


def test_the_hot_classes_have_it() -> None:
    names = {cls.__name__ for cls in QUICK}
    assert {
        "RecordOccurrence",
        "AdmitOccurrence",
        "PersistRuntime",
        "OccurrenceAdmitted",
        "RunStatusChanged",
        "ActiveRun",
        "Open",
        "TransitionAppend",
        "Decision",
        "Position",
        "Stop",
    } <= names


def _shape(signature: inspect.Signature) -> list[tuple[str, Any, Any]]:
    shape = []
    for parameter in signature.parameters.values():
        default = parameter.default
        if default is not inspect.Parameter.empty and repr(default) == "<factory>":
            default = "<factory>"
        shape.append((parameter.name, parameter.kind, default))
    return shape


@pytest.mark.parametrize("cls", QUICK, ids=lambda cls: cls.__name__)
def test_same_signature_same_value_still_frozen(cls: type) -> None:
    quick = cls.__init__
    original = quick.dataclass_init  # type: ignore[attr-defined]
    assert _shape(inspect.signature(quick)) == _shape(inspect.signature(original))
    # A distinct placeholder per field, given as the dataclass's own __init__ takes it.
    arguments = {f.name: object() for f in dataclasses.fields(cls)}
    positional = [
        arguments[p.name]
        for p in inspect.signature(original).parameters.values()
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name != "self"
    ]
    keywords = {
        name: value
        for name, value in arguments.items()
        if inspect.signature(original).parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
    }
    built = cls(*positional, **keywords)
    expected = cls.__new__(cls)
    original(expected, *positional, **keywords)
    assert built == expected
    assert all(getattr(built, name) is value for name, value in arguments.items())
    for name in arguments:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(built, name, None)


@fast_init
@dataclass(frozen=True, slots=True)
class _Base:
    a: int


@fast_init
@dataclass(frozen=True, slots=True)
class _Sample(_Base):
    b: str = "b"
    c: list[int] = field(default_factory=list)
    d: int = field(default=4, kw_only=True)


def test_defaults_factories_keyword_only_and_inherited_fields() -> None:
    assert _Sample(1) == _Sample(1, "b", [], d=4)
    assert _Sample(1, "x", [2], d=5) == _Sample(a=1, b="x", c=[2], d=5)
    first, second = _Sample(1), _Sample(1)
    assert first.c == [] and first.c is not second.c  # a fresh value per instance
    quick = _Sample.__init__
    assert str(inspect.signature(quick)) == str(inspect.signature(quick.dataclass_init))  # type: ignore[attr-defined]
    assert str(inspect.signature(quick)).startswith(
        "(self, a: 'int', b: 'str' = 'b', c: 'list[int]' = <factory>, *, d: 'int' = 4)"
    )


def test_wrong_arguments_raise_type_errors_like_the_dataclass() -> None:
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'a'"):
        _Sample()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'e'"):
        _Sample(1, e=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="positional"):
        _Sample(1, "b", [], 4)  # type: ignore[misc]


def test_only_plain_frozen_slotted_dataclasses_qualify() -> None:
    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        b: InitVar[int] = 0

    @dataclass(frozen=True, slots=True)
    class Skipped:
        a: int
        b: int = field(default=0, init=False)

    for cls in (NoSlots, NotFrozen, PostInit, WithInitVar, Skipped):
        with pytest.raises(TypeError, match="fast_init"):
            fast_init(cls)
