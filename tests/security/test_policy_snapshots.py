"""A policy set is loaded only as a whole: a folder with a manifest of digests (`SHA256SUMS`) loads
only when its files are exactly the ones it names, and `warden policy apply` writes such a folder
and switches one link to it atomically; the watcher sees the switch when it happens."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint.policy import AgentCatalog, PolicyLoadError, load_policy_dir
from checkpoint.policy.subjects import read_value
from checkpoint.server.reload import PolicyStore, PolicyWatcher
from warden.cli import main

from .conftest import wait_for

TOOL = "kind: Tool\nname: ping\naccess: read\ninput_schema: {type: object}\n"
HEADER = "kind: OffLimits\nsubjects:\n"
GOV = '  - pattern: "*.gov"\n    reason: government systems\n'
PAY = '  - pattern: "payments.example.com"\n    reason: the payments lab is frozen\n'


def _sums(folder: Path) -> None:
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(folder).as_posix()}\n"
             for p in sorted(folder.rglob("*.yaml"))]
    (folder / "SHA256SUMS").write_text("".join(lines))


def _folder(root: Path, off_limits: str = HEADER + GOV + PAY) -> Path:
    root.mkdir(parents=True)
    (root / "tool.yaml").write_text(TOOL)
    (root / "off-limits.yaml").write_text(off_limits)
    _sums(root)
    return root


def _reasons(store: PolicyStore) -> tuple[str | None, str | None]:
    current = store.current
    assert current is not None
    return current.off_limits_reason(read_value("x.gov")), current.off_limits_reason(read_value("payments.example.com"))


# -- the manifest -----------------------------------------------------------------------------------


def test_a_half_written_file_is_refused_until_the_manifest_says_it_is_whole(tmp_path):
    """The first part of an edit is valid YAML that says less (the payments entry not written
    yet): without a manifest it loaded, however long the writer paused. With one it is refused,
    the last good set stays and the status says why, until file and manifest agree again."""
    folder = _folder(tmp_path / "p")
    store = PolicyStore(folder, AgentCatalog(None))
    assert store.reload()
    good = store.current
    (folder / "off-limits.yaml").write_text(HEADER + GOV)  # the writer pauses here, for any time
    assert not store.reload()
    assert store.current is good and _reasons(store) == ("government systems", "the payments lab is frozen")
    assert store.status.last_ok is False
    assert any("off-limits.yaml" in e and "SHA256SUMS" in e for e in store.status.errors), store.status.errors
    (folder / "off-limits.yaml").write_text(HEADER + GOV + PAY.replace("frozen", "closed"))
    assert not store.reload()  # whole now, but the manifest does not name it yet
    _sums(folder)
    assert store.reload() and store.current is not good
    assert _reasons(store) == ("government systems", "the payments lab is closed")


def _break(folder: Path, how: str) -> str:
    sums = folder / "SHA256SUMS"
    text = sums.read_text()
    if how == "a file not listed":
        (folder / "extra.yaml").write_text("kind: Rule\nname: r\neffect: deny_if\ncondition: 'false'\n")
        return "extra.yaml"
    if how == "a listed file missing":
        (folder / "off-limits.yaml").unlink()
        return "off-limits.yaml"
    if how == "a malformed line":
        sums.write_text(text + "not a digest line\n")
        return "SHA256SUMS:3"
    if how == "a path out of the folder":
        sums.write_text(text + f"{'0' * 64}  ../elsewhere.yaml\n")
        return "SHA256SUMS:3"
    if how == "an absolute path":
        sums.write_text(text + f"{'0' * 64}  /etc/elsewhere.yaml\n")
        return "SHA256SUMS:3"
    if how == "a file listed twice":
        sums.write_text(text + text.splitlines()[0] + "\n")
        return "SHA256SUMS:3"
    if how == "an upper-case digest of other bytes":
        first = text.splitlines()[0]
        sums.write_text(text.replace(first, "F" * 64 + first[64:]))
        return first.split()[-1]
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["a file not listed", "a listed file missing", "a malformed line",
                                 "a path out of the folder", "an absolute path", "a file listed twice",
                                 "an upper-case digest of other bytes"])
def test_a_set_that_does_not_match_its_manifest_does_not_load(tmp_path, how):
    folder = _folder(tmp_path / "p")
    load_policy_dir(folder)
    named = _break(folder, how)
    with pytest.raises(PolicyLoadError) as caught:
        load_policy_dir(folder)
    assert any(named in str(e) for e in caught.value.errors), caught.value.errors


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=len(HEADER + GOV + PAY) - 1))
def test_any_prefix_of_a_file_is_refused_against_its_manifest(tmp_path_factory, cut):
    folder = _folder(tmp_path_factory.mktemp("p") / "p")
    whole = (folder / "off-limits.yaml").read_text()
    (folder / "off-limits.yaml").write_text(whole[:cut])
    with pytest.raises(PolicyLoadError) as caught:
        load_policy_dir(folder)
    assert any("off-limits.yaml" in str(e) and "SHA256SUMS" in str(e) for e in caught.value.errors)


def test_the_spellings_sha256sum_writes_are_read(tmp_path):
    """`sha256sum` output as it is: two spaces, or ' *' for binary mode, and a './' prefix."""
    folder = _folder(tmp_path / "p")
    lines = (folder / "SHA256SUMS").read_text().splitlines()
    digest, name = lines[0].split("  ")
    lines[0] = f"{digest} *./{name}"
    (folder / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    assert load_policy_dir(folder).tools


# -- warden policy apply ----------------------------------------------------------------------------


def test_policy_apply_writes_a_whole_snapshot_and_switches_the_link(tmp_path, capsys):
    source = _folder(tmp_path / "src")
    (source / "SHA256SUMS").unlink()  # the source is a working folder; apply writes the manifest
    link = tmp_path / "policies"
    assert main(["policy", "apply", str(source), "--policies", str(link)]) == 0, capsys.readouterr().err
    first = Path(os.readlink(link))
    assert link.is_symlink() and (link / "SHA256SUMS").is_file()
    revision = load_policy_dir(link).revision
    assert revision in capsys.readouterr().out
    (source / "off-limits.yaml").write_text(HEADER + GOV)
    assert main(["policy", "apply", str(source), "--policies", str(link)]) == 0
    assert Path(os.readlink(link)) != first and (link.parent / first).is_dir()  # the old snapshot stays
    assert load_policy_dir(link).revision != revision


def test_policy_apply_refuses_a_set_that_does_not_load_and_leaves_the_link(tmp_path, capsys):
    source = _folder(tmp_path / "src")
    link = tmp_path / "policies"
    assert main(["policy", "apply", str(source), "--policies", str(link)]) == 0
    before = os.readlink(link)
    (source / "broken.yaml").write_text("kind: Rule\nname: broken\nbogus: 1\n")
    capsys.readouterr()
    assert main(["policy", "apply", str(source), "--policies", str(link)]) == 3
    err = capsys.readouterr().err
    assert "broken.yaml" in err and "the link was not switched" in err
    assert os.readlink(link) == before
    assert [p.name for p in (tmp_path / "policies.versions").iterdir() if p.name.startswith(".")] == []


def test_policy_apply_refuses_to_replace_a_real_folder(tmp_path, capsys):
    source = _folder(tmp_path / "src")
    real = _folder(tmp_path / "policies")
    assert main(["policy", "apply", str(source), "--policies", str(real)]) == 2
    err = capsys.readouterr().err
    assert str(real) in err and "mv" in err and real.is_dir() and not real.is_symlink()


# -- the watcher sees the switch --------------------------------------------------------------------


def test_a_link_switch_is_loaded_when_it_happens_not_at_the_next_recheck(tmp_path):
    """The recheck is an hour here: only the link's own event can load the new set."""
    one = _folder(tmp_path / "one")
    two = _folder(tmp_path / "two", HEADER + GOV)
    link = tmp_path / "policies"
    link.symlink_to(one)
    loaded = threading.Event()
    store = PolicyStore(link, AgentCatalog(None), on_change=lambda status: loaded.set())
    assert store.reload()
    first = store.current
    loaded.clear()
    watcher = PolicyWatcher(store, settle=0.05, recheck=3600)
    watcher.start()
    try:
        wait_for(lambda: watcher.watching.is_set(), what="the watcher to start")
        staged = tmp_path / ".policies.new"
        staged.symlink_to(two)
        os.replace(staged, link)
        assert loaded.wait(60), "the switch was not loaded"
        assert store.current is not first and _reasons(store) == ("government systems", None)
        # and the new folder is the one watched now: an edit inside it is seen too
        loaded.clear()
        (two / "off-limits.yaml").write_text(HEADER + PAY)
        _sums(two)
        assert loaded.wait(60), "an edit in the new folder was not loaded"
        wait_for(lambda: _reasons(store) == (None, "the payments lab is frozen"), what="the edit")
    finally:
        watcher.stop()
