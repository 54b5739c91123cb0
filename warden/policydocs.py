"""Policy documents read from a file's bytes: its YAML documents with the line of every value, and
each problem a document's validation finds, at its line.

The checkpoint reads every document of a policy file this way before it compiles the set; the
toolrunner reads the Tool documents of the same files this way, compiling nothing. Both report
the same problem in the same words, as `file:line: message`.
"""

from __future__ import annotations

from pydantic import ValidationError

from warden.policyfiles import MAX_FILE_BYTES
from warden.yamlsource import SourceDocument, YamlIssue, load_documents


def read_documents(raw: bytes) -> list[SourceDocument]:
    """Every YAML document of a policy file's bytes; YamlIssue (at line 1 for the file itself:
    over the size cap, not UTF-8) with the line of the first problem."""
    if len(raw) > MAX_FILE_BYTES:
        raise YamlIssue(1, f"file is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise YamlIssue(1, "file is not UTF-8 text") from None
    return load_documents(text)


def validation_problems(exc: ValidationError, source: SourceDocument, kind: str) -> list[YamlIssue]:
    """A document's validation errors as problems at the line of the key each one is about,
    worded `Kind path: message` (an unknown key is said so, not as pydantic words it)."""
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        where = ".".join(str(p) for p in loc) or kind
        message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        problems.append(YamlIssue(source.line_of(loc), f"{kind} {where}: {message}"))
    return problems
