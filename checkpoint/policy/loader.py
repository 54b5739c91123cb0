"""Load a policy folder: parse strictly, validate, cross-check, compile. All of it or none.

Every problem found is collected and reported at once, sorted, as `file:line: message`:
an operator fixes a broken edit in one pass, not one error per run.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastjsonschema
from pydantic import ValidationError

from checkpoint.cel import CelCompileError, CelProgram, CelType, get_engine
from checkpoint.cel import typed as cel_typed
from checkpoint.cel.fastpath import FastProgram, compile_fast
from checkpoint.policy import celtypes, entries, input_schemas, model
from checkpoint.policy.catalog import AgentCatalog
from checkpoint.policy.defaults import with_defaults
from checkpoint.policy.errors import PolicyError, PolicyLoadError
from checkpoint.policy.policyset import (
    SCOPE_DIMENSIONS,
    TYPED_DIMENSIONS,
    AgentVersion,
    CompiledRule,
    CompiledTool,
    PolicySet,
    rules_for,
    tool_definition,
)
from checkpoint.policy.principals import Principals
from checkpoint.policy.subjects import OffLimits, Pattern, SubjectError, read_pattern
from warden import canonical, codes
from warden.policyfiles import (
    MAX_FILE_BYTES,
    policy_files,
    read_file,
    revision_of,
)
from warden.yamlsource import SourceDocument, YamlIssue, load_documents

# A manifest of digests in `sha256sum` format: when the folder holds one, the set loads only when
# its files are exactly the ones the manifest names (docs/policies.md, "Applying a whole set").
MANIFEST = "SHA256SUMS"
_MANIFEST_LINE = re.compile(r"([0-9A-Fa-f]{64}) [ *](.+)")

# What a rule's condition may read, as the engines evaluate it (maps); their fields and types
# are declared in celtypes.py, checked at load. Every rule sees every name; values not relevant
# to the action (say `args` on a model call) are empty maps, so `has()` tells them apart.
RULE_VARIABLES: dict[str, CelType] = {
    "action": CelType.STRING,
    "args": CelType.MAP_STRING_DYN,
    "tool": CelType.MAP_STRING_DYN,
    "agent": CelType.MAP_STRING_DYN,
    "run": CelType.MAP_STRING_DYN,
    "counters": CelType.MAP_STRING_DYN,
    "subjects": CelType.LIST_STRING,
    "touched": CelType.MAP_STRING_DYN,
    "model": CelType.MAP_STRING_DYN,
    "delegation": CelType.MAP_STRING_DYN,
    "plan": CelType.LIST_DYN,
    "person": CelType.MAP_STRING_DYN,
    "now": CelType.TIMESTAMP,
}
TOUCHES_VARIABLES: dict[str, CelType] = {"args": CelType.MAP_STRING_DYN}

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class _Doc:
    file: str
    source: SourceDocument
    spec: Any  # a model.* instance

    def at(self, *path: str | int) -> int:
        return self.source.line_of(path)

    def line_in(self, path: tuple[str | int, ...], line: int) -> int:
        """The file line of line `line` of the text at `path` (a literal block spans lines)."""
        start = self.source.blocks.get(path)
        return self.at(*path) if start is None else start + line - 1


def load_policy_dir(
    directory: str | Path, *, catalog: AgentCatalog | None = None, cel_engine: str = "native"
) -> PolicySet:
    """Load, validate and compile every policy file under `directory`; raise PolicyLoadError.

    Each file is read once: the bytes compiled are the bytes the revision names, and the catalog
    keeps them, so a run pinned to this revision can be decided by it after later edits."""
    root = Path(directory)
    if not root.is_dir():
        raise PolicyLoadError([PolicyError(str(root), 0, "not a directory")])
    contents: list[tuple[str, bytes]] = []
    unread: list[PolicyError] = []
    for path in policy_files(root):
        name = str(path.relative_to(root))
        try:
            contents.append((name, read_file(path)))
        except OSError as exc:
            unread.append(PolicyError(os.path.join(str(directory), name), 1, f"cannot be read: {exc.strerror or exc}"))
    unread.extend(check_manifest(root, str(directory), contents))
    return load_policy_files(contents, str(directory), catalog=catalog, cel_engine=cel_engine, unread=unread)


def check_manifest(root: Path, shown: str, contents: list[tuple[str, bytes]]) -> list[PolicyError]:
    """The folder's files against its manifest, when it has one: every policy file listed, with
    the digest of the very bytes read for the load, and every listed file present with its digest.
    A file written halfway, one added or removed after the manifest, is a set that is not whole:
    it is refused (the last good set stays), whatever time passed since the last write."""
    path = root / MANIFEST
    if not path.exists() and not path.is_symlink():
        return []
    where = os.path.join(shown, MANIFEST)
    try:
        raw = read_file(path)
    except OSError as exc:
        return [PolicyError(where, 1, f"cannot be read: {exc.strerror or exc}")]
    if len(raw) > MAX_FILE_BYTES:
        return [PolicyError(where, 1, f"file is larger than {MAX_FILE_BYTES} bytes")]
    errors: list[PolicyError] = []
    listed: dict[str, tuple[str, int]] = {}
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _MANIFEST_LINE.fullmatch(line)
        name = _manifest_name(match[2]) if match else None
        if match is None or name is None:
            errors.append(PolicyError(where, number, "not a `SHA256  PATH` line of a file inside the folder "
                                                     "(the format `sha256sum` writes)"))
            continue
        if name in listed:
            errors.append(PolicyError(where, number, f"{name} is listed twice (first at line {listed[name][1]})"))
            continue
        listed[name] = (match[1].lower(), number)
    read = dict(contents)
    for name, data in contents:
        if name not in listed:
            errors.append(PolicyError(os.path.join(shown, name), 1, f"not in {where}: the set is not whole (a file "
                                      f"added after the manifest was written); `warden policy apply` writes both"))
        elif hashlib.sha256(data).hexdigest() != listed[name][0]:
            errors.append(PolicyError(os.path.join(shown, name), 1, f"its sha256 is not the one {where}:"
                                      f"{listed[name][1]} names: the file is still being written, or changed after "
                                      "the manifest; the last good set stays until both agree"))
    for name, (digest, number) in sorted(listed.items()):
        if name in read:
            continue
        other = root / name
        try:
            if hashlib.sha256(read_file(other)).hexdigest() != digest:
                errors.append(PolicyError(os.path.join(shown, name), 1, f"its sha256 is not the one {where}:{number} "
                                          "names"))
        except OSError:
            errors.append(PolicyError(where, number, f"{name} is listed but missing: the set is not whole"))
    return errors


def _manifest_name(text: str) -> str | None:
    """A listed path, relative to the folder (`./a.yaml` is `a.yaml`); None when it leaves it."""
    from pathlib import PurePosixPath

    path = PurePosixPath(text)
    if path.is_absolute() or not path.parts or ".." in path.parts or "\\" in text:
        return None
    return path.as_posix()


def load_policy_files(
    contents: list[tuple[str, bytes]], directory: str, *, catalog: AgentCatalog | None = None,
    cel_engine: str = "native", settle: bool = True, unread: list[PolicyError] | None = None,
) -> PolicySet:
    """`load_policy_dir` for files given as (path relative to the folder, bytes), in folder order.

    `settle=False` (an old revision compiled for a pinned run) reads which versions are live
    without letting these files change it. `unread`: the folder's files that could not be read,
    reported with the problems of the rest (the set does not load)."""
    errors: list[PolicyError] = list(unread or ())
    docs: list[_Doc] = []
    for name, data in contents:
        docs.extend(_parse_file(data, os.path.join(directory, name), errors))
    compiler = _Compiler(get_engine(cel_engine), errors)
    revision = revision_of(contents)
    policies = compiler.build(docs, revision, directory, catalog or AgentCatalog(None), cel_engine)
    if errors or policies is None:
        raise PolicyLoadError(errors)
    policies.catalog.record(list(policies.agents.values()), policies.revision)
    policies.catalog.record_revision(revision, contents)
    first_install = policies.catalog.first_install()
    # the files propose; the catalog says which version of each agent is live (docs/catalog.md)
    live, changes = policies.catalog.settle(policies.agents, policies.tenants, compiler.sources, write=settle)
    # and of each skill and template (docs/skills.md)
    entry_changes = policies.catalog.entries.settle(compiler.defined, policies.tenants,
                                                    first_install=first_install, write=settle)
    return policies.with_catalog(live, [*changes, *entry_changes])


def load_agent_definition(text: str, shown: str, policies: PolicySet) -> AgentVersion:
    """A proposed Agent document, checked like one in the policy files against `policies`' tools,
    tenants and agents (errors name `shown`:line), as the version it would be."""
    errors: list[PolicyError] = []
    docs = _parse_file(text.encode("utf-8"), shown, errors)
    if not errors and (len(docs) != 1 or docs[0].spec.kind != "Agent"):
        errors.append(PolicyError(shown, 1, "a proposal is exactly one Agent document"))
    elif not errors and docs[0].spec.mode != "enforce":
        errors.append(PolicyError(shown, 1, "a proposal is a definition to enforce: `mode: shadow` belongs in the "
                                            "policy files"))
    if errors:
        raise PolicyLoadError(errors)
    doc = docs[0]
    agents: dict[str, Any] = dict.fromkeys(policies.defined_agents)
    agents[doc.spec.name] = doc
    # the compiled tools stand in for their documents: only their specs are read
    compiler = _Compiler(get_engine(policies.cel_engine), errors)
    version = compiler._agent(doc, policies.tools, agents, policies.tenants, policies.rules)
    compiler._agent_skills(doc, {}, policies.catalog)
    if errors or version is None:
        raise PolicyLoadError(errors)
    return version


def _parse_file(raw: bytes, shown: str, errors: list[PolicyError]) -> list[_Doc]:
    if len(raw) > MAX_FILE_BYTES:
        errors.append(PolicyError(shown, 1, f"file is larger than {MAX_FILE_BYTES} bytes"))
        return []
    try:
        text = raw.decode("utf-8")
        sources = load_documents(text)
    except UnicodeDecodeError:
        errors.append(PolicyError(shown, 1, "file is not UTF-8 text"))
        return []
    except YamlIssue as issue:
        errors.append(PolicyError(shown, issue.line, issue.message))
        return []
    if not sources:
        errors.append(PolicyError(shown, 1, "file holds no document"))
    out: list[_Doc] = []
    for source in sources:
        data = source.data
        if not isinstance(data, dict):
            errors.append(PolicyError(shown, source.line, "a policy document must be a mapping with a 'kind'"))
            continue
        kind = data.get("kind")
        cls = model.KINDS.get(kind) if isinstance(kind, str) else None
        if cls is None:
            errors.append(
                PolicyError(
                    shown,
                    source.line_of(("kind",)),
                    f"unknown kind {kind!r}; expected one of: {', '.join(model.KINDS)}",
                )
            )
            continue
        try:
            out.append(_Doc(shown, source, cls.model_validate(data)))
        except ValidationError as exc:
            for err in exc.errors():
                loc = tuple(err["loc"])
                where = ".".join(str(p) for p in loc) or kind
                message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
                errors.append(PolicyError(shown, source.line_of(loc), f"{kind} {where}: {message}"))
    return out


def load_entry_definition(text: str, shown: str, kind: str, policies: PolicySet) -> entries.Entry:
    """A proposed Skill or Template document, checked like one in the policy files (errors name
    `shown`:line), as the version it would be."""
    errors: list[PolicyError] = []
    docs = _parse_file(text.encode("utf-8"), shown, errors)
    wanted = entries.DOCUMENT_KIND[kind]
    if not errors and (len(docs) != 1 or docs[0].spec.kind != wanted):
        errors.append(PolicyError(shown, 1, f"a proposal is exactly one {wanted} document"))
    if not errors and docs[0].spec.tenant not in policies.tenants:
        errors.append(PolicyError(shown, docs[0].at("tenant"), f"unknown tenant {docs[0].spec.tenant!r}"))
    if errors:
        raise PolicyLoadError(errors)
    return entries.Entry.of(docs[0].spec)


class _Compiler:
    sources: dict[str, str]  # agent name -> file:line of its definition
    defined: dict[entries.Key, tuple[entries.Entry, str]]  # the skills and templates, with file:line

    def __init__(self, engine: Any, errors: list[PolicyError]):
        self.engine = engine
        self.errors = errors
        self.defaulted: frozenset[str] = frozenset()  # instance ceilings taken from the built-in defaults

    def error(self, doc: _Doc, path: tuple[str | int, ...], message: str) -> None:
        self.errors.append(PolicyError(doc.file, doc.at(*path), message))

    def compile_cel(
        self,
        doc: _Doc,
        path: tuple[str | int, ...],
        source: str,
        variables: dict[str, CelType],
        result_types: tuple[str, ...],
        shapes: Mapping[str, cel_typed.Shape] | None = None,
    ) -> Any:
        """Type-check against the typed declarations (`shapes`, else `variables`) with Google's
        checker, whichever engine evaluates; then compile for the engine (over `variables`).
        The checked result type must be one of `result_types`."""
        what = f"{doc.spec.kind.lower()} {getattr(doc.spec, 'name', '')!r} {'.'.join(map(str, path))}: "
        checked = None
        if cel_typed.AVAILABLE:  # without the native wheel, the engine's own checks stand
            try:
                checked = cel_typed.checker_for(shapes or variables).check(source)
            except cel_typed.TypedCompileError as exc:
                for p in exc.problems:
                    self.errors.append(PolicyError(doc.file, doc.line_in(path, p.line),
                                                   f"{what}CEL does not compile: {p.line}:{p.column}: {p.message}\n"
                                                   + cel_typed.frame(source, p.line, p.column, p.length)))
                return None
        try:
            program = self.engine.compile(source, variables)
        except CelCompileError as exc:
            where = "" if exc.line is None else "\n" + cel_typed.frame(source, exc.line, exc.column or 1)
            self.errors.append(PolicyError(doc.file, doc.line_in(path, exc.line or 1),
                                           f"{what}CEL does not compile: {exc.message}{where}"))
            return None
        if checked is not None and checked not in result_types:
            why = (" (a value whose type is only known when it runs: compare it, e.g. `== true`)"
                   if checked == "DYN" else "")
            self.error(doc, path, f"{what}CEL returns {checked}{why}; it must return {' or '.join(result_types)}")
            return None
        return program

    def build(
        self, docs: list[_Doc], revision: str, directory: str, catalog: AgentCatalog, cel_engine: str
    ) -> PolicySet | None:
        by_kind: dict[str, list[_Doc]] = {k: [] for k in model.KINDS}
        for d in docs:
            by_kind[d.spec.kind].append(d)
        candidates = [d for d in by_kind["Agent"] if d.spec.mode == "shadow"]
        by_kind["Agent"] = [d for d in by_kind["Agent"] if d.spec.mode == "enforce"]
        named = {k: self._unique(by_kind[k]) for k in ("Agent", "Tool", "Rule", "Tenant", "Principal")}

        instance = self._instance(by_kind["Instance"])
        tenants = {name: d.spec for name, d in named["Tenant"].items()}
        tenants.setdefault("default", model.Tenant(kind="Tenant", name="default"))
        for d in named["Tenant"].values():
            self._ceilings_narrow(d, instance)

        tools = {name: self._tool(d) for name, d in named["Tool"].items()}
        rule_docs = list(named["Rule"].values())
        agents = {name: self._agent(d, named["Tool"], named["Agent"], tenants, rule_docs)
                  for name, d in named["Agent"].items()}
        self.sources = {name: f"{d.file}:{d.at()}" for name, d in named["Agent"].items()}
        self.defined = self._entries([*by_kind["Skill"], *by_kind["Template"]], tenants)
        for d in named["Agent"].values():
            self._agent_skills(d, self.defined, catalog)
        shadow_agents = self._shadow_agents(candidates, named["Tool"], named["Agent"], tenants, catalog, rule_docs)
        rules = [self._rule(d, named["Tool"], named["Agent"]) for d in named["Rule"].values()]
        off_limits = OffLimits(self._off_limits(by_kind["OffLimits"]))
        principals = self._principals(named["Principal"], tenants, named["Agent"])
        if self.errors:
            return None
        return PolicySet(
            prepare_rule_activation=self.engine.preparer(RULE_VARIABLES),
            prepare_touches_activation=self.engine.preparer(TOUCHES_VARIABLES),
            revision=revision,
            directory=directory,
            tools={k: v for k, v in tools.items() if v is not None},
            agents={k: v for k, v in agents.items() if v is not None},
            shadow_agents=shadow_agents,
            rules=[r for r in rules if r is not None],
            off_limits=off_limits,
            tenants=tenants,
            instance=instance,
            catalog=catalog,
            cel_engine=cel_engine,
            principals=principals,
        )

    def _principals(self, docs: dict[str, _Doc], tenants: dict[str, model.Tenant],
                    agents: dict[str, _Doc]) -> Principals:
        """Each exact identity belongs to one principal; named tenants and agents must exist."""
        owner: dict[str, _Doc] = {}
        for d in docs.values():
            spec: model.Principal = d.spec
            for i, identity in enumerate(spec.identities):
                first = owner.get(identity)
                if first is not None and "*" not in identity:
                    self.error(d, ("identities", i),
                               f"identity {identity!r} already names principal {first.spec.name!r} ({first.file})")
                owner.setdefault(identity, d)
            for section in ("check", "approve"):
                rights = getattr(spec, section)
                if rights is None:
                    continue
                for i, name in enumerate(rights.tenants):
                    if name != "*" and name not in tenants:
                        self.error(d, (section, "tenants", i), f"principal {spec.name!r}: unknown tenant {name!r}")
                for i, name in enumerate(rights.agents):
                    if name != "*" and name not in agents:
                        self.error(d, (section, "agents", i), f"principal {spec.name!r}: unknown agent {name!r}")
        return Principals(d.spec for d in docs.values())

    def _entries(self, docs: list[_Doc], tenants: dict[str, model.Tenant]) -> dict[entries.Key, tuple[entries.Entry, str]]:
        """Skills and templates: one of each name per tenant, in a tenant that exists."""
        found: dict[entries.Key, tuple[entries.Entry, str]] = {}
        for d in docs:
            spec = d.spec
            entry = entries.Entry.of(spec)
            first = found.get(entry.key)
            if spec.tenant not in tenants:
                self.error(d, ("tenant",), f"{spec.kind} {spec.name!r}: unknown tenant {spec.tenant!r}")
            elif first is not None:
                self.error(d, ("name",), f"{spec.kind} {spec.name!r} of tenant {spec.tenant!r} is defined twice "
                           f"(first in {first[1]})")
            else:
                found[entry.key] = (entry, f"{d.file}:{d.at()}")
        return found

    def _agent_skills(self, doc: _Doc, defined: Mapping[entries.Key, Any], catalog: AgentCatalog) -> None:
        """An agent lists skills of its own tenant that the files define or the catalog holds."""
        spec: model.Agent = doc.spec
        if len(set(spec.skills)) != len(spec.skills):
            self.error(doc, ("skills",), f"agent {spec.name!r} lists a skill twice")
        for i, name in enumerate(spec.skills):
            key = (entries.SKILL, spec.tenant, name)
            if key not in defined and not catalog.entries.known(*key):
                self.error(doc, ("skills", i), f"agent {spec.name!r}: unknown skill {name!r} in tenant {spec.tenant!r}")

    def _off_limits(self, docs: list[_Doc]) -> list[tuple[Pattern, str]]:
        entries = []
        for d in docs:
            for i, subject in enumerate(d.spec.subjects):
                try:
                    entries.append((read_pattern(subject.pattern, subject.type), subject.reason))
                except SubjectError as exc:
                    self.error(d, ("subjects", i, "pattern"), f"off-limits subject: {exc}")
        return entries

    def _shadow_agents(self, docs: list[_Doc], tools: Mapping[str, Any], agents: Mapping[str, _Doc],
                       tenants: dict[str, model.Tenant], catalog: AgentCatalog,
                       rules: list[_Doc]) -> dict[str, AgentVersion]:
        """`mode: shadow` Agent documents: each a candidate for the live agent of its name, in its
        tenant (a shadow never moves an agent: that is an edit reviewed like any other)."""
        found: dict[str, AgentVersion] = {}
        for d in self._unique(docs).values():
            spec: model.Agent = d.spec
            live = agents.get(spec.name)
            if live is None:
                self.error(d, ("mode",), f"shadow agent {spec.name!r} has no live agent of that name to stand beside "
                           "(a shadow is a candidate for an agent the files define in mode enforce)")
                continue
            if spec.tenant != live.spec.tenant:
                self.error(d, ("tenant",), f"shadow agent {spec.name!r} names tenant {spec.tenant!r}; the live agent's "
                           f"is {live.spec.tenant!r} ({live.file})")
                continue
            self._agent_skills(d, self.defined, catalog)
            version = self._agent(d, tools, agents, tenants, rules)
            if version is not None:
                found[spec.name] = version
        return found

    def _unique(self, docs: list[_Doc]) -> dict[str, _Doc]:
        seen: dict[str, _Doc] = {}
        for d in docs:
            first = seen.get(d.spec.name)
            if first is not None:
                self.error(d, ("name",), f"{d.spec.kind} {d.spec.name!r} is defined twice (first in {first.file}:{first.at('name')})")
            else:
                seen[d.spec.name] = d
        return seen

    def _instance(self, docs: list[_Doc]) -> model.Instance:
        for extra in docs[1:]:
            self.error(extra, ("kind",), f"only one Instance document is allowed (first in {docs[0].file})")
        instance, self.defaulted = with_defaults(docs[0].spec if docs else model.Instance(kind="Instance"))
        return instance

    def _ceilings_narrow(self, doc: _Doc, instance: model.Instance) -> None:
        """A tenant may only narrow the instance's ceilings; widening is a mistake worth stopping."""
        for name, value in doc.spec.ceilings:
            above = getattr(instance.ceilings, name)
            if value is not None and above is not None and value > above:
                self.error(doc, ("ceilings", name), f"tenant ceiling {name}={value} exceeds the instance's {above}"
                           + self._default_note(name))
        for name in ("per_owner_usd", "tenant_usd"):
            value, above = getattr(doc.spec.daily_spend, name), getattr(instance.daily_spend, name)
            if value is not None and above is not None and value > above:
                self.error(doc, ("daily_spend", name), f"tenant daily_spend {name}={value} exceeds the instance's {above}"
                           + self._default_note(name))

    def _default_note(self, name: str) -> str:
        return " (the built-in default: set it in instance.yaml to raise it)" if name in self.defaulted else ""

    def _tool(self, doc: _Doc) -> CompiledTool | None:
        spec: model.Tool = doc.spec
        try:
            input_schemas.check(spec.input_schema)
            fast = fastjsonschema.compile(spec.input_schema)
        except input_schemas.SchemaProblem as exc:
            self.error(doc, ("input_schema", *exc.path), f"input_schema is not a valid JSON Schema: {exc.message}")
            return None
        except fastjsonschema.JsonSchemaDefinitionException as exc:
            self.error(doc, ("input_schema",), f"input_schema cannot be compiled: {exc}")
            return None
        if spec.input_schema.get("type") != "object":
            self.error(doc, ("input_schema",), "input_schema must describe an object (type: object)")
        touches: dict[str, CelProgram] = {}
        compiled: dict[str, CelProgram] = {}
        failed = False
        for dim in SCOPE_DIMENSIONS:
            source = getattr(spec.touches, dim)
            if source is not None:
                # always compile through the engine: it type-checks; keep the fast form when there is one
                program = self.compile_cel(doc, ("touches", dim), source, TOUCHES_VARIABLES,
                                           ("LIST<STRING>", "LIST<DYN>", "DYN"),
                                           celtypes.touches_shapes(spec.name, spec.input_schema))
                if program is None:
                    failed = True
                else:
                    compiled[dim] = program
                    touches[dim] = compile_fast(source) or program
        if any(not isinstance(p, FastProgram) for p in touches.values()):
            # one activation serves every expression of a call: when one needs CEL's, all take it
            touches = compiled
        if spec.run is not None:
            properties = spec.input_schema.get("properties", {})
            for i, part in enumerate(spec.run.command):
                for name in _PLACEHOLDER.findall(part):
                    if name not in properties:
                        self.error(doc, ("run", "command", i), f"command placeholder {{{name}}} is not an input_schema property")
            if spec.run.network and spec.touches.connections is None:
                self.error(doc, ("run", "network"), "network needs touches.connections, so scope can decide where it may go")
        if spec.templates is not None:
            self._templates_tool(doc)
        if failed:
            return None
        return CompiledTool(
            spec=spec, explainer=input_schemas.Explainer(spec.input_schema), fast_validate=fast, touches=touches,
            touches_need_cel=any(not isinstance(p, FastProgram) for p in touches.values()),
        )

    def _templates_tool(self, doc: _Doc) -> None:
        """A tool the checkpoint fills from the templates names the arguments it reads and fills (a
        resolved template's image and node are put into `image` and `node`, which its touches must
        read for scope); the filled one is never required (a plan step or the model leaves it out)."""
        spec: model.Tool = doc.spec
        properties = spec.input_schema.get("properties", {})
        filled = entries.FILLED[spec.templates or ""]
        read = ("template", "target", *entries.PLACED) if spec.templates == "resolve" else ()
        for name in (*read, filled):
            if name not in properties:
                self.error(doc, ("input_schema",), f"tool {spec.name!r} (templates: {spec.templates}) needs an "
                           f"input_schema property {name!r}")
        if filled in spec.input_schema.get("required", []):
            self.error(doc, ("input_schema", "required"), f"tool {spec.name!r}: {filled!r} is filled by the "
                       "checkpoint, so it cannot be required")

    def _agent(
        self, doc: _Doc, tools: Mapping[str, Any], agents: Mapping[str, Any], tenants: dict[str, model.Tenant],
        rules: Iterable[Any] = (),
    ) -> AgentVersion | None:
        """`tools` and `agents` are read by name; of a tool or a rule, only its `spec`. The version
        covers the definitions of the tools it resolves and of the rules that can apply to it, so
        an edit of one is a new version, reviewed like an edit of the agent."""
        spec: model.Agent = doc.spec
        wildcard = "*" in spec.allowlist
        resolved: set[str] = set()
        for i, name in enumerate(spec.allowlist):
            if name == "*":
                continue
            tool = tools.get(name)
            if tool is None:
                self.error(doc, ("allowlist", i), f"agent {spec.name!r}: allowlist names unknown tool {name!r}")
            elif tool.spec.agent_management:
                self.error(doc, ("allowlist", i), f"agent {spec.name!r}: {name!r} manages agents and can never be on an allowlist")
            else:
                resolved.add(name)
        if wildcard:
            resolved |= {n for n, t in tools.items() if not t.spec.agent_management}
        for i, name in enumerate(spec.delegates):
            if name not in agents:
                self.error(doc, ("delegates", i), f"agent {spec.name!r}: delegates to unknown agent {name!r}")
            elif name == spec.name:
                self.error(doc, ("delegates", i), f"agent {spec.name!r} cannot delegate to itself")
        if spec.tenant not in tenants:
            self.error(doc, ("tenant",), f"agent {spec.name!r}: unknown tenant {spec.tenant!r}")
        for dim in SCOPE_DIMENSIONS:
            for i, text in enumerate(getattr(spec.scope, dim)):
                try:
                    read_pattern(text, typed=dim in TYPED_DIMENSIONS)
                except SubjectError as exc:
                    self.error(doc, ("scope", dim, i), f"agent {spec.name!r}: scope.{dim}: {exc}")
        needed = {tools[n].spec.access.value for n in resolved if n in tools}
        missing = needed - {a.value for a in spec.scope.access}
        if not wildcard and missing:
            self.error(doc, ("scope", "access"),
                       f"agent {spec.name!r}: its tools need access {', '.join(sorted(missing))} that its scope does not grant")
        version = AgentVersion(
            name=spec.name,
            version="",
            tenant=spec.tenant,
            persona=spec.persona,
            description=spec.description,
            wildcard=wildcard,
            tools=frozenset(resolved),
            scope=spec.scope,
            budget=spec.budget,
            delegates=frozenset(spec.delegates),
            skills=frozenset(spec.skills),
            tool_defs={n: tool_definition(tools[n].spec) for n in sorted(resolved) if n in tools},
            rule_defs=rules_for(spec.name, rules),
        )
        snapshot = version.snapshot()
        return AgentVersion.from_snapshot(canonical.sha256_hex(snapshot)[:20], snapshot)

    def _rule(self, doc: _Doc, tools: dict[str, _Doc], agents: dict[str, _Doc]) -> CompiledRule | None:
        spec: model.Rule = doc.spec
        for i, name in enumerate(spec.tools):
            if name not in tools:
                self.error(doc, ("tools", i), f"rule {spec.name!r} names unknown tool {name!r}")
        for i, name in enumerate(spec.agents):
            if name not in agents:
                self.error(doc, ("agents", i), f"rule {spec.name!r} names unknown agent {name!r}")
        if spec.tools and spec.actions != ["tool_call"]:
            self.error(doc, ("tools",), f"rule {spec.name!r}: 'tools' only applies to tool_call rules")
        own = spec.default_code()
        if spec.code is not None and spec.code != own and (spec.code in codes.DECISION_CODES
                                                           or spec.code.startswith("breaker_")):
            # clients, dashboards and the driver act on codes: a DENY counted as `allowed`, or a
            # handoff the driver reads as a tripped breaker (and whose person it never names)
            self.error(doc, ("code",), f"rule {spec.name!r}: code {spec.code!r} is a stable code warden gives for "
                       f"something else; a {spec.effect.value} rule's code is {own!r} or a name of its own")
        if spec.handoff_to is not None and spec.effect is not model.Effect.HANDOFF_IF:
            self.error(doc, ("handoff_to",), f"rule {spec.name!r}: 'handoff_to' only applies to handoff_if rules")
        named = [(n, tools[n].spec.input_schema) for n in spec.tools if n in tools]
        shapes = celtypes.rule_shapes(named if len(named) == len(spec.tools) else [])
        program = self.compile_cel(doc, ("condition",), spec.condition, RULE_VARIABLES, ("BOOL",), shapes)
        if program is None:
            return None
        return CompiledRule(
            spec=spec, program=program, code=spec.effective_code(), where=f"{doc.file}:{doc.at('condition')}",
            reads=frozenset(name for name in RULE_VARIABLES if re.search(rf"\b{name}\b", spec.condition)),
        )
