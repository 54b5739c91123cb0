"""Model prices, for the spend breaker: USD per million input and output tokens.

Read from the `model_prices` of the Instance document in the policy folder, so the operator
keeps one table. A model with no price is charged at the highest known price: an unknown cost
is counted high rather than not at all (fail closed on spend).
"""

from __future__ import annotations

from pathlib import Path

import yaml


class Prices:
    def __init__(self, table: dict[str, tuple[float, float]]) -> None:
        self.table = dict(table)

    @classmethod
    def from_policy_dir(cls, path: str | Path) -> Prices:
        table: dict[str, tuple[float, float]] = {}
        for f in sorted(Path(path).rglob("*.yaml")):
            try:
                docs = list(yaml.safe_load_all(f.read_text()))
            except yaml.YAMLError:
                continue  # the checkpoint reports broken policy files; prices are read best-effort
            for doc in docs:
                if isinstance(doc, dict) and doc.get("kind") == "Instance":
                    for model, p in (doc.get("model_prices") or {}).items():
                        table[str(model)] = (float(p["input_per_mtok_usd"]), float(p["output_per_mtok_usd"]))
        return cls(table)

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        if model in self.table:
            pin, pout = self.table[model]
        elif self.table:
            pin = max(p[0] for p in self.table.values())
            pout = max(p[1] for p in self.table.values())
        else:
            return 0.0
        return (input_tokens * pin + output_tokens * pout) / 1_000_000
