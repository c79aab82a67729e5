"""What DALI's error text says, read in one place.

DALI reports a failed pipeline only as text. The forms DALI 2.4 produces (tests/dali/test_dali_failures.py
holds each, captured from this DALI, and checks a live one):

* an operator's failure: ``Error in CPU operator `nvidia.dali.fn.decoders.image`, which was used in
  the pipeline definition with the following traceback: ... encountered: <reason>`` (``MIXED``/``GPU``
  on a GPU). nvImageCodec's reason for a JPEG it cannot decode is ``nvImageCodec failure: '#3'``: a
  status code, not the sample; older decoders said ``Failed to decode sample #3``, which names it;
* a Python reader worker's exception: ``Exception traceback received from worker thread: ...`` ending
  with the exception's own line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPERATOR = re.compile(r"Error in (?:CPU|GPU|MIXED|mixed) operator `nvidia\.dali\.fn\.([\w.]+)`")
_SAMPLE = re.compile(r"[Ss]ample #(\d+)")
_NOISE = ("current pipeline object is no longer valid", "critical error in pipeline")


@dataclass(frozen=True)
class DaliFailure:
    """A DALI pipeline failure: the operator that failed (``"decoders.image"``; None for a reader
    worker or an unknown form), the sample DALI named in its batch (None: not named), and the reason."""

    operator: str | None
    sample: int | None
    reason: str

    @property
    def from_decoder(self) -> bool:
        """The JPEG decoder failed (a file it cannot decode), not a reader worker or another operator."""
        return self.operator is not None and self.operator.startswith("decoders.")


def parse_dali_failure(text: str) -> DaliFailure:
    """The :class:`DaliFailure` that DALI's error ``text`` describes."""
    operator = _OPERATOR.search(text)
    sample = _SAMPLE.search(text)
    if "Exception traceback received from worker" in text:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        return DaliFailure(None, None, lines[-1][:300] if lines else "")
    reason = text.split("encountered:", 1)[1] if "encountered:" in text else text
    lines = [line.strip() for line in reason.splitlines()
             if line.strip() and not any(n in line.lower() for n in _NOISE)]
    name = operator.group(1) if operator else ("decoders" if "decod" in text.lower() else None)  # another form
    return DaliFailure(name, int(sample.group(1)) if sample else None, (lines[0] if lines else "")[:300])


def worker_config_error(text: str, kind: str = "ConfigError") -> str | None:
    """The message of a :class:`~dali_backend.errors.ConfigError` a reader worker raised (a 16-bit file
    under a spec without a Window: :func:`dali_backend.core.depth.check_served`), or of another error of
    :mod:`dali_backend.errors` named by ``kind`` (``"TargetError"``: a mask refused when read), or None."""
    marker = f"dali_backend.errors.{kind}: "
    if "Exception traceback received from worker" not in text or marker not in text:
        return None
    return text.rsplit(marker, 1)[1].strip().splitlines()[0]
