"""URL paths: escapes and dot segments normalised (RFC 3986), slash look-alikes read as `/`."""

from __future__ import annotations

import functools
import re
import unicodedata

from checkpoint.policy.subjects.errors import SubjectError

_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_STRAY_PERCENT = re.compile(r"%(?![0-9A-F]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# A server that decodes once more would read these as path structure: `/`, `\`, NUL, or a new escape.
SLASHES = re.compile(r"/{2,}")
_REFUSED_ESCAPES = frozenset({"2F", "5C", "00", "25"})


def _unescape(m: re.Match[str]) -> str:
    hex_ = m.group(1).upper()
    if hex_ in _REFUSED_ESCAPES:
        raise SubjectError(f"the escape %{hex_} is refused in a URL path")
    char = chr(int(hex_, 16))
    return char if char in _UNRESERVED else "%" + hex_


_HIGH_ESCAPES = re.compile(r"(?:%[89A-Fa-f][0-9A-Fa-f])+")


@functools.cache
def _slash_look_alikes() -> tuple[frozenset[str], frozenset[str]]:
    """Symbols that Unicode's confusables (TR39) list as look-alikes of `/` and of `\\`: a server
    that maps characters to a code page's best fit (IIS) or folds confusables reads them as the
    slash. Letters (`ノ`, `丿`) are left alone: they are words in a path. Loaded on first need."""
    from confusable_homoglyphs import confusables

    def of(char: str) -> frozenset[str]:
        found = confusables.is_confusable(char, preferred_aliases=[], greedy=True) or []
        return frozenset(h["c"] for f in found for h in f["homoglyphs"]
                         if not unicodedata.category(h["c"]).startswith("L"))

    return of("/"), of("\\")


def _as_slash(char: str) -> str:
    """`/` for a slash look-alike (or a character NFKC folds to `/`), the character otherwise;
    SubjectError for a backslash look-alike (a backslash is refused in a URL)."""
    folded = unicodedata.normalize("NFKC", char)
    slashes, backslashes = _slash_look_alikes()
    if folded == "/" or char in slashes:
        return "/"
    if folded == "\\" or char in backslashes:
        raise SubjectError(f"U+{ord(char):04X} reads as a backslash; refused in a URL path")
    return char


def _unescape_look_alikes(m: re.Match[str]) -> str:
    try:
        text = bytes.fromhex(m.group().replace("%", "")).decode("utf-8")
    except UnicodeDecodeError:
        return m.group()
    out = []
    for char in text:
        mapped = _as_slash(char)
        out.append(mapped if mapped == "/" else "".join(f"%{b:02X}" for b in char.encode()))
    return "".join(out)


def map_look_alikes(path: str) -> str:
    """The path with each slash look-alike, written or percent-escaped as UTF-8, as `/`."""
    if path.isascii() and "%" not in path:
        return path
    if "%" in path:
        path = _HIGH_ESCAPES.sub(_unescape_look_alikes, path)
    return path if path.isascii() else "".join(_as_slash(c) if not c.isascii() else c for c in path)


def normalise_path(path: str) -> str:
    """RFC 3986 6.2.2: escapes of unreserved characters decoded (so `%2e%2e` is `..`), other
    escapes upper case, dot segments removed (5.2.4). An empty path is `/`."""
    if "%" in path:
        path = _ESCAPE.sub(_unescape, path)
        if _STRAY_PERCENT.search(path):
            raise SubjectError("a '%' in a URL path that is not an escape")
    out: list[str] = []
    segments = path.split("/")[1:] if path.startswith("/") else path.split("/")
    for segment in segments:
        bare = segment.split(";", 1)[0]
        if bare not in (".", ".."):
            out.append(segment)
        elif segment != bare:  # `..;x` is `..` to some servers (Tomcat): refuse rather than guess
            raise SubjectError("parameters on a dot segment ('..;') are refused in a URL path")
        elif bare == ".." and out and out[-1] == "":
            # `/v1//../admin` is `/v1/admin` to RFC 3986 but `/admin` to a server that merges
            # slashes first (nginx's default): refuse rather than guess
            raise SubjectError("a '..' after an empty segment ('//..') is refused in a URL path")
        elif bare == ".." and out:
            out.pop()
    if segments and segments[-1].split(";", 1)[0] in (".", ".."):
        out.append("")  # `/a/b/..` is the folder `/a/`
    return "/" + "/".join(out)
