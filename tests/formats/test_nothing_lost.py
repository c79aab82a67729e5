"""A mixed folder indexes every file; what an index leaves out is said at build time, per class."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from dali_backend.errors import FilesNotIndexedWarning
from dali_backend.index import SampleIndex
from tests.formats.test_bmp_webp import variants as bmp_webp_variants
from tests.formats.test_png import png_variants
from tests.formats.test_tiff import tiff_variants
from tests.helpers import jpeg_bytes, write


@pytest.fixture
def mixed(tmp_path):
    for label, seed in (("good", 0), ("rare", 1)):
        write(tmp_path / label / "a.jpg", jpeg_bytes(seed=seed))
        write(tmp_path / label / "b.png", png_variants(seed)["rgb"])
        write(tmp_path / label / "c.tif", tiff_variants(seed)["lzw"])
        write(tmp_path / label / "d.bmp", bmp_webp_variants(seed)["rgb.bmp"])
        write(tmp_path / label / "e.webp", bmp_webp_variants(seed)["lossless.webp"])
    return tmp_path


def test_a_mixed_folder_indexes_every_file_without_a_warning(mixed, recwarn):
    index = SampleIndex.from_folder(mixed, progress=False)
    assert len(index) == 10 and not index.rejected and not index.ignored
    assert not [w for w in recwarn if issubclass(w.category, FilesNotIndexedWarning)]


def test_a_class_that_loses_files_says_how_many_at_build_time(mixed, caplog):
    write(mixed / "rare" / "f.gif", b"GIF89a")
    write(mixed / "rare" / "g.png", png_variants(2)["rgb"][:-20])
    write(mixed / "rare" / "h.tif", np.zeros(10, np.uint8).tobytes())
    write(mixed / "good" / ".hidden.jpg", b"x")  # hidden: skipped on purpose, not a loss
    with caplog.at_level(logging.WARNING, logger="dali_backend"), \
            pytest.warns(FilesNotIndexedWarning) as warned:
        index = SampleIndex.from_folder(mixed, progress=False)
    text = str(warned[0].message)
    assert text.startswith(f"3 files under {index.root} left out of the index: class 'rare' lost 3 of 8 (other extension 1, "
                           "rejected 2)")
    assert "good" not in text
    assert any(r.getMessage() == text for r in caplog.records)
    assert text in index.summary()


def test_pack_keeps_each_formats_extension_and_its_pixels(mixed, tmp_path):
    import tarfile

    from dali_backend.storage.pack import pack

    index = SampleIndex.from_folder(mixed, progress=False)
    packed = pack(index, tmp_path / "packed", shard_bytes=10**8)
    with tarfile.open(tmp_path / "packed" / packed.shards.names[0]) as tar:
        names = [m.name for m in tar.getmembers()]
    assert sorted(n.split(".")[1] for n in names if not n.endswith(".cls")) == sorted(
        ["jpg", "png", "tif", "bmp", "webp"] * 2)
    from dali_backend import AugmentSpec, DaliLoader, ImageDataset

    spec = AugmentSpec(size=16, color="rgb", dtype="uint8")
    loose, shards = ([x.numpy() for x, _ in DaliLoader(ImageDataset(i, spec), batch_size=10, device="cpu",
                                                         backend="torch")] for i in (index, packed))
    assert np.array_equal(np.concatenate(loose), np.concatenate(shards))


@pytest.mark.parametrize("color", ["rgb", "gray"])
def test_a_mixed_folder_gives_equal_batches_on_both_backends(mixed, color):
    from tests.formats.backends import served_by_both

    out = served_by_both(mixed, color)
    assert out["torch"].shape[0] == 10 and np.array_equal(out["torch"], out["dali-cpu"])


def test_variable_size_batches_and_region_crops_over_mixed_formats_agree(tmp_path):
    """pad_batch (each image's own size, from its format's header) and a first crop (decoded by region
    for JPEG, whole then cropped for the others) give the same batches on both backends."""
    from dali_backend import AugmentSpec, DaliLoader, ImageDataset
    from dali_backend import transforms as T
    from tests.helpers import KINDS

    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(7)
    for k, (ext, h, w) in enumerate(((".png", 30, 44), (".bmp", 26, 38), (".webp", 34, 40), (".jpg", 40, 28),
                                     (".tif", 22, 50))):
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        write(tmp_path / ("a" if k % 2 else "b") / f"{k}{ext}", cv2.imencode(ext, img)[1].tobytes())
    index = SampleIndex.from_folder(tmp_path, progress=False)
    for spec in (AugmentSpec(ops=[T.RandomHorizontalFlip()], color="rgb", dtype="uint8", pad_batch=8),
                 AugmentSpec(ops=[T.RandomResizedCrop(16)], color="rgb", dtype="uint8")):
        out = {}
        for kind, args in KINDS.items():
            loader = DaliLoader(ImageDataset(index, spec, seed=2), batch_size=5, shuffle=False, **args)
            out[kind] = [b[0].numpy() for b in loader]
        assert len(out["torch"]) == 1 and all(np.array_equal(a, b) for a, b in zip(out["torch"], out["dali-cpu"]))
        assert all(np.array_equal(a, b) for a, b in zip(out["torch"], out["torch-threads"]))


def test_update_takes_new_files_of_every_format(mixed):
    index = SampleIndex.from_folder(mixed, progress=False)
    write(mixed / "rare" / "f.png", png_variants(9)["palette"])
    write(mixed / "good" / "g.tiff", tiff_variants(9)["deflate"])
    (mixed / "good" / "d.bmp").unlink()
    updated = index.update(progress=False)
    assert sorted(set(updated.paths) - set(index.paths)) == ["good/g.tiff", "rare/f.png"]
    assert "good/d.bmp" not in updated.paths and len(updated) == 11
