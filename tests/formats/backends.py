"""Shared by the format tests: one folder served by both CPU backends, pixels side by side."""

from __future__ import annotations

import numpy as np

from tests.helpers import KINDS


def served_by_both(root, color: str, size: tuple[int, int] = (24, 32)) -> dict[str, np.ndarray]:
    """Every sample of the folder ``root``, resized to ``size``, as each CPU backend serves it (uint8, in index order)."""
    from dali_backend import AugmentSpec, DaliLoader, ImageDataset
    from dali_backend import transforms as T
    from dali_backend.index import SampleIndex

    index = SampleIndex.from_folder(root, progress=False)
    spec = AugmentSpec(ops=[T.Resize(size)], color=color, dtype="uint8")
    out = {}
    for kind, args in KINDS.items():
        loader = DaliLoader(ImageDataset(index, spec, seed=3), batch_size=5, shuffle=False, **args)
        out[kind] = np.concatenate([x.numpy() for x, _ in loader])
    return out


def assert_refused_with_reasons(root, broken: dict[str, tuple[bytes, str]], ok_name: str, ok: bytes) -> None:
    """Files ``broken`` (name -> (bytes, expected words of the reason)) in ``root/a`` beside one good file:
    the index keeps the good one only and gives each broken one its reason."""
    from dali_backend.index import SampleIndex
    from tests.helpers import write

    for name, (data, _) in broken.items():
        write(root / "a" / name, data)
    write(root / "a" / ok_name, ok)
    index = SampleIndex.from_folder(root, progress=False)
    reasons = {r.path: r.reason for r in index.rejected}
    for name, (_, expected) in broken.items():
        assert expected in reasons[f"a/{name}"], (name, reasons[f"a/{name}"])
    assert list(index.paths) == [f"a/{ok_name}"]
