"""What every receipt store promises, whichever database holds it.

A decision id is claimed before its container is created and completed with the receipt when the
call ends. The claim is the single use of a grant at the toolrunner: it succeeds once per decision
id for every toolrunner that shares the store, whatever the timing, because the database enforces
it (a primary key), never a read followed by a write. A claim names the toolrunner instance that
made it, so that an instance starting again turns only the claims it left running into
`interrupted` receipts, never those of another toolrunner that is still running them.
"""

from __future__ import annotations

from typing import Protocol

from warden.toolrunner.v1 import toolrunner_pb2 as pb

RUNNING = "running"
DONE = "done"
INTERRUPTED = "interrupted"  # the receipt code of a call whose runner ended before it did


class Receipts(Protocol):
    """The receipts of one toolrunner instance, in a store other instances may share.

    Every method may raise warden.store.errors.StoreUnavailable when the database cannot answer;
    the runner then refuses the call (a call it could not claim never runs).
    """

    instance: str  # who claims: kept with each claim, and what interrupt_cut_off() looks for

    def claim(self, decision_id: str, run_id: str, tool: str) -> bool:
        """Record that this decision's call is starting; False when it was claimed before, by any
        instance."""
        ...

    def finish(self, receipt: pb.Receipt) -> None:
        """Store the receipt of a claimed call; its state becomes `done`."""
        ...

    def get(self, decision_id: str) -> tuple[str, pb.Receipt | None] | None:
        """(state, receipt) for a decision id (receipt None while it runs), or None when it never ran."""
        ...

    def interrupt_cut_off(self) -> list[str]:
        """Turn the claims this instance left `running` into `interrupted` receipts; their decision ids."""
        ...

    def mark_interrupted(self) -> int:
        """interrupt_cut_off(), returning how many."""
        ...

    def ping(self) -> bool:
        """Whether the store answers now (health)."""
        ...

    def close(self) -> None: ...


def interrupted_receipt(decision_id: str, run_id: str, tool: str) -> pb.Receipt:
    """The receipt of a call cut off with its runner: it may have run, so it never runs again."""
    return pb.Receipt(decision_id=decision_id, run_id=run_id, tool=tool, exit_code=-1, code=INTERRUPTED)
