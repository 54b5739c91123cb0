"""The watcher loads a policy edit only once its files have stopped changing."""

from __future__ import annotations

import os
import time
from pathlib import Path

from server.helpers import Traffic

from checkpoint.policy import AgentCatalog, load_policy_dir
from checkpoint.policy.subjects import read_value
from checkpoint.server import reload as reload_module
from checkpoint.server.reload import PolicyStore, fingerprint
from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .conftest import tool_call, wait_for

# The pause between the two writes is well under the settle delay, and longer than the 0.5 s poll
# plus 0.3 s "debounce" of the mtime-polling watcher this replaced, which loaded the first part.
SETTLE = 3.0
PAUSE = 1.0
HEADER = "# Off-limits subjects (edited in two steps by the test).\nkind: OffLimits\nsubjects:\n"
PART1 = HEADER + '  - pattern: "*.gov"\n    reason: government systems are never in scope for testing\n'
PART2 = ('  - pattern: "payments.lab.example.com"\n    reason: the payments lab is frozen\n'
         '  - pattern: "customer:vip-*"\n    reason: VIP accounts are handled by people only\n')
TARGET = {"template": "web-basic", "target": "payments.lab.example.com"}


def _write_in_two_steps(path: Path, pause: float) -> None:
    with open(path, "w") as f:
        f.write(PART1)
        f.flush()
        os.fsync(f.fileno())
        time.sleep(pause)  # a script, an editor or a copy that writes in pieces
        f.write(PART2)


def _final_revision(policy_dir: Path) -> str:
    return load_policy_dir(policy_dir).revision


def _no_decision_on_the_first_part(running, write) -> None:
    old = running.server.store.current.revision
    request = running.with_run(tool_call("recon", running.version("recon"), "create_task_from_template", TARGET))
    with Traffic(running.stub(), request) as traffic:
        wait_for(lambda: len(traffic.answers) > 10, what="traffic")
        write()
        final = _final_revision(running.policies)
        assert final != old
        wait_for(lambda: any(a.policy_revision == final for a in traffic.answers[-5:]), what="the final edit")
        seen = len(traffic.answers)
        wait_for(lambda: len(traffic.answers) > seen + 10, what="more traffic")
    assert traffic.errors == []
    assert {a.policy_revision for a in traffic.answers} == {old, final}
    assert {(a.verdict, a.code) for a in traffic.answers} == {(pb.VERDICT_DENY, "subject_off_limits")}


def test_a_file_written_in_two_steps_is_loaded_only_whole(start):
    running = start(settle=SETTLE)
    path = running.policies / "subjects" / "off-limits.yaml"
    _no_decision_on_the_first_part(running, lambda: _write_in_two_steps(path, PAUSE))
    assert running.server.store.status.last_ok


def test_an_edit_written_to_a_dot_file_then_moved_is_never_seen_half_written(start):
    running = start(settle=0.2)
    folder = running.policies / "subjects"

    def write() -> None:
        staging = folder / ".off-limits.yaml.new"  # hidden: neither watched nor loaded
        _write_in_two_steps(staging, pause=0.6)  # longer than the settle time: still never loaded
        os.replace(staging, folder / "off-limits.yaml")  # `mv`: one atomic step

    _no_decision_on_the_first_part(running, write)


def test_nothing_is_swapped_when_the_folder_changes_during_the_load(tmp_path, monkeypatch):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "tool.yaml").write_text("kind: Tool\nname: ping\naccess: read\ninput_schema: {type: object}\n")
    store = PolicyStore(folder, AgentCatalog(None))
    assert store.reload() and store.fingerprint == fingerprint(folder)
    first = store.current
    real_load = reload_module.load_policy_dir

    def load_while_someone_writes(directory, **kwargs):
        loaded = real_load(directory, **kwargs)
        (folder / "rule.yaml").write_text("kind: Rule\nname: r\neffect: deny_if\ncondition: 'true'\n")
        return loaded

    monkeypatch.setattr(reload_module, "load_policy_dir", load_while_someone_writes)
    (folder / "agent.yaml").write_text("kind: Agent\nname: bot\npersona: p\nallowlist: [ping]\nscope: {access: [read]}\n")
    assert not store.reload()
    assert store.current is first and store.status.last_ok and store.status.reloads_failed == 0
    monkeypatch.setattr(reload_module, "load_policy_dir", real_load)
    assert store.reload() and store.current is not first and store.fingerprint == fingerprint(folder)


def test_a_policy_file_turned_into_a_broken_symlink_is_a_reported_failed_reload(tmp_path):
    """The edit that points the off-limits file at a missing target is a broken edit: it keeps the
    last good set and says so (it used to load a set without the off-limits list, silently)."""
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "tool.yaml").write_text("kind: Tool\nname: ping\naccess: read\ninput_schema: {type: object}\n")
    off_limits = folder / "off-limits.yaml"
    off_limits.write_text(HEADER + '  - pattern: "*.gov"\n    reason: never\n')
    store = PolicyStore(folder, AgentCatalog(None))
    assert store.reload()
    first = store.current
    off_limits.unlink()
    off_limits.symlink_to(tmp_path / "not-mounted" / "off-limits.yaml")
    watcher = reload_module.PolicyWatcher(store, settle=0.01)
    assert not watcher.check(settled=False)
    assert store.current is first and store.status.last_ok is False and store.status.reloads_failed == 1
    assert store.status.errors == [f"{off_limits}:1: cannot be read: a symlink whose target is missing"]
    assert first.off_limits_reason(read_value("x.gov")) == "never"


def test_a_broken_settled_edit_still_keeps_the_last_good_set_and_says_so(start):
    running = start(settle=0.2)
    good = running.server.store.current.revision
    (running.policies / "rules" / "broken.yaml").write_text("kind: Rule\nname: broken\nbogus: 1\n")
    wait_for(lambda: not running.server.store.status.last_ok, what="the broken edit")
    details = running.server.health_details()
    assert details["policy_revision"] == good and details["last_reload_ok"] is False
    assert any("broken.yaml:" in e for e in details["last_reload_errors"])
