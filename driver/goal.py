"""A goal, written by a person: objective, success criteria, constraints and budget.

The agent never writes or amends its criteria; a person's amendment is stored as a new goal
version (see RunStore.add_goal), so the record shows what the agent was asked at every point.

A criterion may carry a `check` the driver runs itself instead of trusting the model:
- `receipt_ok`: a receipt of this run (of `tool`, when given) exited 0 with no error code, and
  its output contains `output_contains` when given ("a task succeeded", "an artifact exists").
- `call_ok`: when the model reports final, the driver calls `tool` itself, with `arguments` and
  the values `arguments_from` names in this run's own receipts (e.g. `task_id` from the output
  of its `create_task_from_template` receipt: the task it started). The call is decided by the
  checkpoint and run by the toolrunner like any; the criterion is met when its receipt exited 0
  with no error code and its output contains `output_contains` when given.
Criteria without a check count as met only when the model gives evidence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from driver.errors import GoalError
from driver.yamlfile import pydantic_problems, read_document
from warden.budget import Budget
from warden.yamlsource import SourceDocument


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReceiptValue(_Strict):
    """A value from one of the run's own receipts: the JSON output of the run's last successful
    call of the tool `receipt`, at `field` (a dotted path: `task_id`, `result.items.0.id`)."""

    receipt: str = Field(min_length=1, max_length=200)
    field: str = Field(pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$", max_length=500)


class CriterionCheck(_Strict):
    kind: Literal["receipt_ok", "call_ok"]
    tool: str | None = Field(None, min_length=1, validate_default=True)
    # call_ok only: the call's arguments as written, and those taken from the run's own receipts
    arguments: dict[str, Any] | None = None
    arguments_from: dict[str, ReceiptValue] | None = None
    output_contains: str | None = None

    @field_validator("arguments", "arguments_from")
    @classmethod
    def _only_for_calls(cls, v: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        if v is not None and info.data.get("kind") != "call_ok":
            raise ValueError(f"{info.field_name} belongs to a call_ok check (the driver's own call)")
        return v

    @field_validator("arguments_from")
    @classmethod
    def _one_source_per_argument(cls, v: dict[str, ReceiptValue] | None,
                                 info: ValidationInfo) -> dict[str, ReceiptValue] | None:
        twice = sorted(set(v or {}) & set(info.data.get("arguments") or {}))
        if twice:
            raise ValueError(f"{', '.join(twice)}: an argument is given in arguments or taken from a receipt, "
                             "not both")
        return v

    @field_validator("tool")
    @classmethod
    def _call_names_its_tool(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None and info.data.get("kind") == "call_ok":
            raise ValueError("a call_ok check names the tool the driver calls (tool: ...)")
        return v


class Criterion(_Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,63}$")
    description: str = Field(min_length=1)
    check: CriterionCheck | None = None


# The person's budget for this run: it can only narrow the agent's, tenant's, instance's.
GoalBudget = Budget


class Goal(_Strict):
    objective: str = Field(min_length=1)
    criteria: list[Criterion] = Field(min_length=1)
    constraints: list[str] = Field(default_factory=list)
    budget: GoalBudget = Field(default_factory=lambda: GoalBudget.model_validate({}))

    @field_validator("criteria")
    @classmethod
    def _unique_ids(cls, v: list[Criterion]) -> list[Criterion]:
        ids = [c.id for c in v]
        if len(set(ids)) != len(ids):
            raise ValueError("criterion ids must be unique")
        return v


def parse_goal(data: object, source: str = "goal", doc: SourceDocument | None = None) -> Goal:
    """Validate a goal; every problem is reported at once, one per line (`source:line: ...` when
    `doc` says where each key was)."""
    try:
        return Goal.model_validate(data)
    except ValidationError as exc:
        errors: list[dict[str, Any]] = [dict(e) for e in exc.errors()]
        if doc is None:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in errors)
            raise GoalError(f"{source}: {problems}") from None
        raise GoalError("\n".join(pydantic_problems(source, doc, errors))) from None


def load_goal(path: str | Path) -> Goal:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise GoalError(f"{path}: {exc}") from None
    doc, problems = read_document(text, str(path))
    if doc is None:
        raise GoalError("\n".join(problems))
    return parse_goal(doc.data, str(path), doc)
