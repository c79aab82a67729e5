"""Targets where the images live: an ``s3://`` MVTec AD tree gives the batches of its local copy (masks read
through the store, their headers by one range read, their ETags checked, kept in ``cache_dir``), a changed
mask object is caught as a changed image is, ``update`` pairs a new image with its mask, and a packed
index carries each mask in its image's shard (boxes in the index and a ``.json`` member) and gives the
loose index's batches, on both backends."""

from __future__ import annotations

import io
import tarfile

import cv2
import numpy as np
import pytest
import torch

from dali_backend import AugmentSpec, DaliLoader, TargetError
from dali_backend import transforms as T
from dali_backend.core.defects import generate_mvtec
from dali_backend.errors import StaleIndexError
from dali_backend.index import SampleIndex
from dali_backend.storage.pack import pack
from dali_backend.targets import ImageTargets
from fallback.dataset import ImageDataset
from tests.helpers import LOADER_ARGS
from tests.helpers.targets import detection_index_at

BACKENDS = ["torch", pytest.param("dali-cpu", marks=pytest.mark.slow)]
RECIPE = [T.RandomResizedCrop(40, scale=(0.6, 1.0)), T.RandomHorizontalFlip(), T.RandomRotation(10)]


def batches(index, backend: str, **kw) -> list[dict]:
    if backend != "torch":
        pytest.importorskip("nvidia.dali")
    spec = AugmentSpec(ops=RECIPE, color="rgb", dtype="uint8")
    loader = DaliLoader(ImageDataset(index, spec, seed=4, **kw.pop("dataset", {})), batch_size=4, shuffle=True, seed=1,
                        return_meta=True, num_workers=2, timeout=60, **LOADER_ARGS[backend], **kw)
    try:
        return [{k: v for k, v in b.items() if k != "meta"} | {"index": b["meta"]["index"].clone()} for b in loader]
    finally:
        loader.close()


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) and a
    for x, y in zip(a, b):
        assert sorted(x) == sorted(y)
        for k in x:
            if k in ("boxes", "box_labels"):
                assert all(torch.equal(p, q) for p, q in zip(x[k], y[k], strict=True)), k
            else:
                assert torch.equal(torch.as_tensor(x[k]).cpu(), torch.as_tensor(y[k]).cpu()), k


def upload(s3, folder, bucket: str) -> str:
    from bench.s3local import upload_folder

    upload_folder(s3.server.endpoint, folder, bucket, "", client=s3.client)
    return f"s3://{bucket}"


def put(s3, url: str, data: bytes) -> None:
    bucket, _, key = url[len("s3://"):].partition("/")
    s3.client.put_object(Bucket=bucket, Key=key, Body=data)


@pytest.fixture(scope="module")
def mvtec_root(tmp_path_factory):
    return generate_mvtec(tmp_path_factory.mktemp("mv"), n_train=1, n_good=2, n_defect=3, size=(64, 48))


@pytest.fixture(scope="module")
def mvtec_url(s3, mvtec_root):
    return upload(s3, mvtec_root, "mvtec-targets")


# ------------------------------------------------------------------------------------------ s3://
def test_an_s3_mvtec_tree_pairs_the_masks_of_its_local_copy_reading_headers_by_range(mvtec_root, mvtec_url,
                                                                                       monkeypatch):
    from dali_backend.storage.client import Bucket

    local = SampleIndex.from_mvtec(mvtec_root, "plate", "test")
    asked, get = [], Bucket.get

    def spy(self, rel, etag=None, start=None, end=None):
        if rel.endswith("_mask.png"):
            asked.append((rel, start, end))
        return get(self, rel, etag, start, end)

    monkeypatch.setattr(Bucket, "get", spy)
    remote = SampleIndex.from_mvtec(mvtec_url, "plate", "test")
    assert remote.root == f"{mvtec_url}/plate" and list(remote.paths) == list(local.paths)
    t, u = remote.annotations, local.annotations
    assert list(t.masks) == list(u.masks) and np.array_equal(t.mask_sizes, u.mask_sizes)
    assert t.kinds == u.kinds and t.binary and u.mask_etags is None
    assert [bool(e) for e in t.mask_etags] == [bool(m) for m in t.masks]  # an ETag per mask object
    assert sorted(asked) == sorted((m, 0, 24) for m in t.masks if m)  # one 24-byte range per mask: its PNG header
    assert t.recipe == [{"reader": "mvtec_masks", "args": {"root": mvtec_url, "suffixes": [".png"]}}]


@pytest.mark.parametrize("backend", BACKENDS)
def test_s3_masks_give_the_batches_of_the_local_copy(s3, mvtec_root, mvtec_url, backend):
    local = SampleIndex.from_mvtec(mvtec_root, "plate", "test")
    remote = SampleIndex.from_mvtec(mvtec_url, "plate", "test")
    want = batches(local, backend)
    assert any(b["mask"].any() for b in want)
    assert_same(want, batches(remote, backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_cache_dir_holds_the_masks_like_the_images(s3, mvtec_url, tmp_path, backend):
    remote = SampleIndex.from_mvtec(mvtec_url, "plate", "test")
    cache = tmp_path / "cache"
    cold = batches(remote, backend, dataset={"cache_dir": cache})
    masks = int((remote.annotations.mask_sizes >= 0).sum())
    entries = [p for p in cache.rglob("*") if p.is_file() and p.parent.name != "tmp"]
    assert len(entries) == len(remote) + masks  # every image and every mask
    s3.proxy.stats(reset=True)
    warm = batches(remote, backend, dataset={"cache_dir": cache})
    assert s3.proxy.stats()["requests"].get("GET", 0) == 0  # served from the cache: no request
    assert_same(cold, warm)


def test_masks_are_fetched_ahead_with_their_images(mvtec_url, monkeypatch):
    """The executors prefetch a batch's draws: each mask's GET rides with its image's, in the reader's threads,
    not one round trip after another when the masks are read."""
    import threading

    from dali_backend.core.reading import SampleReader
    from dali_backend.storage.client import Bucket

    remote = SampleIndex.from_mvtec(mvtec_url, "plate", "test")
    reader = SampleReader.for_index(remote, seed=0)
    where, get = [], Bucket.get

    def spy(self, rel, etag=None, start=None, end=None):
        if rel.endswith("_mask.png"):
            where.append(threading.current_thread() is threading.main_thread())
        return get(self, rel, etag, start, end)

    monkeypatch.setattr(Bucket, "get", spy)
    reader.prefetch(range(len(remote)))
    sizes = [(int(h), int(w)) for h, w in zip(remote.heights, remote.widths)]
    got = [remote.annotations.read_mask(reader, i, sizes[i]) for i in range(len(remote))]
    masks = int((remote.annotations.mask_sizes >= 0).sum())
    assert where == [False] * masks  # each mask fetched once, in the prefetching threads
    assert sum(int(m.any()) for m in got) == masks


def test_a_changed_mask_object_makes_the_index_stale_and_is_refused_when_read(s3, mvtec_root, tmp_path):
    url = upload(s3, mvtec_root, "mvtec-changed")
    index = SampleIndex.from_mvtec(url, "plate", "test")
    index.save(tmp_path / "i.npz")
    rel = "ground_truth/stain/001_mask.png"
    data = (mvtec_root / "plate" / rel).read_bytes()
    mid = len(data) // 2
    put(s3, f"{url}/plate/{rel}", data[:mid] + bytes([data[mid] ^ 1]) + data[mid + 1:])  # same size: only the ETag tells
    assert [p for p, _ in index.changed_files()] == [rel]
    with pytest.raises(StaleIndexError, match=f"{rel}: overwritten"):
        SampleIndex.load(tmp_path / "i.npz")
    stale = SampleIndex.load(tmp_path / "i.npz", check="none")
    ds = ImageDataset(stale, AugmentSpec(ops=[T.Resize((24, 32))], color="rgb"))
    i = list(stale.annotations.masks).index(rel)
    with pytest.raises(TargetError, match=f"{url}/plate/{rel}: the mask changed since indexing"):
        ds.move_targets(i, ds.spec.make_params(0, 0, i, (48, 64)), (48, 64))


def test_update_of_an_s3_index_pairs_a_new_image_with_its_mask(s3, mvtec_root):
    url = upload(s3, mvtec_root, "mvtec-update")
    index = SampleIndex.from_mvtec(url, "plate", "test")
    cat = mvtec_root / "plate"
    put(s3, f"{url}/plate/test/stain/009.png", (cat / "test/stain/000.png").read_bytes())
    put(s3, f"{url}/plate/ground_truth/stain/009_mask.png", (cat / "ground_truth/stain/000_mask.png").read_bytes())
    new = index.update()
    assert len(new) == len(index) + 1 and new.paths[len(index)] == "test/stain/009.png"
    t = new.annotations
    assert t.mask_path(len(index)) == "ground_truth/stain/009_mask.png" and t.mask_etags[len(index)]
    assert [t.mask_path(i) for i in range(len(index))] == [index.annotations.mask_path(i) for i in range(len(index))]
    put(s3, f"{url}/plate/ground_truth/stain/009_mask.png", cv2.imencode(".png", np.zeros((8, 8), np.uint8))[1].tobytes())
    with pytest.raises(TargetError, match="009_mask.png: the mask is 8x8 .* its image 'plate/test/stain/009.png' 64x48"):
        new.update()  # a changed mask is checked again


def seg_folders(root):
    """``images/<cls>/<i>.png`` and their masks in a folder beside them, ``masks/<cls>/<i>_mask.png`` (ids 0..2)."""
    for cls in ("ok", "bad"):
        for i in range(3):
            img, mask = np.full((40, 48, 3), 60 + 20 * i, np.uint8), np.zeros((40, 48), np.uint8)
            img[8:20, 4 + i:30] = (30, 30, 220)
            mask[8:20, 4 + i:30] = 2 if cls == "bad" else 1
            for part, array, name in (("images", img, f"{i}.png"), ("masks", mask, f"{i}_mask.png")):
                (root / part / cls).mkdir(parents=True, exist_ok=True)
                cv2.imwrite(str(root / part / cls / name), array)
    return root


def test_masks_in_a_folder_beside_the_images_on_s3_read_through_the_prefix_above(s3, tmp_path):
    from dali_backend.targets import suffix_masks

    local = seg_folders(tmp_path / "seg")
    url = upload(s3, local, "seg-beside")  # s3://seg-beside/{images,masks}: the masks' prefix is the bucket's top
    want = SampleIndex.from_folder(local / "images").with_targets(suffix_masks(local / "images", local / "masks"),
                                                                  num_classes=3)
    got = SampleIndex.from_folder(f"{url}/images").with_targets(suffix_masks(f"{url}/images", f"{url}/masks"),
                                                                num_classes=3)
    assert got.annotations.mask_path(0) == want.annotations.mask_path(0) == "../masks/bad/0_mask.png"
    assert all(got.annotations.mask_etags[i] for i in range(len(got)))
    assert_same(batches(want, "torch"), batches(got, "torch"))
    assert got.changed_files() == []
    data = (local / "masks" / "ok" / "1_mask.png").read_bytes()
    put(s3, f"{url}/masks/ok/1_mask.png", data[:-20] + bytes([data[-20] ^ 1]) + data[-19:])
    assert [(p, w.split(" (")[0]) for p, w in got.changed_files()] == [("../masks/ok/1_mask.png", "overwritten")]


def test_a_coco_file_in_a_bucket_indexes_the_bucket_with_its_boxes(s3, tmp_path):
    from dali_backend.core.defects import generate_detection
    from dali_backend.targets import read_box_csv, read_coco

    local = tmp_path / "det"
    path = generate_detection(local, n=4, size=(64, 48))
    url = upload(s3, local, "coco-boxes")
    want = SampleIndex.from_annotations(local, read_coco(path, local))
    table = read_coco(f"{url}/annotations.json", url)  # the file and the images' existence: from the bucket
    got = SampleIndex.from_annotations(url, table)
    assert table.recipe[0]["args"]["path"] == f"{url}/annotations.json" and list(got.paths) == list(want.paths)
    assert np.array_equal(got.annotations.boxes, want.annotations.boxes)
    assert_same(batches(want, "torch"), batches(got, "torch"))
    rows = "path,x1,y1,x2,y2,label\nimages/000.png,1,2,10,12,3\nimages/404.png,1,2,10,12,3\n"
    put(s3, f"{url}/boxes.csv", rows.encode())
    with pytest.raises(TargetError, match=r"boxes.csv line 3: names 'images/404.png', which is not a file under s3://"):
        read_box_csv(f"{url}/boxes.csv", url)
    with pytest.raises(TargetError, match="nothing.json: the annotation file cannot be read"):
        read_coco(f"{url}/nothing.json")


# ------------------------------------------------------------------------------------------ shards
@pytest.fixture(scope="module")
def det_index(tmp_path_factory):
    return detection_index_at(tmp_path_factory.mktemp("det"), (64, 48), n=6)


def test_a_packed_index_keeps_each_mask_beside_its_image_and_boxes_in_json(mvtec_root, det_index, tmp_path):
    loose = SampleIndex.from_mvtec(mvtec_root, "plate", "test")
    packed = pack(loose, tmp_path / "mv", shard_bytes=8_000)
    assert len(packed.shards.names) > 1
    for i in range(len(loose)):
        shard = tarfile.open(tmp_path / "mv" / packed.shards.names[packed.shards.ids[i]])
        names = {m.name: m for m in shard.getmembers()}
        key = f"{i:08d}"
        rel = loose.annotations.mask_path(i)
        assert (f"{key}.mask.png" in names) == (rel is not None) and f"{key}.json" not in names
        if rel is not None:
            assert shard.extractfile(names[f"{key}.mask.png"]).read() == (mvtec_root / "plate" / rel).read_bytes()
            assert names[f"{key}.mask.png"].offset_data == packed.annotations.mask_members[i]
    again = SampleIndex.load(tmp_path / "mv" / "index.npz")
    assert again.fingerprint == packed.fingerprint and np.array_equal(again.annotations.mask_members,
                                                                      packed.annotations.mask_members)
    boxes = pack(det_index, tmp_path / "det")
    shard = tarfile.open(tmp_path / "det" / boxes.shards.names[0])
    import json

    for i in range(len(det_index)):
        note = json.loads(shard.extractfile(f"{i:08d}.json").read())
        xyxy, labels = det_index.annotations.boxes_of(i)
        assert note == {"boxes": xyxy.tolist(), "labels": labels.tolist()}
    assert boxes.annotations.mask_members is not None and (boxes.annotations.mask_members == -1).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_packed_index_with_masks_and_boxes_gives_the_loose_batches(mvtec_root, det_index, tmp_path, backend):
    loose = SampleIndex.from_mvtec(mvtec_root, "plate", "test")
    for name, index in (("mv", loose), ("det", det_index)):
        pack(index, tmp_path / name, shard_bytes=8_000)
        packed = SampleIndex.load(tmp_path / name / "index.npz")
        assert_same(batches(index, backend), batches(packed, backend))
        train, _ = packed.split(0.5, seed=0)  # a subset reads its masks from the shards as well
        assert_same(batches(loose.split(0.5, seed=0)[0] if name == "mv" else det_index.split(0.5, seed=0)[0], backend),
                    batches(train, backend))


def test_a_packed_index_from_a_bucket_reads_its_masks_by_range(s3, mvtec_root, tmp_path):
    from bench.s3local import upload_folder

    loose = SampleIndex.from_mvtec(mvtec_root, "plate", "test")
    pack(loose, tmp_path / "mv", shard_bytes=8_000)
    upload_folder(s3.server.endpoint, tmp_path / "mv", "packed-masks", "", client=s3.client)
    remote = SampleIndex.load(tmp_path / "mv" / "index.npz", root="s3://packed-masks")
    assert_same(batches(loose, "torch"), batches(remote, "torch"))


def test_a_shard_missing_its_mask_member_is_named(mvtec_root, tmp_path):
    loose = SampleIndex.from_mvtec(mvtec_root, "plate", "test")
    packed = pack(loose, tmp_path / "mv")
    (name,) = packed.shards.names
    path = tmp_path / "mv" / name
    with tarfile.open(path) as tar:  # the shard written again by another tool: images and classes only
        kept = [(m, tar.extractfile(m).read()) for m in tar.getmembers() if not m.name.endswith(".mask.png")]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for m, data in kept:
            tar.addfile(m, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    with pytest.raises(StaleIndexError, match=name):
        SampleIndex.load(tmp_path / "mv" / "index.npz")
    stale = SampleIndex.load(tmp_path / "mv" / "index.npz", check="none")
    i = next(k for k in range(len(stale)) if stale.annotations.mask_path(k))
    ds = ImageDataset(stale, AugmentSpec(ops=[T.Resize((24, 32))], color="rgb"))
    with pytest.raises(TargetError, match=rf"{name}: no mask member <key>.mask.png .* pack the index again"):
        ds.move_targets(i, ds.spec.make_params(0, 0, i, (48, 64)), (48, 64))


def test_a_local_mask_rewritten_after_indexing_is_refused_when_read_not_used(tmp_path):
    root = generate_mvtec(tmp_path / "mv", n_train=1, n_good=1, n_defect=1, size=(64, 48))
    index = SampleIndex.from_mvtec(root, "plate", "test")
    i = next(k for k in range(len(index)) if index.annotations.mask_path(k))
    path = root / "plate" / index.annotations.mask_path(i)
    cv2.imwrite(str(path), np.zeros((48, 64), np.uint8))  # its image's size, other pixels: a valid mask, not the indexed one
    ds = ImageDataset(index, AugmentSpec(ops=[T.Resize((24, 32))], color="rgb"))
    with pytest.raises(TargetError, match=rf"{path}: the mask changed since indexing \(size \d+ -> \d+ bytes\)"):
        ds.move_targets(i, ds.spec.make_params(0, 0, i, (48, 64)), (48, 64))


def test_the_pack_command_packs_an_index_with_its_masks(mvtec_root, tmp_path, capsys):
    from tests.helpers import run_cli

    index = SampleIndex.from_mvtec(mvtec_root, "plate", "test")
    index.save(tmp_path / "i.npz")
    rc, out, err = run_cli(["pack", str(tmp_path / "i.npz"), "--out", str(tmp_path / "p")], capsys)
    assert rc == 0, err
    packed = SampleIndex.load(tmp_path / "p" / "index.npz")
    assert int((packed.annotations.mask_members >= 0).sum()) == int((index.annotations.mask_sizes >= 0).sum()) > 0
