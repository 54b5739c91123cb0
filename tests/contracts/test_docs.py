"""The docs speak to users: every file they cite exists, and no text in the repository names the
development process (sessions, internal issue numbers) instead of the product."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Markdown links to a place in the repository: [text](path) or [text](path#anchor).
LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s#]+)(?:#[^)\s]*)?\)")
# A path in a code span or in prose, rooted at a top-level folder of the repository.
CITED = re.compile(r"(?<![\w./-])((?:bench|checkpoint|demo|deploy|docs|driver|examples|goals|policies|proto|"
                   r"scripts|tests|toolrunner|warden)/[\w./-]*\w)")
# Paths that are patterns or places made at run time, not files of the repository.
NOT_FILES = re.compile(r"[*{}]|^\w+/$|\.warden|/v1$")


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _exists(ref: str, doc: Path) -> bool:
    for base in (doc.parent, ROOT):
        if (base / ref).exists():
            return True
    return False


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.name)
def test_every_file_a_doc_links_to_exists(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    missing = [ref for ref in LINK.findall(text) if not _exists(ref, doc)]
    assert not missing, f"{doc.relative_to(ROOT)} links to files that do not exist: {missing}"


# A page of the docs named bare, as `codes.md` or README.md.
PAGE = re.compile(r"(?<![\w./-])([A-Za-z][\w-]*\.md)\b")


def _prose(text: str) -> str:
    """The text outside fenced code blocks: those show examples (a layout, a sample error), not citations."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.name)
def test_every_repository_path_a_doc_names_exists(doc: Path) -> None:
    text = _prose(doc.read_text(encoding="utf-8"))
    missing = sorted({ref for ref in CITED.findall(text)
                      if not NOT_FILES.search(ref) and not _exists(ref.rstrip("."), doc)})
    missing += sorted({page for page in PAGE.findall(text)
                       if not any((base / page).exists() for base in (ROOT, ROOT / "docs"))})
    assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"


DIARY = re.compile(r"\bsessions?\s+\d+|\bsession\s+(?:one|two|three)\b|\bissues?\s+#?\d+|\bin session\b|"
                   r"\bthis session\b|\bsame session\b|\bearlier sessions?\b", re.IGNORECASE)


def test_no_file_names_development_sessions_or_internal_issue_numbers() -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    found = []
    for name in files:
        path = ROOT / name
        if path.suffix not in {".md", ".py", ".yaml", ".yml", ".toml", ".sh", ".js", ".proto", ".html", ""}:
            continue
        if name == "tests/contracts/test_docs.py" or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if DIARY.search(line):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not found, "text that names the development process rather than the product:\n" + "\n".join(found)
