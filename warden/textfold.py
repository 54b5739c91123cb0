"""Text in the form a reader sees: compatibility forms folded and invisible code points dropped.

Two spellings a person or a model reads as one must compare as one: the driver's `<data>` fence
looks for its tag in this form, and the checkpoint's typed subjects are read from it.

- NFKC folds full-width `ｌｏｃａｌｈｏｓｔ`, small forms, `⒈` and mathematical letters to the plain
  characters;
- default-ignorable code points (zero-width spaces and joiners, soft hyphens, variation
  selectors, bidirectional controls, the invisible tag characters) are drawn as nothing, and IDNA
  and many services drop them, so they are removed; NFKC runs again after a removal, since taking
  one out can leave a base and its mark uncomposed.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import regex


@functools.cache
def _ignorable(keep_joiners: bool) -> regex.Pattern[str]:
    # `regex` is imported and the class built on the first non-ASCII text: that costs ~40 ms,
    # which a CLI start on ASCII text need not pay
    import regex

    if keep_joiners:
        return regex.compile(r"[\p{Default_Ignorable_Code_Point}--[\u200c\u200d]]+", regex.V1)
    return regex.compile(r"\p{Default_Ignorable_Code_Point}+")


def folded(text: str, *, keep_joiners: bool = False) -> str:
    """`text` NFKC-folded with its default-ignorable code points removed. `keep_joiners` keeps ZWJ
    and ZWNJ, which IDNA 2008 keeps in some labels (a host reader reads both spellings)."""
    if text.isascii():  # ASCII is its own NFKC form and holds no default-ignorable code point
        return text
    text = unicodedata.normalize("NFKC", text)
    stripped = _ignorable(keep_joiners).sub("", text)
    if stripped != text:  # a mark that followed a removed character may now compose
        text = unicodedata.normalize("NFKC", stripped)
    return text
