"""The JSON-RPC numbers and CLI exit statuses the error classes declare are
the ones docs/rpc.md, docs/cli.md and the modules' docstrings promise
(scripts key on both)."""

from __future__ import annotations

import re
from pathlib import Path

from adapters import schedule_admin
from adapters.client import ServerUnreachable
from adapters.rpc import protocol
from adapters.rpc.protocol import DOMAIN_ERROR_CODES, InvalidParams, RpcError, Unauthorized
from adapters.schedule_admin import EXIT_CODES, exit_code_for
from core.errors import ERROR_CLASSES, InvalidDefinition, Problem, SchedulingError

DOCS = Path(__file__).resolve().parents[2] / "docs"

# `| `-32003` | `not_found` | ...`: the domain rows (-32010 on are the transport's).
_RPC_ROW = re.compile(r"^\| `(-3200\d)` \| `([a-z_]+)` \|", re.MULTILINE)
# `| `3` | not found ... | `not_found` |`
_EXIT_ROW = re.compile(r"^\| `(\d+)` \| .* \| ([^|]*) \|$", re.MULTILINE)

_NON_DOMAIN: dict[str, type[Exception]] = {
    "invalid_params": InvalidParams,
    "unauthorized": Unauthorized,
    "internal_error": RpcError,
}


def _by_code(name: str) -> type[Exception]:
    found = {cls.code: cls for cls in ERROR_CLASSES}
    return found.get(name) or _NON_DOMAIN[name]


def test_rpc_md_lists_every_domain_class_with_its_declared_number() -> None:
    rows = {name: int(number) for number, name in _RPC_ROW.findall((DOCS / "rpc.md").read_text())}
    assert rows == {cls.code: number for cls, number in DOMAIN_ERROR_CODES.items()}
    for cls in ERROR_CLASSES:
        # A refinement travels under the number of the class it refines.
        assert DOMAIN_ERROR_CODES[next(c for c in cls.__mro__ if c in DOMAIN_ERROR_CODES)] == (
            cls.rpc_code
        )


def test_the_protocol_docstring_lists_the_declared_numbers() -> None:
    # `    -32003  not_found`: the domain rows of its table.
    rows = re.findall(r"^ +(-3200\d)  ([a-z_]+)", protocol.__doc__ or "", re.MULTILINE)
    assert {name: int(number) for number, name in rows} == {
        cls.code: number for cls, number in DOMAIN_ERROR_CODES.items()
    }


def test_cli_md_exit_statuses_are_the_declared_ones() -> None:
    seen: set[str] = set()
    for status, codes in _EXIT_ROW.findall((DOCS / "cli.md").read_text()):
        for name in re.findall(r"`([a-z_]+)`", codes):
            seen.add(name)
            cls = _by_code(name)
            assert getattr(cls, "exit_status", None) == int(status), name
    assert {cls.code for cls, _ in EXIT_CODES if issubclass(cls, SchedulingError)} <= seen
    assert {cls for cls, _ in EXIT_CODES} >= {ServerUnreachable, Unauthorized}


def test_the_cli_docstring_lists_the_declared_exit_statuses() -> None:
    # `   4  conflict   (revision_conflict, already_exists)`
    doc = schedule_admin.__doc__ or ""
    rows = re.findall(r"^ +(\d+)  .*\(([a-z_]+(?:[,;] [a-z_]+)*)[);]", doc, re.MULTILINE)
    assert len(rows) == 6
    for status, codes in rows:
        for name in re.findall(r"[a-z_]+", codes):
            assert getattr(_by_code(name), "exit_status", None) == int(status), name


def test_exit_status_follows_the_error_class_and_a_missing_deployment() -> None:
    missing = InvalidDefinition(
        "", problems=[Problem(field="deployment_id", reason="x")], data={"not_found": True}
    )
    assert exit_code_for(missing) == 3
    assert exit_code_for(InvalidDefinition("bad")) == 5
    assert exit_code_for(ServerUnreachable("down")) == 8
    assert exit_code_for(TimeoutError("slow")) == 1
