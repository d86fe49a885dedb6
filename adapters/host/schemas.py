"""JSON Schema (Draft 2020-12) checks that report `Problem`s instead of raising.

Plans carry three kinds of schema (input, output, resume). They are checked
once against the metaschema when the artifact is created and then applied to
instances with `format` assertions on for `ASSERTED_FORMATS`, so `"format": "date-time"` means it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any, Final

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from core.errors import Problem

__all__ = ["ASSERTED_FORMATS", "check_schema", "join_path", "validate_instance"]

_META = Draft202012Validator(Draft202012Validator.META_SCHEMA)

# The formats docs/plans.md promises are asserted. jsonschema registers a
# format's checker only when the library implementing it imports (date-time
# and time need rfc3339-validator), and an unregistered format silently
# passes everything: so a missing library must stop the host, not weaken it.
ASSERTED_FORMATS: Final = (
    "date",
    "date-time",
    "email",
    "idn-email",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "regex",
    "time",
    "uuid",
)
_DRAFT_CHECKS: Final = Draft202012Validator.FORMAT_CHECKER.checkers
_unchecked = sorted(set(ASSERTED_FORMATS) - set(_DRAFT_CHECKS))
if _unchecked:
    raise ImportError(
        f"no checker for the JSON Schema formats {_unchecked}: reinstall wf-scheduler"
    )
_FORMAT_CHECKER: Final = FormatChecker(())
_FORMAT_CHECKER.checkers = {name: _DRAFT_CHECKS[name] for name in ASSERTED_FORMATS}


def join_path(prefix: str, parts: Iterable[Any]) -> str:
    """`inputs` + ["user", 0, "name"] -> `inputs.user.0.name`."""
    return ".".join([prefix, *(str(part) for part in parts)])


def check_schema(field: str, schema: Any) -> list[Problem]:
    """Every way `schema` fails to be a Draft 2020-12 JSON Schema (empty if valid)."""
    if not isinstance(schema, dict | bool):
        return [Problem(field=field, reason="must be a JSON Schema (an object or a boolean)")]
    problems = [
        Problem(field=join_path(field, error.absolute_path), reason=error.message)
        for error in sorted(_META.iter_errors(schema), key=lambda e: list(map(str, e.path)))
    ]
    problems.extend(_remote_refs(field, schema))
    return problems


def _remote_refs(field: str, node: Any) -> list[Problem]:
    # The host never fetches schemas: a non-local reference could only fail at run time.
    found: list[Problem] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                if not value.startswith("#"):
                    found.append(
                        Problem(
                            field=f"{field}.{key}",
                            reason=f"only local references ('#...') are supported, got {value!r}",
                        )
                    )
            else:
                found.extend(_remote_refs(f"{field}.{key}", value))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_remote_refs(f"{field}.{index}", value))
    return found


def _problems_for(prefix: str, error: ValidationError) -> list[Problem]:
    base = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        # Name the missing property itself (`inputs.name`), not its parent object.
        required = error.validator_value
        names = required if isinstance(required, list) else []
        missing = [name for name in names if isinstance(name, str) and name not in error.instance]
        if missing:
            return [
                Problem(field=join_path(prefix, [*base, name]), reason="is required")
                for name in missing
            ]
    return [Problem(field=join_path(prefix, base), reason=error.message)]


@functools.lru_cache(maxsize=256)
def _compiled(text: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(text), format_checker=_FORMAT_CHECKER)


def _validator(schema: Any) -> Draft202012Validator:
    # Building a validator costs more than most validations (every scheduled
    # admission is checked twice): reuse one per schema, keyed by its content
    # so that a schema changed in place can never meet a stale validator.
    try:
        text = json.dumps(schema, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return Draft202012Validator(schema, format_checker=_FORMAT_CHECKER)
    return _compiled(text)


def validate_instance(prefix: str, schema: Any, instance: Any) -> list[Problem]:
    """Every way `instance` fails `schema`, with fields named from `prefix`.

    A schema that cannot be applied (an unresolvable `$ref`, say) is itself
    reported as a problem rather than raised.
    """
    validator = _validator(schema)
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    try:
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.path)))
    except Exception as exc:  # jsonschema raises several unrelated types here
        return [Problem(field=prefix, reason=f"the schema cannot be applied: {exc}")]
    for error in errors:
        for problem in _problems_for(prefix, error):
            key = (problem.field, problem.reason)
            if key not in seen:
                seen.add(key)
                problems.append(problem)
    return problems
