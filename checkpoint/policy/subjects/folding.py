"""Subject text as a reader takes it: folded, and as written, folded and percent-decoded.

Folding is warden's (warden/textfold.py: NFKC, default-ignorable code points dropped) with ZWJ and
ZWNJ kept, since IDNA 2008 keeps them in some labels and the host reader reads both spellings
(`hosts.host_2003`), and the Unicode full stops read as `.`.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from warden import textfold

_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


def fold(text: str) -> str:
    """Compatibility forms folded (full-width letters and digits, `⒈`), default-ignorable code
    points removed, Unicode full stops as `.`."""
    if text.isascii():  # the hot path: most values are ASCII, which folds to itself
        return text
    return textfold.folded(text, keep_joiners=True).translate(_DOTS)


AN_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def as_written_and_folded(text: str) -> tuple[str, ...]:
    """The text, its folded form when that differs (ASCII text folds to itself: one pass), and,
    when it holds percent-escapes, the folded form of it decoded: a service that decodes the value
    works on `customer:vip-1` when the call wrote `customer:vip%2D1`."""
    folded = fold(text)
    forms: tuple[str, ...] = (text,) if folded == text else (text, folded)
    if "%" in text and AN_ESCAPE.search(text):
        forms += (fold(percent_decoded(text)),)
    return forms


def percent_decoded(text: str) -> str:
    """`text` with its percent-escapes decoded until none is left, at most four times (`%252D` is
    `%2D` to a first decoder and `-` to a second)."""
    for _ in range(4):
        text = unquote(text)
        if not AN_ESCAPE.search(text):
            break
    return text
