"""`warden learnings ...` against a real checkpoint, with a person's own credential file."""

from __future__ import annotations

import pytest

from security.test_catalog_lifecycle import PEOPLE
from security.test_catalog_lifecycle import running as running  # noqa: F401  (the fixture)
from security.test_learnings import DAY, call, clock, learnings, trip
from warden.cli import main


def cli(capsys, running, person: str, *argv: str) -> tuple[int, str]:
    data = running.data.parent / f"cli-{person}"
    data.mkdir(exist_ok=True)
    (data / "checkpoint.token").write_text(PEOPLE[person] + "\n")
    code = main(["learnings", *argv, "--checkpoint", f"127.0.0.1:{running.port}", "--data", str(data)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_list_show_promote_review_and_retire_from_the_command_line(running, capsys):
    now = clock(running)
    halted = trip(running)
    [learning] = learnings(running)
    code, out = cli(capsys, running, "erin", "list")
    assert code == 0 and learning.id in out and "proposed" in out and "breaker_tool_calls" in out
    code, out = cli(capsys, running, "erin", "show", learning.id)
    assert code == 0 and halted.decision_id in out and 'suggested: tool.name == "list_templates"' in out
    code, out = cli(capsys, running, "erin", "promote", learning.id, "--severity", "warning")
    assert code == 1 and "role_required" in out and "not an admin" in out
    code, out = cli(capsys, running, "carol", "promote", learning.id, "--severity", "warning", "--match", "tool.name ==")
    assert code == 1 and "invalid_request" in out and "match:1:" in out
    code, out = cli(capsys, running, "carol", "promote", learning.id, "--severity", "warning", "--note", "true")
    assert code == 0 and "(the proposal's suggestion)" in out and f"learning_changed: {learning.id} is active" in out
    assert call(running, running.start_run("recon"), "list_templates", {}).learnings
    now[0] += 91 * DAY
    running.server.service.learnings.sweep()
    code, out = cli(capsys, running, "erin", "list", "--stale")
    assert code == 0 and learning.id in out and "stale" in out
    code, out = cli(capsys, running, "dave", "review", learning.id, "--severity", "error", "--note", "still so")
    assert code == 0 and f"{learning.id} is active (error:" in out
    code, out = cli(capsys, running, "erin", "list", "--stale")
    assert code == 0 and "no stale learnings" in out
    code, out = cli(capsys, running, "carol", "retire", learning.id, "--note", "fixed")
    assert code == 0 and "is retired" in out
    code, out = cli(capsys, running, "carol", "reject", learning.id)
    assert code == 1 and "not_pending" in out
    code, out = cli(capsys, running, "erin", "list", "--json")
    assert code == 0 and '"status": "retired"' in out
    with pytest.raises(SystemExit) as exit_:  # no role in acme: the same answer as for no learning at all
        cli(capsys, running, "frank", "show", learning.id)
    assert f"no learning {learning.id!r} that you may read" in str(exit_.value.code)


def test_learnings_help_lists_every_command(capsys):
    try:
        main(["learnings", "--help"])
    except SystemExit:
        pass
    out = capsys.readouterr().out
    for name in ("list", "show", "promote", "review", "reject", "retire"):
        assert name in out
