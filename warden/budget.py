"""The budget: ceilings for the eleven breakers, defined once for every process.

Policy files (agent, tenant and instance ceilings), goals (a person's budget for a run), the
driver's run store and the checkpoint's breakers all read these fields; the wire form is the
proto's `warden.checkpoint.v1.Budget`, and a contract test keeps the two field for field.
Unknown keys are errors everywhere, so a renamed field can never make a ceiling vanish.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from warden import budget_fields


class Budget(BaseModel):
    """Ceilings for the eleven breakers. Unset means no ceiling at this level (the instance's
    unset ones take the built-in defaults of checkpoint/policy/defaults.py). Finite numbers only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: int | None = Field(None, ge=0)
    turns: int | None = Field(None, ge=0)
    turns_total: int | None = Field(None, ge=0)
    tool_calls: int | None = Field(None, ge=0, description="tool calls per turn")
    wall_clock_seconds: float | None = Field(None, ge=0, allow_inf_nan=False)
    repetition: int | None = Field(None, ge=0, description="identical calls (same tool, same arguments)")
    failures: int | None = Field(None, ge=0, description="failed or denied calls in a row")
    drift: int | None = Field(None, ge=0, description="calls that serve no plan step")
    tree_tokens: int | None = Field(None, ge=0, description="tokens used by the whole delegation tree")
    spend_usd: float | None = Field(None, ge=0, allow_inf_nan=False, description="the run's share of the daily spend")
    provider_refusals: int | None = Field(None, ge=0)


FIELDS: tuple[str, ...] = tuple(Budget.model_fields)
if FIELDS != budget_fields.FIELDS:  # one list of names, kept by the model
    raise RuntimeError(f"warden/budget_fields.py lists {budget_fields.FIELDS}, the model has {FIELDS}")
