"""The store seam: a second object store plugged in by this one file, nothing in the library edited.

``mem://name/prefix``: objects in a dict held by the process (as MosaicML streaming registers one
downloader class per URL scheme). Registered with :func:`~dali_backend.storage.stores.register_store`,
it is listed and checked by ``SampleIndex.from_folder`` and served by the torch executor, through the
code that serves ``s3://`` (listing, HEAD, conditional GET, byte ranges).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from dali_backend.storage import stores
from dali_backend.storage.objects import ObjectChanged, ObjectInfo, ObjectMissing, ObjectStore
from tests.helpers import jpeg_bytes

OBJECTS: dict[str, bytes] = {}  # "name/key" -> bytes: the whole in-memory store


class MemStore(ObjectStore):
    """The :class:`~dali_backend.storage.stores.Store` protocol over :data:`OBJECTS` (``list``, ``head``,
    ``get``; the staleness check and the rest come from :class:`ObjectStore`)."""

    def __init__(self, url: str, storage_options=None):
        self.root = url
        self.base = url.split("://", 1)[1]

    def url(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def patient(self, factor: int) -> MemStore:
        return self

    def _info(self, rel: str) -> ObjectInfo:
        data = OBJECTS.get(f"{self.base}/{rel}")
        if data is None:
            raise ObjectMissing(f"{self.url(rel)}: no such object")
        return ObjectInfo(rel, len(data), '"' + hashlib.md5(data).hexdigest() + '"', 0)

    def list(self, sub: str = ""):
        start = f"{self.base}/{sub}/" if sub else f"{self.base}/"
        for key in sorted(k for k in OBJECTS if k.startswith(start)):
            yield self._info(key[len(self.base) + 1:])

    def head(self, rel: str) -> ObjectInfo:
        return self._info(rel)

    def get(self, rel: str, etag=None, start=None, end=None):
        info = self._info(rel)
        if etag and etag != info.etag:
            raise ObjectChanged(f"{self.url(rel)}: the object changed since indexing")
        data = OBJECTS[f"{self.base}/{rel}"]
        return (data if start is None else data[start:end]), info


@pytest.fixture
def mem_store():
    stores.register_store("mem", MemStore)
    OBJECTS.clear()
    for label in ("cats", "dogs"):
        for k in range(4):
            OBJECTS[f"zoo/train/{label}/{k}.jpg"] = jpeg_bytes(20, 24, seed=k + 10 * (label == "dogs"))
    OBJECTS["zoo/train/cats/notes.txt"] = b"not a sample"
    yield
    stores.unregister_store("mem")
    OBJECTS.clear()


def test_a_registered_store_is_indexed_and_served_by_the_torch_executor(mem_store):
    from dali_backend import AugmentSpec, FallbackLoader, ImageDataset
    from dali_backend.index import SampleIndex

    index = SampleIndex.from_folder("mem://zoo/train/", progress=False)
    assert index.root == "mem://zoo/train" and index.is_remote and isinstance(index.bucket(), MemStore)
    assert len(index) == 8 and list(index.classes) == ["cats", "dogs"]
    assert (index.widths == 24).all() and (index.heights == 20).all()
    loader = FallbackLoader(ImageDataset(index, AugmentSpec(size=16, color="gray")), batch_size=4, shuffle=False)
    images, labels = zip(*((b[0].numpy(), b[1].numpy()) for b in loader))
    assert np.concatenate(labels).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert np.concatenate(images).shape[0] == 8 and len({im.tobytes() for im in np.concatenate(images)}) == 8


def test_an_object_changed_since_indexing_is_not_served(mem_store):
    from dali_backend import AugmentSpec, FallbackLoader, ImageDataset
    from dali_backend.errors import BadImageError
    from dali_backend.index import SampleIndex

    index = SampleIndex.from_folder("mem://zoo/train", progress=False)
    OBJECTS["zoo/train/cats/0.jpg"] = jpeg_bytes(20, 24, seed=99)
    loader = FallbackLoader(ImageDataset(index, AugmentSpec(size=16, color="gray")), batch_size=8, shuffle=False)
    with pytest.raises(BadImageError, match="changed"):
        list(loader)


def test_an_unregistered_scheme_names_the_supported_ones():
    from dali_backend.errors import ConfigError
    from dali_backend.index import SampleIndex

    with pytest.raises(ConfigError, match="scheme 'mem' is not supported"):
        SampleIndex.from_folder("mem://zoo/train", progress=False)


def test_the_stores_staleness_check_and_update_serve_a_registered_store(mem_store, tmp_path):
    from dali_backend.errors import StaleIndexError
    from dali_backend.index import SampleIndex

    index = SampleIndex.from_folder("mem://zoo/train", progress=False)
    index.save(tmp_path / "i.npz")
    assert SampleIndex.load(tmp_path / "i.npz").fingerprint == index.fingerprint  # check="stat": one listing
    OBJECTS["zoo/train/dogs/1.jpg"] = jpeg_bytes(20, 24, seed=77)
    del OBJECTS["zoo/train/cats/3.jpg"]
    with pytest.raises(StaleIndexError, match=r"cats/3.jpg: missing.*dogs/1.jpg: (size|overwritten)"):
        SampleIndex.load(tmp_path / "i.npz")
    OBJECTS["zoo/train/dogs/9.jpg"] = jpeg_bytes(20, 24, seed=78)
    new = index.update(progress=False)
    assert len(new) == 8 and "cats/3.jpg" not in list(new.paths) and list(new.paths)[-1] == "dogs/9.jpg"
    assert new.changed_files() == [] and new.etags[list(new.paths).index("dogs/1.jpg")] != \
        index.etags[list(index.paths).index("dogs/1.jpg")]
