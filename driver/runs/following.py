"""Following a run's events as they are written, whatever store keeps them: the stored events,
then live ones until the run ends, waits for a person, or the watcher stops. A store gives the
reads and a `wait` that returns early when something may have changed (the SQLite store's
condition, PostgreSQL's notifications) and otherwise after `poll_seconds`, so a change that was
never announced is still found."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from driver.runs.model import FINAL_EVENTS, TERMINAL, Event

if TYPE_CHECKING:
    from driver.runs.store import RunStore


def follow_events(store: RunStore, run_id: str, after_seq: int, stop: threading.Event, *,
                  wait: Callable[[float], object], has_final_event: Callable[[str], bool],
                  poll_seconds: float, until_waiting: bool, final_grace_seconds: float) -> Iterator[Event]:
    """RunStore.follow: events after `after_seq` until `stop`, or until the run has ended and its
    final event (`run_succeeded|failed|cancelled`) has been yielded (a cancel writes it last, after
    stopping what ran; a run a crash left without one is given up on after `final_grace_seconds`),
    or, with `until_waiting`, until it waits for a person."""
    ended_at: float | None = None
    final_seen = False
    while not stop.is_set():
        batch = store.events(run_id, after_seq)
        for e in batch:
            after_seq = e.seq
            final_seen = final_seen or e.kind in FINAL_EVENTS
            yield e
        if batch:
            continue
        if store.run(run_id).status in TERMINAL:
            for e in store.events(run_id, after_seq):  # written between the two reads above
                after_seq = e.seq
                final_seen = final_seen or e.kind in FINAL_EVENTS
                yield e
            # A watch that starts after the final event (after_seq past it) has nothing to wait for.
            if final_seen or has_final_event(run_id):
                return
            ended_at = ended_at if ended_at is not None else time.monotonic()
            if time.monotonic() - ended_at >= final_grace_seconds:
                return
        elif until_waiting and store.waits_for_person(run_id):
            # The status was read after the events: a pause written in between has its event
            # stored by now (set_status_logged writes both at once), so one more read gets it.
            yield from store.events(run_id, after_seq)
            return
        wait(poll_seconds)
