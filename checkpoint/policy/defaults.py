"""Built-in instance ceilings: an install whose policy files set no ceiling is still bounded.

`instance.yaml` overrides each value it sets, upwards or downwards; a value it leaves unset takes
the default below. Tenants, agents and runs then only narrow, as everywhere else. There is no
"unlimited": a ceiling that must be higher is written as a higher number in `instance.yaml`.
The values are those `policies/instance.yaml` ships with (plus a run spend of 50 USD).
"""

from __future__ import annotations

from checkpoint.policy import model

DEFAULT_CEILINGS = model.Budget(
    tokens=2_000_000,
    turns=200,
    turns_total=1000,
    tool_calls=20,
    wall_clock_seconds=7200,
    repetition=5,
    failures=5,
    drift=5,
    tree_tokens=4_000_000,
    spend_usd=50.0,
    provider_refusals=3,
)
DEFAULT_DAILY_SPEND = model.DailySpend(per_owner_usd=200.0, tenant_usd=2000.0)


def with_defaults(instance: model.Instance) -> tuple[model.Instance, frozenset[str]]:
    """The instance with every unset ceiling and daily allowance filled in, and the names filled."""
    filled: set[str] = set()
    updates = {}
    for attr, defaults in (("ceilings", DEFAULT_CEILINGS), ("daily_spend", DEFAULT_DAILY_SPEND)):
        level = getattr(instance, attr)
        missing = {name: value for name, value in defaults if getattr(level, name) is None}
        if missing:
            updates[attr] = level.model_copy(update=missing)
            filled.update(missing)
    return (instance.model_copy(update=updates) if updates else instance), frozenset(filled)
