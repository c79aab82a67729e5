"""The sample index: which files exist, their labels, and which files were refused and why.

Built once, immutable, fixed length. Everything is held in numpy arrays (paths as one UTF-8 buffer
plus offsets), so an index of a million files costs tens of MB and forked DataLoader workers do not
copy it page by page. Validation at build time reads only JPEG headers and the last bytes of each
file (``verify="header"``); ``verify="decode"`` also decodes every file, in colour and in gray, 4-20x
slower. Nothing is dropped silently: refused files land in :attr:`SampleIndex.rejected` with a reason,
are summarised in one log line, and are saved with the index.

The package follows the work: :mod:`.walk` (a data root's candidate files, what is ignored or refused,
split layouts, class names), :mod:`.manifest` (CSV/JSON lists), :mod:`.verify` (the decode check),
:mod:`.build` (the builders' work: candidate files and their checks), :mod:`.kinds` (each sample's format and bit
depth), :mod:`.core` (:class:`SampleIndex`), :mod:`.persist` (index files: save, load, fingerprint, changed files),
:mod:`.store` (index files and every output file: atomic, never onto a special file), :mod:`.report` (what a person reads), :mod:`.options`
(how messages name an option: library keyword or command-line flag).
"""

from __future__ import annotations

from .core import SampleIndex
from .splitkeys import split_keys
from .options import FORMAT_NAME, FORMAT_VERSION, INDEX_CLI_FLAGS, JPEG_EXTENSIONS, Verify, command_line
from .store import check_output_path, write_atomic
from .verify import decode_check  # noqa: F401  (tests call it directly)
from .walk import Rejected

__all__ = ["SampleIndex", "Rejected", "Verify", "INDEX_CLI_FLAGS", "JPEG_EXTENSIONS", "FORMAT_NAME", "FORMAT_VERSION",
           "check_output_path", "command_line", "split_keys", "write_atomic"]
