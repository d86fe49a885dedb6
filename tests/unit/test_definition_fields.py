"""The definition models are the one list of a schedule's fields: the API's
and the client's keyword arguments, the RPC params and the CLI's options
follow them."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, get_args

import pytest

from adapters.admin.schedules import Misfire, Overlap, definition_flags
from adapters.client import App
from adapters.rpc.methods import METHODS
from core.definitions import (
    DEFINITION_FIELDS,
    PATCHABLE_FIELDS,
    ScheduleDefinition,
    SchedulePatch,
)
from core.definitions import Misfire as MisfireField
from core.definitions import Overlap as OverlapField
from shell.schedules_api import SchedulesApi

CREATE: tuple[str, ...] = DEFINITION_FIELDS
UPDATE: tuple[str, ...] = ("schedule_id", "expected_revision", *PATCHABLE_FIELDS)


def _keywords(function: Callable[..., Any]) -> dict[str, bool]:
    """Each keyword-only parameter and whether it is required."""
    return {
        name: parameter.default is inspect.Parameter.empty
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }


def _required(model: type[Any]) -> dict[str, bool]:
    return {name: info.is_required() for name, info in model.model_fields.items()}


def test_a_patch_has_every_field_of_the_definition_but_its_id() -> None:
    assert tuple(name for name in DEFINITION_FIELDS if name != "schedule_id") == PATCHABLE_FIELDS
    assert not any(_required(SchedulePatch).values())


@pytest.mark.parametrize("owner", [SchedulesApi, App])
def test_create_and_update_take_the_definition_fields(owner: type[Any]) -> None:
    assert _keywords(owner.create_schedule) == _required(ScheduleDefinition)
    update = _keywords(owner.update_schedule)
    assert tuple(update) == UPDATE
    assert [name for name, required in update.items() if required] == list(UPDATE[:2])


def test_the_rpc_params_are_the_definition_fields() -> None:
    create = METHODS["workflow.schedules.create"].params
    update = METHODS["workflow.schedules.update"].params
    assert _required(create) == _required(ScheduleDefinition)
    assert tuple(update.model_fields) == UPDATE
    assert [name for name, required in _required(update).items() if required] == list(UPDATE[:2])


def test_the_cli_flags_set_the_patchable_fields_with_the_models_choices() -> None:
    given = dict.fromkeys(inspect.signature(definition_flags).parameters)
    flags = definition_flags(**given)
    assert tuple(flags) == PATCHABLE_FIELDS
    assert {member.value for member in Overlap} == set(get_args(OverlapField))
    assert {member.value for member in Misfire} == set(get_args(MisfireField))
