"""The names of the eleven breakers' ceilings, without the model (warden/budget.py), for code that
must stay light (a command's --help). budget.py refuses to load when the two differ."""

FIELDS: tuple[str, ...] = ("tokens", "turns", "turns_total", "tool_calls", "wall_clock_seconds", "repetition",
                           "failures", "drift", "tree_tokens", "spend_usd", "provider_refusals")
