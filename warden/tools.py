"""The tool model: how a tool is written in the policy files, and reading tools from those files.

The checkpoint compiles these definitions with the rest of the policy set; the toolrunner reads
only them, to run a granted call, with no rule or CEL compiled (a grant names the revision of
the files it was decided under, and the runner runs only that revision's definitions).

Annotations are evaluated as written and defaults come from small functions rather than `list`
and `dict`: every policy load builds these classes first (see checkpoint/policy/model.py).
"""

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError


def _no_items() -> list[Any]:
    return []


def _no_entries() -> dict[str, Any]:
    return {}


Name = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")]
Pattern = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class Strict(BaseModel):
    # defer_build: a model's validator is built when a document first needs it, not at import, so
    # a load pays only for the kinds its folder holds (`warden check` starts ~15 ms sooner)
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False, defer_build=True)


class Access(StrEnum):
    READ = "read"
    WRITE = "write"
    DESTRUCTIVE = "destructive"
    LEARN = "learn"


class Touches(Strict):
    """CEL expressions over `args` that return the list of strings the call touches."""

    images: str | None = None
    nodes: str | None = None
    connections: str | None = None
    threads: str | None = None
    subjects: str | None = None


class Limits(Strict):
    memory_mb: int = Field(256, ge=4, le=65536)
    cpus: float = Field(1.0, gt=0, le=64)
    pids: int = Field(64, ge=1, le=65536)
    nofile: int = Field(256, ge=16, le=1048576)
    fsize_mb: int = Field(16, ge=1, le=65536)
    tmpfs_mb: int = Field(16, ge=1, le=4096)


class Run(Strict):
    """How the toolrunner runs the tool: a locked-down container, argv never through a shell."""

    image: Pattern = Field(..., description="a local image reference; never pulled during a call")
    command: list[str] = Field(
        ..., min_length=1, description="argv template; '{name}' is replaced by the argument 'name'"
    )
    env: dict[str, str] = Field(default_factory=_no_entries)
    secrets: list[Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Z0-9_]{0,63}$")]] = Field(
        default_factory=_no_items, description="names of secrets the toolrunner injects as environment variables"
    )
    timeout_seconds: float = Field(30, gt=0, le=3600)
    output_cap_bytes: int = Field(65536, ge=256, le=16 * 1024 * 1024)
    network: bool = Field(False, description="attach a network; allowed only with connections in touches")
    read_only_root: bool = True
    user: str = "65534:65534"
    limits: Limits = Field(default_factory=Limits)
    runtime: str | None = Field(None, description="an OCI runtime the daemon has, e.g. runsc")


class Masking(Strict):
    """How this tool's arguments are written to the decision log."""

    drop: list[str] = Field(default_factory=_no_items, description="dotted argument paths removed")
    hash: list[str] = Field(default_factory=_no_items, description="dotted argument paths replaced by sha256")


class Tool(Strict):
    kind: Literal["Tool"]
    name: Name
    description: str = ""
    access: Access
    agent_management: bool = Field(False, description="manages agents: never allowed, not even by '*'")
    input_schema: dict[str, Any] = Field(..., description="JSON Schema (draft 2020-12) of the arguments")
    touches: Touches = Field(default_factory=Touches)
    run: Run | None = None
    audit: Masking = Field(default_factory=Masking)
    templates: Literal["list", "resolve"] | None = Field(
        None,
        description="served from the run's tenant's reviewed templates (docs/skills.md): `list` fills the "
        "argument `templates`; `resolve` reads `template` and `target` and fills `spec`",
    )




class ToolReadError(Exception):
    """Tool definitions that cannot be read: every problem, as `file:line: message`."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def read_tools(contents: list[tuple[str, bytes]], directory: str) -> dict[str, Tool]:
    """The Tool documents among a policy folder's files (as `warden.policyfiles` reads them), by
    name, validated by the same model the checkpoint compiles; nothing else is parsed past its
    kind, and no rule or CEL expression is compiled. Raises ToolReadError with every problem."""
    from warden.policydocs import read_documents, validation_problems
    from warden.yamlsource import YamlIssue

    tools: dict[str, Tool] = {}
    problems: list[str] = []
    for name, raw in contents:
        shown = f"{directory.rstrip('/')}/{name}"
        try:
            sources = read_documents(raw)
        except YamlIssue as issue:
            problems.append(f"{issue.where(shown)}: {issue.message}")
            continue
        for source in sources:
            if not isinstance(source.data, dict) or source.data.get("kind") != "Tool":
                continue
            try:
                tool = Tool.model_validate(source.data)
            except ValidationError as exc:
                problems.extend(f"{shown}:{issue.line}: {issue.message}"
                                for issue in validation_problems(exc, source, "Tool"))
                continue
            if tool.name in tools:
                problems.append(f"{shown}:{source.line}: tool {tool.name!r} is defined twice")
                continue
            tools[tool.name] = tool
    if problems:
        raise ToolReadError(sorted(problems))
    return tools
