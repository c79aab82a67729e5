"""The clip contenders' data: the benchmark's images cut into sequences, and the clips drawn from them.

The benchmark's images are not recordings, so sequences are made up, the same way for synthetic data
and for ``--data``: each class's images, in index order, are cut into sequences of
``SEQUENCE_FRAMES`` (32) frames (a remainder joins the class's last sequence; a class with fewer
images is one shorter sequence). The grouping is written as a manifest CSV next to the benchmark's
index file and read with :meth:`~dali_backend.sampling.sequences.Sequences.from_manifest`, as a user with a
line camera's manifest would; file names play no part, so any folder of images gives sequences.
Throughput does not depend on which frames form a sequence, only on how many clips an epoch holds.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

SEQUENCE_FRAMES = 32  # frames per made-up sequence
CLIP_LEN = 8  # frames per clip (T), --clip-len
CLIP_STEP = 4  # frames between clip starts, --clip-step: windows overlap, a frame is shown about twice


def write_sequences(index, path: Path, sequence_frames: int = SEQUENCE_FRAMES) -> Path:
    """Write the manifest CSV (``path``, ``sequence``, ``frame``) grouping ``index``'s images into
    sequences of ``sequence_frames`` frames per class; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["path", "sequence", "frame"])
        for c, name in enumerate(index.classes):
            members = np.flatnonzero(index.labels == c)
            count = max(1, len(members) // sequence_frames)
            for j, i in enumerate(members.tolist()):
                out.writerow([index.paths[i], f"{name}-{min(j // sequence_frames, count - 1):04d}", j])
    return path


def clip_sampler(index, sequences_csv: str | Path, clip_len: int, clip_step: int):
    """The clip contenders' :class:`~dali_backend.sampling.clips.ClipSampler`: uniform (a shuffle of every
    clip per epoch, as the single-image contenders' uniform sampler), seed 0.

    Raises:
        ConfigError: no sequence holds a clip, naming ``--clip-len`` and ``--images`` and the fix.
    """
    from dali_backend import ClipSampler, Sequences
    from dali_backend.errors import ConfigError

    seqs = Sequences.from_manifest(index, sequences_csv, sequence_column="sequence", frame_column="frame")
    longest = int(seqs.lengths.max(initial=0))
    if longest < clip_len:
        raise ConfigError(f"--clip-len {clip_len}: the clip contenders cut each class's images into sequences of "
                          f"{SEQUENCE_FRAMES} frames and the longest here has {longest}; pass a --clip-len of at most "
                          f"{longest}, or more --images")
    return ClipSampler(seqs, clip_len, clip_step, mode="uniform", seed=0)


def clips_per_batch(batch_size: int, clip_len: int) -> int:
    """Clips per batch (B): as many as fit in ``batch_size`` frames, at least one, so that the executor
    runs batches of about the same number of frames as the single-image contenders."""
    return max(1, batch_size // clip_len)
