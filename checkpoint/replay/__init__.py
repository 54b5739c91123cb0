"""Policy change impact: replay recorded decisions (and the policy tests) against a candidate
policy folder and list every decision whose verdict or code would change (`warden policy diff`).

What a replay assumes (docs/policies.md, "Policy diff"):
- The request is rebuilt from the record: the actor chain, tenant, run ids, the action and its
  inputs as logged; the run's mode and inputs from the `start_run` record of its root run.
- Counters are not recorded: a replay decides as at the start of a fresh run (every counter
  zero), so breakers do not trip. A decision a breaker made is reported as not replayable.
- Arguments the log masked (the tool's `audit` section) or kept only as a hash cannot be
  rebuilt: such a decision is not replayable, never guessed.
- Agents: by default each agent of the chain at the version the candidate defines for it now
  (`versions="current"`: what the edit means for the next run). With `versions="pinned"` the
  version the record pinned, resolved in the candidate and its catalog (`--data`); a version the
  candidate cannot resolve is reported as not replayable.
- An ALLOW that a person's approval made is replayed with the approve-if rules that approval
  answered (from the REQUIRE_APPROVAL record of the same call digest); without that record it
  is not replayable.
- Refusals made outside the decision function (credentials, run tokens, malformed requests,
  the log, grants, roles) are not replayable: a policy folder does not decide them.

Reading the records (`reading`), rebuilding each request (`requests`), replaying them
(`replaying`) and reporting what would change (`report`) are modules of their own.
"""

from __future__ import annotations

from checkpoint.replay.reading import ReplaySourceError, read_facts, read_records
from checkpoint.replay.replaying import REPLAYED_ACTIONS, diff
from checkpoint.replay.report import ASSUMPTIONS, Answer, DiffReport, Flip, Versions, render
from checkpoint.replay.requests import NotReplayable, rebuild

__all__ = [
    "ASSUMPTIONS",
    "REPLAYED_ACTIONS",
    "Answer",
    "DiffReport",
    "Flip",
    "NotReplayable",
    "ReplaySourceError",
    "Versions",
    "diff",
    "read_facts",
    "read_records",
    "rebuild",
    "render",
]
