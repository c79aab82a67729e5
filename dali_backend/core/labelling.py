"""Keyword labelling for raw folders with messy file names, in any language.

A file's label comes from keywords in its name (without the extension), then, if the name has none,
in its folders, nearest first. A file that matches no class, or two classes in the same name or
folder, is reported and never guessed.

How a keyword matches a name or folder name (a *component* of the path):

* Both are compared after Unicode NFKC normalisation and case folding (``str.casefold``): ``OK``,
  ``ok`` and full-width ``ＯＫ`` are one word, and a name written decomposed (NFD, as macOS writes
  Korean or accented names) matches a keyword typed precomposed.
* A keyword made of ASCII letters only (``scratch``, ``ok``) matches a whole **word**. Words are the
  runs of ASCII letters of the component, split at camelCase boundaries; anything else ends a word
  (digits, ``_``, ``-``, spaces, and letters of other scripts): ``IMG_OK_3`` holds ``img``, ``ok``;
  ``ScratchLeft`` holds ``scratch``, ``left``; ``划痕scratch2`` holds ``scratch``. So ``ok`` never
  matches ``token``. A word may carry a plural or past suffix (``scratches``, ``dented``,
  ``pitted``).
* Any other keyword (one with a letter outside ASCII: Chinese, Japanese, Korean, Cyrillic, accented
  Latin...; it may also hold digits) matches as a **substring** of the component, because scripts
  such as Chinese and Japanese write words without spaces: ``划痕`` matches the folders ``划痕``,
  ``划痕_2024`` and ``左侧划痕区``. Where one matched keyword lies inside a longer one matched at
  the same place (``划痕`` inside ``深划痕``), only the longer one counts, so ``{"deep": ["深划痕"],
  "scratch": ["划痕"]}`` labels ``深划痕`` deep and ``划痕`` scratch. Mind words that contain a
  keyword: ``正常`` (normal) is inside ``不正常`` (abnormal); give such a word as a keyword of its
  own class (``{"normal": ["正常"], "defect": ["不正常"]}``) and it wins where it matches.

Keywords are letters, combining marks and digits (no spaces or punctuation); an ASCII keyword is
letters only, since a word ends at a digit.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence

from ..errors import ConfigError

DEFAULT_KEYWORDS: Mapping[str, tuple[str, ...]] = {
    "normal": ("ok", "normal", "good"),
    "scratch": ("scratch", "scr"),
    "dent": ("dent", "pit"),
}
_SUFFIXES = ("", "s", "es", "ed", "ted", "ing", "ting")
# ASCII words split at every other character and at camelCase boundaries: "IMG_scr12" -> img, scr;
# "ScratchLeft" -> scratch, left.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")


def fold(text: str) -> str:
    """``text`` as keywords are compared: NFKC-normalised and case-folded (then NFKC again, since
    folding can leave a string that is not in normal form)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def _is_word_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LMN"


class KeywordRules:
    """Maps keywords to classes. ``rules`` is ``{class_name: [keyword, ...]}``; see the module
    documentation for how a keyword matches (whole ASCII words, or substrings for other scripts)."""

    def __init__(self, rules: Mapping[str, Sequence[str]] = DEFAULT_KEYWORDS):
        if not isinstance(rules, Mapping):
            raise ConfigError(f"keyword rules: got {type(rules).__name__} {rules!r:.60}; pass a dict "
                              "{class_name: [keyword, ...]}, e.g. {'dent': ['dent', 'pit']}")
        if not rules:
            raise ConfigError("keyword rules are empty: pass {class_name: [keyword, ...]}, e.g. {'dent': ['dent', 'pit']} "
                              "or {'scratch': ['划痕']}")
        self._word_to_class: dict[str, str] = {}  # ASCII keywords: whole words
        self._text_to_class: dict[str, str] = {}  # other keywords: substrings of a component
        for cls, words in rules.items():
            if isinstance(words, str):
                raise ConfigError(f"keyword rules for class {cls!r}: got the string {words!r}; pass a list of keywords, "
                                  f"e.g. {{{cls!r}: [{words!r}]}}")
            if not isinstance(words, Sequence):
                raise ConfigError(f"keyword rules for class {cls!r}: got {words!r}; pass a list of keywords")
            if not words:
                raise ConfigError(f"keyword rules for class {cls!r}: the list of keywords is empty; give at least one")
            for w in words:
                if not isinstance(w, str):
                    raise ConfigError(f"keyword {w!r} for class {cls!r} is not a string; keywords are words such as "
                                      "'dent' or '凹坑'")
                key = fold(w)
                if not key or not all(_is_word_char(ch) for ch in key):
                    raise ConfigError(f"keyword {w!r} for class {cls!r} must be letters and digits only (no spaces or "
                                      "punctuation); split it into separate keywords")
                if key.isascii() and not key.isalpha():
                    raise ConfigError(f"keyword {w!r} for class {cls!r}: an ASCII keyword must be letters only (it "
                                      "matches whole words, and a word ends at a digit); drop the digits")
                table = self._word_to_class if key.isascii() else self._text_to_class
                other = self._word_to_class.get(key, self._text_to_class.get(key))
                if other is not None and other != cls:
                    raise ConfigError(f"keyword {w!r} is given for both {other!r} and {cls!r}; keep it in one class")
                table[key] = cls
        self.classes: tuple[str, ...] = tuple(sorted(rules))
        # longest first: where two keywords match at one place, the longer one is found first
        self._texts = sorted(self._text_to_class, key=lambda k: (-len(k), k))

    def _classes_in(self, component: str) -> dict[str, str]:
        """``{class: the word or keyword that matched}`` for one path component."""
        found: dict[str, str] = {}
        for word in (m.lower() for m in _WORD.findall(unicodedata.normalize("NFKC", component))):
            for suffix in _SUFFIXES:
                if suffix and not word.endswith(suffix):
                    continue
                stem = word[: len(word) - len(suffix)] if suffix else word
                cls = self._word_to_class.get(stem)
                if cls is not None:
                    found.setdefault(cls, word)
                    break
        if self._texts:
            text = fold(component)
            spans: list[tuple[int, int, str]] = []
            for key in self._texts:
                start = text.find(key)
                while start >= 0:
                    end = start + len(key)
                    if not any(s <= start and end <= e for s, e, _ in spans):  # not inside a longer match
                        spans.append((start, end, key))
                    start = text.find(key, start + 1)
            for _, _, key in sorted(spans):
                found.setdefault(self._text_to_class[key], key)
        return found

    def label(self, relpath: str) -> tuple[str | None, str | None]:
        """Return ``(class_name, None)`` or ``(None, reason)`` for a path relative to the data root."""
        parts = relpath.split("/")
        stem = parts[-1].rsplit(".", 1)[0]
        for level in [stem, *reversed(parts[:-1])]:
            found = self._classes_in(level)
            if len(found) == 1:
                return next(iter(found)), None
            if len(found) > 1:
                detail = ", ".join(f"{c} ({w!r})" for c, w in sorted(found.items()))
                return None, f"ambiguous keywords in {level!r}: {detail}"
        keys = {**self._word_to_class, **self._text_to_class}
        return None, "no keyword matched (rules: " + ", ".join(
            f"{c}: {'/'.join(sorted(w for w, k in keys.items() if k == c))}" for c in self.classes
        ) + ")"
