"""The fast path for plain argument lookups must answer exactly like the CEL engines."""

from __future__ import annotations

import pytest

from checkpoint.cel import CelType, get_engine
from checkpoint.cel.fastpath import FastProgram, compile_fast

VARIABLES = {"args": CelType.MAP_STRING_DYN}
SOURCES = [
    "[args.target]",
    " [ args.target ] ",
    "has(args.node) ? [args.node] : []",
    "has( args.node )?[args.node]:[]",
    "args.hosts",
]
ARGS = [
    {},
    {"target": "www.lab.example.com"},
    {"target": 3},
    {"target": None},
    {"target": ["a", "b"]},
    {"node": "lab-node-1"},
    {"node": ""},
    {"hosts": ["a.example", "b.example"]},
    {"hosts": "not-a-list"},
    {"target": "x", "node": "y", "hosts": []},
]


def outcome(result):
    return ("error",) if result.error is not None else ("value", result.value)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("args", ARGS, ids=lambda a: repr(a)[:40])
@pytest.mark.parametrize("engine", ["native", "python"])
def test_fast_path_agrees_with_engine(source, args, engine):
    fast = compile_fast(source)
    assert isinstance(fast, FastProgram)
    slow = get_engine(engine).compile(source, VARIABLES)
    assert outcome(fast.evaluate({"args": args})) == outcome(slow.evaluate({"args": args}))


@pytest.mark.parametrize(
    "source",
    [
        "[args.target, args.node]",
        "has(args.node) ? [args.other] : []",
        "[args.in]",  # a reserved word: left to the engine
        "args.target.split(',')",
        "[args['target']]",
    ],
)
def test_other_shapes_are_left_to_the_engine(source):
    assert compile_fast(source) is None


def test_missing_args_variable_is_an_error():
    fast = compile_fast("[args.target]")
    assert fast is not None
    assert fast.evaluate({}).error is not None
