"""explain mode, the operator's command line, and the shipped policy tests under both CEL engines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ckpt_helpers import ENGINES, FOLDERS, build, case, policies
from google.protobuf import json_format

from checkpoint.engine.breakers import BREAKERS
from checkpoint.policy import load_policy_dir
from checkpoint.policytest import find_test_files, load_cases, run_case
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.cli import main

DOC = {"doc": "doc:readme"}


# -- explain ---------------------------------------------------------------------------------------


def test_explain_lists_every_rule_evaluated_on_allow():
    got = case("x", "ALLOW", "allowed", chain=["reader"], tool="read_doc", args=DOC, explain=True).check()
    steps = [(o.rule, o.outcome) for o in got.response.explanation]
    names = [s[0] for s in steps]
    assert {o for _, o in steps} == {"pass"}
    for rule in ("request.shape", "request.arguments", "allowlist", "scope.access", "scope.subjects",
                 "off_limits", "rule:no-secret-docs"):
        assert rule in names, names
    assert [n for n in names if n.startswith("breaker.")] == [
        f"breaker.{b.name}" for b in BREAKERS if "tool_call" in b.checks
    ]
    # rules that cannot apply to this call are not evaluated (indexed by tool and agent)
    assert "rule:worker-writes-need-approval" not in names and "rule:boom-reads-missing-key" not in names


def test_explain_on_a_model_call_skips_tool_only_breakers():
    got = case("x", "ALLOW", "allowed", chain=["reader"], model={"model": "m"}, explain=True).check()
    names = [o.rule for o in got.response.explanation]
    assert "rule:no-forbidden-model" in names
    assert [n for n in names if n.startswith("breaker.")] == [
        f"breaker.{b.name}" for b in BREAKERS if b.name not in ("tool_calls", "repetition")]


@pytest.mark.parametrize("c", [
    pytest.param(case("x", "DENY", "subject_out_of_scope", chain=["reader"], tool="read_doc",
                      args={"doc": "other:x"}, explain=True), id="deny"),
    pytest.param(case("x", "HALT", "breaker_drift", chain=["reader"], tool="read_doc", args=DOC,
                      counters={"drift": 2}, explain=True), id="halt"),
    pytest.param(case("x", "REQUIRE_APPROVAL", "approval_required", chain=["worker"], tool="write_doc",
                      args=DOC, explain=True), id="approval"),
])
def test_explain_ends_with_the_deciding_rule(c):
    got = c.check()
    last = got.response.explanation[-1]
    assert (last.rule, last.outcome, last.code) == (got.rule, "fail", got.code)
    assert all(o.outcome in ("pass", "approval") for o in got.response.explanation[:-1])


def test_explain_shows_a_pending_approval_before_the_breakers():
    got = case("x", "REQUIRE_APPROVAL", "approval_required", chain=["worker"], tool="write_doc", args=DOC,
               explain=True).check()
    outcomes = [(o.rule, o.outcome) for o in got.response.explanation]
    assert ("rule:worker-writes-need-approval", "approval") in outcomes
    assert ("breaker.provider", "pass") in outcomes


def test_without_explain_the_list_is_empty():
    got = case("x", "DENY", "subject_out_of_scope", chain=["reader"], tool="read_doc",
               args={"doc": "other:x"}).check()
    assert len(got.response.explanation) == 0
    got = case("x", "ALLOW", "allowed", chain=["reader"], tool="read_doc", args=DOC).check()
    assert len(got.response.explanation) == 0


# -- CLI -------------------------------------------------------------------------------------------


def test_policy_check_ok(capsys):
    assert main(["policy", "check", str(FOLDERS["engine"])]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: ") and "agent reader" in out


@pytest.mark.parametrize("cel_engine", ENGINES)
def test_policy_check_shipped(capsys, cel_engine):
    assert main(["policy", "check", str(FOLDERS["shipped"]), "--cel-engine", cel_engine]) == 0


def test_policy_check_errors_print_file_line(tmp_path, capsys):
    folder = tmp_path / "p"
    shutil.copytree(FOLDERS["engine"], folder)
    (folder / "b.yaml").write_text("kind: Agent\nname: x\npersona: p\nallowlist: [nuke]\n")
    (folder / "a.yaml").write_text("kind: Robot\n")
    assert main(["policy", "check", str(folder)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{folder / 'a.yaml'}:1: unknown kind")
    assert err[1].startswith(f"{folder / 'b.yaml'}:4: ")
    assert err[-1] == "2 error(s); nothing was loaded"


def test_policy_test_passes_on_shipped(capsys):
    assert main(["policy", "test", str(FOLDERS["shipped"])]) == 0
    assert " 0 failed" in capsys.readouterr().out


def _with_test(tmp_path: Path, body: str) -> Path:
    folder = tmp_path / "p"
    shutil.copytree(FOLDERS["engine"], folder)
    (folder / "tests").mkdir()
    (folder / "tests" / "x_test.yaml").write_text(body)
    return folder


def test_policy_test_failing_case_exits_1(tmp_path, capsys):
    folder = _with_test(tmp_path, (
        "suite: s\ndefaults: {agent: reader}\ncases:\n"
        "  - name: passes\n    tool: read_doc\n    args: {doc: 'doc:a'}\n    expect: {verdict: ALLOW, code: allowed}\n"
        "  - name: wrong on purpose\n    tool: read_doc\n    args: {doc: 'doc:a'}\n"
        "    expect: {verdict: DENY, code: tool_not_allowed}\n"
    ))
    assert main(["policy", "test", str(folder)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {folder / 'tests' / 'x_test.yaml'}:8: s / wrong on purpose" in out
    assert "1 passed, 1 failed" in out


def test_policy_test_load_failure_exits_3(tmp_path, capsys):
    folder = _with_test(tmp_path, "suite: s\ncases:\n  - name: ok\n    tool: read_doc\n    expect: {verdict: ALLOW}\n")
    assert main(["policy", "test", str(folder)]) == 3  # the case lacks expect.code
    (folder / "tests" / "x_test.yaml").write_text(
        "suite: s\ncases:\n  - {name: a, tool: read_doc, expect: {verdict: ALLOW, code: allowed}}\n")
    (folder / "broken.yaml").write_text("kind: Robot\n")
    assert main(["policy", "test", str(folder)]) == 3  # the policies do not load
    assert "unknown kind" in capsys.readouterr().err


def test_policy_test_without_test_files_exits_3(capsys):
    assert main(["policy", "test", str(FOLDERS["engine"])]) == 3


def _request_json(p, **kw) -> str:
    return json_format.MessageToJson(build(p, **kw))


def test_check_prints_a_check_response(tmp_path, capsys):
    p = policies("engine")
    path = tmp_path / "req.json"
    path.write_text(_request_json(p, chain=["reader"], tool="read_doc", args={"doc": "other:x"}))
    assert main(["check", "--policies", str(FOLDERS["engine"]), str(path)]) == 0
    response = json_format.Parse(capsys.readouterr().out, pb.CheckResponse())
    assert response.verdict == pb.VERDICT_DENY and response.code == "subject_out_of_scope"
    assert response.agent_version == p.agents["reader"].version
    assert response.policy_revision == p.revision
    assert len(response.explanation) == 0


def test_check_explain_flag(tmp_path, capsys):
    path = tmp_path / "req.json"
    path.write_text(_request_json(policies("engine"), chain=["reader"], tool="read_doc", args=DOC))
    assert main(["check", "--explain", "--policies", str(FOLDERS["engine"]), str(path)]) == 0
    response = json_format.Parse(capsys.readouterr().out, pb.CheckResponse())
    assert response.code == "allowed" and len(response.explanation) > 5


def test_check_resolves_an_old_version_from_the_data_folder(tmp_path, capsys):
    folder = tmp_path / "p"
    shutil.copytree(FOLDERS["engine"], folder)
    data = tmp_path / "data"
    from checkpoint.policy import AgentCatalog

    old = load_policy_dir(folder, catalog=AgentCatalog(data / "catalog.db")).agents["reader"].version
    agents = folder / "agents" / "agents.yaml"
    agents.write_text(agents.read_text().replace("allowlist: [read_doc, read_note]", "allowlist: [read_doc]"))
    path = tmp_path / "req.json"
    path.write_text(_request_json(policies("engine"), chain=["reader"], versions={"reader": old},
                                  tool="read_note", args=DOC))
    assert main(["check", "--policies", str(folder), "--data", str(data), str(path)]) == 0
    assert json_format.Parse(capsys.readouterr().out, pb.CheckResponse()).code == "allowed"
    # a check reads the catalog and never writes it: the edited version was not recorded
    assert AgentCatalog(data / "catalog.db").versions("reader") == [old]
    assert main(["check", "--policies", str(folder), str(path)]) == 0
    assert json_format.Parse(capsys.readouterr().out, pb.CheckResponse()).code == "unknown_agent_version"


def test_check_with_a_data_folder_that_has_no_catalog_says_so(tmp_path, capsys):
    path = tmp_path / "req.json"
    path.write_text(_request_json(policies("engine"), chain=["reader"], tool="read_doc", args=DOC))
    assert main(["check", "--policies", str(FOLDERS["engine"]), "--data", str(tmp_path / "none"), str(path)]) == 2
    assert "no agent catalog at" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def test_check_rejects_an_unknown_field(tmp_path, capsys):
    body = json.loads(_request_json(policies("engine"), chain=["reader"], tool="read_doc", args=DOC))
    body["toolCall"]["sudo"] = True
    path = tmp_path / "req.json"
    path.write_text(json.dumps(body))
    assert main(["check", "--policies", str(FOLDERS["engine"]), str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("invalid_request:")


@pytest.mark.parametrize("text", [pytest.param("{not json", id="not-json"),
                                  pytest.param('{"run": {}, "toolCall": {"tool": "read_doc"}}', id="no-chain")])
def test_check_rejects_a_malformed_request(tmp_path, capsys, text):
    path = tmp_path / "req.json"
    path.write_text(text)
    assert main(["check", "--policies", str(FOLDERS["engine"]), str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "invalid_request" in captured.err


def test_check_with_broken_policies_exits_3(tmp_path, capsys):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.yaml").write_text("kind: Robot\n")
    path = tmp_path / "req.json"
    path.write_text("{}")
    assert main(["check", "--policies", str(tmp_path / "p"), str(path)]) == 3


# -- the shipped policy tests, under both CEL engines ----------------------------------------------


def _shipped_cases():
    folder = FOLDERS["shipped"]
    for path in find_test_files(folder):
        suite, cases = load_cases(path, str(path))
        for line, c in cases:
            yield pytest.param(c, id=f"{path.stem}:{line}:{c.name}")


@pytest.mark.parametrize("cel_engine", ENGINES)
@pytest.mark.parametrize("c", list(_shipped_cases()))
def test_shipped_policy_cases(c, cel_engine):
    result = run_case(policies("shipped", cel_engine), c)
    ok, detail = result.ok, result.detail
    assert ok, detail


def test_shipped_cases_exist():
    assert len(list(_shipped_cases())) >= 40


@pytest.mark.parametrize("content", [pytest.param(b"", id="empty"), pytest.param(b"not sqlite at all" * 100, id="garbage")])
def test_check_with_a_data_folder_whose_catalog_is_not_one_says_so(tmp_path, capsys, content):
    path = tmp_path / "req.json"
    path.write_text(_request_json(policies("engine"), chain=["reader"], tool="read_doc", args=DOC))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "catalog.db").write_bytes(content)
    assert main(["check", "--policies", str(FOLDERS["engine"]), "--data", str(tmp_path / "data"), str(path)]) == 2
    err = capsys.readouterr().err
    assert "catalog.db" in err and "Traceback" not in err
