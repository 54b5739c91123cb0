"""Both engines must give the same normalised answer on every expression of the corpus.

Each entry also pins the expected outcome, so a bug shared by both engines (or a change in
the chosen semantics) fails here too, not only a disagreement.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from checkpoint.cel import Case, CelResult, differential, get_engine
from checkpoint.cel.differential import Mismatch, agree

from .cel_corpus import NOW, POLICY_VARIABLES, base_activation

ERR = object()  # expected: an evaluation error (any message)
COMPILE = object()  # expected: rejected at compile time

# (expression, expected, activation overrides)
CORPUS: list[tuple[str, object, dict[str, object]]] = [
    # booleans and logic, including CEL's commutative error absorption
    ("true && !false", True, {}),
    ("args.flag || action == 'tool_call'", True, {}),
    ("args.missing || true", True, {}),
    ("true || args.missing", True, {}),
    ("args.missing && false", False, {}),
    ("!args.missing", ERR, {}),
    ("args.missing || false", ERR, {}),
    ("args.flag ? 'yes' : 'no'", "no", {}),
    ("args.count > 1 ? args.count : 0", 3, {}),
    # arithmetic
    ("args.count * 2 + 1", 7, {}),
    ("args.ratio * 2.0", 5.0, {}),
    ("7 / 2", 3, {}),
    ("-7 / 2", -3, {}),
    ("-7 % 3", -1, {}),
    ("args.count / 0", ERR, {}),
    ("args.count % 0", ERR, {}),
    ("args.ratio / 0.0", math.inf, {}),
    ("9223372036854775807 + args.count", ERR, {}),
    ("args.amount + 1", ERR, {}),  # no mixed arithmetic
    ("args.count + 0.5", ERR, {}),
    ("double(args.count) + 0.5", 3.5, {}),
    ("int(args.amount) + 1", 151, {}),
    ("counters.spend_usd + 0.75", 2.0, {}),
    # mixed-number comparisons: by value, in both engines
    ("args.amount > 100", True, {}),
    ("args.amount > 100.0", True, {}),
    ("args.amount == 150", True, {}),
    ("args.count == 3.0", True, {}),
    ("args.count < 3.5", True, {}),
    ("args.count >= 3.0", True, {}),
    ("args.count != 3.0", False, {}),
    ("args.ratio > 2", True, {}),
    ("counters.tool_calls <= 4.0", True, {}),
    ("args.count == dyn(3u)", True, {}),
    ("3 == 3.0", COMPILE, {}),  # statically typed: the checker refuses it
    ("3 == 3u", COMPILE, {}),
    ("args.count in [1.0, 3.0]", True, {}),
    ("args.amount in [150]", True, {}),
    ("[1, 2] == dyn([1.0, 2.0])", True, {}),
    ("{'a': 1} == dyn({'a': 1.0})", True, {}),
    # equality across kinds is false, not an error
    ("args.customer == 42", False, {}),
    ("args.note == 0", False, {}),
    ("args.flag == 0", False, {}),
    ("args.mixed.exists(v, v == 'x')", True, {}),
    ("args.mixed.all(v, v != 'y')", True, {}),
    # ordering across kinds is an error
    ("args.customer < 3", ERR, {}),
    ("args.note > 1", ERR, {}),
    ("args.mixed.all(v, v > 0)", ERR, {}),
    # strings
    ("args.customer.startsWith('cus_')", True, {}),
    ("args.email.endsWith('@example.com')", True, {}),
    ("args.email.contains('@')", True, {}),
    ("args.email.matches('^[a-z]+@example\\\\.com$')", True, {}),
    ("args.customer.matches('[')", ERR, {}),
    ("size(args.customer)", 6, {}),
    ("args.customer + '!'", "cus_42!", {}),
    ("string(args.count)", "3", {}),
    ("args.customer[0]", ERR, {}),
    ("'abc' < 'abd'", True, {}),
    # in, has, missing keys
    ("tool.name in ['issue_refund', 'void']", True, {}),
    ("'write' in agent.access", True, {}),
    ("'amount' in args", True, {}),
    ("'nope' in args", False, {}),
    ("has(args.amount)", True, {}),
    ("has(args.missing)", False, {}),
    ("has(args.nested.level.deep)", True, {}),
    ("has(args.nested.level.shallow)", False, {}),
    ("args.missing", ERR, {}),
    ("args.missing == 1", ERR, {}),
    ("args['customer']", "cus_42", {}),
    ("args['nope']", ERR, {}),
    ("args.nested.level.deep", True, {}),
    ("args.nested.nope.deep", ERR, {}),
    ("args.customer.x", ERR, {}),
    # nulls
    ("args.note == null", True, {}),
    ("args.note != null", False, {}),
    ("has(args.note)", True, {}),
    ("args.note", None, {}),
    # lists, size and the macros
    ("size(args.tags)", 2, {}),
    ("args.tags.size() == 2", True, {}),
    ("args.tags[1]", "eu", {}),
    ("args.tags[5]", ERR, {}),
    ("args.tags + ['new']", ["vip", "eu", "new"], {}),
    ("args.items.all(i, i.qty >= 0)", True, {}),
    ("args.items.exists(i, i.qty == 0)", True, {}),
    ("args.items.exists_one(i, i.sku == 'a')", True, {}),
    ("args.items.map(i, i.sku)", ["a", "b"], {}),
    ("args.items.filter(i, i.qty > 0).map(i, i.sku)", ["a"], {}),
    ("args.items.map(i, i.qty * 2)", [4, 0], {}),
    ("args.items.map(i, i.missing)", ERR, {}),
    ("subjects.exists(s, s.startsWith('customer:'))", True, {}),
    ("subjects.filter(s, s.startsWith('order:'))", ["order:o-9"], {}),
    ("args.exists(k, k == 'amount')", True, {}),
    # the touched values as read (engine/as_read.py): the maps rules read instead of raw text
    ("touched.subjects.exists(s, s.host == 'bank.example' || s.host.endsWith('.bank.example'))", True, {}),
    ("touched.subjects.filter(s, s.range).map(s, s.address)", ["10.20.0.0/24"], {}),
    ("touched.subjects.exists(s, s.kind == 'url' && s.path.startsWith('/admin') && s.port == 443)", True, {}),
    ("touched.subjects.map(s, s.name).filter(n, n != '')", ["customer:vip-1"], {}),
    ("touched.subjects.all(s, s.kind in ['host', 'ip', 'url', 'name'])", True, {}),
    ("size(touched.connections)", 0, {}),
    ("touched.subjects[0].port + 1", 1, {}),
    ("touched.subjects.exists(s, s.missing == 1)", ERR, {}),
    ("touched.subjects.exists(s, s.range)", False, {"touched": {"subjects": []}}),
    ("touched.subjects.exists(s, s.range)", ERR, {"touched": {}}),
    # a predicate or an operand of || and && that is no bool is an error, as an error is: it is
    # absorbed by a true (||, exists) or a false (&&, all), never handed on as the result
    ("args.tags.exists(s, s)", ERR, {}),
    ("args.tags.all(s, s)", ERR, {}),
    ("args.tags.exists_one(s, s)", ERR, {}),
    ("[true, 'yes'].exists_one(s, s)", ERR, {}),
    ("args.tags.filter(s, s).size() == 0", ERR, {}),
    ("[null, true].exists(s, s)", True, {}),
    ("[null, false].all(s, s)", False, {}),
    ("[1, 0].exists_one(x, 1 / x == 1)", ERR, {}),
    ("args.mixed.filter(v, v == 1)", [1], {}),
    ("args.note || false", ERR, {}),
    ("false || args.customer", ERR, {}),
    ("args.customer && true", ERR, {}),
    ("args.customer || true", True, {}),
    ("args.note && false", False, {}),
    ("[].all(x, x > 0)", True, {}),
    ("[1, 2, 3].map(x, x * x)", [1, 4, 9], {}),
    # maps and literals as results
    ("{'k': args.count, 'v': [args.flag]}", {"k": 3, "v": [False]}, {}),
    ("tool", {"name": "issue_refund", "access": "write"}, {}),
    ("args.mixed", [1, 2.5, "x", None], {}),
    ("b'ab'", b"ab", {}),
    ("1u + 2u", 3, {}),
    ("1u - 2u", ERR, {}),
    # realistic policy conditions
    ("args.amount > 100.0 && tool.name in ['issue_refund'] && !(run.mode == 'background')", True, {}),
    ("run.depth > 0 && action == 'delegation'", False, {}),
    ("counters.tool_calls >= 4 && agent.version == 'v3'", True, {}),
    ("run.tenant == 'acme' && subjects.all(s, !s.startsWith('vip:'))", True, {}),
    # activation shapes
    ("args.big", ERR, {"args": {"big": 2**70}}),
    ("args.t", ERR, {"args": {"t": (1, 2)}}),
    ("args.count", ERR, {"args": {"count": {1, 2}}}),
    ("args.deep.a[0].b", [True, None], {"args": {"deep": {"a": [{"b": [True, None]}]}}}),
    ("size(args)", 0, {"args": {}}),
    ("action", ERR, {"action": 5}),
    ("subjects", ERR, {"subjects": ["ok", 3]}),
    ("size(subjects)", ERR, {"subjects": None}),
    ("run.mode", ERR, {"run": None}),
    ("action", "plan", {"action": "plan"}),
    # a bad value only fails expressions that read that variable (both engines convert lazily)
    ("true", True, {"action": 7}),
    ("args.count == 3", True, {"subjects": [1]}),
    ("has(args.y)", ERR, {"args": {"x": 2**70}}),
    ("run.depth == 0", True, {"args": {"x": 2**70}}),
    # the checkpoint's clock: a timestamp, its parts read in an explicit time zone
    ("now.getHours('Europe/Berlin')", 9, {}),
    ("now.getDayOfWeek('Europe/Berlin')", 0, {}),
    ("now.getHours('America/New_York')", 3, {}),
    ("now.getHours()", 7, {}),
    ("now.getHours('+05:30') * 60 + now.getMinutes('+05:30')", 13 * 60, {}),
    ("now.getFullYear('Pacific/Kiritimati') * 100 + now.getMonth('Pacific/Kiritimati')", 202402, {}),
    ("now.getDayOfMonth('UTC')", 30, {}),
    ("now > timestamp('2024-01-01T00:00:00Z')", True, {}),
    ("now - duration('8h') < timestamp('2024-03-31T00:00:00Z')", True, {}),
    ("now.getHours('Europe/Berlin') >= 9 && now.getHours('Europe/Berlin') < 17 && "
     "now.getDayOfWeek('Europe/Berlin') in [1, 2, 3, 4, 5]", False, {}),
    ("now.getDayOfWeek('Europe/Berlin') in [1, 2, 3, 4, 5]", True,
     {"now": NOW + timedelta(days=1)}),
    ("now.getHours('Mars/Olympus')", ERR, {}),
    ("string(now)", "2024-03-31T07:30:15Z", {}),
    ("now", NOW, {}),
    ("now.getHours()", 10, {"now": datetime(2024, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))}),
    ("now == timestamp('2024-01-01T10:00:00Z')", True,
     {"now": datetime(2024, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))}),
    ("now.getHours()", ERR, {"now": "2024-03-31T07:30:15Z"}),  # text is not a timestamp
    ("true", True, {"now": datetime(2024, 1, 1, tzinfo=UTC)}),
    ("now + 1", COMPILE, {}),
    ("now > 5", COMPILE, {}),
    # where cel-python was more lenient than the native runtime (and CEL), so a deny_if rule over
    # a caller's value held under one engine and not the other: a macro over a string iterated
    # its characters, has() on a missing or non-map parent was false, bools did arithmetic,
    # conversions read null as 0 / "" / false, and string(true) was "True"
    ("args.hosts.exists(h, h == 'prod')", ERR, {"args": {"hosts": "prod"}}),
    ("!args.hosts.all(h, h != 'prod')", ERR, {"args": {"hosts": "prod"}}),
    ("args.hosts.exists_one(h, h == 'prod')", ERR, {"args": {"hosts": "prod"}}),
    ("args.hosts.filter(h, h == 'prod').size() > 0", ERR, {"args": {"hosts": "prod"}}),
    ("args.hosts.map(h, h).size() > 0", ERR, {"args": {"hosts": "prod"}}),
    ("args.hosts.exists(h, h == 'prod')", True, {"args": {"hosts": ["prod"]}}),
    ("args.hosts.exists(k, k == 'prod')", True, {"args": {"hosts": {"prod": 1}}}),
    ("has(args.opts.force)", ERR, {"args": {}}),
    ("has(args.opts.force)", ERR, {"args": {"opts": "force"}}),
    ("has(args.opts.force)", False, {"args": {"opts": {}}}),
    ("has(args.opts.force)", True, {"args": {"opts": {"force": None}}}),
    ("!has(args.opts.force) || args.opts.force == false", ERR, {"args": {"opts": ["force"]}}),
    ("args.flag + 1 > 0", ERR, {}),
    ("-args.flag < 0", ERR, {}),
    ("int(args.note) == 0", ERR, {}),
    ("size(args.note) == 0", ERR, {}),
    ("args.note.size() == 0", ERR, {}),
    ("bool(args.note) == false", ERR, {}),
    ("double(args.flag) == 0.0", ERR, {}),
    ("uint(args.flag) == 0u", ERR, {}),
    ("duration(args.count) > duration('1s')", ERR, {}),
    ("string(args.tags) == ''", ERR, {}),
    ("string(args.flag)", "false", {}),
    ("string(!args.flag) == 'true'", True, {}),
    ("type(args.count) == int && type(args.ratio) == double && type(args.customer) == string", True, {}),
    ("type(args.count) != uint && type(args.flag) == bool && int(args.customer.size()) == 6", True, {}),
    # the limits across runs: counts read before the decision
    ("limits.deploys_hourly.remaining <= 1", True, {}),
    ("limits.deploys_hourly.used + 1 > limits.deploys_hourly.max", False, {}),
    ("limits.tenant_daily_spend.used >= 1.0 && limits.tenant_daily_spend.remaining < 0.5", True, {}),
    ("limits.tenant_daily_spend.used + 1", ERR, {}),  # no mixed arithmetic, as for any double
    ("limits.deploys_hourli.used > 1", ERR, {}),  # no such limit: an error, so a deny_if refuses
    ("has(limits.deploys_hourly) && !has(limits.other)", True, {}),
    ("limits.deploys_hourly.remaining == 0", False, {"limits": {"deploys_hourly": {"used": 0, "remaining": 5,
                                                                                   "max": 5}}}),
    # compile-time rejections
    ("undeclared_var == 1", COMPILE, {}),
    ("args.amount >", COMPILE, {}),
    ("nosuchfn(args)", COMPILE, {}),
    ("1 + 'a'", COMPILE, {}),
    ("args.items.map(i, j)", COMPILE, {}),
    ("action + 1", COMPILE, {}),
]


def _cases() -> list[Case]:
    return [Case(src, base_activation(**over), POLICY_VARIABLES) for src, _, over in CORPUS]


def test_corpus_is_big_enough() -> None:
    assert len(CORPUS) >= 60


def test_engines_agree_on_corpus() -> None:
    mismatches = differential(_cases())
    assert mismatches == [], "\n".join(str(m) for m in mismatches)


@pytest.mark.parametrize(("source", "expected", "overrides"), CORPUS, ids=[c[0] for c in CORPUS])
@pytest.mark.parametrize("engine_name", ["native", "python"])
def test_expected_outcome(engine_name: str, source: str, expected: object, overrides: dict) -> None:
    from checkpoint.cel import CelCompileError

    engine = get_engine(engine_name)
    if expected is COMPILE:
        with pytest.raises(CelCompileError):
            engine.compile(source, POLICY_VARIABLES)
        return
    result = engine.compile(source, POLICY_VARIABLES).evaluate(base_activation(**overrides))
    if expected is ERR:
        assert result.error is not None, result
        assert result.value is None
        return
    assert result.error is None, result
    assert agree(result, CelResult(value=expected)), f"{result.value!r} != {expected!r}"


def test_differential_reports_a_real_disagreement() -> None:
    # An engine that answers "false" to everything must be caught by the helper.
    class Liar:
        name = "liar"

        def compile(self, source, variables):
            class P:
                def evaluate(self, activation):
                    return CelResult(value=False)

            p = P()
            p.source = source
            return p

    from checkpoint.cel.differential import differential as raw

    cases = [Case("1 == 1", {}, {}), Case("1 == 2", {}, {})]
    out = raw(cases, get_engine("native"), Liar())
    assert [m.source for m in out] == ["1 == 1"]
    assert isinstance(out[0], Mismatch)


def test_agree_is_strict_about_types() -> None:
    assert not agree(CelResult(value=1), CelResult(value=1.0))
    assert not agree(CelResult(value=True), CelResult(value=1))
    assert not agree(CelResult(value=[1]), CelResult(value=[1.0]))
    assert agree(CelResult(value=math.nan), CelResult(value=math.nan))
    assert agree(CelResult(error="a"), CelResult(error="b"))
    assert not agree(CelResult(error="a"), CelResult(value=None))
    assert not agree("compile error: x", CelResult(value=None))
