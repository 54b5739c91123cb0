from __future__ import annotations

import pytest

from checkpoint.cel import CelCompileError, CelResult, CelType, get_engine
from checkpoint.cel.pure import PythonEngine

from .cel_corpus import POLICY_VARIABLES, base_activation


def test_get_engine_names() -> None:
    assert get_engine().name == "native"
    assert get_engine("native").name == "native"
    assert get_engine("python").name == "python"
    assert get_engine("native") is get_engine("native")
    with pytest.raises(ValueError, match="unknown CEL engine 'rust'"):
        get_engine("rust")


# --- compile errors ---------------------------------------------------------------


def test_syntax_error_has_position(engine) -> None:
    with pytest.raises(CelCompileError) as info:
        engine.compile("args.amount > ", POLICY_VARIABLES)
    err = info.value
    assert err.line == 1
    assert err.column is not None and err.column >= 13
    assert err.source == "args.amount > "
    assert err.message.startswith("1:")
    assert "yntax error" in err.message


def test_undeclared_variable_is_named(engine) -> None:
    with pytest.raises(CelCompileError) as info:
        engine.compile("rn.mode == 'background'", POLICY_VARIABLES)
    assert "undeclared reference to 'rn" in info.value.message
    assert info.value.column is not None


def test_variable_not_declared_for_this_compile(engine) -> None:
    # `args` is fine with the policy declarations but not with an empty set.
    engine.compile("has(args.x)", POLICY_VARIABLES)
    with pytest.raises(CelCompileError, match="args"):
        engine.compile("has(args.x)", {})


def test_type_error_at_compile(engine) -> None:
    with pytest.raises(CelCompileError, match="no matching overload"):
        engine.compile("action > 3", POLICY_VARIABLES)


def test_unknown_function(engine) -> None:
    with pytest.raises(CelCompileError, match="frobnicate"):
        engine.compile("frobnicate(args)", POLICY_VARIABLES)


def test_python_engine_checks_names_without_native_checker() -> None:
    # The fallback must still refuse typos when the native wheel is absent.
    engine = PythonEngine(full_check=False)
    with pytest.raises(CelCompileError, match="undeclared reference to 'agnet'"):
        engine.compile("agnet.name == 'x'", POLICY_VARIABLES)
    with pytest.raises(CelCompileError, match="undeclared reference to 'y'"):
        engine.compile("args.items.all(x, y > 0)", POLICY_VARIABLES)
    with pytest.raises(CelCompileError, match="function 'nope'"):
        engine.compile("args.tags.nope()", POLICY_VARIABLES)
    with pytest.raises(CelCompileError, match="syntax error"):
        engine.compile("(((", POLICY_VARIABLES)
    # Macro variables, type names and `has` are not variables.
    program = engine.compile("args.items.all(i, type(i) == map && has(i.sku))", POLICY_VARIABLES)
    assert program.evaluate(base_activation()).is_true()


# --- is_true semantics ------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (CelResult(value=True), True),
        (CelResult(value=False), False),
        (CelResult(value=1), False),
        (CelResult(value="true"), False),
        (CelResult(value=[True]), False),
        (CelResult(value=None), False),
        (CelResult(value=True, error="boom"), False),
        (CelResult(error="NOT_FOUND: Key not found"), False),
    ],
)
def test_is_true_only_for_bool_true(result: CelResult, expected: bool) -> None:
    assert result.is_true() is expected


def test_non_bool_results_are_not_true(engine) -> None:
    act = base_activation()
    for src in ("1", "'true'", "[true]", "args.note", "{'a': true}"):
        result = engine.compile(src, POLICY_VARIABLES).evaluate(act)
        assert result.error is None
        assert not result.is_true(), src


# --- errors are results, never exceptions ----------------------------------------


def test_error_value_becomes_error_result(engine) -> None:
    # The native runtime returns the error *as a value* whose payload is a truthy string;
    # it must surface as .error, never as .value.
    result = engine.compile("args.missing == 1", POLICY_VARIABLES).evaluate(base_activation())
    assert result.value is None
    assert result.error and "missing" in result.error
    assert not result.is_true()


def test_negated_error_stays_error(engine) -> None:
    result = engine.compile("!(args.missing == 1)", POLICY_VARIABLES).evaluate(base_activation())
    assert result.error is not None
    assert not result.is_true()


def test_or_true_absorbs_error(engine) -> None:
    result = engine.compile("args.missing == 1 || true", POLICY_VARIABLES).evaluate(base_activation())
    assert result == CelResult(value=True)


def test_missing_declared_variable(engine) -> None:
    act = base_activation()
    del act["run"]
    # Even an expression that never reads `run` fails: the activation is malformed.
    result = engine.compile("true", POLICY_VARIABLES).evaluate(act)
    assert result.error == "activation is missing declared variable 'run'"


def test_wrongly_typed_variable_is_error(engine) -> None:
    result = engine.compile("action == 'plan'", POLICY_VARIABLES).evaluate(base_activation(action=7))
    assert result.error is not None and not result.is_true()


def test_evaluate_never_raises_on_weird_input(engine) -> None:
    program = engine.compile("args.x == 1", POLICY_VARIABLES)
    for bad in ({"x": object()}, {"x": {1, 2}}, {"x": 10**30}, {1.5: "float key"}):
        result = program.evaluate(base_activation(args=bad))
        assert result.error is not None, bad


# --- normalisation ------------------------------------------------------------------


def test_values_are_plain_python(engine) -> None:
    src = "{'b': true, 'i': 1, 'd': 1.5, 's': 'x', 'y': b'z', 'n': null, 'l': [1u, 2]}"
    result = engine.compile(src, POLICY_VARIABLES).evaluate(base_activation())
    assert result.error is None
    value = result.value
    assert value == {"b": True, "i": 1, "d": 1.5, "s": "x", "y": b"z", "n": None, "l": [1, 2]}
    assert type(value) is dict
    for key, expected_type in {"b": bool, "i": int, "d": float, "s": str, "y": bytes, "l": list}.items():
        assert type(value[key]) is expected_type, key
    assert all(type(x) is int for x in value["l"])


def test_program_is_reusable(engine) -> None:
    program = engine.compile("args.amount > 100.0", POLICY_VARIABLES)
    assert program.source == "args.amount > 100.0"
    assert program.evaluate(base_activation()).is_true()
    assert not program.evaluate(base_activation(args={"amount": 5.0})).is_true()
    assert program.evaluate(base_activation(args={"amount": 101})).is_true()


def test_declared_scalar_types(engine) -> None:
    variables = {"d": CelType.DOUBLE, "i": CelType.INT, "b": CelType.BOOL, "m": CelType.MAP_STRING_STRING}
    program = engine.compile("d + 0.5 == 2.5 && i + 1 == 3 && !b && m.k == 'v'", variables)
    assert program.evaluate({"d": 2, "i": 2, "b": False, "m": {"k": "v"}}).is_true()
    assert program.evaluate({"d": 2.0, "i": 2.0, "b": False, "m": {"k": "v"}}).error is not None
    assert program.evaluate({"d": 2.0, "i": 2, "b": False, "m": {"k": 1}}).error is not None


def test_python_engine_uses_interpreted_runner() -> None:
    # cel-python 0.5.0's CompiledRunner crashes ('Tree' object has no attribute
    # 'checked_exception'); the interpreted runner is the one that works.
    import celpy

    program = get_engine("python").compile("args.count == 3", POLICY_VARIABLES)
    assert isinstance(program._runner, celpy.InterpretedRunner)  # type: ignore[attr-defined]
    assert program.evaluate(base_activation()).is_true()


def test_concurrent_evaluation_gives_each_caller_its_own_answer(engine) -> None:
    # The checkpoint serves gRPC from a thread pool and shares compiled programs.
    from concurrent.futures import ThreadPoolExecutor

    program = engine.compile("args.count * 2", POLICY_VARIABLES)
    rounds = 300 if engine.name == "native" else 30

    def worker(n: int) -> list[object]:
        return [program.evaluate(base_activation(args={"count": n + i})).value for i in range(rounds)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(worker, range(0, 8000, 1000)))
    for n, values in zip(range(0, 8000, 1000), results, strict=True):
        assert values == [(n + i) * 2 for i in range(rounds)]


def test_the_python_engine_evaluates_each_macro_of_a_chain_once(monkeypatch) -> None:
    """Its strict macro target check must not make cel-python evaluate the target again: a chain of
    k macros then cost 2**k evaluations (a rule over a caller's list, under --cel-engine python)."""
    from checkpoint.cel import pure

    calls = []
    real = pure._Evaluator.member_dot_arg

    def counted(self, tree):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(self, tree)

    monkeypatch.setattr(pure._Evaluator, "member_dot_arg", counted)
    chain = "subjects" + ".map(x, x)" * 12 + ".size() == 2"
    act = base_activation(subjects=["a.example", "b.example"])
    assert PythonEngine().compile(chain, POLICY_VARIABLES).evaluate(act).value is True
    assert len(calls) == 12 + 1  # each macro once, and size()
