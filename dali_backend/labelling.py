"""Keyword labelling for raw folders with messy file names.

A file's label comes from keywords in its name, then (if the name has none) in its folders, nearest
first. A file that matches no class, or two classes at the same level, is reported and never guessed.
Matching is by word, not substring: ``ok`` matches ``IMG_OK_3.jpg`` but not ``token.jpg``; a word may
carry a plural or past suffix (``scratches``, ``dented``, ``pitted``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .errors import ConfigError

DEFAULT_KEYWORDS: Mapping[str, tuple[str, ...]] = {
    "normal": ("ok", "normal", "good"),
    "scratch": ("scratch", "scr"),
    "dent": ("dent", "pit"),
}
_SUFFIXES = ("", "s", "es", "ed", "ted", "ing", "ting")
# Words split at non-letters and at camelCase boundaries: "IMG_scr12" -> img, scr; "ScratchLeft" -> scratch, left.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")


class KeywordRules:
    """Maps words to classes. ``rules`` is ``{class_name: [keyword, ...]}``; keywords are case-insensitive."""

    def __init__(self, rules: Mapping[str, Sequence[str]] = DEFAULT_KEYWORDS):
        if not rules:
            raise ConfigError("keyword rules are empty: pass {class_name: [keyword, ...]}, e.g. {'dent': ['dent', 'pit']}")
        self._word_to_class: dict[str, str] = {}
        for cls, words in rules.items():
            if isinstance(words, str):
                raise ConfigError(f"keyword rules for class {cls!r}: got the string {words!r}; pass a list of keywords")
            for w in words:
                w_low = w.lower()
                if not w_low.isalpha():
                    raise ConfigError(f"keyword {w!r} for class {cls!r} must be letters only (words are split at other characters)")
                other = self._word_to_class.get(w_low)
                if other is not None and other != cls:
                    raise ConfigError(f"keyword {w!r} is given for both {other!r} and {cls!r}; keep it in one class")
                self._word_to_class[w_low] = cls
        self.classes: tuple[str, ...] = tuple(sorted(rules))

    def _classes_in(self, text: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for word in (m.lower() for m in _WORD.findall(text)):
            for suffix in _SUFFIXES:
                if suffix and not word.endswith(suffix):
                    continue
                stem = word[: len(word) - len(suffix)] if suffix else word
                cls = self._word_to_class.get(stem)
                if cls is not None:
                    found.setdefault(cls, word)
                    break
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
        return None, "no keyword matched (rules: " + ", ".join(
            f"{c}: {'/'.join(sorted(w for w, k in self._word_to_class.items() if k == c))}" for c in self.classes
        ) + ")"
