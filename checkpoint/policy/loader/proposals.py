"""Proposed definitions (an Agent, a Skill or a Template sent to the checkpoint) checked like documents
of the policy files against the set in force, as the version each would be."""

from __future__ import annotations

from typing import Any

from checkpoint.cel import get_engine
from checkpoint.policy import entries
from checkpoint.policy.errors import PolicyError, PolicyLoadError
from checkpoint.policy.loader.agents import agent_skills, compile_agent
from checkpoint.policy.loader.compiler import Compiler
from checkpoint.policy.loader.documents import parse_file
from checkpoint.policy.policyset import AgentVersion, PolicySet


def load_agent_definition(text: str, shown: str, policies: PolicySet) -> AgentVersion:
    """A proposed Agent document, checked like one in the policy files against `policies`' tools,
    tenants and agents (errors name `shown`:line), as the version it would be."""
    errors: list[PolicyError] = []
    docs = parse_file(text.encode("utf-8"), shown, errors)
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
    compiler = Compiler(get_engine(policies.cel_engine), errors)
    version = compile_agent(compiler, doc, policies.tools, agents, policies.tenants, policies.rules)
    agent_skills(compiler, doc, {}, policies.catalog)
    if errors or version is None:
        raise PolicyLoadError(errors)
    return version


def load_entry_definition(text: str, shown: str, kind: str, policies: PolicySet) -> entries.Entry:
    """A proposed Skill or Template document, checked like one in the policy files (errors name
    `shown`:line), as the version it would be."""
    errors: list[PolicyError] = []
    docs = parse_file(text.encode("utf-8"), shown, errors)
    wanted = entries.DOCUMENT_KIND[kind]
    if not errors and (len(docs) != 1 or docs[0].spec.kind != wanted):
        errors.append(PolicyError(shown, 1, f"a proposal is exactly one {wanted} document"))
    if not errors and docs[0].spec.tenant not in policies.tenants:
        errors.append(PolicyError(shown, docs[0].at("tenant"), f"unknown tenant {docs[0].spec.tenant!r}"))
    if errors:
        raise PolicyLoadError(errors)
    return entries.Entry.of(docs[0].spec)
