"""A served sample is the indexed version (issue 32, cases 1-2): objects and shards overwritten at the same
size, a store or gateway that ignores ``If-Match``, on both backends. Local S3 server (moto) behind the
fault proxy of bench/s3local.py, as tests/storage/test_storage.py."""

from __future__ import annotations

import pytest

from tests.helpers import KINDS, jpeg_bytes, write
from dali_backend import AugmentSpec, BadImageError, DaliLoader, SampleIndex
from fallback import ImageDataset
from tests.storage.test_storage import put, upload


def same_size_edit(data: bytes) -> bytes:
    """``data`` with one byte of its entropy data changed: the same size and headers, another ETag."""
    b = bytearray(data)
    p = len(b) // 2 + next(k for k in range(64) if b[len(b) // 2 + k - 1] != 0xFF and b[len(b) // 2 + k] not in
                          (0xFE, 0xFF))
    b[p] ^= 0x01
    assert len(b) == len(data) and b != bytearray(data)
    return bytes(b)


def two_classes(root, n: int = 4, **jpeg):
    for cls in ("a", "b"):
        for k in range(n):
            write(root / cls / f"{k}.jpg", jpeg_bytes(seed=k + (10 if cls == "b" else 0), **jpeg))


def passes(index, kind: str, on_error: str = "raise", **dataset):
    """``(served indices, stats)`` of one pass over ``index`` (``dataset``: ImageDataset's options); raises what
    the loader raises."""
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16), on_error=on_error, **dataset), batch_size=4,
                        return_meta=True, timeout=60, **KINDS[kind])
    try:
        served = [int(s) for _, _, m in loader for s in m["index"]]
        return served, loader.stats()
    finally:
        loader.close()


@pytest.mark.parametrize("ignore_if_match", [False, True], ids=["store", "gateway-ignoring-If-Match"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_an_object_overwritten_at_the_same_size_is_never_served(s3, tmp_path, kind, ignore_if_match):
    two_classes(tmp_path / "d")
    url = upload(s3, tmp_path / "d", f"same-size-{kind}-{int(ignore_if_match)}")
    index = SampleIndex.from_folder(url, progress=False)
    victim = list(index.paths).index("b/2.jpg")
    original = s3.client.get_object(Bucket=url[5:], Key="b/2.jpg")["Body"].read()
    put(s3, f"{url}/b/2.jpg", same_size_edit(original))  # only the ETag gives it away
    s3.proxy.configure(drop_headers=["If-Match"] if ignore_if_match else [])
    s3.proxy.stats(reset=True)
    try:
        with pytest.raises(BadImageError) as e:
            passes(index, kind)
        stats = s3.proxy.stats()
        served, loader_stats = passes(index, kind, on_error="skip")
    finally:
        s3.proxy.configure()
    assert e.value.path == f"{url}/b/2.jpg" and e.value.index == victim and "changed" in e.value.reason
    assert stats["requests"].get("GET", 0) > 0
    assert stats["if_match"]["GET"] == stats["requests"]["GET"]  # every read is conditional on the indexed ETag
    assert victim not in served and len(served) == len(index) and loader_stats["skipped"] == 1


# ------------------------------------------------------------------------------ updating a bucket's index (case 12)
def test_a_bucket_index_updates_by_listing_and_etags(s3, tmp_path):
    """Issue 32 case 12: before, update() of an s3:// index blamed subset()/split() or an old release and
    advised a rebuild that refused the same way. Now the builders record a source for a bucket too, and an
    update lists the bucket and reads only new and changed objects."""
    two_classes(tmp_path / "d")
    url = upload(s3, tmp_path / "d", "updates")
    index = SampleIndex.from_folder(url, progress=False)
    index.save(tmp_path / "i.npz")
    loaded = SampleIndex.load(tmp_path / "i.npz")
    original = s3.client.get_object(Bucket="updates", Key="a/1.jpg")["Body"].read()
    put(s3, f"{url}/a/1.jpg", same_size_edit(original))  # same size, new ETag: re-checked
    put(s3, f"{url}/b/9.jpg", jpeg_bytes(seed=99))  # new
    put(s3, f"{url}/c/0.jpg", jpeg_bytes(seed=98))  # new, in a new class
    s3.client.delete_object(Bucket="updates", Key="b/0.jpg")  # gone
    s3.proxy.stats(reset=True)
    new = loaded.update()
    assert s3.proxy.stats()["requests"] == {"GET": 1 + 3}  # one listing, one range read per new or changed object
    fresh = SampleIndex.from_folder(url, progress=False, classes=["a", "b", "c"])
    assert sorted(new.paths) == sorted(fresh.paths) and list(new.classes) == ["a", "b", "c"]
    order = {p: k for k, p in enumerate(fresh.paths)}
    for k, p in enumerate(new.paths):
        f = order[p]
        assert (new.labels[k], new.sizes[k], new.widths[k], new.heights[k], new.etags[k]) == \
            (fresh.labels[f], fresh.sizes[f], fresh.widths[f], fresh.heights[f], fresh.etags[f]), p
    assert list(new.paths)[:len(index) - 1] == [p for p in index.paths if p != "b/0.jpg"]  # old order kept
    served, _ = passes(new, "torch")
    assert sorted(served) == list(range(len(new)))  # the new ETags are the ones read: nothing "changed"
    from dali_backend.errors import ConfigError

    derived = index.subset([0, 1])
    with pytest.raises(ConfigError, match=r"index of s3://updates records no source.*build it once again"):
        derived.update()
