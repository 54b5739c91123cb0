"""One life for everything a person reviews: agent versions, skills, templates and learnings.

Each of them is proposed, reviewed, put in force and, one day, retired. The move from one state to
the next is in one table (`TRANSITIONS`); every act of every store (catalog.py, entries.py,
learnings.py) asks `next_state` before it is recorded and written, and a move the table does not
hold is refused with the stable code that store gives (docs/codes.md). The stored state names stay
those each store has always written: the catalog calls a proposal `pending` and what is in force
`live`; the learning store calls them `proposed` and `active` (and `stale`: in force but asleep).

    agent, skill, template                      learning
    (none) --propose|file--> pending            (none) --propose--> proposed
    pending --approve--> live                   proposed --promote--> active
    pending --reject--> rejected                proposed --reject--> rejected
    pending --withdraw--> withdrawn             active|stale --review--> active
    live --supersede--> superseded              active --stale--> stale
    live --narrow--> narrowed (agents)          active|stale --retire--> retired
    any but retired --retire--> retired
    (an agent's live version is not retired: another goes live first)

`file` is a policy file's version (it may bring back a version superseded, narrowed, rejected or
withdrawn before; never a retired one: retirement is final). `remove` is a skill's or template's
file removed: its live version goes out of service as `superseded`.
"""

from __future__ import annotations

from collections.abc import Iterable

# the catalog's words (agents, skills, templates)
LIVE, SUPERSEDED, NARROWED, PENDING, REJECTED, WITHDRAWN, RETIRED = (
    "live", "superseded", "narrowed", "pending", "rejected", "withdrawn", "retired")
# the learning store's words for proposed and in force, and its own sleeping state
PROPOSED, ACTIVE, STALE = "proposed", "active", "stale"

AGENT, SKILL, TEMPLATE, LEARNING = "agent", "skill", "template", "learning"
CATALOG = (AGENT, SKILL, TEMPLATE)
FAMILIES = (*CATALOG, LEARNING)

# versions no new run may pin (their runs already pinned go on, but a retired one's halt)
UNPINNABLE = frozenset({NARROWED, PENDING, REJECTED, WITHDRAWN, RETIRED})
NOT_RETIRED = (None, LIVE, SUPERSEDED, NARROWED, PENDING, REJECTED, WITHDRAWN)  # None: no state recorded

State = str | None  # None: the store holds no state for it (new, or from before states were kept)

_ROWS: list[tuple[Iterable[str], str, Iterable[State], str]] = [
    # families, act, from, to
    (CATALOG, "propose", (None, SUPERSEDED, NARROWED, REJECTED, WITHDRAWN), PENDING),
    (CATALOG, "file", NOT_RETIRED, PENDING),
    (CATALOG, "approve", (PENDING,), LIVE),
    (CATALOG, "reject", (PENDING,), REJECTED),
    (CATALOG, "withdraw", (PENDING,), WITHDRAWN),
    (CATALOG, "supersede", (None, LIVE, SUPERSEDED), SUPERSEDED),
    ((AGENT,), "narrow", (None, LIVE, NARROWED), NARROWED),
    ((AGENT,), "retire", (None, SUPERSEDED, NARROWED, PENDING, REJECTED, WITHDRAWN), RETIRED),
    ((SKILL, TEMPLATE), "retire", NOT_RETIRED, RETIRED),
    ((SKILL, TEMPLATE), "remove", (None, LIVE, SUPERSEDED), SUPERSEDED),
    ((LEARNING,), "propose", (None,), PROPOSED),
    ((LEARNING,), "promote", (PROPOSED,), ACTIVE),
    ((LEARNING,), "reject", (PROPOSED,), REJECTED),
    ((LEARNING,), "review", (ACTIVE, STALE), ACTIVE),
    ((LEARNING,), "retire", (ACTIVE, STALE), RETIRED),
    ((LEARNING,), "stale", (ACTIVE,), STALE),
]
TRANSITIONS: dict[tuple[str, State, str], str] = {
    (family, state, act): to for families, act, states, to in _ROWS for family in families for state in states
}
ACTS = frozenset(act for _, act, _, _ in _ROWS)

# the stable code of a refused move: (family, act, state) first, then (family, act)
_RETIRED_CODE = {AGENT: "agent_version_retired", SKILL: "skill_retired", TEMPLATE: "template_retired"}
_CODES: dict[tuple[str, str, State] | tuple[str, str], str] = {
    **{(f, "propose", RETIRED): _RETIRED_CODE[f] for f in CATALOG},
    **{(f, "file", RETIRED): _RETIRED_CODE[f] for f in CATALOG},
    **{(f, "propose"): "no_change" for f in CATALOG},  # pending already, or live
    **{(f, "retire"): "no_change" for f in CATALOG},  # retired already
    (AGENT, "retire", LIVE): "version_live",
    **{(f, act): "not_pending" for f in FAMILIES for act in ("approve", "reject", "promote")},
    **{(LEARNING, act): "learning_not_active" for act in ("review", "retire", "stale")},
}


class Refused(Exception):
    """A move the table does not hold; `code` is the store's stable code for it."""

    def __init__(self, family: str, state: State, act: str, code: str):
        super().__init__(f"{family}: {act} from {state or 'no state'} is not a move its life holds ({code})")
        self.family, self.state, self.act, self.code = family, state, act, code


def refusal_code(family: str, state: State, act: str) -> str:
    return _CODES.get((family, act, state)) or _CODES.get((family, act)) or "invalid_request"


def allows(family: str, state: State, act: str) -> bool:
    return (family, state, act) in TRANSITIONS


def next_state(family: str, state: State, act: str) -> str:
    """The state `act` moves a thing of `family` to from `state`; Refused when the table holds no
    such move."""
    to = TRANSITIONS.get((family, state, act))
    if to is None:
        raise Refused(family, state, act, refusal_code(family, state, act))
    return to
