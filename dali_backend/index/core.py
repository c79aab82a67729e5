""":class:`SampleIndex`: the files, their labels and the refused files, in numpy arrays; building (the work is
in :mod:`.build`), deriving, checking and saving it."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from ..formats.jpeg import DEFAULT_MAX_PIXELS
from ..core.labelling import DEFAULT_KEYWORDS, KeywordRules
from ..storage import stores
from ..util.strings import StringTable
from .options import Verify
from .report import headline, summary_text, warn_losses
from .indexers import indexer_of
from .kinds import BEFORE, checked_fields
from .persist import fingerprint_of, load_index, save_index
from .shards import Shards
from . import targetbuild
from .splitkeys import split_keys
from .targets import IndexTargets
from .update import check_source, source_of
from .walk import Rejected, Candidates, count_text

log = logging.getLogger("dali_backend")


class SampleIndex:
    """An immutable list of (file, label) samples under one root folder or object-storage URL.

    Build it with :meth:`from_folder`, :meth:`from_manifest` or :meth:`from_keywords`; save it with
    :meth:`save` and reload it with :meth:`load` (no pickle: a ``.npz`` of plain arrays and JSON).

    Attributes:
        root: absolute data root, or a URL (``s3://bucket/prefix``, without credentials); paths are
            relative to it.
        paths: relative paths (``/``-separated), a read-only sequence of ``str``.
        labels: int64 class ids, ``labels[i]`` indexes ``classes``.
        classes: class names; ids are positions in this tuple.
        sizes, mtimes: file size in bytes and mtime in ns at indexing time (int64).
        widths, heights: image size declared by the JPEG frame header (before EXIF rotation).
        rejected: files that were refused, each with a reason.
        ignored: counts of files skipped on purpose, by reason (``hidden``, ``macOS ._ file``,
            ``not .jpg/.jpeg``, ``symlink loop``).
        ignored_files: every skipped file or folder as ``Rejected(path, reason)``, the reason one of
            those of :attr:`ignored` (empty for an index saved before they were recorded).
        etags: each object's ETag at indexing time (a URL root), or None (a folder, or an index
            saved before ETags were recorded).
        format_ids, format_names, bit_depths: each sample's format, by content (``format_names[format_ids[i]]``,
            :attr:`formats`) and bits per value its header declares (uint8; 16: 16-bit PNG/TIFF): :mod:`.kinds`.
        shards: where packed samples lie (``dali-backend pack``: tar shards, one range read per sample),
            or None for loose files; see :mod:`.shards`.
        annotations: masks and boxes per sample (:class:`~.targets.IndexTargets`) or None: :meth:`with_targets`.
        storage_options: credentials and settings for a URL root (never saved, printed or
            fingerprinted; pass them again to :meth:`load`).
        store: the root's store (:mod:`dali_backend.storage.stores`: a ``LocalStore`` for a folder), which
            answers listing, reads and which samples changed.
        fingerprint: SHA-256 over classes, paths, labels, sizes and mtimes (and ETags when recorded).
        source: how the index was built (builder and options), what :meth:`update` walks again; None
            for an index derived with :meth:`subset` / :meth:`split`, or built from a URL.
    """

    __slots__ = ("root", "_paths", "labels", "classes", "sizes", "mtimes", "widths", "heights", "rejected",
                 "ignored", "ignored_files", "etags", "storage_options", "shards", "annotations", "fingerprint",
                 "source", "format_ids", "format_names", "bit_depths", "__weakref__")

    def __init__(self, root: str | os.PathLike, paths: StringTable, labels: NDArray[np.int64],
                 classes: Sequence[str], sizes: NDArray[np.int64], mtimes: NDArray[np.int64],
                 widths: NDArray[np.int32], heights: NDArray[np.int32],
                 rejected: Iterable[Rejected] = (), ignored: Mapping[str, int] | None = None,
                 ignored_files: Iterable[Rejected] = (), etags: StringTable | None = None,
                 storage_options: Mapping | None = None, shards: Shards | None = None, source: Mapping | None = None,
                 format_ids: NDArray[np.uint8] | None = None, format_names: Sequence[str] = (BEFORE[0],),
                 bit_depths: NDArray[np.uint8] | None = None, annotations: IndexTargets | None = None):
        n = len(paths)
        kinds = checked_fields(n, format_ids, format_names, bit_depths)  # None: an index of before (JPEG, 8-bit)
        if shards is not None and len(shards) != n:
            raise ConfigError(f"SampleIndex: shards place {count_text(len(shards), 'sample')} for {count_text(n, 'path')}")
        if etags is not None and len(etags) != n:
            raise ConfigError(f"SampleIndex: etags has {count_text(len(etags), 'entry', 'entries')} for {count_text(n, 'path')}")
        arrays = {"labels": (labels, np.int64), "sizes": (sizes, np.int64), "mtimes": (mtimes, np.int64),
                  "widths": (widths, np.int32), "heights": (heights, np.int32)}
        fixed = {}
        for name, (arr, dtype) in arrays.items():
            a = np.array(arr, dtype=dtype, copy=True).reshape(-1)
            if a.size != n:
                raise ConfigError(f"SampleIndex: {name} has {count_text(a.size, 'entry', 'entries')} for "
                                  f"{count_text(n, 'path')}")
            a.flags.writeable = False
            fixed[name] = a
        classes = tuple(str(c) for c in classes)
        if len(set(classes)) != len(classes):
            raise ConfigError(f"SampleIndex: class names must be unique, got {classes}")
        if n and (fixed["labels"].min() < 0 or fixed["labels"].max() >= len(classes)):
            raise ConfigError(f"SampleIndex: labels must lie in [0, {len(classes) - 1}] for classes {classes}")
        sa = object.__setattr__
        sa(self, "root", stores.normal_root(root))
        sa(self, "_paths", paths)
        sa(self, "classes", classes)
        for name, a in fixed.items():
            sa(self, name, a)
        sa(self, "rejected", tuple(rejected))
        sa(self, "ignored", dict(ignored or {}))
        sa(self, "ignored_files", tuple(ignored_files))
        sa(self, "etags", etags)
        sa(self, "storage_options", dict(storage_options) if storage_options else None)
        sa(self, "shards", shards)
        sa(self, "annotations", annotations)
        sa(self, "fingerprint", fingerprint_of(self))
        sa(self, "source", check_source(source))
        for name, value in zip(("format_ids", "format_names", "bit_depths"), kinds):
            sa(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"SampleIndex is immutable; cannot set {name!r} (build a new index instead)")

    def __reduce__(self):  # pickling (spawned workers, deepcopy): the slots as they are, no re-validation
        return _restore_index, (tuple(getattr(self, name) for name in _STATE_SLOTS),)

    # ----------------------------------------------------------------------------------- accessors
    @property
    def paths(self) -> StringTable:
        return self._paths

    def __len__(self) -> int:
        return len(self._paths)

    @property
    def class_to_idx(self) -> dict[str, int]:
        """``{class name: class id}``, as torchvision's ``ImageFolder.class_to_idx``."""
        return {c: i for i, c in enumerate(self.classes)}

    @property
    def targets(self) -> NDArray[np.int64]:
        """The class id of every sample, as torchvision's ``ImageFolder.targets``.

        A read-only int64 numpy array (the same as :attr:`labels`), not a list: it works wherever
        torchvision code reads ``targets`` (``len``, indexing, ``np.bincount``, ``torch.as_tensor``,
        ``Counter``) without creating a Python object per sample.
        """
        return self.labels

    @property
    def samples(self) -> list[tuple[str, int]]:
        """``[(absolute path, class id), ...]``, as torchvision's ``ImageFolder.samples``.

        Built on each access (one Python tuple per sample): fine for inspection, avoid it in
        DataLoader workers, where :meth:`abspath` and :attr:`labels` cost nothing.
        """
        return [(os.path.join(self.root, p), int(lab)) for p, lab in zip(self._paths, self.labels.tolist())]

    def abspath(self, i: int) -> str:
        """Absolute path (or URL) of sample ``i``; for a packed sample (``dali-backend pack``), its shard's
        path and its name in the shard, ``SHARD:relative/path.jpg``, as its errors name it."""
        if self.shards is not None:
            return f"{os.path.join(self.root, self.shards.names[self.shards.ids[i]])}:{self._paths[i]}"
        return os.path.join(self.root, self._paths[i])

    @property
    def store(self) -> stores.Store:
        """The store of the root (:func:`~dali_backend.storage.stores.open_store`: a
        :class:`~dali_backend.storage.local.LocalStore` for a folder), opened on each access (cheap: no request)."""
        return stores.open_store(self.root, self.storage_options)

    @property
    def is_remote(self) -> bool:
        """Whether the root is not a folder on this machine (an object-storage URL): the store says."""
        return self.store.folder is None

    def bucket(self):
        """The store of a root the index lists rather than walks (an object store), or None for a folder."""
        store = self.store
        return None if store.folder is not None else store

    @property
    def formats(self) -> NDArray[np.str_]:
        """Each sample's format name (``"jpeg"``, ``"png"``...), built from :attr:`format_ids` on each access."""
        return np.array(self.format_names, dtype=str)[self.format_ids]

    def class_counts(self) -> NDArray[np.int64]:
        """Number of samples per class, in the order of :attr:`classes`."""
        return np.bincount(self.labels, minlength=len(self.classes)).astype(np.int64)

    def summary(self) -> str:
        """Counts per class and per format and bit depth, then every rejected file with its reason and every ignored
        file, grouped by reason.

        The first line is the one logged when the index is built (counts and a few examples); the
        lines after it list every rejected file under its kind of reason (a file rejected several
        times, such as a path listed on many manifest lines, once, with the count) and every
        ignored file or folder (hidden, ``._*``, not ``.jpg``/``.jpeg``, symlink loops).
        """
        return summary_text(self)

    def __repr__(self) -> str:
        return f"<SampleIndex n={len(self)} classes={list(self.classes)} rejected={len(self.rejected)} root={self.root!r}>"

    # ----------------------------------------------------------------------------------- builders
    @classmethod
    def from_folder(cls, root: str | os.PathLike, split: str | None = None, *, classes: Sequence[str] | None = None,
                    verify: Verify = "header", max_pixels: int = DEFAULT_MAX_PIXELS,
                    allow_outside_symlinks: bool = False, workers: int = 8, progress: bool | None = None,
                    storage_options: Mapping | None = None, targets: Mapping | None = None) -> SampleIndex:
        """Index ``root/<class>/**/*.jpg`` (or ``root/<split>/<class>/**`` when ``split`` is given).

        Args:
            root: data folder, or an object-storage URL ``s3://bucket/prefix`` (the same layouts, read
                from one listing: names, sizes and ETags; the header check reads byte ranges, see
                :mod:`dali_backend.index.remote`).
            split: name of a split folder (``"train"``, ``"val"``); classes are then the union of the
                class folders of every split, so the ids agree between splits. Without it, a root
                whose sub-folders are split names (train, val, valid, validation, test, testing)
                holding folders is refused rather than indexed with the splits as classes.
            classes: explicit class names in id order (default: sorted folder names). A class folder
                not in this list is an error; a listed class without a folder has no samples. Giving
                it also turns off the split-layout check (for classes really named ``test``) and the
                look-alike check below.
            verify: ``"header"`` (markers, frame type and size, EXIF orientations; default),
                ``"decode"`` (also decode every file, in colour and in gray, with libjpeg-turbo in
                strict mode), or ``"none"`` (trust the files). Only
                ``"decode"`` catches a scan cut short and re-terminated with an end-of-image marker
                (it would decode with its bottom rows flat grey) or corrupt entropy data.
            max_pixels: refuse files whose frame header declares more pixels than this.
            allow_outside_symlinks: follow symlinks that point outside ``root`` (refused by default).
            workers: threads used to read headers (I/O bound; at least 32 for a URL).
            progress: show a progress bar (None: when stderr is a terminal).
            storage_options: for a URL root: credentials, endpoint and request settings (see
                :mod:`dali_backend.storage.client`); kept in memory for the loaders, never saved.
            targets: masks and/or boxes per image (a table of :mod:`dali_backend.targets`): :meth:`with_targets`.

        Class folders whose names differ only in case or Unicode normalisation (``Dent`` and
        ``dent``; ``café`` precomposed and decomposed, e.g. one copied from macOS) are refused, not
        silently made two classes, nor silently merged: rename one folder (or move its files into the
        other), or pass ``classes=`` naming both to keep them as two classes.

        Raises:
            IndexBuildError: no folder, a split layout without ``split=``, look-alike class folder
                names, or no usable JPEG at all (the message says what was found instead).
        """
        source = source_of("folder", split=split, classes=classes, allow_outside_symlinks=allow_outside_symlinks,
                           verify=verify, max_pixels=max_pixels)
        how = indexer_of(root, storage_options)
        index = cls._checked(how, how.folder(split, classes, allow_outside_symlinks), verify, max_pixels, workers,
                             progress, source)
        return index if targets is None else index.with_targets(targets)

    @classmethod
    def from_keywords(cls, root: str | os.PathLike, rules: Mapping[str, Sequence[str]] | KeywordRules = DEFAULT_KEYWORDS,
                      *, verify: Verify = "header", max_pixels: int = DEFAULT_MAX_PIXELS,
                      allow_outside_symlinks: bool = False, workers: int = 8, progress: bool | None = None,
                      storage_options: Mapping | None = None) -> SampleIndex:
        """Index every JPEG below ``root`` (a folder or an ``s3://`` URL, as :meth:`from_folder`) and label
        it by keywords in its name or folders.

        Default rules (the tutorial's): ok/normal/good -> normal, scratch/scr -> scratch, dent/pit ->
        dent. Keywords may be in any script: an ASCII keyword matches a whole word of a file or folder
        name, any other keyword (``{"scratch": ["划痕"]}``) matches inside a name (``划痕_2024``),
        both after NFKC normalisation and case folding; see :mod:`dali_backend.core.labelling` for the
        exact rule. Files that match no class or several are put in :attr:`rejected`, never guessed.
        """
        kw = rules if isinstance(rules, KeywordRules) else KeywordRules(rules)
        words = {**kw._word_to_class, **kw._text_to_class}
        source = source_of("keywords", rules={c: sorted(w for w, k in words.items() if k == c) for c in kw.classes},
                           allow_outside_symlinks=allow_outside_symlinks, verify=verify, max_pixels=max_pixels)
        how = indexer_of(root, storage_options)
        return cls._checked(how, how.keywords(kw, allow_outside_symlinks), verify, max_pixels, workers, progress,
                            source)

    @classmethod
    def from_manifest(cls, path: str | os.PathLike, root: str | os.PathLike | None = None, split: str | None = None, *,
                      classes: Sequence[str] | None = None, verify: Verify = "header",
                      max_pixels: int = DEFAULT_MAX_PIXELS, workers: int = 8, progress: bool | None = None,
                      path_column: str | None = None, label_column: str | None = None,
                      split_column: str | None = None, encoding: str | None = None,
                      storage_options: Mapping | None = None, targets: Mapping | None = None) -> SampleIndex:
        """Index the files listed in a manifest.

        Args:
            path: a JSON object ``{"relative/path.jpg": "class", ...}`` (``.json``; a key given twice
                is an error), or a CSV file. A CSV without a header row has the columns
                ``path,label[,split]``. A header row is read by name: the path column may be called
                any of :data:`PATH_COLUMNS` (``path``, ``file``, ``filename``, ``image``,
                ``image_path``, ``filepath``, ``img``, ...), the label column any of
                :data:`LABEL_COLUMNS` (``label``, ``class``, ``class_name``, ``target``,
                ``category``, ...) and the optional split column any of :data:`SPLIT_COLUMNS`
                (``split``, ``subset``, ``set``, ``fold``, ...); other columns are ignored. A first
                row that looks like a header (no cell names a ``.jpg``/``.jpeg`` or an existing
                file) but has none of these names is an error: pass ``path_column=`` and
                ``label_column=``.
            root: folder the manifest paths are relative to (default: the manifest's folder), or an
                ``s3://bucket/prefix`` URL (the manifest itself is a local file; each listed object is
                checked as :meth:`from_folder` checks a bucket's, after one HEAD). An entry resolving
                outside it (``../``, absolute paths elsewhere, symlinks) is refused.
            split: keep only CSV rows whose split column equals this.
            classes: explicit class names in id order (default: sorted labels found). A label not in
                this list is an error. An empty label is always an error (file and line named).
            path_column: CSV header name of the path column, for headers with other names such as
                ``文件名,类别`` (the CSV must then have a header row).
            label_column: CSV header name of the label column (as ``path_column``).
            split_column: CSV header name of the split column (as ``path_column``).
            encoding: the manifest's text encoding (default UTF-8, with or without a byte-order
                mark), e.g. ``"gbk"`` or ``"cp1252"`` for a CSV saved by Excel on Windows. A manifest
                that does not decode is a :class:`ManifestError` naming the line and byte offset.

        Files written on Windows read as they are: a byte-order mark and CRLF line ends are fine,
        and a path written with backslashes (``scratch\\img1.jpg``) names ``scratch/img1.jpg`` when
        no file is named with the backslash itself (on POSIX, where ``\\`` may be part of a name).
        A path with spaces around it is used exactly as written when that file exists (a file may
        really be named `` lead.jpg``), else without them (``a.jpg, ok``). Labels are stripped;
        labels that differ only in case or Unicode normalisation (``Dent`` and ``dent``) are an
        error unless ``classes=`` names both. A CSV error (an unclosed quote) names its line.
        ``targets``: masks and/or boxes per image, as :meth:`with_targets`.
        """
        source = source_of("manifest", manifest=os.path.abspath(path), split=split, classes=classes,
                           path_column=path_column, label_column=label_column, split_column=split_column,
                           encoding=encoding, verify=verify, max_pixels=max_pixels)
        how = indexer_of(root, storage_options)
        built = how.manifest(path, split, classes, path_column, label_column, split_column, encoding)
        index = cls._checked(how, built, verify, max_pixels, workers, progress, source)
        return index if targets is None else index.with_targets(targets)

    @classmethod
    def from_mvtec(cls, root: str | os.PathLike, category: str, split: str = "test", **options) -> SampleIndex:
        """One MVTec AD category's split with its masks (a folder or an ``s3://`` URL): :func:`.targetbuild.from_mvtec`."""
        return targetbuild.from_mvtec(cls, root, category, split, **options)

    @classmethod
    def from_annotations(cls, root: str | os.PathLike, targets: Mapping, **options) -> SampleIndex:
        """The images a box table names, with their boxes, no class folders: :func:`.targetbuild.from_annotations`."""
        return targetbuild.from_annotations(cls, root, targets, **options)

    def with_targets(self, targets: Mapping, num_classes: int = 2, binary: bool = False) -> SampleIndex:
        """This index with each sample's mask file and boxes from a reader's table (saved, checked, cached, packed and
        updated like the images; ``num_classes``, ``binary`` of the masks): :func:`.targetbuild.join_targets`."""
        return targetbuild.with_targets(self, targets, num_classes, binary)

    @classmethod
    def _checked(cls, how, built: tuple, verify: Verify, max_pixels: int, workers: int, progress: bool | None,
                 source: dict) -> SampleIndex:
        """The index of the candidates ``built`` by the indexer ``how`` (:mod:`.indexers`), once checked."""
        root, cand, classes, infos = built
        keep, cols, rejected, extra = how.check(root, cand, classes, infos, verify, max_pixels, workers, progress)
        return cls._built(root, cand, classes, keep, cols, rejected, source=source, **extra)

    @classmethod
    def _built(cls, root, cand: Candidates, classes: Sequence[str], keep: list[int], cols: NDArray[np.int64],
               rejected: list[Rejected], **extra) -> SampleIndex:
        """The index of the checked candidates ``keep`` (columns: size, mtime, width, height), logged."""
        index = cls(root, StringTable.from_strings(cand.paths[i] for i in keep), np.asarray(cand.labels, np.int64)[keep],
                    classes, cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3], rejected, cand.ignored,
                    sorted(cand.ignored_files, key=lambda r: r.path), **extra)
        log.info("%s", headline(index))
        warn_losses(index)  # files rejected or of another extension, per class (issue 34: nothing lost silently)
        empty = [c for c, k in zip(index.classes, index.class_counts()) if k == 0]
        if empty:
            log.warning("classes with no samples: %s", empty)
        return index

    def update(self, *, workers: int = 8, progress: bool | None = None) -> SampleIndex:
        """This index brought up to date with its root, reading only what changed; a new index.

        Walks the root again as the index was built (:attr:`source`), calls ``stat`` on every file and reads
        the headers only of files that are new, changed (size or mtime) or were refused before; files
        gone or now refused leave. The result holds what a fresh build would (samples, labels, sizes,
        rejects). Order: samples still present keep their relative order (their positions are
        unchanged when nothing was removed; removing one moves those after it down by one), new files
        are appended in walk order, and new classes are appended to :attr:`classes` (class ids keep
        their meaning). A bucket is listed again: objects of the indexed size and ETag are not read. See
        :mod:`dali_backend.index.update`. CLI: ``dali-backend index --update INDEX``.

        Args:
            workers: threads that ``stat`` files and read headers.
            progress: show a progress bar (None: when stderr is a terminal).

        Raises:
            ConfigError: no recorded source (an index from :meth:`subset`/:meth:`split`, or saved by an
                older release): update the index it came from, or build it once.
            IndexBuildError: what a fresh build would raise (no usable file left, a split layout...).
        """
        from .update import update_index

        return update_index(self, workers=workers, progress=progress)[0]

    # ----------------------------------------------------------------------------------- derived
    def subset(self, positions: Sequence[int] | NDArray[np.int64]) -> SampleIndex:
        """A new index holding the samples at ``positions`` (same root and classes; rejects kept)."""
        pos = np.asarray(positions, dtype=np.int64).reshape(-1)
        if pos.size and (pos.min() < 0 or pos.max() >= len(self)):
            raise ConfigError(f"subset positions must lie in [0, {len(self) - 1}]")
        return SampleIndex(self.root, self._paths.take(pos), self.labels[pos], self.classes, self.sizes[pos],
                           self.mtimes[pos], self.widths[pos], self.heights[pos], self.rejected, self.ignored,
                           self.ignored_files, None if self.etags is None else self.etags.take(pos),
                           self.storage_options, None if self.shards is None else self.shards.take(pos),
                           format_ids=self.format_ids[pos], format_names=self.format_names,
                           bit_depths=self.bit_depths[pos],
                           annotations=None if self.annotations is None else self.annotations.take(pos))

    def split(self, val_fraction: float, seed: int = 0, *, stratify: bool = False) -> tuple[SampleIndex, SampleIndex]:
        """Split into ``(train, val)`` deterministically.

        Every file gets a key, a hash of (seed, relative path) uniform in [0, 1).

        * ``stratify=False`` (default): a file is in val when its key is below ``val_fraction``. Its
          side depends on nothing else, so a file keeps its side when others are added or removed;
          but each file is an independent draw, so a class gets ``val_fraction`` of its files only in
          expectation: the count is binomial (a class of 20 files at 0.2 gets 4 on average, and 6 or
          more, 30 %, about one time in five).
        * ``stratify=True``: each class gets exactly ``val_fraction`` of its files in val, rounded to
          the nearest count (half up): the files with the smallest keys. Deterministic for a seed;
          when a class grows, only files near its boundary can change sides.

        Raises:
            ConfigError: ``val_fraction`` outside [0, 1].
        """
        if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float, np.floating)) or \
                not 0.0 <= val_fraction <= 1.0:
            raise ConfigError(f"val_fraction={val_fraction!r}; must be a number in [0, 1], e.g. 0.2")
        u = split_keys(self._paths, seed)
        if stratify:
            val = np.zeros(len(self), dtype=bool)
            for c in range(len(self.classes)):
                members = np.flatnonzero(self.labels == c)
                k = int(np.floor(members.size * float(val_fraction) + 0.5))
                # smallest keys; ties (never in practice) broken by position, so the result is deterministic
                val[members[np.lexsort((members, u[members]))[:k]]] = True
        else:
            val = u < val_fraction
        return self.subset(np.flatnonzero(~val)), self.subset(np.flatnonzero(val))

    # ----------------------------------------------------------------------------------- checks
    def changed_files(self, positions: Iterable[int] | None = None) -> list[tuple[str, str]]:
        """``(path, what changed)`` for files whose size or mtime differ from indexing time, or are gone.

        For a URL root: objects whose size or ETag differ, or are gone, from one listing of the root
        (no object is read).
        """
        if self.shards is not None:  # packed: the shards are the files
            return self.shards.changed(self.root, self.bucket())
        masks = [] if self.annotations is None else self.annotations.changed(self.store)
        return self.store.changed(self._paths, self.sizes, self.mtimes, self.etags,
                                  range(len(self)) if positions is None else positions) + masks

    # ----------------------------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write the index to ``path`` (a ``.npz`` of plain arrays; no pickle). Atomic.

        The file is written under a new temporary name next to ``path`` and renamed over it, so a
        reader sees the old index or the new one, never a part (see :func:`write_atomic`). A ``path``
        that exists and is not a regular file (a folder, FIFO, socket, or a device such as
        ``/dev/null``) is refused and left as it is; a symlink to a file has that file replaced.
        Names that are not UTF-8 on disk round-trip: paths keep their bytes, and the metadata is
        ASCII JSON (lone surrogates escaped).

        Raises:
            OutputFileError: ``path`` is not a regular file, or writing failed (disk full,
                permissions); the message names ``path``, and no temporary file is left behind.
        """
        save_index(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, root: str | os.PathLike | None = None,
             check: Literal["stat", "none"] = "stat", storage_options: Mapping | None = None) -> SampleIndex:
        """Read an index written by :meth:`save`.

        Args:
            path: the index file.
            root: data root to use instead of the saved one (the data moved; CLI ``--root``): a folder or
                an ``s3://bucket/prefix`` URL.
            check: ``"stat"`` compares every file's size and mtime with indexing time (for a URL root:
                every object's size and ETag, from one listing) and raises :class:`StaleIndexError`
                listing the changed files; ``"none"`` skips that (CLI ``--no-check``).
            storage_options: credentials and settings for a URL root (they are never saved with the
                index; without them the ``AWS_*`` environment variables and profiles are used).

        Raises:
            IndexFileError: the file is missing, not an index, or damaged (rebuild it).
            StaleIndexError: ``check="stat"`` found changed or missing files; when most are
                missing, the message says to pass ``root=`` (the data moved).
        """
        return load_index(cls, path, root, check, storage_options)


_STATE_SLOTS = ("root", "_paths", "labels", "classes", "sizes", "mtimes", "widths", "heights", "rejected", "ignored",
                "ignored_files", "etags", "storage_options", "shards", "fingerprint", "source", "format_ids",
                "format_names", "bit_depths", "annotations")


def _restore_index(values: tuple) -> SampleIndex:
    index = SampleIndex.__new__(SampleIndex)
    for name, value in zip(_STATE_SLOTS, values):
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        object.__setattr__(index, name, value)
    return index
