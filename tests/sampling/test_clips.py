"""Sequences and clips (issue 23): frames grouped into ordered sequences, windows drawn as clips, clips
through both loaders as ``[B, T, C, H, W]`` with one draw of augmentation parameters per clip."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers import KINDS, LOADER_ARGS, jpeg_bytes, needs_cuda, write
from dali_backend import AugmentSpec, BadImageError, ConfigError, DaliLoader, ManifestError, SampleIndex
from dali_backend.sampling.clips import Clip, ClipSampler
from dali_backend.sampling.sampler import Draw
from dali_backend.sampling.sequences import Sequences, frame_number, natural_key
from dali_backend.transforms import ColorJitter, RandomHorizontalFlip, RandomResizedCrop
from fallback import ImageDataset
from tests.helpers.levels import PRESET_MAX_LEVELS, assert_within_tolerance

# sequence folder -> frame file names (written in this order; the index sorts them as text)
LAYOUT = {
    "normal/line1": [f"frame{k}.jpg" for k in range(1, 13)],   # 12 frames: frame10 after frame9 naturally
    "normal/line2": [f"frame{k}.jpg" for k in range(1, 6)],    # 5
    "normal/short": ["frame1.jpg", "frame2.jpg"],              # shorter than a 3-frame clip
    "scratch/cam1": [f"img_{k:04d}.jpg" for k in range(1, 10)],  # 9
    "scratch/cam2": [f"img_{k:04d}.jpg" for k in range(1, 7)],   # 6
}


def make_sequences(root: Path, layout: dict[str, list[str]], h: int = 24, w: int = 32) -> Path:
    seed = 0
    for folder, names in layout.items():
        for name in names:
            seed += 1
            write(root / folder / name, jpeg_bytes(h, w, seed=seed))
    return root


@pytest.fixture(scope="module")
def seq_root(tmp_path_factory) -> Path:
    return make_sequences(tmp_path_factory.mktemp("sequences"), LAYOUT)


@pytest.fixture(scope="module")
def seq_index(seq_root) -> SampleIndex:
    return SampleIndex.from_folder(seq_root, progress=False)


@pytest.fixture(scope="module")
def ds(seq_index) -> ImageDataset:
    return ImageDataset(seq_index, AugmentSpec(size=16), seed=5)


def names_of(seqs: Sequences, s: int) -> list[str]:
    return [p.rsplit("/", 1)[1] for p in seqs.paths(s)]


# ---------------------------------------------------------------------------------------------- sequences
def test_sequences_by_folder_in_natural_order(seq_index):
    seqs = Sequences.from_index(seq_index)
    assert list(seqs.names) == list(LAYOUT)
    assert seqs.lengths.tolist() == [len(v) for v in LAYOUT.values()]
    for s, names in enumerate(LAYOUT.values()):
        assert names_of(seqs, s) == names  # frame2 before frame10, as written
    assert sorted(seqs.frames.tolist()) == list(range(len(seq_index)))  # every frame once
    assert isinstance(seqs.frames, np.ndarray) and not seqs.frames.flags.writeable
    assert len(seqs.gaps) == 0 and seqs.unnumbered == 0
    # the index itself sorts as text: frame10 comes before frame2 there
    assert seq_index.paths[1].endswith("frame10.jpg")


def test_natural_key_and_frame_number():
    names = ["f10.jpg", "f2.jpg", "f02.jpg", "f1.jpg", "g.jpg", "a100b3.jpg"]
    assert sorted(names, key=natural_key) == ["a100b3.jpg", "f1.jpg", "f02.jpg", "f2.jpg", "f10.jpg", "g.jpg"]
    assert [frame_number(n) for n in ["cam2_frame0031.jpg", "x.jpg", "7.jpeg", "a1b22c.jpg"]] == [31, -1, 7, 22]


def test_gaps_are_reported(tmp_path, caplog):
    root = make_sequences(tmp_path, {"ok/a": ["f1.jpg", "f2.jpg", "f5.jpg", "f6.jpg", "f8.jpg"],
                                     "ok/b": ["f1.jpg", "f2.jpg"]})
    index = SampleIndex.from_folder(root, progress=False)
    with caplog.at_level(logging.WARNING, logger="dali_backend"):
        seqs = Sequences.from_index(index)
    assert seqs.gaps.tolist() == [[0, 3, 4], [0, 7, 7]]
    assert "2 gap(s)" in caplog.text and "'ok/a' lacks frames 3-4" in caplog.text
    report = seqs.report()
    assert "'ok/a' lacks frames 3-4" in report and "'ok/a' lacks frame 7" in report
    assert names_of(seqs, 0) == ["f1.jpg", "f2.jpg", "f5.jpg", "f6.jpg", "f8.jpg"]  # still ordered, nothing dropped


def test_duplicate_frame_numbers_are_refused(tmp_path):
    root = make_sequences(tmp_path, {"ok/a": ["frame1.jpg", "frame2.jpg", "frame02.jpg", "frame3.jpg"]})
    index = SampleIndex.from_folder(root, progress=False)
    with pytest.raises(ConfigError, match=r"duplicate frame number.*'ok/a/frame02.jpg' and 'ok/a/frame2.jpg'.*rename"):
        Sequences.from_index(index)


def write_manifest(path: Path, rows: list[tuple], header=("path", "sequence", "frame")) -> Path:
    path.write_text("\n".join(",".join(str(c) for c in r) for r in [header, *rows]) + "\n", encoding="utf-8")
    return path


def test_sequences_from_a_manifest(tmp_path, caplog):
    # file names say nothing about the order; the manifest's frame column does
    root = make_sequences(tmp_path / "data", {"ok": ["c.jpg", "a.jpg", "b.jpg", "d.jpg", "e.jpg"]})
    index = SampleIndex.from_folder(root, progress=False)
    rows = [("ok/c.jpg", "run1", 2), ("ok/a.jpg", "run1", 7), ("ok\\b.jpg", "run1", 3), ("ok/d.jpg", "run2", 10),
            (str(root / "ok/e.jpg"), "run2", 11), ("ok/other_split.jpg", "run9", 1)]
    with caplog.at_level(logging.WARNING, logger="dali_backend"):
        seqs = Sequences.from_manifest(index, write_manifest(tmp_path / "m.csv", rows), "sequence", "frame")
    assert list(seqs.names) == ["run1", "run2"]
    assert names_of(seqs, 0) == ["c.jpg", "b.jpg", "a.jpg"] and names_of(seqs, 1) == ["d.jpg", "e.jpg"]
    assert seqs.numbers.tolist() == [2, 3, 7, 10, 11]
    assert seqs.gaps.tolist() == [[0, 4, 6]] and "'run1' lacks frames 4-6" in caplog.text

    dup = rows[:2] + [("ok/b.jpg", "run1", 7)] + rows[3:5]
    with pytest.raises(ConfigError, match=r"duplicate frame number.*frame 7 of sequence 'run1'"):
        Sequences.from_manifest(index, write_manifest(tmp_path / "dup.csv", dup))
    with pytest.raises(ConfigError, match=r"1 frame\(s\) of the index have no row.*ok/e.jpg"):
        Sequences.from_manifest(index, write_manifest(tmp_path / "short.csv", rows[:4]))
    bad = rows[:4] + [("ok/e.jpg", "run2", "x1")]
    with pytest.raises(ManifestError, match=r"line 6: frame='x1' for 'ok/e.jpg'"):
        Sequences.from_manifest(index, write_manifest(tmp_path / "bad.csv", bad))
    with pytest.raises(ManifestError, match=r"frame_column='frame_no' is not a column"):
        Sequences.from_manifest(index, tmp_path / "m.csv", "sequence", "frame_no")
    twice = rows[:5] + [("ok/a.jpg", "run1", 8)]
    with pytest.raises(ManifestError, match=r"'ok/a.jpg' is listed on line 3 and on line 7"):
        Sequences.from_manifest(index, write_manifest(tmp_path / "twice.csv", twice))


# ---------------------------------------------------------------------------------------------- windows
def starts_in(sampler: ClipSampler, s: int) -> list[int]:
    seqs = sampler.sequences
    return (sampler.starts[sampler.clip_sequence == s] - seqs.offsets[s]).tolist()


def test_windows_fit_inside_their_sequence(seq_index):
    seqs = Sequences.from_index(seq_index)
    cam1 = list(seqs.names).index("scratch/cam1")  # 9 frames
    assert starts_in(ClipSampler(seqs, clip_len=4, step=2), cam1) == [0, 2, 4]
    assert starts_in(ClipSampler(seqs, clip_len=3, step=3), cam1) == [0, 3, 6]  # the last ends on the last frame
    assert starts_in(ClipSampler(seqs, clip_len=3, step=2, stride=3), cam1) == [0, 2]  # spans 7 frames
    sampler = ClipSampler(seqs, clip_len=4, step=2, stride=2)
    for c in range(sampler.num_clips):  # every clip: stride-spaced frames of one sequence, in order
        s = sampler.clip_sequence[c]
        want = seqs.sequence(s)[sampler.starts[c] - seqs.offsets[s]::2][:4]
        assert sampler.frames([c])[0].tolist() == want.tolist()


def test_short_sequences_are_skipped_and_said(seq_index, caplog):
    with caplog.at_level(logging.WARNING, logger="dali_backend"):
        sampler = ClipSampler(seq_index, clip_len=3, step=2)
    seqs = sampler.sequences
    assert [seqs.names[int(s)] for s in sampler.skipped] == ["normal/short"]
    assert "'normal/short' (2 frames)" in caplog.text
    assert "skipped: 'normal/short' (2 frames)" in sampler.report()
    assert sampler.num_clips == 5 + 2 + 4 + 2
    assert "normal/short" not in {seqs.names[int(s)] for s in sampler.clip_sequence}
    with pytest.raises(ConfigError, match=r"no sequence holds a clip of 13 frames.*longest has 12"):
        ClipSampler(seq_index, clip_len=13, step=1)
    for bad in (dict(clip_len=0, step=1), dict(clip_len=2, step=1.5), dict(clip_len=2, step=1, stride=0)):
        with pytest.raises(ConfigError, match="must be a positive integer"):
            ClipSampler(seq_index, **bad)


def mixed_index(tmp_path: Path) -> SampleIndex:
    """Sequences a (3 frames: dent, dent, ok), b (4: ok ok dent dent), c (2: ok)."""
    layout = {"a": ["f1.jpg", "f2.jpg", "f3.jpg"], "b": ["f1.jpg", "f2.jpg", "f3.jpg", "f4.jpg"], "c": ["f1.jpg", "f2.jpg"]}
    root = make_sequences(tmp_path / "data", layout)
    labels = {"a/f1.jpg": "dent", "a/f2.jpg": "dent", "a/f3.jpg": "ok", "b/f1.jpg": "ok", "b/f2.jpg": "ok",
              "b/f3.jpg": "dent", "b/f4.jpg": "dent", "c/f1.jpg": "ok", "c/f2.jpg": "ok"}
    manifest = tmp_path / "labels.csv"
    manifest.write_text("path,label\n" + "".join(f"{p},{c}\n" for p, c in labels.items()))
    return SampleIndex.from_manifest(manifest, root, progress=False)


def test_a_sequence_of_mixed_labels_is_refused_unless_majority(tmp_path):
    index = mixed_index(tmp_path)
    assert index.classes == ("dent", "ok")
    with pytest.raises(ConfigError, match=r"2 sequence\(s\) hold frames of different classes: 'a' \(dent 2, ok 1\), "
                                          r"'b' \(dent 2, ok 2\).*label='majority'"):
        ClipSampler(index, clip_len=2, step=1)
    sampler = ClipSampler(index, clip_len=2, step=1, label="majority")
    got = {tuple(index.paths[int(f)] for f in sampler.frames([c])[0]): int(sampler.labels[c])
           for c in range(sampler.num_clips)}
    dent, ok = 0, 1
    assert got == {("a/f1.jpg", "a/f2.jpg"): dent, ("a/f2.jpg", "a/f3.jpg"): dent,  # a tie: the smaller id
                   ("b/f1.jpg", "b/f2.jpg"): ok, ("b/f2.jpg", "b/f3.jpg"): dent, ("b/f3.jpg", "b/f4.jpg"): dent,
                   ("c/f1.jpg", "c/f2.jpg"): ok}
    with pytest.raises(ConfigError, match="label='guess'"):
        ClipSampler(index, clip_len=2, step=1, label="guess")


# ---------------------------------------------------------------------------------------------- draws
def test_draws_are_pure_and_balanced(seq_index):
    def make(**kw):
        return ClipSampler(seq_index, clip_len=3, step=1, seed=4, **kw)

    a, b = make(), make()
    assert a.global_draw(2).tolist() == b.global_draw(2).tolist()
    assert a.global_draw(2).tolist() != a.global_draw(3).tolist()
    a.set_epoch(2)
    clips = list(a)
    assert all(isinstance(c, Clip) and c.epoch == 2 for c in clips) and len(clips) == len(a) == a.num_clips
    assert [c.clip for c in clips] == a.global_draw(2).tolist()
    assert all(list(c.frames) == a.frames([c.clip])[0].tolist() and c.label == a.labels[c.clip] for c in clips)
    # balanced (default, with replacement): each class of clips about equally often, although normal has more
    many = make(num_samples=4000)
    classes = many.labels[many.global_draw(0)]
    assert abs(np.mean(classes == 0) - 0.5) < 0.02
    drawn = make(num_samples=4000, mode="uniform", replacement=True)  # clips alike: normal's share of the clips
    share = np.mean(drawn.labels == 0)
    assert abs(np.mean(drawn.labels[drawn.global_draw(0)] == 0) - share) < 0.02 and share > 0.54
    shuffle = make(mode="uniform")
    assert sorted(shuffle.global_draw(0).tolist()) == list(range(shuffle.num_clips))
    assert make(mode="sequential").global_draw(5).tolist() == list(range(shuffle.num_clips))


@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_partition_the_clips(seq_index, drop_last):
    world = 3
    samplers = [ClipSampler(seq_index, clip_len=3, step=1, mode="uniform", seed=2, rank=r, world_size=world,
                            drop_last=drop_last) for r in range(world)]
    n = samplers[0].num_clips
    per_rank = [s.rank_draw(1) for s in samplers]
    assert len({len(ids) for ids, _ in per_rank}) == 1 and all(len(s) == len(per_rank[0][0]) for s in samplers)
    positions = np.concatenate([p for _, p in per_rank])
    clips = np.concatenate([ids for ids, _ in per_rank])
    assert sorted(positions.tolist()) == list(range(len(positions)))  # every position on exactly one rank
    real = clips[positions < n]
    assert len(set(real.tolist())) == len(real)  # no clip twice, padding aside
    if drop_last:
        assert len(real) == n // world * world
    else:
        assert sorted(real.tolist()) == list(range(n))  # every clip once
        assert len(positions) - n == samplers[0].num_padded


def test_a_plain_dataloader_refuses_clips(ds, seq_index):
    loader = DataLoader(ds, batch_size=2, sampler=ClipSampler(seq_index, clip_len=2, step=1))
    with pytest.raises(ConfigError, match="a ClipSampler yields clips"):
        next(iter(loader))


# ---------------------------------------------------------------------------------------------- loaders
def run_epoch(ds, sampler, kind: str, epoch: int = 0, **kw):
    loader = DaliLoader(ds, batch_size=4, sampler=sampler, return_meta=True, **KINDS[kind], **kw)
    loader.set_epoch(epoch)
    try:
        return list(loader), len(loader), loader.stats()
    finally:
        loader.close()


def test_both_backends_give_the_same_clips(ds, seq_index):
    sampler = lambda: ClipSampler(seq_index, clip_len=3, step=2, mode="uniform", seed=9)  # noqa: E731
    runs = {kind: run_epoch(ds, sampler(), kind, epoch=1) for kind in KINDS}
    ref = sampler()
    clip_ids, positions = ref.rank_draw(1)
    for kind, (batches, n, stats) in runs.items():
        assert n == len(batches) == -(-ref.num_clips // 4), kind  # len() counts batches of clips
        assert stats["draws"] == stats["yielded"] == stats["accounted"] == ref.num_clips, (kind, stats)
        got = torch.cat([m["clip"] for _, _, m in batches]).tolist()
        assert got == clip_ids.tolist(), kind
        assert torch.cat([m["position"] for _, _, m in batches]).tolist() == positions.tolist()
        for images, labels, meta in batches:
            assert images.shape == (len(labels), 3, 3, 16, 16) and images.dtype == torch.float32
            assert labels.dtype == torch.int64 and labels.tolist() == ref.labels[meta["clip"].numpy()].tolist()
            assert meta["index"].tolist() == ref.frames(meta["clip"].numpy()).tolist()  # frames in order
            assert meta["path"] == [[seq_index.abspath(int(i)) for i in row] for row in meta["index"].tolist()]
            assert meta["epoch"].tolist() == [1] * len(labels)
    (dali, _, _), (cpu, _, _) = runs["dali-cpu"], runs["torch"]
    for (x, y, m), (u, v, w) in zip(dali, cpu, strict=True):
        assert torch.equal(y, v) and m["path"] == w["path"] and m["params"] == w["params"]
    assert_within_tolerance([x.flatten(0, 1) for x, _, _ in dali], [u.flatten(0, 1) for u, _, _ in cpu], ds.spec,
                            PRESET_MAX_LEVELS)


def test_every_frame_of_a_clip_shares_its_parameters(seq_index):
    spec = AugmentSpec(ops=[RandomResizedCrop(16, scale=(0.3, 1.0)), RandomHorizontalFlip(),
                            ColorJitter(brightness=0.4, contrast=0.4)])
    ds = ImageDataset(seq_index, spec, seed=3)
    sampler = ClipSampler(seq_index, clip_len=4, step=1, mode="uniform", seed=1)
    batches, _, _ = run_epoch(ds, sampler, "torch")
    seen = []
    for _, _, meta in batches:
        for frames in meta["params"]:
            assert len(frames) == 4 and all(p == frames[0] for p in frames), frames
            seen.append(frames[0])
    assert len({repr(p) for p in seen}) == len(seen), "clips draw their own parameters"
    assert {p["RandomHorizontalFlip"]["flip"] for p in seen} == {True, False}
    # the pixels too: each frame is what the dataset makes of that frame at the clip's position
    images, _, meta = batches[0]
    for k in range(2):
        for t in range(4):
            want, _ = ds[Draw(int(meta["index"][k, t]), int(meta["epoch"][k]), int(meta["position"][k]))]
            assert torch.equal(images[k, t], want)


@pytest.mark.parametrize("kind", KINDS)
def test_resume_mid_epoch_is_exact(ds, seq_index, kind):
    def loader():
        sampler = ClipSampler(seq_index, clip_len=3, step=1, seed=6)  # balanced, with replacement
        return DaliLoader(ds, batch_size=3, sampler=sampler, return_meta=True, **KINDS[kind])

    first = loader()
    first.set_epoch(2)
    whole = [(m["clip"].tolist(), y.tolist()) for _, y, m in first]
    first.set_epoch(2)
    it = iter(first)
    head = [next(it) for _ in range(2)]
    state = first.state_dict()
    first.close()
    assert state["batches_done"] == 2 and state["batches_per_epoch"] == len(whole)
    assert state["sampler"]["clip_len"] == 3 and state["sampler"]["type"] == "ClipSampler"
    again = loader()
    again.load_state_dict(state)
    rest = [(m["clip"].tolist(), y.tolist()) for _, y, m in again]
    stats = again.stats()
    again.close()
    assert [(m["clip"].tolist(), y.tolist()) for _, y, m in head] + rest == whole
    assert stats["resumed"] == 6 and stats["yielded"] + stats["resumed"] == stats["draws"] == stats["accounted"]


def test_drop_last_and_len_count_clip_batches(ds, seq_index):
    sampler = ClipSampler(seq_index, clip_len=3, step=2, mode="sequential")  # 13 clips
    loader = DaliLoader(ds, batch_size=4, sampler=sampler, drop_last=True, backend="torch", device="cpu")
    batches = [x.shape[0] for x, _ in loader]
    assert len(loader) == len(batches) == 3 and batches == [4, 4, 4]
    assert loader.stats()["dropped"] == 1 and loader.stats()["accounted"] == 13
    loader.close()


def test_padding_is_counted_on_each_rank(ds, seq_index):
    stats = []
    for rank in range(2):  # 13 clips over 2 ranks: 7 each, one padding clip on rank 1
        sampler = ClipSampler(seq_index, clip_len=3, step=2, mode="uniform", rank=rank, world_size=2)
        batches, n, st = run_epoch(ds, sampler, "torch")
        assert sum(len(y) for _, y, _ in batches) == 7
        stats.append(st)
    assert [s["padded"] for s in stats] == [0, 1] and all(s["accounted"] == s["draws"] == 7 for s in stats)


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_frame_raises_naming_it(tmp_path, kind):
    root = make_sequences(tmp_path, {"ok/a": [f"f{k}.jpg" for k in range(1, 5)]})
    index = SampleIndex.from_folder(root, progress=False)
    bad = root / "ok/a/f3.jpg"
    bad.write_bytes(b"\0" * bad.stat().st_size)  # the same size: only the read-time check sees it
    ds = ImageDataset(index, AugmentSpec(size=16))
    sampler = ClipSampler(index, clip_len=2, step=2, mode="sequential")  # clips (f1, f2), (f3, f4)
    loader = DaliLoader(ds, batch_size=1, sampler=sampler, **KINDS[kind])
    it = iter(loader)
    images, labels = next(it)
    assert images.shape == (1, 2, 3, 16, 16)
    with pytest.raises(BadImageError, match="f3.jpg") as e:
        next(it)
    assert e.value.path.endswith("ok/a/f3.jpg") and "no JPEG signature" in str(e.value)
    loader.close()


def test_a_clip_sampler_of_another_index_is_refused(ds, tmp_path):
    other = SampleIndex.from_folder(make_sequences(tmp_path, {"x/a": ["f1.jpg", "f2.jpg"]}), progress=False)
    with pytest.raises(ConfigError, match="another index than the dataset's"):
        DaliLoader(ds, batch_size=2, sampler=ClipSampler(other, clip_len=2, step=1), backend="torch", device="cpu")


SKIP_LAYOUT = {"dent/c": [f"f{k}.jpg" for k in range(1, 7)], "ok/a": [f"f{k}.jpg" for k in range(1, 7)],
               "ok/b": [f"f{k}.jpg" for k in range(1, 7)]}  # clips of 3, step 3: 0 c0, 1 c1 (dent); 2 a0, 3 a1, 4 b0, 5 b1 (ok)


def skip_epoch(index, kind: str, **kw) -> tuple[list, dict]:
    """One epoch of 3-frame clips under on_error='skip': (images, labels, meta) per batch, and stats()."""
    sampler = ClipSampler(index, clip_len=3, step=3, mode="sequential")
    ds = ImageDataset(index, AugmentSpec(ops=[RandomResizedCrop(16, scale=(0.5, 1.0)), RandomHorizontalFlip()]),
                      seed=4, on_error="skip")
    with DaliLoader(ds, batch_size=2, sampler=sampler, return_meta=True, **KINDS[kind], **kw) as loader:
        return [(x, y, m) for x, y, m in loader], loader.stats()


@pytest.mark.parametrize("kind", [*KINDS, "torch-workers", "dali-cpu-readers"])
def test_skip_replaces_a_clip_with_a_bad_frame_by_a_whole_clip_of_its_class(tmp_path, kind):
    root = make_sequences(tmp_path / "data", SKIP_LAYOUT)
    index = SampleIndex.from_folder(root, progress=False)
    bad = root / "ok/a/f5.jpg"  # the middle frame of clip a1 (f4 f5 f6): f4 and f6 are fine
    bad.write_bytes(b"\0" * bad.stat().st_size)  # the same size: only the read-time check sees it
    # torch: 2 DataLoader workers; DALI: 8 threads, 2 Python reader processes (threads // 4), which share
    # the frames of a clip
    extra = {"torch-workers": {"num_workers": 2}, "dali-cpu-readers": {"num_workers": 8}}.get(kind, {})
    batches, stats = skip_epoch(index, kind.split("-workers")[0].split("-readers")[0], **extra)
    sampler = ClipSampler(index, clip_len=3, step=3, mode="sequential")
    planned = torch.cat([m["planned_clip"] for _, _, m in batches]).tolist()
    served = torch.cat([m["clip"] for _, _, m in batches]).tolist()
    assert planned == list(range(6))
    assert [p for p, s in zip(planned, served) if p != s] == [3]  # a1 only
    assert served[3] in (2, 4, 5) and sampler.labels[served[3]] == index.classes.index("ok")  # a clip of its class
    for _, y, m in batches:
        for k in range(len(y)):
            clip = int(m["clip"][k])
            want = [index.abspath(int(i)) for i in sampler.frames([clip])[0]]
            assert m["path"][k] == want, "every frame of the clip comes from the one served clip, in order"
            assert m["index"][k].tolist() == sampler.frames([clip])[0].tolist()
            assert m["planned"][k].tolist() == sampler.frames([int(m["planned_clip"][k])])[0].tolist()
            assert int(y[k]) == sampler.labels[clip]
            assert all(p == m["params"][k][0] for p in m["params"][k]), "one draw of parameters for the clip"
    assert stats["skipped"] == 1 and stats["yielded"] == 5 and stats["accounted"] == stats["draws"] == 6
    # the bad frame itself, and the replacement's frame at its place (the middle one)
    assert stats["skipped_files"] == [(str(root / "ok/a/f5.jpg"), index.abspath(int(sampler.frames([served[3]])[0, 1])))]
    # the replacement's pixels are the served clip's own, as a run without the bad file would give them
    # at that position: same parameters (the position's), same frames
    images = torch.cat([x for x, _, _ in batches])
    again = ImageDataset(index, AugmentSpec(ops=[RandomResizedCrop(16, scale=(0.5, 1.0)), RandomHorizontalFlip()]),
                         seed=4)
    position = int(batches[1][2]["position"][1])
    want = torch.stack([again[Draw(int(i), 0, position)][0] for i in sampler.frames([served[3]])[0]])
    if kind.startswith("torch"):
        assert torch.equal(images[3], want)
    else:
        assert_within_tolerance([images[3]], [want], again.spec)


def test_skip_chooses_the_same_replacement_clips_on_both_backends(tmp_path):
    root = make_sequences(tmp_path / "data", SKIP_LAYOUT)
    index = SampleIndex.from_folder(root, progress=False)
    for name in ("ok/a/f2.jpg", "ok/b/f6.jpg", "dent/c/f1.jpg"):  # one bad frame in a0 (2), b1 (5) and c0 (0)
        (root / name).write_bytes(b"\0" * (root / name).stat().st_size)
    got = {}
    for kind in KINDS:
        batches, stats = skip_epoch(index, kind)
        got[kind] = (torch.cat([m["clip"] for _, _, m in batches]).tolist(), stats["skipped"])
    served, skipped = got["torch"]
    assert got["dali-cpu"] == got["torch"] and skipped == 3
    assert served[0] == served[1] == 1  # c1: dent's only good clip
    assert served[2] in (3, 4) and served[5] in (3, 4) and served[3:5] == [3, 4]  # a1 and b0: ok's good clips


@pytest.mark.parametrize("kind", KINDS)
def test_skip_without_a_usable_clip_of_the_class_raises_naming_the_frame(tmp_path, kind):
    root = make_sequences(tmp_path / "data", SKIP_LAYOUT)
    index = SampleIndex.from_folder(root, progress=False)
    for name in ("dent/c/f2.jpg", "dent/c/f4.jpg"):  # both clips of dent hold a bad frame
        (root / name).write_bytes(b"\0" * (root / name).stat().st_size)
    with pytest.raises(BadImageError, match=r"dent/c/f2.jpg: no JPEG signature; its clip 0 has no usable "
                                            r"replacement among 32 clips of its class"):
        skip_epoch(index, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_skip_replaces_a_clip_whose_frame_the_decoder_refuses(tmp_path, kind):
    from tests.facade.test_faults import corrupt_huffman  # passes the read-time checks; DALI's decoder and OpenCV refuse it

    root = make_sequences(tmp_path / "data", SKIP_LAYOUT)
    bad = root / "ok/b/f3.jpg"  # the last frame of clip b0 (4)
    bad.write_bytes(corrupt_huffman(bad.read_bytes()))
    index = SampleIndex.from_folder(root, progress=False)
    batches, stats = skip_epoch(index, kind)
    served = torch.cat([m["clip"] for _, _, m in batches]).tolist()
    assert served[:4] + served[5:] == [0, 1, 2, 3, 5] and served[4] in (2, 3, 5) and stats["skipped"] == 1


def test_frames_of_other_sizes_differ_only_in_size_dependent_parameters(tmp_path):
    root = tmp_path / "data"
    for k, (h, w) in enumerate([(24, 32), (40, 30), (24, 32), (64, 48)], start=1):
        write(root / "ok" / "run" / f"f{k}.jpg", jpeg_bytes(h, w, seed=k))
    index = SampleIndex.from_folder(root, progress=False)
    spec = AugmentSpec(ops=[RandomResizedCrop(16, scale=(0.3, 1.0)), RandomHorizontalFlip(),
                            ColorJitter(brightness=0.4, contrast=0.4)])
    ds = ImageDataset(index, spec, seed=2)
    sampler = ClipSampler(index, clip_len=4, step=1, mode="sequential")
    with DaliLoader(ds, batch_size=1, sampler=sampler, return_meta=True, backend="torch", device="cpu") as loader:
        _, _, meta = next(iter(loader))
    frames = meta["params"][0]
    for p in frames:  # flip and jitter: one draw for the clip, whatever the frame's size
        assert p["RandomHorizontalFlip"] == frames[0]["RandomHorizontalFlip"]
        assert p["ColorJitter"] == frames[0]["ColorJitter"]
    crops = [p["RandomResizedCrop"] for p in frames]
    assert crops[0] == crops[2] and crops[0] != crops[1] and crops[1] != crops[3]  # in pixels of each frame


def test_torch_workers_and_consecutive_epochs_on_dali_give_the_same_clips(ds, seq_index):
    def epochs(kind, **kw):
        loader = DaliLoader(ds, batch_size=4, sampler=ClipSampler(seq_index, clip_len=3, step=2, seed=3),
                            return_meta=True, **KINDS[kind], **kw)
        out = []
        for epoch in range(2):  # DALI plans the next epoch ahead: its prefetched clips must be the right ones
            loader.set_epoch(epoch)
            out.append([(m["index"].tolist(), y.tolist(), m["params"]) for _, y, m in loader])
        loader.close()
        return out

    want = epochs("torch")
    assert want[0] != want[1]
    assert epochs("torch", num_workers=2) == want
    assert epochs("dali-cpu") == want


def test_a_class_left_without_clips_is_said(tmp_path, caplog):
    root = make_sequences(tmp_path, {"dent/r1": ["f1.jpg", "f2.jpg"], "ok/r2": ["f1.jpg", "f2.jpg", "f3.jpg"]})
    index = SampleIndex.from_folder(root, progress=False)
    with caplog.at_level(logging.WARNING, logger="dali_backend"):
        sampler = ClipSampler(index, clip_len=3, step=1)
    assert "classes ['dent'] have no clips and are never drawn" in caplog.text
    assert set(sampler.labels[sampler.global_draw(0)].tolist()) == {1}


@pytest.mark.parametrize("kind", KINDS)
def test_a_frame_the_decoder_refuses_raises_at_its_clip(tmp_path, kind):
    from tests.facade.test_faults import corrupt_huffman  # passes the read-time checks; DALI's decoder and OpenCV refuse it

    root = make_sequences(tmp_path, {"ok/a": [f"f{k}.jpg" for k in range(1, 9)]})
    bad = root / "ok/a/f6.jpg"
    bad.write_bytes(corrupt_huffman(bad.read_bytes()))
    index = SampleIndex.from_folder(root, progress=False)
    sampler = ClipSampler(index, clip_len=2, step=2, mode="sequential")  # (f1 f2) (f3 f4) | (f5 f6) (f7 f8)
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=2, sampler=sampler, **KINDS[kind])
    for epoch in range(2):  # and again: the loader stays usable
        loader.set_epoch(epoch)
        got = []
        with pytest.raises(BadImageError) as e:
            for clips, _ in loader:
                got.append(clips)
        assert len(got) == 1 and got[0].shape == (2, 2, 3, 16, 16), "the clips before the bad frame are yielded"
        assert e.value.path.endswith("ok/a/f6.jpg") and e.value.epoch == epoch
    loader.close()


def test_sequences_check_their_arrays(seq_index):
    seqs = Sequences.from_index(seq_index)
    again = Sequences(seq_index, seqs.names, seqs.offsets, seqs.frames, seqs.numbers, "folders")
    assert np.array_equal(again.frames, seqs.frames)
    with pytest.raises(ConfigError, match="exactly one sequence"):
        Sequences(seq_index, seqs.names, seqs.offsets, seqs.frames[::-1][1:], seqs.numbers[1:], "folders")
    with pytest.raises(ConfigError, match="offsets must rise"):
        Sequences(seq_index, seqs.names, seqs.offsets[::-1], seqs.frames, seqs.numbers, "folders")


@pytest.mark.cuda
@needs_cuda
def test_clips_and_their_skips_on_the_gpu_equal_the_fallback(tmp_path):
    """The GPU check's case (bench/gpu_check.sh runs the CUDA-marked tests): clips, their parameters and
    the clips chosen under on_error='skip' are the fallback's; pixels within the GPU's published bound."""
    from bench.equivalence import over_bound
    from tests.helpers.levels import level_stats

    root = make_sequences(tmp_path / "data", SKIP_LAYOUT)
    index = SampleIndex.from_folder(root, progress=False)
    (root / "ok/a/f5.jpg").write_bytes(b"\0" * (root / "ok/a/f5.jpg").stat().st_size)
    runs = {}
    for kind, args in (("torch", KINDS["torch"]), ("dali-gpu", LOADER_ARGS["dali-gpu"])):
        sampler = ClipSampler(index, clip_len=3, step=3, mode="uniform", seed=2)
        ds = ImageDataset(index, AugmentSpec(ops=[RandomResizedCrop(16, scale=(0.5, 1.0)), RandomHorizontalFlip()]),
                          seed=4, on_error="skip")
        with DaliLoader(ds, batch_size=2, sampler=sampler, return_meta=True, num_workers=2, **args) as loader:
            runs[kind] = ([(x.cpu(), y.cpu(), m) for x, y, m in loader], loader.stats())
    (gpu, gstats), (cpu, cstats) = runs["dali-gpu"], runs["torch"]
    assert gstats["skipped"] == cstats["skipped"] >= 1 and gstats["skipped_files"] == cstats["skipped_files"]
    for (x, y, m), (u, v, w) in zip(gpu, cpu, strict=True):
        assert torch.equal(y, v) and torch.equal(m["clip"], w["clip"]) and m["path"] == w["path"]
        assert m["params"] == w["params"]
    stats = level_stats([x.flatten(0, 1) for x, _, _ in gpu], [u.flatten(0, 1) for u, _, _ in cpu], ds.spec)
    assert not over_bound("end-to-end", stats, "gpu"), stats


@pytest.mark.parametrize("kind", KINDS)
def test_a_replacement_clip_whose_frame_the_decoder_refuses_is_passed_over(tmp_path, kind):
    """Clip a1 (3) has a read-time bad frame; its replacements a0 (2) and b0 (4) hold a frame that passes
    the read-time checks but that the decoder refuses; b1 (5) is fine: both backends serve b1 (DALI's
    recovery finds the refused frame by serving the draws in flight by the clip rule; before, by the
    single-sample rule, it never reached the replacement's frame and could not name the file)."""
    from tests.facade.test_faults import corrupt_huffman

    root = make_sequences(tmp_path / "data", SKIP_LAYOUT)
    for name in ("ok/a/f2.jpg", "ok/b/f2.jpg"):
        (root / name).write_bytes(corrupt_huffman((root / name).read_bytes()))
    index = SampleIndex.from_folder(root, progress=False)
    bad = root / "ok/a/f5.jpg"
    bad.write_bytes(b"\0" * bad.stat().st_size)
    sampler = ClipSampler(index, clip_len=3, step=3, mode="weights", weights=[0, 0, 0, 1, 0, 0], num_samples=1, seed=1)
    # seed 3: the clip rule tries 2 first at (epoch 0, position 0); the single-sample rule serves b/f6 for a/f5
    assert sampler.table().replacements(3, 3, 0, 0).tolist()[0] == 2
    ds = ImageDataset(index, AugmentSpec(size=16), seed=3, on_error="skip")
    with DaliLoader(ds, batch_size=1, sampler=sampler, return_meta=True, **KINDS[kind]) as loader:
        served = [m["clip"].tolist() for _, _, m in loader]
        assert served == [[5]] and loader.stats()["skipped"] == 1


def test_a_frame_overwritten_while_two_dali_readers_read_its_clip_gives_no_mixed_clip(tmp_path, monkeypatch):
    """A frame overwritten between two DALI reader processes' reads of its clip: the first reader chose
    the clip (SlotRing.decide), the other finds its frame bad; the batch runs again on a new pipeline
    and the clip is replaced whole (before: each reader chose for itself, and the loader met a mixed
    clip, "frames [1, 2, 8] are no clip of the sampler"). Simulated deterministically: the first process
    to read f5 reads it intact, any other sees it overwritten. (num_workers=8: 2 reader processes.)"""
    import os
    import time

    from dali_backend import BadImageError, reading

    root = make_sequences(tmp_path / "data", {"ok/a": [f"f{k}.jpg" for k in range(1, 13)]})
    index = SampleIndex.from_folder(root, progress=False)
    x = next(i for i in range(len(index)) if index.abspath(i).endswith("ok/a/f5.jpg"))  # in clip 1 (f4 f5 f6)
    flag = tmp_path / "first-reader"
    orig = reading.SampleReader.read

    def read(self, i, epoch=None):
        if i == x:
            try:
                fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
            except FileExistsError:
                pass
            if flag.read_text() != str(os.getpid()):
                raise BadImageError(self.path(i), i, int(self.labels[i]), epoch, "file changed since indexing")
        time.sleep(0.05)  # slow reads: both reader processes take a part of the batch
        return orig(self, i, epoch)

    monkeypatch.setattr(reading.SampleReader, "read", read)
    sampler = ClipSampler(index, clip_len=3, step=3, mode="sequential")
    ds = ImageDataset(index, AugmentSpec(size=16), on_error="skip")
    # 9 slots per batch split 5 / 4 over 2 readers: clip 1 (slots 3-5) is read by both
    with DaliLoader(ds, batch_size=3, sampler=sampler, return_meta=True, num_workers=8, backend="dali",
                    device="cpu") as loader:
        for _, _, m in loader:
            for k in range(len(m["clip"])):
                assert m["index"][k].tolist() == sampler.frames([int(m["clip"][k])])[0].tolist()
