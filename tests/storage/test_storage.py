"""Data on object storage: s3:// roots wherever a folder is accepted, indexing by listing and byte ranges,
ETags recorded and checked, reading through both executors, secrets kept out of every text.

Everything runs against a local S3 server (moto, its own process) behind this package's latency/fault
proxy (bench/s3local.py, its own process too), on 127.0.0.1 only; skipped only where the storage
packages are not installed (``pip install -e '.[test]'`` installs them).
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import time

import numpy as np
import pytest
import torch

from tests.helpers import jpeg_bytes, write
from dali_backend import AugmentSpec, BadImageError, DaliLoader, SampleIndex
from dali_backend.errors import (ConfigError, IndexBuildError, ManifestError, StaleIndexError, StorageError)
from dali_backend.storage import normalize
from fallback import ImageDataset

BACKENDS = {"torch": dict(device="cpu", backend="torch"), "dali-cpu": dict(device="cpu", backend="dali")}


def upload(s3, folder, bucket: str, prefix: str = "") -> str:
    from bench.s3local import upload_folder

    upload_folder(s3.server.endpoint, folder, bucket, prefix, client=s3.client)
    return f"s3://{bucket}/{prefix}".rstrip("/")


def put(s3, url: str, data: bytes) -> None:
    bucket, _, key = url[len("s3://"):].partition("/")
    s3.client.put_object(Bucket=bucket, Key=key, Body=data)


def run_all(index, backend: str, **kw):
    """Every batch of one pass: images, labels, meta (paths dropped), through DaliLoader."""
    ds = ImageDataset(index, AugmentSpec(size=32), **kw.pop("dataset", {}))
    loader = DaliLoader(ds, batch_size=8, shuffle=True, seed=5, return_meta=True, num_workers=2, timeout=60,
                        **BACKENDS[backend], **kw)
    try:
        out = [(x.clone(), y.clone(), {k: v for k, v in m.items() if k != "path"}) for x, y, m in loader]
        stats = loader.stats()
    finally:
        loader.close()
    return out, stats


# ------------------------------------------------------------------------------------------ URLs
def test_urls_are_normalised_and_credentials_in_them_refused():
    assert normalize("s3://bucket/a//b/") == "s3://bucket/a/b"
    assert normalize("S3://bucket") == "s3://bucket"
    with pytest.raises(ConfigError) as e:
        normalize("s3://AKIAXXX:topsecretvalue@bucket/x")
    assert "topsecretvalue" not in str(e.value) and "AKIAXXX" not in str(e.value) and "storage_options" in str(e.value)
    for bad, said in (("gs://bucket/x", "scheme"), ("s3://B_ad/x", "bucket name"), ("s3://bucket/../x", "'..'")):
        with pytest.raises(ConfigError, match=said):
            normalize(bad)


def test_storage_options_are_refused_for_a_folder_and_checked(defect_root):
    with pytest.raises(ConfigError, match="storage_options apply to an s3:// URL"):
        SampleIndex.from_folder(defect_root, storage_options={"region": "x"})
    from dali_backend.storage.client import Bucket

    with pytest.raises(ConfigError, match="unknown key 'secret_key'") as e:
        Bucket("s3://bucket", {"secret_key": "hunter2hunter2"})
    assert "hunter2" not in str(e.value)


# ------------------------------------------------------------------------------------------ indexing
def test_a_bucket_indexes_like_the_same_folder(s3, s3_defects, defect_index):
    s3.proxy.stats(reset=True)
    index = SampleIndex.from_folder(s3_defects + "/", progress=False)
    assert index.root == s3_defects and index.is_remote
    assert list(index.paths) == list(defect_index.paths)
    for name in ("labels", "sizes", "widths", "heights"):
        assert np.array_equal(getattr(index, name), getattr(defect_index, name)), name
    assert index.classes == defect_index.classes
    assert all(e.startswith('"') and len(e) > 8 for e in index.etags)
    assert index.abspath(0) == f"{s3_defects}/{index.paths[0]}"
    # small objects: one listing request, then one range read each (the whole object fits in it)
    stats = s3.proxy.stats()
    assert stats["requests"] == {"GET": len(index) + 1}, stats


def test_split_layouts_keywords_and_refused_objects_in_a_bucket(s3, tmp_path):
    root = tmp_path / "data"
    for split, n in (("train", 3), ("val", 2)):
        for cls in ("ok", "scratch"):
            for k in range(n):
                write(root / split / cls / f"{cls}_{k}.jpg", jpeg_bytes(seed=k + 10 * len(cls)))
    write(root / "val" / "dent" / "d0.jpg", jpeg_bytes(seed=99))
    write(root / "train" / "ok" / "notes.txt", b"hello")
    write(root / "train" / "ok" / ".hidden.jpg", jpeg_bytes(seed=1))
    write(root / "train" / "scratch" / "empty.jpg", b"")
    write(root / "train" / "scratch" / "text.jpg", b"<html>not an image</html>")
    good = jpeg_bytes(seed=3)
    write(root / "train" / "scratch" / "cut.jpg", good[:len(good) // 2])
    url = upload(s3, root, "layouts", "raw/")
    with pytest.raises(IndexBuildError, match="looks like a split layout") as e:
        SampleIndex.from_folder(url, progress=False)
    assert "split='train'" in str(e.value) and url in str(e.value)
    train = SampleIndex.from_folder(url, split="train", progress=False)
    local = SampleIndex.from_folder(root, split="train", progress=False)
    assert train.classes == local.classes == ("dent", "ok", "scratch")  # ids agree between splits
    assert list(train.paths) == list(local.paths)
    assert [(r.path, r.reason) for r in train.rejected] == [(r.path, r.reason) for r in local.rejected]
    assert len(train.rejected) == 3 and train.ignored == local.ignored
    kw = SampleIndex.from_keywords(url + "/val", progress=False)
    assert sorted(kw.class_counts().tolist()) == [1, 2, 2] and kw.classes == ("dent", "normal", "scratch")
    with pytest.raises(IndexBuildError, match="no objects under it"):
        SampleIndex.from_folder(url + "/nothing-here", progress=False)


def test_a_manifest_relative_to_a_url_root(s3, s3_defects, defect_index, tmp_path):
    rows = [(defect_index.paths[i], defect_index.classes[defect_index.labels[i]]) for i in range(0, 60, 7)]
    csv = tmp_path / "m.csv"
    again = [rows[0], (rows[1][0], "dent" if rows[1][1] != "dent" else "normal")]  # a duplicate, a conflicting label
    csv.write_text("path,label\n" + "".join(f"{p},{c}\n" for p, c in rows + again + [("normal/absent.jpg", "normal")]))
    index = SampleIndex.from_manifest(csv, root=s3_defects, progress=False)
    assert list(index.paths) == [p for p, _ in rows]
    reasons = {r.path: r.reason for r in index.rejected}
    assert reasons["normal/absent.jpg"] == "missing file" and len(reasons) == 3
    assert reasons[rows[0][0]].startswith("duplicate: listed again at")
    assert reasons[rows[1][0]].startswith("conflicting label") and "listed again at" in reasons[rows[1][0]]
    csv.write_text("path,label\n../other/x.jpg,normal\n")
    with pytest.raises(ManifestError, match="leaves the root"):
        SampleIndex.from_manifest(csv, root=s3_defects, progress=False)


def test_the_header_check_reads_byte_ranges_not_objects(s3, tmp_path):
    """640x480 photos (~60 KB): the check reads the first 16 KB and the last 2 bytes of each."""
    from dali_backend.core.synthetic import generate_defect_dataset

    root = generate_defect_dataset(tmp_path / "big", n=6, size=(640, 480), seed=1, progress=False)
    url = upload(s3, root, "bigger")
    s3.proxy.stats(reset=True)
    index = SampleIndex.from_folder(url, progress=False)
    stats = s3.proxy.stats()
    assert len(index) == 6 and index.sizes.min() > 32768
    assert stats["requests"]["GET"] == 1 + 2 * len(index)
    listing = stats["bytes"]["GET"] - 6 * (16384 + 2)
    assert 0 < listing < 8192, stats  # the rest is the listing's XML
    assert np.array_equal(index.widths, SampleIndex.from_folder(root, progress=False).widths)
    s3.proxy.stats(reset=True)
    SampleIndex.from_folder(url, verify="decode", progress=False)
    assert s3.proxy.stats()["bytes"]["GET"] >= int(index.sizes.sum())  # decode downloads every object


def test_save_load_and_changed_objects(s3, tmp_path):
    root = tmp_path / "d"
    for cls in ("a", "b"):
        for k in range(3):
            write(root / cls / f"{k}.jpg", jpeg_bytes(seed=k + (10 if cls == "b" else 0)))
    url = upload(s3, root, "changes", "v1/")
    index = SampleIndex.from_folder(url, progress=False)
    path = tmp_path / "index.npz"
    index.save(path)
    again = SampleIndex.load(path)
    assert again.root == url and list(again.etags) == list(index.etags) and again.fingerprint == index.fingerprint
    # the same data under another prefix: root= takes a URL (the data moved)
    moved = upload(s3, root, "changes", "v2/")
    assert SampleIndex.load(path, root=moved).root == moved
    # overwritten with the same size: only the ETag tells
    victim = (root / "b" / "1.jpg").read_bytes()
    mid = len(victim) - 10  # a byte of the scan data: the same size, other content
    put(s3, url + "/b/1.jpg", victim[:mid] + bytes([victim[mid] ^ 1]) + victim[mid + 1:])
    changed = again.changed_files()
    assert [p for p, _ in changed] == ["b/1.jpg"] and "ETag" in changed[0][1]
    with pytest.raises(StaleIndexError, match="b/1.jpg: overwritten"):
        SampleIndex.load(path)
    s3.client.delete_object(Bucket="changes", Key="v1/a/0.jpg")
    with pytest.raises(StaleIndexError, match="a/0.jpg: missing"):
        SampleIndex.load(path)
    assert len(SampleIndex.load(path, check="none")) == 6


def test_index_files_without_etags_still_load(defect_index, tmp_path):
    """A local index (as every index saved before ETags existed) has no ETag arrays and loads as before."""
    import zipfile

    path = tmp_path / "i.npz"
    defect_index.save(path)
    assert not any(n.startswith("etag") for n in zipfile.ZipFile(path).namelist())
    loaded = SampleIndex.load(path)
    assert loaded.etags is None and loaded.fingerprint == defect_index.fingerprint


# ------------------------------------------------------------------------------------------ secrets
def test_no_secret_in_errors_logs_or_saved_index(s3, s3_defects, tmp_path, caplog, monkeypatch):
    secret, env_secret = "sk-STORAGEOPTION-0123456789abcdef", "sk-ENVIRONMENT-fedcba9876543210"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", env_secret)
    caplog.set_level(logging.DEBUG, logger="dali_backend")
    opts = {"access_key_id": "testing", "secret_access_key": secret, "retries": 1, "backoff_s": 0.01}
    texts = []
    index = SampleIndex.from_folder(s3_defects, storage_options=opts, progress=False)
    path = tmp_path / "i.npz"
    index.save(path)
    texts += [repr(index), index.summary(), str(index.storage_options is not None)]
    from bench.s3local import free_port

    dead = {**opts, "endpoint_url": f"http://127.0.0.1:{free_port()}", "connect_timeout": 0.5}
    for call in (lambda: SampleIndex.from_folder("s3://no-such-bucket/x", storage_options=opts, progress=False),
                 lambda: SampleIndex.from_folder(s3_defects, storage_options=dead, progress=False),
                 lambda: SampleIndex.from_folder(s3_defects, storage_options={**opts, "profile": "nope"},
                                                 progress=False),
                 lambda: SampleIndex.load(path, storage_options=dead)):
        with pytest.raises((StorageError, IndexBuildError)) as e:
            call()
        texts.append(str(e.value))
        texts.append(repr(e.value))
    s3.proxy.configure(faults=[{"status": 503, "code": "SlowDown", "count": 3}])
    try:
        ds = ImageDataset(SampleIndex.load(path, check="none", storage_options=opts), AugmentSpec(size=16))
        with pytest.raises(BadImageError) as e:
            ds[0]
        texts.append(str(e.value))
    finally:
        s3.proxy.configure()
    assert "GET failed after 2 attempts: HTTP 503 SlowDown" in texts[-1] and s3_defects in texts[-1]
    assert "no-such-bucket" in texts[3] and "could not connect" in texts[5]
    texts += [r.getMessage() for r in caplog.records]
    assert any("retry" in r.getMessage() for r in caplog.records)
    raw = path.read_bytes()
    for value in (secret, env_secret):
        assert value.encode() not in raw
        assert not [t for t in texts if value in t]


# ------------------------------------------------------------------------------------------ reading
@pytest.mark.parametrize("backend", [pytest.param(b, marks=[pytest.mark.slow] if b == "dali-cpu" else [])
                                     for b in BACKENDS])
def test_same_pixels_labels_meta_and_order_local_and_in_the_bucket(s3, s3_defects, defect_index, backend):
    remote = SampleIndex.from_folder(s3_defects, progress=False)
    local, local_stats = run_all(defect_index, backend)
    bucket, bucket_stats = run_all(remote, backend)
    assert len(local) == len(bucket) == 8
    for (xa, ya, ma), (xb, yb, mb) in zip(local, bucket):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert json.dumps(ma, default=str, sort_keys=True) == json.dumps(mb, default=str, sort_keys=True)
    assert local_stats == bucket_stats


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_an_object_overwritten_after_indexing_is_a_bad_image(s3, tmp_path, backend):
    root = tmp_path / "d"
    for cls in ("a", "b"):
        for k in range(4):
            write(root / cls / f"{k}.jpg", jpeg_bytes(seed=k + (10 if cls == "b" else 0)))
    url = upload(s3, root, f"overwrite-{backend}")
    index = SampleIndex.from_folder(url, progress=False)
    victim = list(index.paths).index("b/2.jpg")
    put(s3, f"{url}/b/2.jpg", jpeg_bytes(seed=123))  # a valid JPEG: only the ETag gives it away
    ds = ImageDataset(index, AugmentSpec(size=16))
    loader = DaliLoader(ds, batch_size=4, **BACKENDS[backend], timeout=60)
    try:
        with pytest.raises(BadImageError) as e:
            list(loader)
    finally:
        loader.close()
    assert e.value.path == f"{url}/b/2.jpg" and e.value.index == victim
    assert "changed since indexing" in e.value.reason
    skip = DaliLoader(ImageDataset(index, AugmentSpec(size=16), on_error="skip"), batch_size=4, **BACKENDS[backend],
                      timeout=60, return_meta=True)
    try:
        served = [int(s) for _, _, m in skip for s in m["index"]]
        stats = skip.stats()
    finally:
        skip.close()
    assert victim not in served and len(served) == 8 and stats["skipped"] == 1


def _read_in_child(bucket, rel, queue):
    from dali_backend.storage.client import Bucket  # noqa: F401  (the child uses the forked copy)

    data, _ = bucket.get(rel)
    queue.put((os.getpid(), bucket.created_in, len(data)))


def test_the_client_is_created_again_in_a_forked_process(s3, s3_defects):
    from dali_backend.storage.client import Bucket

    bucket = Bucket(s3_defects)
    data, _ = bucket.get("normal/normal_00000.jpg")
    parent_client = bucket.client()
    assert bucket.created_in == os.getpid()
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_read_in_child, args=(bucket, "normal/normal_00000.jpg", queue)) for _ in range(2)]
    for p in procs:
        p.start()
    got = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert sorted(pid for pid, _, _ in got) == sorted(p.pid for p in procs)
    assert all(created == pid and n == len(data) for pid, created, n in got)
    assert bucket.client() is parent_client and bucket.get("normal/normal_00000.jpg")[0] == data  # parent unharmed


def test_throttling_is_retried_with_backoff(s3, s3_defects):
    from dali_backend.storage.client import Bucket

    bucket = Bucket(s3_defects, {"backoff_s": 0.05})
    for status, code in ((503, "SlowDown"), (429, "TooManyRequests"), (500, "InternalError")):
        s3.proxy.configure(faults=[{"status": status, "code": code, "count": 3, "match": "normal_00001"}])
        s3.proxy.stats(reset=True)
        t0 = time.monotonic()
        data, _ = bucket.get("normal/normal_00001.jpg")
        assert data[:2] == b"\xff\xd8" and s3.proxy.stats()["faults"] == 3
        assert time.monotonic() - t0 < 5
    s3.proxy.configure(faults=[{"action": "drop", "count": 2, "match": "normal_00002"}])
    assert bucket.get("normal/normal_00002.jpg")[0][:2] == b"\xff\xd8"
    s3.proxy.configure(faults=[{"status": 503, "code": "SlowDown", "match": "normal_00003"}])  # never ends
    try:
        with pytest.raises(StorageError, match=r"normal_00003.jpg: GET failed after 6 attempts: HTTP 503 SlowDown"):
            bucket.get("normal/normal_00003.jpg")
        s3.proxy.configure(faults=[{"status": 403, "code": "AccessDenied", "match": "normal_00003"}])
        s3.proxy.stats(reset=True)
        with pytest.raises(StorageError, match="HTTP 403 AccessDenied; check the credentials"):
            bucket.get("normal/normal_00003.jpg")
        assert s3.proxy.stats()["faults"] == 1  # not retried
    finally:
        s3.proxy.configure()


# ------------------------------------------------------------------------------------------ the server goes away
FAST_FAIL = {"retries": 2, "backoff_s": 0.05, "connect_timeout": 1, "timeout": 2}


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_server_killed_mid_epoch_is_a_typed_error_naming_the_url(s3, s3_defects, backend):
    """The proxy (the only way to the data) is SIGKILLed after the first batch: the loader raises a typed
    error naming an object's URL within the timeout, after yielding only whole, correct batches."""
    from bench.s3local import Proxy

    proxy = Proxy(s3.server.endpoint)
    try:
        index = SampleIndex.from_folder(s3_defects, storage_options={**FAST_FAIL, "endpoint_url": proxy.endpoint},
                                        progress=False)
        loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=2, num_workers=1, timeout=20,
                            **BACKENDS[backend])
        batches, t0 = 0, None
        try:
            with pytest.raises((BadImageError, StorageError)) as e:
                for _, labels in loader:
                    batches += 1
                    if t0 is None:
                        proxy.kill()
                        t0 = time.monotonic()
        finally:
            loader.close()
        assert time.monotonic() - t0 < 20 and 1 <= batches < 30
        assert s3_defects in str(e.value) and "could not connect" in str(e.value)
        if isinstance(e.value, BadImageError):
            assert e.value.path.startswith(s3_defects + "/")
            assert "Check that the storage is reachable" in str(e.value) and "Fix or remove the file" not in str(e.value)
    finally:
        proxy.stop()


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_server_that_stops_answering_is_bounded_by_the_loader_timeout(s3, s3_defects, backend):
    from dali_backend.errors import LoaderTimeoutError

    index = SampleIndex.from_folder(s3_defects, storage_options={"timeout": 60}, progress=False)
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=4, num_workers=1, timeout=3,
                        **BACKENDS[backend])
    s3.proxy.configure(faults=[{"action": "hang", "hang_s": 30, "method": "GET"}])
    t0 = time.monotonic()
    try:
        with pytest.raises(LoaderTimeoutError):
            next(iter(loader))
        assert time.monotonic() - t0 < 15
    finally:
        s3.proxy.configure()
        loader.close()


# ------------------------------------------------------------------------------------------ command line
def test_the_command_line_takes_urls(s3, s3_defects, tmp_path, capsys):
    from tests.helpers import run_cli

    out = tmp_path / "i.npz"
    rc, stdout, err = run_cli(["index", s3_defects, "--out", str(out)], capsys)
    assert rc == 0 and "index of 60 files" in stdout, err
    assert SampleIndex.load(out).root == s3_defects
    rc, stdout, err = run_cli(["split", str(out), "--val-fraction", "0.25", "--train-out", str(tmp_path / "t.npz"),
                               "--val-out", str(tmp_path / "v.npz"), "--root", s3_defects], capsys)
    assert rc == 0, err
    assert SampleIndex.load(tmp_path / "v.npz").etags is not None
    rc, _, err = run_cli(["index", "s3://key:hunter2secret@defects/x", "--out", str(out)], capsys)
    assert rc == 2 and "hunter2secret" not in err and "credentials in a URL are refused" in err
    assert len(err.strip().splitlines()) == 1
    rc, _, err = run_cli(["index", "s3://no-such-bucket-here/x", "--out", str(out)], capsys)
    assert rc == 2 and "s3://no-such-bucket-here/x" in err and len(err.strip().splitlines()) == 1


def test_credentials_from_an_aws_profile(s3, s3_defects, tmp_path, monkeypatch):
    """The standard chain: a named profile in ~/.aws/credentials (here AWS_SHARED_CREDENTIALS_FILE), with no
    key in the environment; the profile's secret appears in no message."""
    creds = tmp_path / "credentials"
    creds.write_text("[plant7]\naws_access_key_id = testing\naws_secret_access_key = sk-PROFILE-0123456789\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent-config"))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_PROFILE", "plant7")
    index = SampleIndex.from_folder(s3_defects, progress=False)
    assert len(index) == 60 and index.storage_options is None
    monkeypatch.delenv("AWS_PROFILE")
    with pytest.raises(StorageError, match="Unable to locate credentials"):  # the profile is what signed above
        SampleIndex.from_folder(s3_defects, progress=False)
    assert len(SampleIndex.from_folder(s3_defects, storage_options={"profile": "plant7"}, progress=False)) == 60
    with pytest.raises(StorageError, match="could not configure the S3 client") as e:
        SampleIndex.from_folder(s3_defects, storage_options={"profile": "other"}, progress=False)
    assert "sk-PROFILE" not in str(e.value)


def test_a_header_longer_than_the_first_range_reads_more_only_as_needed(s3, tmp_path):
    """An APP1 segment of 40 KB before the frame header (EXIF thumbnails, ICC profiles): the check reads on
    in ranges until the frame header, and still judges the file exactly as the local check does."""
    from tests.helpers import with_exif_orientation

    base = with_exif_orientation(jpeg_bytes(60, 90, seed=4, color=True), 6)
    filler = b"\xff\xe2" + (40002).to_bytes(2, "big") + b"ICC_PROFILE\x00" + bytes(40000 - 12)
    big = base[:2] + filler + base[2:]
    root = tmp_path / "d"
    write(root / "a" / "long_header.jpg", big)
    write(root / "a" / "plain.jpg", jpeg_bytes(seed=1))
    write(root / "b" / "two_orientations.jpg", with_exif_orientation(big, 3))  # refused by its headers
    url = upload(s3, root, "long-headers")
    s3.proxy.stats(reset=True)
    index = SampleIndex.from_folder(url, progress=False)
    local = SampleIndex.from_folder(root, progress=False)
    assert list(index.paths) == list(local.paths) == ["a/long_header.jpg", "a/plain.jpg"]
    assert np.array_equal(index.widths, local.widths) and np.array_equal(index.heights, local.heights)
    assert [(r.path, r.reason) for r in index.rejected] == [(r.path, r.reason) for r in local.rejected]
    st = s3.proxy.stats()
    # listing 1; plain.jpg 1; each long file: 16 KB, its tail, then one longer range: 3
    assert st["requests"]["GET"] == 1 + 1 + 3 + 3, st
    assert st["bytes"]["GET"] < 2 * len(big) + len(jpeg_bytes(seed=1)) + 8192
