"""The checkpoint signs its log's head on a timer and when it stops (docs/audit.md, "Signed heads")."""

from __future__ import annotations

import stat

from checkpoint.audit import DecisionReader
from checkpoint.audit.heads import heads_path, load_public_key, read_heads


def test_the_checkpoint_signs_its_head_when_it_stops(start):
    running = start(head_interval=None)  # the timer off: only the shutdown head
    running.start_run("recon")
    log = running.data / "decisions.db"
    running.server.stop(grace=0.5)
    heads = read_heads(heads_path(log))
    head = DecisionReader(log).head()
    assert head is not None and [(h.seq, h.hash) for h in heads] == [head]
    key = running.data / "audit-head.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert heads[0].verifies(load_public_key(key))
    assert DecisionReader(log).verify(anchors=[heads[0].anchor("the shutdown head")]).ok


def test_the_checkpoint_signs_its_head_on_a_timer(start):
    running = start(head_interval=0.05)
    running.start_run("recon")
    log = running.data / "decisions.db"
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if heads_path(log).exists() and read_heads(heads_path(log)):
            break
        time.sleep(0.02)
    assert read_heads(heads_path(log)), "no head signed while the checkpoint ran"


def test_the_checkpoint_says_at_shutdown_where_the_log_ended_and_that_it_is_signed(start, caplog):
    running = start(head_interval=None)
    running.start_run("recon")
    head = DecisionReader(running.data / "decisions.db").head()
    assert head is not None
    with caplog.at_level("INFO", logger="warden.checkpoint"):
        running.server.stop(grace=0.5)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("decision log closed")]
    assert said == [f"decision log closed at seq {head[0]}, hash {head[1][:16]}; that head is signed"]
