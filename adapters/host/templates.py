"""Value paths (`input.user.name`, `state.greeting`) and string templates.

A path starts at `input` (the run's merged inputs) or `state` (results written
by the nodes so far) and walks object keys; a segment of digits indexes a
list. A template is text with `{path}` placeholders; `{{` and `}}` stand for
literal braces. A string value is inserted as is; any other JSON value is
inserted as compact JSON (`3`, `true`, `null`, `{"a":1}`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "PathNotSet",
    "Template",
    "ValuePath",
    "parse_path",
    "parse_template",
    "render",
    "resolve",
]

_SEGMENT: Final = re.compile(r"^[A-Za-z0-9_-]+$")
_ROOTS: Final = ("input", "state")


class PathNotSet(LookupError):
    """A path names a value that this run does not have (yet)."""


@dataclass(frozen=True, slots=True)
class ValuePath:
    root: Literal["input", "state"]
    segments: tuple[str, ...]

    @property
    def text(self) -> str:
        return ".".join((self.root, *self.segments))


@dataclass(frozen=True, slots=True)
class Template:
    # Literal text and paths, in order.
    parts: tuple[str | ValuePath, ...]

    @property
    def paths(self) -> tuple[ValuePath, ...]:
        return tuple(part for part in self.parts if isinstance(part, ValuePath))


def parse_path(text: Any) -> ValuePath:
    """Parse `input[.seg]*` or `state[.seg]*`. Raises ValueError naming the fault."""
    if not isinstance(text, str):
        raise ValueError(f"a path must be a string, got {type(text).__name__}")
    root, *segments = text.split(".")
    if root not in _ROOTS:
        raise ValueError(f"path {text!r} must start with 'input' or 'state'")
    for segment in segments:
        if not _SEGMENT.match(segment):
            raise ValueError(
                f"path {text!r} has an empty or invalid segment {segment!r} "
                "(segments are letters, digits, '_' and '-')"
            )
    return ValuePath(root="input" if root == "input" else "state", segments=tuple(segments))


def resolve(path: ValuePath, inputs: Any, state: Any) -> Any:
    """The value at `path`. Raises PathNotSet when any segment is missing."""
    value = inputs if path.root == "input" else state
    walked: list[str] = [path.root]
    for segment in path.segments:
        walked.append(segment)
        if isinstance(value, dict) and segment in value:
            value = value[segment]
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            raise PathNotSet(f"{'.'.join(walked)} is not set")
    return value


def parse_template(text: Any) -> Template:
    """Parse a template. Raises ValueError naming the first syntax fault."""
    if not isinstance(text, str):
        raise ValueError(f"a template must be a string, got {type(text).__name__}")
    parts: list[str | ValuePath] = []
    literal: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "{" and text.startswith("{{", index):
            literal.append("{")
            index += 2
        elif char == "}" and text.startswith("}}", index):
            literal.append("}")
            index += 2
        elif char == "{":
            end = text.find("}", index + 1)
            if end == -1:
                raise ValueError(f"unclosed '{{' at offset {index}")
            inner = text[index + 1 : end]
            try:
                path = parse_path(inner.strip())
            except ValueError as exc:
                raise ValueError(f"placeholder at offset {index}: {exc}") from None
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(path)
            index = end + 1
        elif char == "}":
            raise ValueError(f"single '}}' at offset {index} (write '}}}}' for a literal brace)")
        else:
            literal.append(char)
            index += 1
    if literal:
        parts.append("".join(literal))
    return Template(parts=tuple(parts))


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def render(template: Template, inputs: Any, state: Any) -> str:
    """Fill the template. Raises PathNotSet for the first path without a value."""
    return "".join(
        part if isinstance(part, str) else _as_text(resolve(part, inputs, state))
        for part in template.parts
    )
