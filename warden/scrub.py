"""Masking secrets and credentials in tool output before it leaves warden: the toolrunner's
output, and the MCP gateway's results.

Three layers, applied to the same text in one pass (overlapping finds are merged):

1. the exact values of the secrets injected into this call, and their base64 (standard and
   URL-safe, with and without padding, and the three offset forms that match the secret inside
   a longer base64 blob such as ``env | base64``), URL-encoded and hex (lower and upper case)
   forms; base64 wrapped over several lines (``base64`` wraps at 76 columns) is matched too;
2. well-known credential shapes: gitleaks' maintained rule set, vendored as data
   (warden/secret_rules.py: some 220 providers' token formats, labelled with the rule's id), and a
   few of warden's own (cloud keys, provider tokens, private key blocks masked to the end when
   unterminated, JWTs, bearer/basic authorization headers, passwords in URLs);
3. high-entropy assignments: ``name=value`` / ``"name": "value"`` whose value looks random, or
   whose name says secret/token/password/key and whose value is not trivially short or plain.

``StreamScrubber`` does the same on a stream: it holds back the tail of what it has seen until
no find can still grow across the next chunk boundary, so a secret split over two chunks is
masked exactly as if it had arrived whole.
"""

from __future__ import annotations

import base64
import bisect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

from warden.secret_rules import gitleaks, shannon_entropy

# Held-back window while streaming: longer than any credential shape below except private key
# blocks, which are held open until their END line (see _PRIVATE_KEY) or _MAX_HOLD.
_HOLD_CHARS = 1024
# A find that keeps growing (one endless token) is cut here rather than buffering forever; the
# remainder is scanned again on its own, so it is still masked when it still looks like a secret.
_MAX_HOLD = 1 << 20

# Why each pattern is shaped as it is: the vendor's documented token format, tight enough that
# ordinary output (ids, hashes, base64 payloads) is not masked.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private_key",
        # An unterminated block is masked to the end: a key cut off by the output cap or a kill
        # must not leak its first half.
        re.compile(
            r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----"
            r"(?:.*?-----END[A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----|.*\Z)",
            re.S,
        ),
    ),
    ("aws_access_key_id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b")),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("stripe_key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}")),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}")),
    ("openai_key", re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_\-]{20,}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*")),
    ("bearer", re.compile(r"(?i)(?<=\bbearer )[A-Za-z0-9\-._~+/]{8,}=*")),
    ("basic_auth", re.compile(r"(?i)(?<=\bbasic )[A-Za-z0-9+/]{8,}=*")),
    ("url_password", re.compile(r"(?<=://)[^/\s:@]{1,128}:[^/\s@]{1,256}(?=@)")),
)

_SECRET_NAME = r"[A-Za-z0-9_.\-]*(?:secret|token|passw(?:or)?d|passwd|pwd|api[_\-]?key|private[_\-]?key|access[_\-]?key|credential|auth)[A-Za-z0-9_.\-]*"
# name, optional closing quote, = or :, optional opening quote, value. The value group is what
# gets masked; the name stays so the output still reads.
_NAMED_ASSIGNMENT = re.compile(
    r"(?i)\b" + _SECRET_NAME + r"""["']?\s*[:=]\s*["']?([^\s"'`,;&<>{}\[\]]{8,})"""
)
_ANY_ASSIGNMENT = re.compile(r"""\b[A-Za-z_][A-Za-z0-9_.\-]*["']?\s*[:=]\s*["']?([A-Za-z0-9+/_\-=.]{20,})""")


def _looks_random(value: str, threshold: float) -> bool:
    has_digit = any(ch.isdigit() for ch in value)
    has_alpha = any(ch.isalpha() for ch in value)
    return has_digit and has_alpha and shannon_entropy(value) > threshold


# How far before a pattern's match its lookbehind (`bearer `) and `\b` may look.
_LOOKBEHIND = 16
# An offset form shorter than this would match ordinary base64 by chance.
_MIN_OFFSET_FORM = 8


def base64_offset_forms(raw: bytes) -> set[str]:
    """What base64 of a longer blob holds wherever `raw` sits inside it, for any position.

    base64 encodes 3 bytes as 4 characters, so a secret that starts 0, 1 or 2 bytes into a
    3-byte group is spelled in three different ways. For each offset, encode the secret behind
    that many placeholder bytes and keep only the characters that depend on the secret alone:
    the first characters mix in the bytes before it and the last one the bytes after it.
    """
    forms: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        start = -(-offset * 8 // 6)  # ceil: the first character holding no placeholder bit
        end = (offset + len(raw)) * 8 // 6  # floor: the last character holding only secret bits
        core = encoded[start:end]
        if len(core) >= _MIN_OFFSET_FORM:
            forms.add(core)
            forms.add(core.translate(str.maketrans("+/", "-_")))
    return forms


def secret_forms(value: str) -> set[str]:
    """The spellings of one secret value that a tool could plausibly print."""
    if not value:
        return set()
    raw = value.encode()
    forms = {value, quote(value, safe=""), quote(value), raw.hex(), raw.hex().upper()}
    for encoded in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()):
        forms.add(encoded)
        forms.add(encoded.rstrip("="))
    forms |= base64_offset_forms(raw)
    return {f for f in forms if f}


_WRAP = re.compile(r"(?<=[A-Za-z0-9+/=_\-])[\r\n]+(?=[A-Za-z0-9+/=_\-])")


class _Unwrapped:
    """`text` without the line breaks that sit between two base64 characters, and a map from a
    position in it back to the original text."""

    def __init__(self, text: str):
        pieces: list[str] = []
        self._joined_starts: list[int] = []
        self._orig_starts: list[int] = []
        pos = length = 0
        for m in _WRAP.finditer(text):
            self._joined_starts.append(length)
            self._orig_starts.append(pos)
            pieces.append(text[pos : m.start()])
            length += m.start() - pos
            pos = m.end()
        self._joined_starts.append(length)
        self._orig_starts.append(pos)
        pieces.append(text[pos:])
        self.text = "".join(pieces)
        self.wrapped = len(pieces) > 1

    def original(self, joined_pos: int) -> int:
        i = bisect.bisect_right(self._joined_starts, joined_pos) - 1
        return self._orig_starts[i] + joined_pos - self._joined_starts[i]


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    label: str
    # Where the text that makes this a find begins: the name of an assignment, the `Bearer ` a
    # lookbehind needs. A stream must hold that text back with the find, or a rescan of the rest
    # no longer sees what it was.
    anchor: int = -1

    def __post_init__(self) -> None:
        if self.anchor < 0 or self.anchor > self.start:
            object.__setattr__(self, "anchor", self.start)


class Scrubber:
    """Finds and masks secrets in text. Immutable; safe to share between threads."""

    def __init__(self, secrets: Mapping[str, str] | None = None):
        forms: dict[str, str] = {}
        for name, value in sorted((secrets or {}).items()):
            for form in secret_forms(value):
                forms.setdefault(form, name)
        # Matched in any letter case: `tr a-z A-Z`, `%2f` for `%2F`, hex digits in either case.
        self._form_names = {form.lower(): name for form, name in forms.items()}
        # Longest first, so a secret's base64 form wins over a shorter secret inside it.
        self._literals = (
            re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)), re.IGNORECASE)
            if forms
            else None
        )
        self.longest_literal = max((len(f) for f in forms), default=0)

    def _secret_label(self, found: str) -> str:
        return "secret:" + self._form_names.get(found.lower(), "?")

    def literal_spans(self, text: str) -> list[Span]:
        """The injected secrets' own forms only (no shapes, no assignments), merged."""
        if self._literals is None:
            return []
        return _merge(Span(m.start(), m.end(), self._secret_label(m.group(0))) for m in self._literals.finditer(text))

    def spans(self, text: str) -> list[Span]:
        """Every find, merged so that none overlap, in order."""
        found: list[Span] = []
        if self._literals is not None:
            for m in self._literals.finditer(text):
                found.append(Span(m.start(), m.end(), self._secret_label(m.group(0))))
            unwrapped = _Unwrapped(text) if "\n" in text else None
            if unwrapped is not None and unwrapped.wrapped:
                # A secret's base64 split over wrapped lines: find it in the joined text and
                # mask the original characters it spans, line breaks included.
                for m in self._literals.finditer(unwrapped.text):
                    found.append(Span(unwrapped.original(m.start()), unwrapped.original(m.end() - 1) + 1,
                                      self._secret_label(m.group(0))))
        for label, pattern in _PATTERNS:
            for m in pattern.finditer(text):
                if m.end() > m.start():
                    # a lookbehind (`bearer `) and a `\b` look before the match
                    found.append(Span(m.start(), m.end(), label, max(0, m.start() - _LOOKBEHIND)))
        for find in gitleaks().finds(text):
            found.append(Span(find.start, find.end, find.label, max(0, find.match_start - _LOOKBEHIND)))
        for m in _NAMED_ASSIGNMENT.finditer(text):
            value = m.group(1)
            # Lower-case words ("required", "redacted") are settings, not secrets.
            if len(set(value)) >= 4 and not (value.isalpha() and value.islower()):
                found.append(Span(m.start(1), m.end(1), "assignment", max(0, m.start() - 1)))
        for m in _ANY_ASSIGNMENT.finditer(text):
            if _looks_random(m.group(1), 4.0):
                found.append(Span(m.start(1), m.end(1), "high_entropy", max(0, m.start() - 1)))
        return _merge(found)

    def scrub(self, text: str) -> tuple[str, int]:
        """`text` with every find replaced by ``[masked:<label>]``, and how many there were."""
        spans = self.spans(text)
        return apply(text, spans), len(spans)


def _merge(spans: Iterable[Span]) -> list[Span]:
    merged: list[Span] = []
    for span in sorted(spans, key=lambda s: (s.start, -s.end)):
        if merged and span.start < merged[-1].end:
            last = merged[-1]
            if span.end > last.end:
                merged[-1] = Span(last.start, span.end, last.label, min(last.anchor, span.anchor))
            elif span.anchor < last.anchor:
                merged[-1] = Span(last.start, last.end, last.label, span.anchor)
            continue
        merged.append(span)
    return merged


def apply(text: str, spans: list[Span]) -> str:
    parts: list[str] = []
    pos = 0
    for span in spans:
        parts.append(text[pos : span.start])
        parts.append(f"[masked:{span.label}]")
        pos = span.end
    parts.append(text[pos:])
    return "".join(parts)


# A find still growing at the hold limit is released masked, and this much text around its start
# is kept (never released again) and scanned before what follows: the pattern that found it (a
# BEGIN line, a token's prefix, an assignment's name) then goes on matching the rest of it.
_CARRY_BEFORE = 256
_CARRY_AFTER = 128


class StreamScrubber:
    """Scrubs one stream chunk by chunk, with the same result as scrubbing it whole.

    ``feed`` returns the scrubbed text that is safe to release now; ``finish`` the rest.
    """

    def __init__(self, scrubber: Scrubber, hold_chars: int = _HOLD_CHARS, max_hold: int = _MAX_HOLD):
        self._scrubber = scrubber
        self._hold = max(hold_chars, 2 * scrubber.longest_literal + 64)
        self._max_hold = max(max_hold, 4 * self._hold)
        self._buffer = ""
        # The start of a find that was cut at the hold limit, already released as its mask:
        # scanned in front of the buffer, never released again.
        self._carry = ""
        self.masked = 0
        # The buffer's length at which it is scanned next. Scanning at every chunk would cost the
        # whole held text per chunk: a tool writing a byte at a time, or a find growing towards
        # the hold limit, would make this process (outside the container's CPU limit) scan
        # quadratically. Scanning once another hold's worth has come, or once a growing find has
        # doubled, keeps the work linear in the output; release waits at most one more hold.
        self._scan_at = self._hold + 1

    def _spans(self) -> list[Span]:
        """Finds in the buffer, in its coordinates. A find that begins in the carry continues one
        already masked: it is clipped to the buffer and labelled ``""`` (mask it, say nothing)."""
        offset = len(self._carry)
        spans = self._scrubber.spans(self._carry + self._buffer) if offset else self._scrubber.spans(self._buffer)
        if not offset:
            return spans
        return [
            Span(max(span.start - offset, 0), span.end - offset, "" if span.start < offset else span.label,
                 max(span.anchor - offset, 0))
            for span in spans
            if span.end > offset
        ]

    def _apply(self, text: str, spans: list[Span]) -> str:
        self.masked += sum(1 for span in spans if span.label)
        parts: list[str] = []
        pos = 0
        for span in spans:
            parts.append(text[pos : span.start])
            if span.label:
                parts.append(f"[masked:{span.label}]")
            pos = span.end
        parts.append(text[pos:])
        return "".join(parts)

    def feed(self, text: str) -> str:
        self._buffer += text
        if len(self._buffer) < self._scan_at:
            return ""
        spans = self._spans()
        cut = len(self._buffer) - self._hold
        # A find that reaches past the cut could still grow with the next chunk: release only
        # what lies before it, and before the text that makes it a find (its anchor), which
        # may in turn sit inside an earlier find.
        # Passes from the right until nothing moves: finds packed closer than their anchors reach
        # (a tool listing access keys line by line) form a chain that one pass walks back in full;
        # starting again from the left at every move made that quadratic per scan.
        moved = True
        while moved and cut > 0:
            moved = False
            for span in reversed(spans):
                if span.anchor < cut < span.end:
                    cut = span.anchor
                    moved = True
        carry = ""
        if cut <= 0:
            # the buffer is the rest of a find already masked: release it as it comes
            continuing = bool(spans) and spans[0].start == 0 and not spans[0].label
            if len(self._buffer) < self._max_hold and not continuing:
                self._scan_at = min(2 * len(self._buffer), self._max_hold)
                return ""
            # One find has grown to the hold limit. Its part before the cut is released as its
            # mask (never in clear), and its start is carried so that the rest is masked too.
            cut = len(self._buffer) - self._hold
            for i, span in enumerate(spans):
                if span.start < cut < span.end:
                    spans[i] = Span(span.start, cut, span.label)
                    if span.label:
                        start = len(self._carry) + span.start
                        anchor = len(self._carry) + span.anchor
                        scan = self._carry + self._buffer[:cut]
                        carry = scan[max(0, min(anchor, start - _CARRY_BEFORE)) : start + _CARRY_AFTER]
                    else:
                        carry = self._carry
                    break
        released = [s for s in spans if s.end <= cut]
        out = self._apply(self._buffer[:cut], released)
        self._buffer = self._buffer[cut:]
        self._carry = carry
        self._scan_at = len(self._buffer) + self._hold
        return out

    def finish(self) -> str:
        out = self._apply(self._buffer, self._spans())
        self._buffer = self._carry = ""
        return out
