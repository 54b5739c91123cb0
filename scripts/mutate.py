"""Mutation testing of the trust boundary: every rule-enforcing line must be held by a test.

    .venv/bin/python scripts/mutate.py                 # every target, 2 workers
    .venv/bin/python scripts/mutate.py --list          # the mutants only, no tests run
    .venv/bin/python scripts/mutate.py --module checkpoint/server/approvals.py --jobs 1
    .venv/bin/python scripts/mutate.py --help

First the test selections run once under coverage, each test recorded as the context of the lines
it runs (this file is also that pytest plugin). Then one textual mutation at a time (comparisons flipped, `and`/`or` swapped, `not` dropped, `in`/`is`
negated, `True`/`False` swapped, numbers bumped, code-like strings changed, an `if` test negated,
a `raise` or a side-effect statement removed, a value returned or passed replaced by None, an early
`return None`) is made to a private copy of the tree (one per worker, in a temporary folder, so
the worktree is never changed), and the tests that run the mutated statement run against it with
`-x`; a mutant they let through is run again against the whole selection before it counts. A mutant
is *killed* when the tests fail, *timed out* past `--timeout`, *survived* when they pass. Only the
functions listed in TARGETS are mutated, without their docstrings, log and metrics calls, or the
audit record literals they build. Results go to stdout and, as JSON lines, to `--out`.
Survivors are either a missing test or an equivalent mutant; the equivalent ones are listed in
EQUIVALENT with the reason, and reported as such.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tokenize
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

# file -> the functions (qualified names) or module-level names whose code is mutated; "name:text"
# mutates a function only up to the first line that contains `text`.
TARGETS: dict[str, list[str]] = {
    "checkpoint/server/approvals.py": ["*"],
    "checkpoint/server/runs.py": ["*"],
    "warden/tokens.py": ["*"],
    "checkpoint/server/single_use.py": ["SingleUse.claim"],
    "checkpoint/policy/principals.py": ["*"],
    "checkpoint/server/service.py": [
        "KNOWN_VERDICTS", "CheckpointService.check", "_fail_closed", "_forget_claimed_run",
        "CheckpointService.start_run", "CheckpointService._person_act",
    ],
    # execute up to the container's run: the grant, the replay, the spec (its user) and the claim
    "toolrunner/runner.py": ["ToolRunner.execute:receipt = self._run(", "ToolRunner._check_revision",
                             "ToolRunner._remove_containers_of"],
    "toolrunner/container.py": ["create"],
    "checkpoint/engine/decide.py": ["_approve_or_stop"],
    "checkpoint/engine/authority.py": ["check_tool"],
    "checkpoint/policy/lifecycle.py": ["widenings", "tool_widenings"],
    "checkpoint/policy/catalog.py": ["AgentCatalog._file_change"],
}

CHECKPOINT_TESTS = [
    "tests/security/test_trust_boundary.py", "tests/server/test_approvals.py", "tests/server/test_run_tokens.py",
    "tests/server/test_auth.py", "tests/server/test_rpcs.py", "tests/checkpoint/test_ckpt_codes.py",
    "tests/checkpoint/test_ckpt_version_bounds.py", "tests/security",
]
A, R = "checkpoint/server/approvals.py", "checkpoint/server/runs.py"
_RUNNER_TESTS = ["tests/toolrunner/test_toolrunner_review.py", "tests/toolrunner/test_toolrunner_execute.py",
                 "tests/toolrunner/test_toolrunner_claims.py", "tests/toolrunner/test_toolrunner_crash.py"]
# what an agent version may do, as the catalog compares versions: the tests that edit versions
VERSION_TESTS = ["tests/checkpoint/test_ckpt_version_bounds.py", "tests/security/test_version_covers_tools.py",
                 "tests/security/test_catalog_lifecycle.py", "tests/security/test_pinned_authority.py"]
TESTS: dict[str, list[str]] = {
    "toolrunner/runner.py": [*_RUNNER_TESTS, *CHECKPOINT_TESTS],
    "toolrunner/container.py": [*_RUNNER_TESTS, "tests/toolrunner/test_toolrunner_hardening.py"],
    "checkpoint/policy/lifecycle.py": VERSION_TESTS,
    "checkpoint/policy/catalog.py": VERSION_TESTS,
}

# Mutant id -> why it cannot be told apart from the original by any caller (see the report).
_DIGEST_KEY = "a key of the digested dict: a call digest is only ever compared with one this code made"
_CACHE = "the memo is a cache: a token it no longer holds is verified again, with the same answer"
EQUIVALENT: dict[str, str] = {
    **{f'{A}:{line}:string:"{key}"->"XX{key}"': _DIGEST_KEY for line, key in (
        (50, "run_id"), (51, "agent"), (52, "agent_version"), (53, "action"), (54, "call"),
        (55, "child_agent_version"))},
    f"{A}:54:swap:True->False": "the call's fields spelled in camelCase: one name per field, so equal calls "
                                "still digest equal and different calls different",
    f"{A}:54:value_none:True->None": "as True->False (None is false)",
    f"{R}:36:swap:True->False": "the chain claim spelled otherwise (camelCase, enum names): ParseDict reads "
                                "every spelling back to the same Actor",
    f"{R}:36:swap:True->False#2": "as above",
    f"{R}:36:value_none:True->None": "as True->False (None is false)",
    f"{R}:36:value_none:True->None#2": "as True->False (None is false)",
    f"{R}:31:removed:super().__init__(reason)->pass": "every `except Refused` reads .code, .reason and .rule; "
                                                      "the exception's own message is never read",
    f"{R}:101:swap:>->>=": _CACHE + " (it holds one token fewer)",
    f"{R}:102:swap:False->True": _CACHE + " (the newest is dropped instead of the oldest)",
    f"{R}:102:value_none:False->None": "popitem(last=None) is popitem(last=False): None is false",
    f"{R}:101:if_negated:len(self._memo) > _MEMO_SIZE->not (len(self._memo) > _MEMO_S":
        _CACHE + " (it then holds at most one token)",
    f"{R}:79:removed:self._memo.move_to_end(token)->pass": _CACHE + " (oldest-first rather than least recently used)",
    f"{R}:84:value_none:token->None": "the established context's run_token is copied over the request's and never "
                                      "read again: tokens, records and child runs are made from the other fields",
}

SWAPS = {"==": "!=", "!=": "==", "<": "<=", "<=": "<", ">": ">=", ">=": ">",
         "and": "or", "or": "and", "True": "False", "False": "True"}
CODE_LIKE = re.compile(r"""^(['"])[a-z][a-z0-9_]*\1$""")
SKIPPED_CALLS = re.compile(r"^(log|self\.metrics|self\._count)\b")


@dataclass
class Mutant:
    id: str
    path: str
    line: int
    kind: str
    before: str
    after: str
    start: int  # character offsets into the file
    end: int
    text: str
    lines: tuple[int, int]  # the statement it is in: the tests that run these lines see it


def _offsets(source: str) -> list[int]:
    starts, pos = [0], 0
    for line in source.splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def _qualnames(tree: ast.Module) -> dict[str, ast.AST]:
    found: dict[str, ast.AST] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found[prefix + child.name] = child
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.Assign) and prefix == "":
                for target in child.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = child
    walk(tree, "")
    return found


def _is_docstring(node: ast.AST, parent: ast.AST) -> bool:
    body = getattr(parent, "body", None)
    return (isinstance(body, list) and bool(body) and body[0] is node and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))


def mutants_of(path: str) -> list[Mutant]:
    source = (ROOT / path).read_text()
    lines = source.splitlines(keepends=True)
    starts = _offsets(source)
    tree = ast.parse(source)
    names = _qualnames(tree)

    def char(line: int, byte_col: int) -> int:  # ast columns are UTF-8 byte offsets
        return starts[line - 1] + len(lines[line - 1].encode()[:byte_col].decode())

    # the line ranges mutated, and the ones left alone inside them
    ranges: list[tuple[int, int]] = []
    functions: list[ast.AST] = []
    for spec in TARGETS[path]:
        until = ""
        if spec == "*":
            chosen = [n for n in names.values() if isinstance(n, ast.FunctionDef)]
        else:
            name, _, until = spec.partition(":")
            chosen = [names[name]]
        for node in chosen:
            end = node.end_lineno
            if until:
                end = next(i for i in range(node.lineno, end + 1) if until in lines[i - 1])
            ranges.append((node.lineno, end))
            functions.append(node)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            quiet = _is_docstring(child, node) or (
                isinstance(child, ast.Expr) and isinstance(child.value, ast.Call)
                and SKIPPED_CALLS.match(ast.unparse(child.value.func)))
            # the audit record a service method builds is the log, not a rule
            quiet = quiet or (isinstance(child, ast.Assign) and isinstance(child.value, ast.Dict)
                              and ast.unparse(child.targets[0]) == "record")
            if quiet:
                skipped.update(range(child.lineno, child.end_lineno + 1))

    def wanted(line: int) -> bool:
        return line not in skipped and any(a <= line <= b for a, b in ranges)

    found: list[Mutant] = []
    statements = [n for f in functions for n in ast.walk(f)
                  if isinstance(n, ast.stmt) and not isinstance(n, ast.FunctionDef)]

    def add(kind: str, line: int, start: int, end: int, after: str) -> None:
        before = source[start:end]
        if before == after or not wanted(line):
            return
        text = source[:start] + after + source[end:]
        try:
            compile(text, path, "exec")
        except SyntaxError:
            return
        short = " ".join(before.split())[:60]
        stmt = min((n for n in statements if n.lineno <= line <= n.end_lineno),
                   key=lambda n: n.end_lineno - n.lineno, default=None)
        lines = (stmt.lineno, stmt.end_lineno) if stmt is not None else (line, line)
        found.append(Mutant(f"{path}:{line}:{kind}:{short}->{after.strip()[:30]}", path, line, kind, short, after,
                            start, end, text, lines))

    # token mutations: operators, keywords, numbers, code-like strings
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for i, tok in enumerate(tokens):
        (row, col), (erow, ecol) = tok.start, tok.end
        start, end = starts[row - 1] + col, starts[erow - 1] + ecol
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.string in SWAPS and tok.type in (tokenize.OP, tokenize.NAME):
            add("swap", row, start, end, SWAPS[tok.string])
        elif tok.string == "not" and nxt is not None and nxt.string == "in":
            add("not_in", row, start, starts[nxt.start[0] - 1] + nxt.end[1], "in")
        elif tok.string == "not":
            add("not_dropped", row, start, starts[nxt.start[0] - 1] + nxt.start[1], "")
        elif tok.string == "in" and tokens[i - 1].string != "not":
            add("in", row, start, end, "not in")
        elif tok.string == "is" and nxt is not None and nxt.string == "not":
            add("is_not", row, start, starts[nxt.start[0] - 1] + nxt.end[1], "is")
        elif tok.string == "is":
            add("is", row, start, end, "is not")
        elif tok.type == tokenize.NUMBER and tok.string.isdigit():
            add("number", row, start, end, str(int(tok.string) + 1))
        elif tok.type == tokenize.STRING and CODE_LIKE.match(tok.string):
            add("string", row, start, end, tok.string[0] + "XX" + tok.string[1:])

    # tree mutations, inside the chosen functions only
    for function in functions:
        body = getattr(function, "body", None)
        if isinstance(function, ast.FunctionDef) and body:
            first = body[1] if _is_docstring(body[0], function) and len(body) > 1 else body[0]
            indent = lines[first.lineno - 1][: first.col_offset]
            at = starts[first.lineno - 1]
            add("early_return", first.lineno, at, at, f"{indent}return None\n")
        for node in ast.walk(function):
            if isinstance(node, ast.Raise | ast.AugAssign) or (
                    isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
                add("removed", node.lineno, char(node.lineno, node.col_offset),
                    char(node.end_lineno, node.end_col_offset), "pass")
            elif isinstance(node, ast.If | ast.While):
                test = node.test
                add("if_negated", node.lineno, char(test.lineno, test.col_offset),
                    char(test.end_lineno, test.end_col_offset), f"not ({ast.unparse(test)})")
            elif isinstance(node, ast.Return) and node.value is not None and not (
                    isinstance(node.value, ast.Constant) and node.value.value in (None, True, False)):
                value = node.value
                add("return_none", node.lineno, char(value.lineno, value.col_offset),
                    char(value.end_lineno, value.end_col_offset), "None")
            values = []
            if isinstance(node, ast.Dict):
                values = [v for v in node.values if v is not None]
            elif isinstance(node, ast.Call):
                values = [k.value for k in node.keywords if k.arg not in (None, "reason")]
            for value in values:
                if not (isinstance(value, ast.Constant) and value.value is None):
                    add("value_none", value.lineno, char(value.lineno, value.col_offset),
                        char(value.end_lineno, value.end_col_offset), "None")
    return unique(found)


def unique(found: list[Mutant]) -> list[Mutant]:
    """Two mutants that read the same (two `True`s on one line) are told apart by a `#n` suffix."""
    seen: Counter[str] = Counter()
    for m in found:
        seen[m.id] += 1
        if seen[m.id] > 1:
            m.id += f"#{seen[m.id]}"
    return found


def selection(path: str) -> list[str]:
    return TESTS.get(path, CHECKPOINT_TESTS)


# -- the coverage map: which tests run which lines ----------------------------------------------

_coverage: Any = None


def pytest_configure(config: object) -> None:  # pytest plugin mode: `-p mutate`
    global _coverage
    import coverage
    _coverage = coverage.Coverage(data_file=os.environ["MUTATE_COVERAGE"], include=[str(ROOT / p) for p in TARGETS])
    _coverage.start()


def pytest_unconfigure(config: object) -> None:
    _coverage.stop()
    _coverage.save()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: object) -> Iterator[None]:
    _coverage.switch_context(item.nodeid)
    yield
    _coverage.switch_context("")


def coverage_map(paths: list[str]) -> dict[str, dict[int, list[str]]]:
    """file -> line -> the node ids of the tests that ran it (in the order they ran)."""
    import coverage
    data_file = ROOT / ".warden" / f"mutate-{os.getpid()}.coverage"
    tests = list(dict.fromkeys(t for p in paths for t in selection(p)))
    env = {**os.environ, "MUTATE_COVERAGE": str(data_file), "PYTHONPATH": str(Path(__file__).parent)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "mutate", *tests],
                   cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=False)
    data = coverage.CoverageData(str(data_file))
    data.read()
    order = {c: i for i, c in enumerate(sorted(data.measured_contexts()))}
    out: dict[str, dict[int, list[str]]] = {}
    for path in paths:
        by_line = data.contexts_by_lineno(str(ROOT / path))
        out[path] = {line: sorted((c for c in ctx if c), key=order.get) for line, ctx in by_line.items()}
    return out


def run_mutant(mutant: Mutant, copy: Path, timeout: float, tests: list[str]) -> tuple[str, float]:
    target = copy / mutant.path
    original = target.read_text()
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    began = time.monotonic()
    try:
        target.write_text(mutant.text)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=copy, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout,
        )
        # 1: a test failed. Anything else (no such test, an internal error) proves nothing.
        status = {0: "survived", 1: "killed"}.get(proc.returncode, f"error{proc.returncode}")
    except subprocess.TimeoutExpired:
        status = "timeout"
    finally:
        target.write_text(original)
    return status, time.monotonic() - began


def make_copy() -> Path:
    copy = Path(tempfile.mkdtemp(prefix="warden-mutate-"))
    shutil.copytree(ROOT, copy, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".warden", "*.egg-info"))
    probe = subprocess.run([sys.executable, "-c", "import checkpoint; print(checkpoint.__file__)"], cwd=copy,
                           env={**os.environ, "PYTHONPATH": str(copy)}, capture_output=True, text=True, check=True)
    assert probe.stdout.startswith(str(copy)), f"the copy is not what gets imported: {probe.stdout}"
    return copy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", action="append", choices=sorted(TARGETS), help="only this file (repeatable)")
    parser.add_argument("--match", default="", help="only mutants whose id matches this regular expression")
    parser.add_argument("--no-confirm", action="store_true",
                        help="count a mutant the covering tests let through as survived, without the whole selection")
    parser.add_argument("--rerun", metavar="JSONL",
                        help="run again only the mutants an earlier --out left alive; its killed ones stay killed "
                             "(added tests cannot revive a mutant)")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--jobs", type=int, default=2, help="parallel workers, each with its own copy")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per mutant")
    parser.add_argument("--out", default=".warden/mutate.jsonl", help="JSON lines of the results")
    args = parser.parse_args()

    mutants = [m for path in (args.module or TARGETS) for m in mutants_of(path) if re.search(args.match, m.id)]
    earlier: dict[str, str] = {}
    if args.rerun:
        rows = [json.loads(line) for line in Path(args.rerun).read_text().splitlines()]
        seen: Counter[str] = Counter()
        for row in rows:  # runs before the `#n` suffix wrote duplicate ids, in generation order
            seen[row["id"]] += 1
            key = row["id"] if "#" in row["id"] or seen[row["id"]] == 1 else f"{row['id']}#{seen[row['id']]}"
            earlier[key] = row["status"]
        chosen = {m.path for m in mutants}
        gone = set() if args.match else {i for i in earlier if i.split(":")[0] in chosen} - {m.id for m in mutants}
        assert not gone, f"{len(gone)} mutants of {args.rerun} are no longer generated, e.g. {sorted(gone)[0]}"
    if args.list:
        for m in mutants:
            print(m.id)
        print(f"{len(mutants)} mutants")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `kill PID` still removes the copies
    copies = [make_copy() for _ in range(max(1, args.jobs))]
    free = list(copies)
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    counts: dict[str, Counter[str]] = {}

    lines_run = coverage_map(sorted({m.path for m in mutants}))

    def one(mutant: Mutant) -> tuple[Mutant, str, float]:
        if earlier.get(mutant.id) == "killed":
            return mutant, "killed", 0.0
        covering = lines_run[mutant.path]
        first, last = mutant.lines
        tests = list(dict.fromkeys(t for line in range(first, last + 1) for t in covering.get(line, ())))
        copy = free.pop()
        try:
            status, took = run_mutant(mutant, copy, args.timeout, tests or selection(mutant.path))
            if status == "survived" and tests and not args.no_confirm:  # the whole selection must let it through too
                status, more = run_mutant(mutant, copy, args.timeout, selection(mutant.path))
                took += more
        finally:
            free.append(copy)
        if status == "survived" and mutant.id in EQUIVALENT:
            status = "equivalent"
        return mutant, status, took

    try:
        with ThreadPoolExecutor(len(copies)) as pool, out.open("w") as sink:
            for mutant, status, took in pool.map(one, mutants):
                counts.setdefault(mutant.path, Counter())[status] += 1
                row = {k: v for k, v in asdict(mutant).items() if k not in ("text", "start", "end")}
                sink.write(json.dumps({**row, "status": status, "seconds": round(took, 1)}) + "\n")
                sink.flush()
                if status not in ("killed",):
                    print(f"{status.upper():10} {mutant.id}", flush=True)
    finally:
        for copy in copies:
            shutil.rmtree(copy, ignore_errors=True)
    print(f"\n{'module':36} generated killed survived timeout equivalent")
    for path, c in counts.items():
        print(f"{path:36} {sum(c.values()):9} {c['killed']:6} {c['survived']:8} {c['timeout']:7} {c['equivalent']:10}")
    return 1 if any(c["survived"] for c in counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
