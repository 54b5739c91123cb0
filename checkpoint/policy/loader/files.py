"""A revision's policy files loaded into the set in force: parsed, compiled, and settled against the
catalog, which says which version of each agent, skill and template is live."""

from __future__ import annotations

import os
from dataclasses import replace

from checkpoint.cel import get_engine
from checkpoint.policy.catalog import AgentCatalog
from checkpoint.policy.errors import PolicyError, PolicyLoadError
from checkpoint.policy.loader.compiler import Compiler
from checkpoint.policy.loader.documents import Doc, parse_file
from checkpoint.policy.policyset import PolicySet
from warden.policyfiles import revision_of


def load_policy_files(
    contents: list[tuple[str, bytes]], directory: str, *, catalog: AgentCatalog | None = None,
    cel_engine: str = "native", settle: bool = True, unread: list[PolicyError] | None = None,
) -> PolicySet:
    """`load_policy_dir` for files given as (path relative to the folder, bytes), in folder order.

    `settle=False` (an old revision compiled for a pinned run) reads which versions are live
    without letting these files change it. `unread`: the folder's files that could not be read,
    reported with the problems of the rest (the set does not load)."""
    errors: list[PolicyError] = list(unread or ())
    docs: list[Doc] = []
    broken: set[tuple[str, str]] = set()
    for name, data in contents:
        docs.extend(parse_file(data, os.path.join(directory, name), errors, broken))
    compiler = Compiler(get_engine(cel_engine), errors, broken)
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
    loaded = policies.with_catalog(live, [*changes, *entry_changes])
    # an old revision's set is kept for its runs' lifetime and never refreshed: it must not refuse a
    # version newer than its compile as one the replica has not read yet (the set in force decides
    # every call too, the stricter answer standing, and it is kept current)
    return loaded if settle else replace(loaded, stated=None)
