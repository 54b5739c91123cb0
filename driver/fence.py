"""The <data> fence: text from outside goes into the model's context as data, and nothing in it
can be read as the fence's own tag.

Tool output, a child run's summary, lessons, skills and the reasons of refusals reach the model
inside `<data ...>` ... `</data>`; the system prompt says that whatever is inside is data. A
text that could open or close the element could speak as the system. A model reads through
spellings that a byte comparison keeps apart, so `fenced_text()` first normalises the text:

- NFKC: full-width `＜／ｄａｔａ＞`, small-form `﹤/data﹥` and mathematical letters `𝐝𝐚𝐭𝐚` become
  the plain characters a reader sees;
- default-ignorable code points removed: zero-width spaces and joiners, soft hyphens, variation
  selectors, bidirectional controls, and the invisible tag characters that can smuggle text a
  person reviewing it never sees. Nothing visible changes.

Then it escapes the opening bracket (as `&lt;`) of every tag-like spelling of `data` in that text:
a bracket or its look-alike (`‹`, `˂`, `ᐸ`, `〈`, ...), then any spaces, slashes, backslashes and
combining marks, then `data` in any case, each letter possibly a look-alike from another script
(Cyrillic `а`, `Т`, Greek `α`, ...; Unicode's confusables table) with combining marks on it. The
text keeps every other character as normalised: only the brackets that could begin a fence change.
"""

from __future__ import annotations

import functools
import json
import unicodedata
from typing import TYPE_CHECKING

from warden.textfold import folded

if TYPE_CHECKING:
    import regex

# Angle brackets that Unicode's confusables table does not list as look-alikes of `<`, though a
# model reads them as one (NFKC already folds the full-width and small forms to `<`).
_EXTRA_OPENERS = "\u2329\u3008\u27e8\u276c\u2770\u29fc"


@functools.cache
def _confusables() -> dict[str, list[dict[str, str]]]:
    from confusable_homoglyphs import utils  # its table loads on first use, not on every CLI start

    table: dict[str, list[dict[str, str]]] = utils.load("confusables.json")
    return table


def _lookalikes(plain: str) -> str:
    """`plain` with every character Unicode lists as confusable with it, in either case."""
    table = _confusables()
    chars = {plain, plain.upper()}
    for key in set(chars):
        chars.update(h["c"] for h in table.get(key, []) if len(h["c"]) == 1)
    return "".join(sorted(chars))


def _klass(chars: str) -> str:
    import regex

    return "[" + "".join(regex.escape(c) for c in chars) + "]"


@functools.cache
def _fence_spelling() -> regex.Pattern[str]:
    import regex

    opener = _klass(_lookalikes("<") + _EXTRA_OPENERS)
    between = _klass(_lookalikes("/") + _lookalikes("\\"))
    letters = [_klass(_lookalikes(c)) + r"\p{M}*" for c in "data"]
    return regex.compile(rf"{opener}(?=[\s\p{{M}}]*(?:{between}[\s\p{{M}}]*)*{''.join(letters)})",
                         regex.IGNORECASE)


def normalise(text: str) -> str:
    """NFKC, with the default-ignorable code points removed (warden/textfold.py)."""
    return folded(text)


def fenced_text(text: str) -> str:
    """`text`, normalised, with no spelling of the fence a model could read as one. Searched in
    its decomposed form, so a bracket under a combining mark (`≮`, a `<` with U+0338) is found."""
    decomposed = unicodedata.normalize("NFD", normalise(text))
    return unicodedata.normalize("NFC", _fence_spelling().sub("&lt;", decomposed))


def attribute(value: str) -> str:
    """A value for an attribute of the fence's tag: a JSON string (only ASCII, quotes escaped),
    with `<` and `>` escaped too, so no value can end the tag or spell another one."""
    return json.dumps(normalise(str(value))).replace("<", "\\u003c").replace(">", "\\u003e")
