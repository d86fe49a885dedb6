"""docs/plans.md is executable: every JSON block is a valid plan, and every run the
text describes ("With inputs `...` ... output `...`") behaves as described."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from adapters.host.plans import compile_plan

from .conftest import Builder, deploy

DOC = Path(__file__).resolve().parents[2] / "docs" / "plans.md"
_BLOCK = re.compile(r"```json\n(.*?)```", re.DOTALL)


def _examples() -> list[tuple[dict[str, Any], str]]:
    text = DOC.read_text()
    blocks = list(_BLOCK.finditer(text))
    return [
        (json.loads(block.group(1)), text[block.end() : nxt.start() if nxt else len(text)])
        for block, nxt in zip(blocks, [*blocks[1:], None], strict=True)
    ]


EXAMPLES = _examples()


def test_the_doc_has_examples() -> None:
    assert [plan["name"] for plan, _ in EXAMPLES] == ["hello", "approval", "fallback", "slow"]


@pytest.mark.parametrize(("plan", "prose"), EXAMPLES, ids=[p["name"] for p, _ in EXAMPLES])
async def test_example(build: Builder, plan: dict[str, Any], prose: str) -> None:
    compile_plan(plan)
    inputs = re.search(r"inputs\s+`([^`]+)`", prose)
    output = re.search(r"output\s+`([^`]+)`", prose)
    assert inputs and output, f"the text after plan {plan['name']!r} describes no run"
    server = build()
    await deploy(server, plan, f"{plan['name']}.default")
    run = await server.api.run_deployment(f"{plan['name']}.default", json.loads(inputs.group(1)))
    resume = re.search(r"resume_run\(run_id, ([^)]+)\)", prose)
    if resume:
        assert run["status"] == "interrupted"
        run = await server.api.resume_run(run["run_id"], json.loads(resume.group(1)))
    assert run["status"] == "completed"
    assert run["output"] == json.loads(output.group(1))
