"""Letters of other scripts that read as Latin ones, folded before text is read for sessionmem's own names and
for orders to an AI.

NFKC folds fullwidth and styled letters, but leaves Cyrillic "о" and Greek "ο" as they are, though a
reader, and a model, reads "ignоre previous instructions" or "</sessiоnmem-context>" as if they were
Latin. One character for one: a position in the folded text is the same position in the text, so a
caller can fold to look and still change only what it found. Standard library only.
"""

from __future__ import annotations

_CYRILLIC = {"а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c", "т": "t",
             "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j", "ԁ": "d", "ӏ": "l", "ԛ": "q", "ԝ": "w", "ѵ": "v",
             "һ": "h", "ү": "y"}
_GREEK = {"α": "a", "β": "b", "ε": "e", "ζ": "z", "η": "n", "ι": "i", "κ": "k", "μ": "u", "ν": "v", "ο": "o",
          "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "γ": "y"}
_UPPER = {"А": "a", "В": "b", "Е": "e", "К": "k", "М": "m", "Н": "h", "О": "o", "Р": "p", "С": "c", "Т": "t",
          "Х": "x", "У": "y", "Ѕ": "s", "І": "i", "Ј": "j", "Α": "a", "Β": "b", "Ε": "e", "Ζ": "z", "Η": "h",
          "Ι": "i", "Κ": "k", "Μ": "m", "Ν": "n", "Ο": "o", "Ρ": "p", "Τ": "t", "Υ": "y", "Χ": "x"}
LATIN_LOOKALIKES = str.maketrans({**_CYRILLIC, **_GREEK, **_UPPER})


def latin_skeleton(text: str) -> str:
    """``text`` with each look-alike letter made the Latin one it reads as (lower case), one for one."""
    return text if text.isascii() else text.translate(LATIN_LOOKALIKES)
