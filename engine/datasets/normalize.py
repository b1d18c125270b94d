r"""The paper's exact-match normalisation of answer text, for the places Python needs it.

The product computes every metric in SQL (store/views); exact match's normalisation there is
the same as `normalize_answer` here (tests/store/test_views.py keeps the two in step over every code
point). engine/datasets/data.py uses this function to mark ALCE documents relevant when they contain a
gold answer.

`normalize_answer` is the seed library's `preprocess`: str.lower(), then every character that is
neither a Unicode word character nor whitespace is deleted (`re.sub(r'[^\w\s]', '', s)`, so
`1,000` -> `1000`, `U.S.` -> `us`, `“Hey Jude”` -> `hey jude`, `Jay-Z` -> `jayz`), then
whitespace is folded and stripped.
"""

from __future__ import annotations

import re

# Unicode-aware on str, as in the seed: \w is the categories L*, N* and "_".
_NOT_WORD_OR_SPACE = re.compile(r"[^\w\s]")
# Python's str whitespace, which RE2 spells [\t\n\x0b\f\r\x1c-\x1f\x85\p{Z}].
_SPACE = re.compile(r"\s+")


def normalize_answer(text: str) -> str:
    """The paper's EM normalisation: lowercase, delete all but word characters and whitespace, fold."""
    return _SPACE.sub(" ", _NOT_WORD_OR_SPACE.sub("", text.lower())).strip()
