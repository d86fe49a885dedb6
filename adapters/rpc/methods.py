"""The method registry: JSON-RPC method name -> params schema -> API call.

Every method is one row of `METHODS`: its name, a pydantic model of its
params (unknown keys rejected, no type coercion), and the API call it makes.
Params carry the Python API's keyword names (the schedule methods' models
are built from the definition models, `_definition_params`); a param left out or sent as
`null` is not passed, so the API's own default (or, for updates, "unpatched")
applies. Shape errors become `InvalidParams` (-32602) naming each field;
everything the API itself rejects keeps its domain error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import UnionType
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic.fields import FieldInfo

from adapters.rpc.protocol import METHOD_NOT_FOUND, InvalidParams, RpcError
from core.definitions import ScheduleDefinition, SchedulePatch
from core.errors import Problem, SchedulerUnavailable, StoreUnavailable

__all__ = [
    "METHODS",
    "Method",
    "RpcContext",
    "invoke",
    "method_names",
    "params_problems",
]


class Params(BaseModel):
    """Base of every params model: named members only, nothing unknown, no coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class NoParams(Params):
    pass


class ScheduleIdParams(Params):
    schedule_id: str


class ListSchedulesParams(Params):
    include_deleted: bool | None = None


def _json_shape(annotation: Any) -> Any:
    """The JSON type a definition field's value has on the wire.

    The params check only shapes; the definition's own rules (ranges, zones,
    cron syntax) are the API's to apply, so that they answer as
    `InvalidDefinition` naming the field, not as invalid params."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _json_shape(get_args(annotation)[0])
    if origin in (Union, UnionType):
        (shape,) = {_json_shape(arg) for arg in get_args(annotation) if arg is not type(None)}
        return shape
    if origin is Literal:
        (shape,) = {type(value) for value in get_args(annotation)}
        return shape
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return dict[str, Any]
    if annotation in (str, int, float, bool):
        return annotation
    raise TypeError(f"no JSON shape for a definition field of type {annotation!r}")


def _definition_params(name: str, fields: Mapping[str, FieldInfo], **leading: Any) -> type[Params]:
    # The schedule methods take the definition's fields as params, so their
    # models are built from it: a field added to the definition is accepted
    # on the wire with no second list to keep in step.
    members: dict[str, Any] = dict(leading)
    for field_name, info in fields.items():
        shape = _json_shape(info.annotation)
        members[field_name] = (shape, ...) if info.is_required() else (shape | None, None)
    model: type[Params] = create_model(name, __base__=Params, __module__=__name__, **members)
    return model


CreateScheduleParams = _definition_params("CreateScheduleParams", ScheduleDefinition.model_fields)
UpdateScheduleParams = _definition_params(
    "UpdateScheduleParams",
    SchedulePatch.model_fields,
    schedule_id=(str, ...),
    expected_revision=(int, ...),
)


class TriggerScheduleParams(Params):
    schedule_id: str
    # Left out (None) = the schedule's overlap policy; the API names a value
    # other than "allow" as `invalid_input` (values are the API's to check).
    overlap: str | None = None


class BackfillScheduleParams(Params):
    schedule_id: str
    # ISO-8601 instants with an offset; the API parses them and names a bad
    # one, a range that ends in the future or holds too many instants.
    start: str
    end: str
    overlap: str | None = None


class ListOccurrencesParams(Params):
    schedule_id: str
    limit: int | None = None
    cursor: str | None = None


class CreateArtifactParams(Params):
    artifact_id: str
    version: int
    plan: dict[str, Any]
    title: str | None = None
    description: str | None = None


class GetArtifactParams(Params):
    artifact_id: str
    version: int | None = None


class SaveDeploymentParams(Params):
    payload: dict[str, Any]


class DeploymentIdParams(Params):
    deployment_id: str


class DeleteDeploymentParams(Params):
    deployment_id: str
    # Left out (None) = the API's default: refuse while schedules use it.
    force: bool | None = None


class StartRunParams(Params):
    deployment_id: str
    inputs: dict[str, Any] | None = None
    max_steps: int | None = None


class ResumeRunParams(Params):
    run_id: str
    # Whatever the interrupt's resume_schema accepts; the host validates it.
    payload: Any


class RunIdParams(Params):
    run_id: str


class ListRunsParams(Params):
    status: str | None = None
    cursor: str | None = None
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class RpcContext:
    """What a method may touch: the server's API and a health reporter."""

    api: Any
    health: Callable[[], Mapping[str, Any]] = field(default=lambda: {"status": "ok"})


Target = Literal["api", "schedules", "health"]


@dataclass(frozen=True, slots=True)
class Method:
    """One RPC method: `target.attribute(**params)`; `defaults` fill params left out."""

    name: str
    params: type[Params]
    target: Target
    attribute: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""


def _row(
    name: str,
    params: type[Params],
    target: Target,
    attribute: str,
    summary: str,
    **defaults: Any,
) -> tuple[str, Method]:
    return name, Method(name, params, target, attribute, defaults, summary)


METHODS: Final[Mapping[str, Method]] = dict(
    [
        _row(
            "workflow.schedules.create",
            CreateScheduleParams,
            "schedules",
            "create_schedule",
            "Create a schedule (caller-chosen id).",
        ),
        _row(
            "workflow.schedules.get",
            ScheduleIdParams,
            "schedules",
            "get_schedule",
            "The full definition payload of one schedule.",
        ),
        _row(
            "workflow.schedules.list",
            ListSchedulesParams,
            "schedules",
            "list_schedules",
            "Every schedule; deleted ones only with include_deleted.",
        ),
        _row(
            "workflow.schedules.update",
            UpdateScheduleParams,
            "schedules",
            "update_schedule",
            "Patch the provided fields; expected_revision required.",
        ),
        _row(
            "workflow.schedules.pause",
            ScheduleIdParams,
            "schedules",
            "pause_schedule",
            "Stop future admission (idempotent).",
        ),
        _row(
            "workflow.schedules.resume",
            ScheduleIdParams,
            "schedules",
            "resume_schedule",
            "Resume from the next future instant (idempotent).",
        ),
        _row(
            "workflow.schedules.delete",
            ScheduleIdParams,
            "schedules",
            "delete_schedule",
            "Soft delete; runs and history survive.",
        ),
        _row(
            "workflow.schedules.trigger",
            TriggerScheduleParams,
            "schedules",
            "trigger_schedule",
            "Run the schedule now, once (origin trigger); answers its occurrence.",
        ),
        _row(
            "workflow.schedules.backfill",
            BackfillScheduleParams,
            "schedules",
            "backfill_schedule",
            "Admit the past range's instants that did not run (origin backfill); answers the plan.",
        ),
        _row(
            "workflow.schedules.backfill.cancel",
            ScheduleIdParams,
            "schedules",
            "cancel_backfill",
            "Stop the schedule's running backfill (runs already admitted go on).",
        ),
        _row(
            "workflow.schedules.occurrences.list",
            ListOccurrencesParams,
            "schedules",
            "list_schedule_occurrences",
            "One page of occurrence history, oldest first, with next_cursor.",
        ),
        _row(
            "workflow.artifacts.create_from_plan",
            CreateArtifactParams,
            "api",
            "create_artifact_from_plan",
            "Create an artifact version from a plan.",
        ),
        _row(
            "workflow.artifacts.get",
            GetArtifactParams,
            "api",
            "get_artifact",
            "One artifact (latest version unless version is given).",
        ),
        _row("workflow.artifacts.list", NoParams, "api", "list_artifacts", "Every artifact."),
        _row(
            "workflow.deployments.save",
            SaveDeploymentParams,
            "api",
            "save_deployment",
            "Create or replace a deployment.",
        ),
        _row(
            "workflow.deployments.get",
            DeploymentIdParams,
            "api",
            "get_deployment",
            "One deployment.",
        ),
        _row("workflow.deployments.list", NoParams, "api", "list_deployments", "Every deployment."),
        _row(
            "workflow.deployments.delete",
            DeleteDeploymentParams,
            "api",
            "delete_deployment",
            "Delete a deployment (refused while schedules use it, unless force).",
        ),
        _row(
            "workflow.runs.start",
            StartRunParams,
            "api",
            "start_run",
            "Start a manual run; returns its run id at once.",
            inputs={},
        ),
        _row(
            "workflow.runs.resume",
            ResumeRunParams,
            "api",
            "resume_run",
            "Resume an interrupted run with a payload.",
        ),
        _row("workflow.runs.inspect", RunIdParams, "api", "inspect_run", "One run's status."),
        _row(
            "workflow.runs.list",
            ListRunsParams,
            "api",
            "list_runs",
            "One page of runs, with next_cursor.",
        ),
        _row("workflow.health", NoParams, "health", "", "Liveness and scheduler state."),
    ]
)


def method_names() -> list[str]:
    return sorted(METHODS)


def params_problems(exc: ValidationError) -> list[Problem]:
    """One `Problem` per pydantic error, named by its params path."""
    problems: list[Problem] = []
    for error in exc.errors():
        path = ".".join(str(part) for part in error["loc"]) or "params"
        kind = error["type"]
        if kind == "extra_forbidden":
            reason = "unknown parameter"
        elif kind == "missing":
            reason = "required"
        else:
            reason = error["msg"]
        problems.append(Problem(field=path, reason=reason))
    return problems


def _schedules_of(api: Any) -> Any:
    schedules = getattr(api, "schedules", None)
    if schedules is None:
        raise SchedulerUnavailable(
            "scheduling is not enabled on this server "
            "(start wf-rpc-server with --enable-scheduler or server.scheduler.enabled)"
        )
    return schedules


async def invoke(registry: Mapping[str, Method], ctx: RpcContext, method: str, params: Any) -> Any:
    """Run one call. Raises `RpcError` (unknown method), `InvalidParams`, or
    whatever the API raises (domain errors pass through unchanged; an
    `OSError` becomes `StoreUnavailable`)."""
    spec = registry.get(method)
    if spec is None:
        raise RpcError(
            METHOD_NOT_FOUND,
            f"method not found: {method!r}",
            {"code": "method_not_found", "method": method},
        )
    try:
        model = spec.params.model_validate(params)
    except ValidationError as exc:
        problems = params_problems(exc)
        raise InvalidParams.from_problems(f"params for {method}", problems) from None
    kwargs = dict(spec.defaults)
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if value is not None or info.is_required():
            kwargs[name] = value
    if spec.target == "health":
        return dict(ctx.health())
    target = _schedules_of(ctx.api) if spec.target == "schedules" else ctx.api
    call: Callable[..., Awaitable[Any]] = getattr(target, spec.attribute)
    try:
        return await call(**kwargs)
    except OSError as exc:
        # The APIs answer store errors as StoreUnavailable themselves; one that
        # slips through is still the store's, not an internal error.
        raise StoreUnavailable.from_os_error(exc, operation=method) from exc
