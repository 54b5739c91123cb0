"""A model that replays a YAML script: deterministic runs with no network and no key.

The script is a list under ``responses``. An entry is either a raw action object (anything with
an ``action`` key, passed to the boundary untouched, so a script can hold unknown fields or
unknown actions on purpose), or a mapping with some of:

    actions: [ ...raw action objects... ]   # several tool calls in one turn
    text: "prose"                           # a reply with no action (the loop nudges)
    stop_reason: max_tokens                 # a cut-off reply
    error: overloaded | credit | quota | auth | unavailable
    usage: {input_tokens: N, output_tokens: M}

Entry n answers the run's n-th model call (counted across restarts and resumes, from the run
store). When the script runs out the model hands off, so a run never loops on an empty script.

A script may also hold, under ``delegates``, the scripts of the child runs its agent starts, by
agent name (each a script of the same shape, so grandchildren nest). A child with no script of
its own hands off at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from driver.boundary import ProviderReply
from driver.errors import ProviderError
from driver.providers.base import ModelRequest, estimate_tokens
from driver.yamlfile import read_document
from warden.yamlsource import SourceDocument

_ENTRY_KEYS = {"actions", "text", "stop_reason", "error", "usage"}
_ERROR_STATUS = {"overloaded": 529, "credit": 400, "quota": 429, "auth": 401, "unavailable": 503}


class ScriptError(ValueError):
    pass


Script = dict[str, Any]  # {"responses": [...], "delegates": {agent: Script}}


def load_script(path: str | Path) -> Script:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ScriptError(f"{path}: {exc}") from None
    return parse_script(text, str(path))


def parse_script(text: str, source: str = "script") -> Script:
    """A script from YAML text; every problem at once, one per line, as `source:line: message`."""
    doc, problems = read_document(text, source)
    if doc is None:
        raise ScriptError("\n".join(problems))
    return validate_script(doc.data, source, doc)


def validate_script(data: Any, path: str = "script", doc: SourceDocument | None = None,
                    prefix: tuple[str | int, ...] = ()) -> Script:
    """The script in normal form; every problem at once (a bare list is a script's responses)."""

    def at(*loc: str | int) -> str:
        return f"{path}:{doc.line_of(prefix + loc)}" if doc is not None else path

    wrapped = isinstance(data, list)
    if wrapped:
        data = {"responses": data}
    if (not isinstance(data, dict) or "responses" not in data or not set(data) <= {"responses", "delegates"}
            or not isinstance(data["responses"], list)):
        raise ScriptError(f"{at()}: a script is a mapping with 'responses' (a list) and optionally "
                          "'delegates' (child scripts by agent name)")
    problems = []
    delegates: dict[str, Script] = {}
    children = data.get("delegates") or {}
    if not isinstance(children, dict):
        problems.append(f"{at('delegates')}: 'delegates' maps agent names to scripts")
        children = {}
    for agent, child in children.items():
        try:
            delegates[str(agent)] = validate_script(child, path, doc, prefix + ("delegates", agent))
        except ScriptError as exc:
            problems.append(str(exc))
    for i, entry in enumerate(data["responses"]):
        loc: tuple[str | int, ...] = (i,) if wrapped else ("responses", i)
        if not isinstance(entry, dict):
            problems.append(f"{at(*loc)}: response {i} is not a mapping")
            continue
        if "action" not in entry and not set(entry) <= _ENTRY_KEYS:
            problems.append(f"{at(*loc)}: response {i} has unknown keys {sorted(set(entry) - _ENTRY_KEYS)}")
        if "error" in entry and entry["error"] not in _ERROR_STATUS:
            problems.append(f"{at(*loc, 'error')}: response {i}: unknown error {entry['error']!r}")
    if problems:
        raise ScriptError("\n".join(problems))
    return {"responses": list(data["responses"]), "delegates": delegates}


def child_script(script: Any, agent: str) -> Script:
    """The script of a child run of `agent`, from its parent's (empty when it has none)."""
    children = script.get("delegates") or {} if isinstance(script, dict) else {}
    return children.get(agent) or {"responses": [], "delegates": {}}


class ScriptedProvider:
    name = "scripted"

    def __init__(self, script: str | Path | list[Any] | Script, model: str = "scripted") -> None:
        self.model = model
        loaded = load_script(script) if isinstance(script, (str, Path)) else validate_script(script)
        self.responses: list[Any] = loaded["responses"]

    def complete(self, request: ModelRequest) -> ProviderReply:
        input_tokens = estimate_tokens(request.system + json.dumps(request.transcript, default=str))
        if request.attempt >= len(self.responses):
            action = {"action": "handoff", "reason": "the model script has no more responses"}
            return ProviderReply(stop_reason="end_turn", actions=[action], transcript=[action],
                                 input_tokens=input_tokens, output_tokens=10, model=self.model)
        entry = self.responses[request.attempt]
        if "action" in entry:
            entry = {"actions": [entry]}
        if "error" in entry:
            kind = entry["error"]
            raise ProviderError(kind, f"scripted provider error: {kind}", status=_ERROR_STATUS[kind])
        usage = entry.get("usage") or {}
        actions = list(entry.get("actions") or [])
        text = str(entry.get("text") or "")
        stop = entry.get("stop_reason") or ("tool_use" if any(
            isinstance(a, dict) and a.get("action") == "tool_call" for a in actions) else "end_turn")
        return ProviderReply(
            stop_reason=stop,
            actions=actions,
            text=text,
            input_tokens=int(usage.get("input_tokens", input_tokens)),
            output_tokens=int(usage.get("output_tokens", estimate_tokens(json.dumps(actions) + text))),
            model=self.model,
            transcript={"actions": actions, "text": text},
        )
