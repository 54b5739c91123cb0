"""Strict loading: every error at once, sorted, with file:line; the whole set loads or none of it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from ckpt_helpers import ENGINES

from checkpoint.policy import AgentCatalog, PolicyLoadError, load_policy_dir
from checkpoint.policy.loader import load_agent_definition

BASE = {
    "instance.yaml": "kind: Instance\nceilings: {turns: 10}\n",
    "tools.yaml": (
        "kind: Tool\nname: ping\naccess: read\ninput_schema: {type: object}\n"
        "---\n"
        "kind: Tool\nname: admin\naccess: write\nagent_management: true\ninput_schema: {type: object}\n"
    ),
    "agents/ok.yaml": "kind: Agent\nname: ok\npersona: fine\nallowlist: [ping]\nscope: {access: [read]}\n",
}


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def agent(extra: str, name: str = "bad") -> str:
    return f"kind: Agent\nname: {name}\npersona: p\n{extra}"


def rule(condition: str) -> str:
    return f"kind: Rule\nname: r\neffect: deny_if\ncondition: '{condition}'\n"


def off_limits(entries: str) -> str:
    return f"kind: OffLimits\nsubjects:\n  - {{pattern: ok.example, reason: fine}}\n{entries}"


def tool(extra: str = "", schema: str = "{type: object}") -> str:
    return f"kind: Tool\nname: t2\naccess: read\ninput_schema: {schema}\n{extra}"


# (id, file, text, line, message fragment)
ERRORS = [
    ("malformed-yaml", "b.yaml", "kind: Agent\nname: [unclosed\npersona: p\n", 3, "YAML syntax"),
    ("tab-indent", "b.yaml", "kind: Agent\n\tname: x\n", 2, "YAML syntax"),
    ("unknown-key", "b.yaml", agent("allowlist: [ping]\nallowlistt: []\n"), 5, "unknown key"),
    ("unknown-nested-key", "b.yaml", agent("scope:\n  access: [read]\n  hosts: [a]\n"), 6, "unknown key"),
    ("duplicate-key", "b.yaml", agent("allowlist: [ping]\nallowlist: []\n"), 5, "duplicate key 'allowlist'"),
    ("wrong-type-budget", "b.yaml", agent("budget:\n  turns: many\n"), 5, "budget.turns"),
    ("wrong-type-list", "b.yaml", agent("allowlist: ping\n"), 4, "allowlist"),
    ("negative-ceiling", "b.yaml", agent("budget: {tokens: -1}\n"), 4, "budget.tokens"),
    ("bad-access-level", "b.yaml", agent("scope:\n  access: [root]\n"), 5, "scope.access"),
    ("bad-name", "b.yaml", "kind: Agent\nname: Bad Name\npersona: p\n", 2, "name"),
    ("missing-required", "b.yaml", "kind: Agent\nname: bad\n", 1, "persona"),
    ("unknown-kind", "b.yaml", "# a robot\nkind: Robot\nname: x\n", 2, "unknown kind 'Robot'"),
    ("not-a-mapping", "b.yaml", "- just\n- a list\n", 1, "must be a mapping"),
    ("empty-file", "b.yaml", "# nothing here\n", 1, "no document"),
    ("merge-key", "b.yaml", "base: &b {persona: p}\nkind: Agent\nname: x\n<<: *b\n", 4, "merge keys"),
    ("date-value", "b.yaml", agent("description: 2024-01-01\n"), 4, "unsupported YAML value"),
    # an explicit tag the safe constructors cannot read raised KeyError/ValueError out of the loader
    ("tag-bool-unreadable", "b.yaml", agent("description: !!bool maybe\n"), 4, "cannot read 'maybe'"),
    ("tag-int-unreadable", "b.yaml", agent("budget: {turns: !!int many}\n"), 4, "cannot read 'many'"),
    ("tag-timestamp-unreadable", "b.yaml", agent("description: !!timestamp soon\n"), 4, "cannot read 'soon'"),
    ("tag-python", "b.yaml", agent("description: !!python/name:os.system ''\n"), 4, "is not allowed"),
    ("tag-custom", "b.yaml", agent("description: !secret x\n"), 4, "is not allowed"),
    # and one on a collection was dropped without a word
    ("tag-on-mapping", "b.yaml", agent("scope: !!python/object:x.Y {access: [read]}\n"), 4, "is not allowed"),
    ("tag-set", "b.yaml", agent("allowlist: !!set {ping}\n"), 4, "is not allowed"),
    ("cel-syntax", "r.yaml", rule("args.x =="), 4, "CEL does not compile"),
    ("cel-undeclared-variable", "r.yaml", rule("secret == 1"), 4, "CEL does not compile"),
    ("cel-type-error", "r.yaml", rule("action + 1 == 2"), 4, "CEL does not compile"),
    ("cel-condition-not-bool", "r.yaml", rule("1 + 2"), 4, "CEL returns INT; it must return BOOL"),
    ("cel-condition-string", "r.yaml", rule('"s"'), 4, "CEL returns STRING"),
    ("touches-not-a-list", "t.yaml", tool("touches:\n  subjects: '\"x\"'\n"),
     6, "CEL returns STRING; it must return LIST<STRING> or LIST<DYN>"),
    ("touches-cel-undeclared", "t.yaml", tool("touches:\n  subjects: '[run.x]'\n"), 6, "CEL does not compile"),
    ("invalid-json-schema", "t.yaml",
     "kind: Tool\nname: t2\naccess: read\ninput_schema:\n  type: object\n  properties:\n    a: {type: 12}\n",
     7, "not a valid JSON Schema"),
    ("schema-not-object", "t.yaml", tool(schema="{type: string}"), 4, "type: object"),
    ("allowlist-unknown-tool", "b.yaml", agent("allowlist:\n  - ping\n  - nuke\nscope: {access: [read]}\n"),
     6, "unknown tool 'nuke'"),
    ("allowlist-agent-management", "b.yaml", agent("allowlist: [ping, admin]\nscope: {access: [read, write]}\n"),
     4, "manages agents"),
    ("allowlist-needs-missing-access", "b.yaml", agent("allowlist: [ping]\nscope:\n  access: [write]\n"),
     6, "need access read"),
    ("delegates-unknown-agent", "b.yaml", agent("delegates: [ghost]\n"), 4, "unknown agent 'ghost'"),
    ("delegates-itself", "b.yaml", agent("delegates: [bad]\n"), 4, "cannot delegate to itself"),
    ("unknown-tenant", "b.yaml", agent("tenant: nobody\n"), 4, "unknown tenant"),
    ("rule-unknown-tool", "r.yaml", rule("true") + "tools: [nuke]\n", 5, "unknown tool 'nuke'"),
    # a rule's own code may not pass for another stable code: a DENY counted as `allowed`, or a
    # handoff the driver pauses as a breaker (not naming whom the case went to)
    ("rule-code-allowed", "r.yaml", rule("true") + "code: allowed\n", 5, "stable code warden gives"),
    ("rule-code-off-limits", "r.yaml", rule("true") + "code: subject_off_limits\n", 5, "stable code warden gives"),
    ("rule-code-breaker", "r.yaml", rule("true").replace("deny_if", "handoff_if") + "code: breaker_tokens\n",
     5, "a handoff_if rule's code is 'handoff'"),
    ("rule-code-breaker-like", "r.yaml", rule("true") + "code: breaker_custom\n", 5, "stable code warden gives"),
    ("duplicate-name-across-files", "z.yaml", "kind: Agent\nname: ok\npersona: again\n", 2,
     "defined twice (first in"),
    ("second-instance", "z.yaml", "kind: Instance\n", 1, "only one Instance"),
    ("tenant-ceiling-above-instance", "tenant.yaml", "kind: Tenant\nname: t\nceilings:\n  turns: 11\n", 4,
     "exceeds the instance's 10"),
    ("command-placeholder", "t.yaml", tool("run:\n  image: x\n  command: [a, '{nope}']\n"), 7, "placeholder {nope}"),
    # typed subjects (checkpoint/policy/subjects/): a bad entry never loads as something else
    ("off-limits-bad-cidr", "o.yaml", off_limits("  - {pattern: 10.9.0.0/33, reason: r}\n"), 4, "not an IP range"),
    ("off-limits-host-bits", "o.yaml", off_limits("  - {pattern: 10.9.0.1/16, reason: r}\n"), 4, "host bits set"),
    ("off-limits-idna-refused", "o.yaml", off_limits("  - {pattern: \"xn--zz.example\", reason: r}\n"),
     4, "not a host name"),
    ("off-limits-emoji-host", "o.yaml", off_limits("  - {pattern: \"\U0001f4a3.example\", reason: r}\n"),
     4, "not a host name"),
    ("off-limits-unknown-type", "o.yaml", off_limits("  - {pattern: a.example, reason: r, type: dns}\n"),
     4, "subjects.1.type"),
    ("off-limits-type-disagrees", "o.yaml", off_limits("  - {pattern: 10.20.0.evil.com, reason: r, type: ip}\n"),
     4, "reads as type host, not ip"),
    ("off-limits-integer-address", "o.yaml", off_limits("  - {pattern: '167641093', reason: r}\n"),
     4, "not a canonical IP address"),
    ("scope-host-wildcard-inside", "b.yaml", agent("scope:\n  subjects:\n    - www.*.example.com\n"),
     6, "only wildcard is a leading '*.'"),
    ("scope-short-address", "b.yaml", agent("scope:\n  subjects: [10.9.2313]\n"), 5, "scope.subjects"),
    ("scope-url-query", "b.yaml", agent("scope:\n  connections: ['https://a.example/v1?x=*']\n"),
     5, "no query"),
]


@pytest.mark.parametrize("cel_engine", ENGINES)
@pytest.mark.parametrize("name, file, text, line, fragment", [pytest.param(*e, id=e[0]) for e in ERRORS])
def test_each_error_names_file_and_line(tmp_path, name, file, text, line, fragment, cel_engine):
    folder = write(tmp_path / "p", {**BASE, file: text})
    catalog = AgentCatalog(tmp_path / "catalog.db")
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dir(folder, catalog=catalog, cel_engine=cel_engine)
    shown = [str(e) for e in info.value.errors]
    wanted = re.compile(re.escape(f"{folder / file}:{line}:") + r"(\d+:)? ")  # a column where YAML knows it
    assert any(wanted.match(s) and fragment in s for s in shown), shown
    assert info.value.code == "policy_error"
    assert catalog.versions("ok") == [], "nothing of a broken set is loaded"


def test_the_base_set_loads(tmp_path):
    policies = load_policy_dir(write(tmp_path / "p", BASE))
    assert set(policies.agents) == {"ok"} and set(policies.tools) == {"ping", "admin"}


def test_a_rule_may_name_its_own_code_or_its_effects(tmp_path):
    rules = (rule("true") + "code: refund_frozen\n---\n" + rule("true").replace("name: r", "name: r2")
             + "code: rule_denied\n")
    policies = load_policy_dir(write(tmp_path / "p", {**BASE, "r.yaml": rules}))
    assert [r.code for r in policies.rules] == ["refund_frozen", "rule_denied"]


def test_every_error_in_every_file_is_reported_at_once_and_sorted(tmp_path):
    folder = write(tmp_path / "p", {
        **BASE,
        "z-last.yaml": "kind: Robot\n",
        "a-first.yaml": agent("allowlist: [nuke]\nfoo: 1\n"),
        "m-middle.yaml": rule("args.x =="),
        "agents/y.yaml": "kind: Agent\nname: ok\npersona: twice\n",
    })
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dir(folder)
    errors = info.value.errors
    where = [(Path(e.file).relative_to(folder).as_posix(), e.line) for e in errors]
    assert where == sorted(where)
    files = {w[0] for w in where}
    assert files == {"z-last.yaml", "a-first.yaml", "m-middle.yaml", "agents/y.yaml"}
    text = str(info.value)
    assert "unknown kind 'Robot'" in text and "unknown key" in text and "CEL does not compile" in text
    assert "defined twice" in text
    # one line per error, a CEL error followed by its code frame (indented, `|`)
    headlines = [line for line in text.splitlines() if not line.startswith("    |")]
    assert len(headlines) == len(errors) >= 4
    assert "    | args.x ==" in text


def test_an_alias_bomb_is_refused_with_the_other_errors(tmp_path):
    """Eight short lines whose aliases expand to 10**8 values held the loader (and a hot reload)
    for minutes while memory filled; it is refused at its line, and the rest is still reported."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    folder = write(tmp_path / "p", {**BASE, "bomb.yaml": "\n".join(lines) + "\n",
                                    "other.yaml": agent("allowlist: [nuke]\n")})
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dir(folder)
    shown = [str(e) for e in info.value.errors]
    assert any(s.startswith(f"{folder / 'bomb.yaml'}:") and "aliases are expanded" in s for s in shown), shown
    assert any(s.startswith(f"{folder / 'other.yaml'}:4: ") and "unknown tool 'nuke'" in s for s in shown), shown


def test_an_alias_bomb_sent_as_a_proposal_is_refused(tmp_path):
    """A proposed definition is a caller's text (ProposeAgentChange, 64 KiB at most): the same
    eight lines would have held a checkpoint worker for minutes."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    policies = load_policy_dir(write(tmp_path / "p", BASE))
    with pytest.raises(PolicyLoadError) as info:
        load_agent_definition(agent("allowlist: [ping]\n") + "\n".join(lines) + "\n", "proposal", policies)
    (error,) = info.value.errors
    assert error.file == "proposal" and "aliases are expanded" in error.message


def test_aliases_that_expand_to_little_still_load(tmp_path):
    scope = "allowlist: [ping]\nscope: {access: [read], nodes: &lab [lab-1, lab-2], images: *lab}\n"
    folder = write(tmp_path / "p", {**BASE, "agents/ok2.yaml": agent(scope, name="ok2")})
    assert load_policy_dir(folder).agents["ok2"].scope.images == ["lab-1", "lab-2"]


def test_duplicate_names_report_the_second_definition(tmp_path):
    folder = write(tmp_path / "p", {**BASE, "agents/zz.yaml": "# again\nkind: Agent\nname: ok\npersona: again\n"})
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dir(folder)
    (error,) = info.value.errors
    assert error.file.endswith("agents/zz.yaml") and error.line == 3
    assert "agents/ok.yaml:2" in error.message


def test_test_files_are_not_policy_files(tmp_path):
    folder = write(tmp_path / "p", {**BASE, "tests/ok_test.yaml": "suite: s\ncases: []\n"})
    assert "ok" in load_policy_dir(folder).agents


def test_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(PolicyLoadError):
        load_policy_dir(tmp_path / "nope")


def test_a_file_that_is_not_utf8_is_an_error(tmp_path):
    folder = write(tmp_path / "p", BASE)
    (folder / "bin.yaml").write_bytes(b"kind: Agent\nname: \xff\xfe\n")
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dir(folder)
    assert any("UTF-8" in e.message and e.file.endswith("bin.yaml") for e in info.value.errors)


def test_a_policy_file_that_cannot_be_read_is_an_error_not_left_out(tmp_path):
    """An off-limits list replaced by a symlink whose target is gone (a wrong relative path, a
    volume not mounted) was skipped, and the set loaded without it: every subject in it allowed."""
    folder = write(tmp_path / "p", {**BASE, "other.yaml": agent("allowlist: [nuke]\n")})
    (folder / "subjects").mkdir()
    (folder / "subjects" / "off-limits.yaml").symlink_to(tmp_path / "gone" / "off-limits.yaml")
    os.mkfifo(folder / "pipe.yaml")  # listed too, and refused without waiting for a writer
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dir(folder)
    shown = [str(e) for e in info.value.errors]
    assert f"{folder / 'subjects' / 'off-limits.yaml'}:1: cannot be read: a symlink whose target is missing" in shown
    assert f"{folder / 'pipe.yaml'}:1: cannot be read: not a regular file" in shown
    assert any("unknown tool 'nuke'" in s for s in shown), "the other files' errors come with it"


def test_an_oversized_file_is_an_error(tmp_path):
    folder = write(tmp_path / "p", {**BASE, "big.yaml": "kind: Instance\n" + "#" * (1024 * 1024 + 1) + "\n"})
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dir(folder)
    assert any("larger than" in e.message for e in info.value.errors)


def _problems(tmp_path: Path, files: dict[str, str]) -> list[str]:
    folder = write(tmp_path / "p", {**BASE, **files})
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dir(folder, catalog=AgentCatalog(tmp_path / "catalog.db"))
    return [str(e) for e in info.value.errors]


def test_a_broken_agent_is_reported_once_not_again_at_each_name_of_it(tmp_path):
    shown = _problems(tmp_path, {
        "helper.yaml": agent("allowlist: [ping]\nscoep: {access: [read]}\n", name="helper"),
        "lead.yaml": agent("allowlist: [ping]\nscope: {access: [read]}\ndelegates: [helper]\n", name="lead"),
        "r.yaml": "kind: Rule\nname: r\neffect: deny_if\nagents: [helper]\ncondition: 'true'\n",
    })
    assert len(shown) == 1 and "helper.yaml:5: Agent scoep: unknown key" in shown[0], shown


def test_an_undefined_name_is_still_unknown_and_says_what_was_meant(tmp_path):
    shown = _problems(tmp_path, {
        "lead.yaml": agent("allowlist: [pign]\ndelegates: [helpr]\ntenant: defualt\n", name="lead"),
        "helper.yaml": agent("allowlist: [ping]\n", name="helper"),
        "r.yaml": "kind: Rule\nname: r\neffect: deny_if\nagents: [leed]\ntools: [ping, admn]\ncondition: 'true'\n",
        "t.yaml": tool("run:\n  image: x\n  command: [echo, '{targt}']\n",
                       schema="{type: object, properties: {target: {type: string}}}"),
    })
    text = "\n".join(shown)
    for said in ("unknown tool 'pign'; did you mean 'ping'?", "unknown agent 'helpr'; did you mean 'helper'?",
                 "unknown tenant 'defualt'; did you mean 'default'?", "unknown agent 'leed'; did you mean 'lead'?",
                 "unknown tool 'admn'; did you mean 'admin'?",
                 "placeholder {targt} is not an input_schema property; did you mean 'target'?"):
        assert said in text, text
    # a name far from every defined one gets no guess
    shown = _problems(tmp_path / "2", {"lead.yaml": agent("allowlist: [zzzzzz]\n", name="lead")})
    assert any(s.endswith("unknown tool 'zzzzzz'") for s in shown), shown


def test_a_yaml_syntax_error_names_its_column(tmp_path):
    shown = _problems(tmp_path, {"b.yaml": "kind: Agent\nname: x\npersona: p\nallowlist: [ping, ]]\n"})
    assert any(re.match(r".*b\.yaml:4:\d+: YAML syntax", s) for s in shown), shown
