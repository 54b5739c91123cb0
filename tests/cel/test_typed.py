"""The typed check (checkpoint/cel/typed.py): fields and their types known at load, messages a
person can act on (a code frame's column, a "did you mean"), and a check that does not depend
on the engine that later evaluates."""

from __future__ import annotations

import pytest

from checkpoint.cel import CelType
from checkpoint.cel.typed import (
    Checker,
    ListOf,
    Obj,
    TypedCompileError,
    checker_for,
    frame,
    json_name,
    selectable,
    suggest,
    time_zone_problems,
)

TOOL = Obj("Tool", "tool", (("name", CelType.STRING), ("access", CelType.STRING)))
ARGS = Obj("Args", "args", (
    ("service", CelType.STRING), ("amount", CelType.DYN), ("count", CelType.INT), ("flag", CelType.BOOL),
    ("tags", CelType.LIST_STRING), ("meta", CelType.MAP_STRING_DYN), ("items", CelType.LIST_DYN),
    ("ids", ListOf(CelType.INT)),
), hint=": not a property of the input_schema of deploy")
STEP = Obj("Step", "a plan step", (("id", CelType.STRING), ("tool", CelType.STRING)))
VARIABLES = {"tool": TOOL, "args": ARGS, "plan": ListOf(STEP), "now": CelType.TIMESTAMP,
             "action": CelType.STRING, "run": CelType.MAP_STRING_DYN}


@pytest.fixture(scope="module")
def checker() -> Checker:
    return checker_for(VARIABLES)


def problems(checker: Checker, source: str) -> list:
    with pytest.raises(TypedCompileError) as info:
        checker.check(source)
    assert info.value.problems and info.value.line == info.value.problems[0].line
    return info.value.problems


@pytest.mark.parametrize("source, result", [
    ('tool.access == "write"', "BOOL"),
    ("args.service.startsWith('db-')", "BOOL"),
    ("args.amount > 500", "BOOL"),  # dyn: compared by value at run time
    ("args.amount > 500.0", "BOOL"),
    ("args.count > 5", "BOOL"),
    ("args.flag", "BOOL"),
    ("'vip' in args.tags && args.ids.all(i, i > 0)", "BOOL"),
    ("args.meta.anything.deeper == 1", "BOOL"),  # an object argument is a map of dyn
    ("has(args.service) && size(args.items) > 0", "BOOL"),
    ("plan.exists(s, s.tool == 'deploy')", "BOOL"),
    ("now.getHours('Europe/Berlin') >= 9", "BOOL"),
    ("run.inputs.customer", "DYN"),  # a map stays a map
    ("args.amount", "DYN"),
    ("args.service", "STRING"),
    ("[args.service]", "LIST<STRING>"),
])
def test_typed_expressions_check_with_their_result_type(checker, source, result):
    assert checker.check(source) == result


def test_an_unknown_field_names_the_object_the_column_and_the_nearest_field(checker):
    (p,) = problems(checker, 'tool.acess == "write"')
    assert (p.line, p.column, p.length) == (1, 6, 5)
    assert p.message == "tool has no field 'acess' (did you mean 'access'?)"


def test_an_unknown_argument_says_where_arguments_come_from(checker):
    (p,) = problems(checker, 'args.servcie == "db"')
    assert "args has no field 'servcie': not a property of the input_schema of deploy" in p.message
    assert p.message.endswith("(did you mean 'service'?)")
    assert p.column == 6


def test_far_from_every_field_the_fields_are_listed(checker):
    (p,) = problems(checker, "tool.zzz == 'x'")
    assert p.message == "tool has no field 'zzz'; its fields: name, access"


def test_a_string_compared_with_a_number_names_the_operand_and_its_type(checker):
    (p,) = problems(checker, "args.service > 5")
    assert (p.line, p.column) == (1, 14)
    assert p.message == "'>' does not apply to (string, int): args.service is string"


def test_mixed_numbers_get_a_hint(checker):
    (p,) = problems(checker, "args.count > 5.0")
    assert "args.count is int" in p.message and "double()" in p.message


@pytest.mark.parametrize("source, fragment", [
    ("'service' in args", "args is an object with known fields, not a map: ask for a field with has(args.field)"),
    ("args['service'] == 'x'", "not a map"),
    ("size(tool) > 1", "tool is an object with known fields"),
])
def test_a_typed_object_is_not_a_map(checker, source, fragment):
    (p,) = problems(checker, source)
    assert fragment in p.message


def test_unknown_variables_and_functions_get_suggestions(checker):
    (p,) = problems(checker, "tol.name == 'x'")
    assert p.message.startswith("unknown variable 'tol' (did you mean 'tool'?)") and p.column == 1
    (p,) = problems(checker, "args.service.startswith('a')")
    assert p.message == "unknown function 'startswith' (did you mean 'startsWith'?)"
    assert p.column == 14 and p.length == len("startswith")


def test_every_problem_is_reported_with_its_own_line(checker):
    found = problems(checker, 'tool.name == "a" &&\n  tool.nmae == "b" &&\n  args.count == "c"')
    assert [(p.line, p.column) for p in found] == [(2, 8), (3, 14)]
    assert "did you mean 'name'" in found[0].message and "args.count is int" in found[1].message


def test_a_misspelt_time_zone_is_refused_with_a_suggestion(checker):
    (p,) = problems(checker, 'now.getHours("Europe/Berln") > 8')
    assert p.message.startswith("unknown time zone 'Europe/Berln' (did you mean 'Europe/Berlin'?)")
    assert (p.column, p.length) == (15, len("Europe/Berln"))
    (p,) = problems(checker, "now.getDayOfWeek('europe/berlin') == 1")
    assert "(did you mean 'Europe/Berlin'?)" in p.message
    for fine in ("Europe/Berlin", "+02:00", "UTC", "America/New_York", ""):
        assert time_zone_problems(f"now.getHours({fine!r}) > 1") == [], fine


def test_the_code_frame_puts_the_caret_under_the_column():
    assert frame('tool.acess == "write"', 1, 6, 5) == '    | tool.acess == "write"\n    |      ^~~~~'
    assert frame("a &&\n  bad", 2, 3, 3) == "    |   bad\n    |   ^~~"
    assert frame("x", 1, 40) == "    | x\n    |  ^"  # past the end: at the end


def test_suggest_is_difflib_with_a_case_insensitive_fallback():
    assert suggest("acess", ["name", "access"]) == " (did you mean 'access'?)"
    assert suggest("ZZZ", ["name", "access"]) == ""
    assert suggest("europe/berlin", ["Europe/Berlin", "Europe/Paris"]) == " (did you mean 'Europe/Berlin'?)"


def test_names_that_cannot_be_fields():
    assert selectable(["service", "amount_usd", "Type", "class"]) is None
    assert "not a CEL identifier" in (selectable(["ok", "max-retries"]) or "")
    assert "not a CEL identifier" in (selectable(["in"]) or "")
    assert "cannot both be fields" in (selectable(["foo_bar", "fooBar"]) or "")
    assert json_name("foo_bar_baz") == "fooBarBaz"


def test_checkers_are_shared_per_declaration_set():
    assert checker_for(VARIABLES) is checker_for(dict(reversed(list(VARIABLES.items()))))
    other = checker_for({**VARIABLES, "args": CelType.MAP_STRING_DYN})
    assert other is not checker_for(VARIABLES)
    assert other.check("args.servcie == 'x'") == "BOOL"  # a map of dyn: any key


def test_an_object_that_cannot_be_declared_is_a_clear_error():
    with pytest.raises(ValueError, match="max-retries"):
        Checker({"args": Obj("Args", "args", (("max-retries", CelType.INT),))})
