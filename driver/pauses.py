"""A person's pause of a run, and its reach to every active run below it (`parent_paused`).

The run stops at its next step boundary: a step under way (a model call, a tool call the
checkpoint allowed) finishes and is kept. The pause is stored as an intent before it is sent to
the checkpoint (with the intent's id, so a second send is not recorded twice) and closed in the
transaction that holds the run and adds its children's pauses: a driver that stops anywhere in
between applies it, and the pauses it reached, when it starts again, each recorded and applied
once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver.errors import RunStateError
from driver.record import record_act
from driver.runs.model import PAUSED, PERSON_PAUSED, TERMINAL, Pause, Run

if TYPE_CHECKING:
    from driver.loop import Driver


def pause(driver: Driver, run_id: str, person: str, reason: str = "") -> tuple[Run, list[Run]]:
    """Pause a run that is running or waiting (approval, child), and every active run below it;
    returns the run and the descendants paused. A pause the checkpoint refuses to record does
    not happen (`act_not_recorded`)."""
    store = driver.store
    run = store.run(run_id)
    if not person:
        raise RunStateError("a pause needs the person's id", code="person_required")
    check_pausable(run)
    why = f"paused by {person}" + (f": {reason}" if reason else "")
    intent = store.add_pause(run_id, PERSON_PAUSED, person, why, reason)
    if intent is None:
        # One is under way, or was left open because the checkpoint could not be reached:
        # finish that one (sent again under its own id, it is recorded once).
        under_way = store.open_pauses([run_id])
        if not under_way:  # it closed meanwhile
            check_pausable(store.run(run_id))
            raise RunStateError(f"run {run_id} is being paused", code="run_already_paused")
        intent = under_way[0]
    if intent.state == "intent":
        try:
            record_act(driver, run, "pause", intent.person, intent.note, act_id=intent.pause_id)
        except RunStateError:
            store.drop_pause(intent.pause_id)  # refused: not on the record, so it never happened
            raise
        # DependencyUnavailable: the checkpoint may have recorded it before the answer was
        # lost, so the intent stays open; asked again, or after a restart, it is applied.
        store.pause_recorded(intent.pause_id)
    moved, below = store.apply_pause(intent.pause_id)
    if not moved:
        check_pausable(store.run(run_id))  # it paused or ended meanwhile: say which
    return store.run(run_id), apply_pauses(driver, below)


def apply_pauses(driver: Driver, pauses: list[Pause]) -> list[Run]:
    """Apply open pauses in order (each one's children after it): record those not yet on the
    record, under their own id, then hold the run. A pause reaching further only stops more,
    so, like a cancel, it happens even when the checkpoint cannot record it (an
    `act_unrecorded` event says so) rather than leave a run going under it. Returns the runs
    held."""
    store = driver.store
    held: list[Run] = []
    todo = list(pauses)
    while todo:
        p = todo.pop(0)
        if p.state == "intent":
            details = {"parent_run_id": p.parent_run_id} if p.parent_run_id else {}
            note = p.note if p.code == PERSON_PAUSED else p.reason
            record_act(driver, store.run(p.run_id), "pause", p.person, note, required=False,
                       act_id=p.pause_id, **details)
            store.pause_recorded(p.pause_id)
        moved, below = store.apply_pause(p.pause_id)
        if moved:
            held.append(store.run(p.run_id))
        todo += below
    return held


def check_pausable(run: Run) -> None:
    if run.status in TERMINAL:
        raise RunStateError(f"run {run.run_id} is already {run.status}", code=f"run_{run.status}")
    if run.status == PAUSED:
        raise RunStateError(f"run {run.run_id} is already paused ({run.code}: {run.reason})",
                            code="run_already_paused")


def pause_descendants(driver: Driver, run: Run, person: str, reason: str = "") -> list[Run]:
    """Pause every active run below `run`, which `person` paused (or whose pause reached it):
    code `parent_paused`, each act recorded under the child's own run token naming the same
    person. A run already paused keeps its own reason and is not resumed with the parent; ended
    ones are skipped. Safe to repeat: only runs still running or waiting are moved, and a run
    with a pause under way gets no second one."""
    return apply_pauses(driver, driver.store.pause_below(run.run_id, person, reason))
