"""The contenders of ``python -m bench``; each runs in its own process (clean memory figures).

* ``ceiling``: decode + CLAHE alone on all cores, no loader: the compute limit of this pipeline (with
  ``--bit-depth`` 12 or 16: decode at 16 bits, the ``Window``'s lookup to 8 bits, CLAHE), with OpenCV's decoder
  and the Clahe operation's kernel (the compiled one where it is built: OpenCV's pixels, faster).
* ``ceiling-dali``: the same steps with DALI's CPU operators (``decoders.image``, ``lookup_table``,
  ``clahe``) on DALI's threads, files read by ``readers.file``: the limit of a loader that must use them
  (``dali-cpu``; :data:`bench.OWN_CEILINGS`). DALI's PNG decoder and CLAHE cost other CPU than OpenCV's
  (16-bit gray PNG at 2048x1536, one core: decode 88 ms, lookup 7.7, CLAHE 14.8, against OpenCV's 91, 4.7
  and 8.6), so each loader is also set against the ceiling of its own executor.
* ``tutorial``: the Dataset style of the tutorial this project grew from (grayscale + CLAHE, then
  rotation and jitter in float at full resolution, then resize) in a DataLoader with all cores.
* ``fallback``: ``DaliLoader(backend="torch")``, our tuned OpenCV DataLoader.
* ``fallback-threads``: ``DaliLoader(backend="torch-threads")``, the same work on threads of the loader's
  process (no worker processes, no batch IPC).
* ``dali-cpu`` / ``dali-gpu``: ``DaliLoader`` on DALI's CPU or GPU operators.
* ``recipe-*``: the torchvision ImageNet training recipe (RandomResizedCrop + horizontal flip +
  ColorJitter(0.4, 0.4, 0.4) + Normalize, RGB) on the fallback and on DALI (CPU or GPU); on DALI the
  crop's window is decoded alone (region decode; JPEG only, other formats decode fully and crop).

With ``--bit-depth`` 12 or 16 every contender runs its contract after a ``Window(0, 2**bits - 1)``
(:func:`window_for`; a spec without one refuses such data): :func:`preset_spec`, :func:`recipe_spec`,
the tutorial and the ceiling alike. ``--format`` needs nothing here: every decoder reads every format.
* ``clips-*`` (only with ``--only``): the preset's contract on clips, ``DaliLoader`` with a
  ``ClipSampler`` on the fallback and on DALI (CPU or GPU). Defaults: clips of 8 frames starting every
  4 frames (``--clip-len``, ``--clip-step``) of sequences of 32 frames cut from each class's images
  (:mod:`bench.clipset`), a uniform draw of every clip per epoch, ``--batch-size // clip_len`` clips
  per batch (4 clips of 8 frames for the default 32: the executor runs batches of as many frames as
  the other contenders'). Their img/s and CPU per image count frames (``B * T`` per batch); with
  overlapping windows an epoch holds about twice as many frames as images.
"""

from __future__ import annotations

import statistics
import time
import warnings

import cv2
import numpy as np
import torch

from dali_backend.util.procstats import dali_operator_cpu_seconds

from .measure import PeakRss, tree_cpu_seconds, tree_rss_mb

from . import CONTENDERS, PEERS  # noqa: E402,F401  (the names live in the light package module)


def window_for(bit_depth: int):
    """The declared 16-to-8-bit step of a contract on ``bit_depth``-bit data (12: stored in 16, values below 4096)."""
    from dali_backend.transforms import Window

    return Window(0, (1 << bit_depth) - 1)


def _read_gray(path: str, table: np.ndarray | None) -> np.ndarray:
    """``path`` decoded to 8-bit gray: at 16 bits then the Window's lookup ``table`` when given."""
    data = np.fromfile(path, dtype=np.uint8)
    if table is None:
        return cv2.imdecode(data, cv2.IMREAD_GRAYSCALE)
    return table[cv2.imdecode(data, cv2.IMREAD_GRAYSCALE | cv2.IMREAD_ANYDEPTH)]


def _ceiling_work(path: str) -> int:
    clahe, table = _CEILING
    return int(clahe(_read_gray(path, table))[0, 0])


_CEILING = None  # a ceiling worker's (CLAHE, the Window's lookup table or None for 8-bit data)


def _ceiling_init(bit_depth: int = 8) -> None:
    """A ceiling worker: the Clahe operation's own kernel (the compiled one where it is built, else OpenCV's)."""
    global _CEILING
    from dali_backend.transforms.color import clahe_plane

    cv2.setNumThreads(0)
    _CEILING = (lambda img: clahe_plane(img, 2.0, (8, 8))), None if bit_depth == 8 else window_for(bit_depth).table


class DaliCeiling:
    """``ceiling-dali``: decode to gray (16 bits and the Window's table for 16-bit data) and CLAHE on DALI's CPU
    operators, ``workers`` threads, batches of ``batch_size``; iterating gives one epoch of
    ``(1x1 corner of each image, labels)`` torch tensors (the images stay inside DALI: no copy out)."""

    def __init__(self, index, batch_size: int, workers: int, bit_depth: int = 8):
        from nvidia.dali import fn, pipeline_def, types

        self.n, self.batch_size = len(index), batch_size
        files = [index.abspath(i) for i in range(self.n)]
        table = None if bit_depth == 8 else window_for(bit_depth).table

        @pipeline_def(batch_size=batch_size, num_threads=workers, device_id=None, exec_dynamic=True, prefetch_queue_depth=2)
        def pipe():
            data, labels = fn.readers.file(files=files, labels=[int(v) for v in index.labels], pad_last_batch=True,
                                           name="files")  # each epoch from the first file (its last batch padded)
            img = fn.decoders.image(data, device="cpu", output_type=types.GRAY,
                                    **({} if table is None else {"dtype": types.UINT16}))
            if table is not None:
                img = fn.lookup_table(img, keys=list(range(len(table))), values=table.tolist(), default_value=0,
                                      dtype=types.UINT8)
            img = fn.clahe(img, tiles_x=8, tiles_y=8, clip_limit=2.0)
            return fn.crop(img, crop=(1, 1), crop_pos_x=0.0, crop_pos_y=0.0), labels  # the top-left pixel

        self.pipe = pipe()
        self.pipe.build()

    def __iter__(self):
        left = self.n
        while left > 0:
            img, labels = self.pipe.run()
            k = min(left, self.batch_size)
            left -= k
            yield (torch.from_numpy(np.stack([np.array(img[i]) for i in range(k)])),
                   torch.from_numpy(np.array([np.array(labels[i]).item() for i in range(k)])))

    def close(self) -> None:
        del self.pipe


class TutorialDataset(torch.utils.data.Dataset):
    """The tutorial's style: every step at full resolution, in float, before the resize."""

    def __init__(self, paths: list[str], labels: np.ndarray, size: tuple[int, int], rotate: float = 5.0,
                 bit_depth: int = 8):
        self.paths, self.labels, self.size, self.rotate = paths, labels, size, rotate
        self.clahe = None
        self.table = None if bit_depth == 8 else window_for(bit_depth).table  # 16-bit data: windowed first

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        if self.clahe is None:
            self.clahe = cv2.createCLAHE(clipLimit=2.0, tileGridSize=(8, 8))
        img = self.clahe.apply(_read_gray(self.paths[i], self.table)).astype(np.float32)
        h, w = img.shape
        rng = np.random.default_rng(i)
        m = cv2.getRotationMatrix2D((w / 2, h / 2), float(rng.uniform(-self.rotate, self.rotate)), 1.0)
        img = cv2.warpAffine(img, m, (w, h))
        b, c = rng.uniform(0.9, 1.1, size=2)
        img = np.clip(b * (128 + c * (img - 128)), 0, 255)
        img = cv2.resize(img, (self.size[1], self.size[0])) / 255.0
        img = (np.stack([img] * 3) - np.array([0.485, 0.456, 0.406])[:, None, None]) / np.array([0.229, 0.224, 0.225])[:, None, None]
        return torch.from_numpy(img.astype(np.float32)), int(self.labels[i])


_REF = None


def _reference_init(index_path: str, size: tuple[int, int], bit_depth: int = 8) -> None:
    """A reference worker: the dataset's own operations, nothing of a loader around them."""
    global _REF
    from dali_backend import SampleIndex
    from dali_backend._own import own

    cv2.setNumThreads(0)
    torch.set_num_threads(1)
    spec = preset_spec(size, bit_depth)
    _REF = (own("fallback.dataset").ImageDataset(SampleIndex.load(index_path, check="none"), spec, seed=0), spec)


def _reference_work(draw) -> int:
    from dali_backend.core.tensors import normalize

    ds, spec = _REF
    image, label = ds.load_uint8(draw)
    return int(normalize(torch.from_numpy(image)[None], spec)[0, 0, 0, 0] > 0) + label


def stage_breakdown(index, size: tuple[int, int], images: int = 64) -> dict[str, float]:
    """CPU milliseconds per image of each stage of the default contract, one thread, on ``images`` files
    (normalisation batch by batch, as the loaders do).

    The stages a loader cannot avoid (reading, decode, CLAHE, resize, rotate, jitter, normalise):
    ``cpu s/img`` of a contender minus their sum is that loader's own overhead.
    """
    from dali_backend import AugmentSpec
    from dali_backend.core.reading import read_regular_file
    from dali_backend.core.tensors import normalize
    from dali_backend._own import own

    decode = own("fallback.ops").decode
    spec = AugmentSpec(size=size)
    stages = dict(zip(("clahe", "resize", "rotate", "jitter"), spec.transforms))  # the operations the loaders run
    times = dict.fromkeys(("read", "decode", *stages, "normalize"), 0.0)
    n = min(images, len(index))
    clock = time.thread_time  # CPU time of this thread: what the stage costs, not what the machine did meanwhile
    done = []
    for i in range(n):
        t0 = clock()
        data = read_regular_file(index.abspath(i))
        t1 = clock()
        img = decode(data, "gray")
        times["read"] += t1 - t0
        times["decode"] += clock() - t1
        for (name, op), params in zip(stages.items(), spec.make_params(0, 0, i, img.shape[:2])):
            t = clock()
            img = op.apply(img, params)
            times[name] += clock() - t
        done.append(img)
    for b in range(0, n, 32):  # normalisation runs per batch in the loaders
        batch = torch.from_numpy(np.stack(done[b:b + 32]))[:, None]
        t0 = clock()
        normalize(batch, spec)
        times["normalize"] += clock() - t0
    return {k: 1000 * v / n for k, v in times.items()}


def dali_stage_breakdown(index, size: tuple[int, int], images: int = 96, batch_size: int = 16, threads: int = 2,
                         repeats: int = 3) -> dict[str, float]:
    """CPU milliseconds per image of DALI's own CPU operators for the default contract.

    Pipelines of growing prefixes of the loader's graph (the same ``op.dali`` fragments, fed by a
    plain external source with the same parameters) run on ``images`` files with ``threads`` threads
    (the loader's, so the cores are shared as in the loader); each stage costs the CPU time its
    prefix adds, median of ``repeats`` runs (stages are differences: a cheap one may come out
    slightly negative). ``framework`` only passes the bytes through. This shows which of DALI's
    kernels cost what; the loader's own CPU is measured in the run itself instead (the contender's
    CPU minus its DALI operator threads', see :func:`~dali_backend.util.procstats.dali_operator_cpu_seconds`).
    """
    from dali_backend import AugmentSpec
    from dali_backend.dali.graph import import_dali
    from dali_backend.core.reading import read_regular_file
    from dali_backend.transforms.base import GraphContext

    dali = import_dali()
    from nvidia.dali import fn, types

    spec = AugmentSpec(size=size)
    ops = spec.transforms
    n = max(batch_size, min(images, len(index)) // batch_size * batch_size)
    files = [np.frombuffer(read_regular_file(index.abspath(i % len(index))), np.uint8) for i in range(n)]
    wires = [spec.wire_arrays(spec.make_params(0, 0, i, (int(index.heights[i % len(index)]),
                                                         int(index.widths[i % len(index)])))) for i in range(n)]
    wire_types = {"float32": types.FLOAT, "int32": types.INT32}

    def batches():
        while True:
            for b in range(0, n, batch_size):
                yield [files[b:b + batch_size]] + [[w[j] for w in wires[b:b + batch_size]] for j in range(len(spec.wire))]

    def cpu_ms(stages: int) -> float:
        """CPU ms per image of the graph up to (decode = 0, then operation ``stages - 1``)."""
        feed = batches()

        @dali.pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, prefetch_queue_depth=1,
                           exec_dynamic=True, enable_conditionals=True)
        def graph():
            jpegs, *values = fn.external_source(source=lambda: next(feed), num_outputs=1 + len(spec.wire),
                                                dtype=[types.UINT8] + [wire_types[p.dtype] for _, p in spec.wire])
            if stages < 0:
                return jpegs
            params: list[dict] = [{} for _ in ops]
            for (k, p), node in zip(spec.wire, values):
                params[k][p.name] = node
            shape = fn.peek_image_shape(jpegs, dtype=types.INT32)
            ctx = GraphContext(gpu=False, channels=spec.channels, hw=(shape[0], shape[1]))
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY if spec.color == "gray" else types.RGB)
            for k in range(stages):
                images = ops[k].dali(images, params[k], ctx)
            return images

        with warnings.catch_warnings():  # short prefixes leave parameters unused: DALI warns about that
            warnings.simplefilter("ignore")
            pipe = graph()
            pipe.build()
        pipe.run()  # warm-up (the feed cycles)
        t0 = time.process_time()
        for _ in range(n // batch_size):
            pipe.run()
        spent = time.process_time() - t0
        del pipe
        return 1000 * spent / n

    totals = [statistics.median(cpu_ms(k) for _ in range(repeats)) for k in range(-1, len(ops) + 1)]
    short = {"Clahe": "clahe", "Resize": "resize", "RandomRotation": "rotate", "ColorJitter": "jitter"}
    names = ["framework", "decode"] + [short.get(type(op).__name__, type(op).__name__.lower()) for op in ops]
    return {name: totals[0] if i == 0 else totals[i] - totals[i - 1] for i, name in enumerate(names)}


def preset_spec(size: tuple[int, int], bit_depth: int = 8):
    """The preset's contract (gray, CLAHE, resize, rotation, jitter); for 12- or 16-bit data the same steps after
    a :func:`window_for` (as ``dali-backend demo --bit-depth`` runs them)."""
    from dali_backend import AugmentSpec
    from dali_backend.transforms import Grayscale

    preset = AugmentSpec(size=size)
    if bit_depth == 8:
        return preset
    return AugmentSpec(ops=[Grayscale(3), window_for(bit_depth), *preset.transforms], mean=preset.mean, std=preset.std)


def recipe_spec(size: tuple[int, int], bit_depth: int = 8):
    """torchvision's ImageNet training recipe as a spec (what ``from_torchvision`` gives for it); for 12- or
    16-bit data after a :func:`window_for` (the crop resamples: it cannot run on 16-bit values)."""
    from dali_backend import AugmentSpec
    from dali_backend.core.augment import IMAGENET_MEAN, IMAGENET_STD
    from dali_backend.transforms import ColorJitter, Normalize, RandomHorizontalFlip, RandomResizedCrop

    first = [] if bit_depth == 8 else [window_for(bit_depth)]
    return AugmentSpec(ops=[*first, RandomResizedCrop(size), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4),
                            Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def contract_sampler(index):
    """The draws of the preset's loaders and of the peers: the library's sampler, a seeded shuffle."""
    from dali_backend import WeightedSampler

    return WeightedSampler(index, mode="uniform", seed=0)


SAME_WORK = ("fallback", "fallback-threads", "dali-cpu", "dali-gpu", *PEERS)
"""The contenders whose first batch is set against the fallback's pixels (:func:`levels_difference`)."""


def levels_difference(batch: torch.Tensor, index, size: tuple[int, int], draws) -> float:
    """Mean absolute difference, in uint8 levels, between a normalised batch of the default contract
    (``[B, 3, H, W]``) and the fallback's pixels (``ImageDataset.load_uint8``) for the same ``draws``."""
    from .peers import fallback_dataset

    spec = preset_spec(size)
    ds = fallback_dataset(index, spec)
    ref = np.stack([ds.load_uint8(d)[0] for d in draws]).astype(np.float64)  # [B, 1, H, W]
    scale, shift = (v.astype(np.float64)[:, None, None] for v in spec.normalize_coefficients())
    levels = (batch.detach().cpu().double().numpy() - shift) / scale
    return float(np.abs(levels - ref).mean())


def _loader_for(name: str, index, size: tuple[int, int], batch_size: int, workers: int, clips=None,
                bit_depth: int = 8):
    """The loader of contender ``name``; ``clips`` is the clip contenders' ClipSampler (whose
    ``clip_len`` divides ``batch_size`` frames into clips per batch)."""
    from dali_backend import DaliLoader
    from dali_backend._own import own

    ImageDataset = own("fallback.dataset").ImageDataset

    if name == "tutorial":
        paths = [index.abspath(i) for i in range(len(index))]
        ds = TutorialDataset(paths, index.labels, size, bit_depth=bit_depth)
        return torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                                           persistent_workers=True)
    if name in PEERS:
        from .peers import peer_loader

        return peer_loader(name, index, preset_spec(size), contract_sampler(index), batch_size, workers)
    if name.startswith("recipe-"):
        name = name[len("recipe-"):]
        ds = ImageDataset(index, recipe_spec(size, bit_depth), seed=0)
    else:
        ds = ImageDataset(index, preset_spec(size, bit_depth), seed=0)
    if name.startswith("clips-"):
        from .clipset import clips_per_batch

        name, sampler, batch_size = name[len("clips-"):], clips, clips_per_batch(batch_size, clips.clip_len)
    else:
        sampler = contract_sampler(index)
    device, backend = {"fallback": ("cpu", "torch"), "fallback-threads": ("cpu", "torch-threads"), "dali-cpu": ("cpu", "dali"),
                       "dali-gpu": ("cuda", "dali")}[name]
    return DaliLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=workers, device=device, backend=backend)


def run_contender(name: str, index_path: str, size: tuple[int, int], epochs: int, batch_size: int,
                  workers: int, sequences: str | None = None, clip_len: int = 8, clip_step: int = 4,
                  bit_depth: int = 8) -> dict:
    """Warm-up epoch + ``epochs`` timed epochs; images/s is the median of the timed epochs (``bit_depth``
    12 or 16: every contract after a Window, see the module docstring).

    A clip contender (``clips-*``) needs ``sequences`` (the manifest :func:`bench.clipset.write_sequences`
    wrote) and draws clips of ``clip_len`` frames every ``clip_step`` frames; its images/s and CPU per
    image count frames, and its result adds ``clip_len``, ``clip_step``, ``clips_per_batch``,
    ``clips_per_epoch``, ``batches_per_epoch`` and ``frames_per_epoch`` (counted in the last epoch).
    """
    from dali_backend import SampleIndex
    from dali_backend.errors import ConfigError

    from .peers import AREA_RESIZE, area_resize_difference

    index = SampleIndex.load(index_path)
    n_images = len(index)
    clips = None
    if name.startswith("clips-"):
        from .clipset import clip_sampler

        if sequences is None:
            raise ConfigError(f"contender {name}: no sequences manifest; pass sequences= (bench.clipset.write_sequences)")
        clips = clip_sampler(index, sequences, clip_len, clip_step)
    timed_frames = batches = 0
    extra: dict = {}
    rates, rss_after = [], []
    first_batch_s = None
    cpu0 = tree_cpu_seconds()
    with PeakRss() as peak:
        t_create = time.perf_counter()
        if name in ("ceiling", "reference"):
            import multiprocessing as mp

            from dali_backend import WeightedSampler

            if name == "ceiling":
                work, items = _ceiling_work, [index.abspath(i) for i in range(n_images)]
                pool = mp.get_context("fork").Pool(workers, initializer=_ceiling_init, initargs=(bit_depth,))
            else:
                work, sampler = _reference_work, WeightedSampler(index, mode="uniform", seed=0)
                pool = mp.get_context("fork").Pool(workers, initializer=_reference_init,
                                                   initargs=(index_path, size, bit_depth))
            loader = None
        elif name == "ceiling-dali":
            loader = DaliCeiling(index, batch_size, workers, bit_depth)
        else:
            loader = _loader_for(name, index, size, batch_size, workers, clips, bit_depth)
        timed_cpu0 = dali_cpu0 = None
        for epoch in range(epochs + 1):
            if epoch == 1:
                timed_cpu0 = tree_cpu_seconds() - peak.cpu_seconds  # the memory sampler's CPU is not the loader's
                dali_cpu0 = dali_operator_cpu_seconds()
            t0 = time.perf_counter()
            n = batches = 0
            if loader is None:
                if name == "reference":
                    items = sampler.draws(epoch)
                n = len(pool.map(work, items, chunksize=4))
            else:
                if hasattr(loader, "set_epoch"):
                    loader.set_epoch(epoch)
                for x, y in loader:
                    if first_batch_s is None:
                        first_batch_s = time.perf_counter() - t_create
                        first = (x.clone(), y.clone())  # a loader may reuse its output memory
                    n += len(y) if clips is None else x.shape[0] * x.shape[1]  # clips: B * T frames
                    batches += 1
                if getattr(getattr(loader, "device", None), "type", None) == "cuda":  # the GPU's work done
                    torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if epoch > 0:
                rates.append(n / dt)
                timed_frames += n
            rss_after.append(tree_rss_mb())
        timed_cpu = tree_cpu_seconds() - peak.cpu_seconds - timed_cpu0
        dali_cpu = dali_operator_cpu_seconds()
        dali_ops = None if dali_cpu is None or dali_cpu0 is None or "dali" not in name else dali_cpu - dali_cpu0
        if loader is None:
            pool.close()
            pool.join()
        elif hasattr(loader, "close"):
            loader.close()
    if name in SAME_WORK and bit_depth == 8:  # the same work: the first batch's pixels and labels against the fallback's
        draws = contract_sampler(index).draws(0)[:len(first[1])]
        extra["levels_difference"] = levels_difference(first[0], index, size, draws)
        if name in AREA_RESIZE:
            extra["area_resize_levels"] = area_resize_difference(index, preset_spec(size), draws)
        extra["labels_match"] = bool(np.array_equal(first[1].cpu().numpy(), index.labels[[d.index for d in draws]]))
    growth = (rss_after[-1] - rss_after[0]) / rss_after[0] * 100 if len(rss_after) > 1 else 0.0
    timed = n_images * epochs if clips is None else timed_frames  # clips: per frame served
    extra |= {} if clips is None else {"clip_len": clips.clip_len, "clip_step": clips.step,
                                      "clips_per_batch": loader.batch_size, "clips_per_epoch": len(clips),
                                      "batches_per_epoch": batches, "frames_per_epoch": n}
    return {
        "name": name,
        "images_per_s": statistics.median(rates),
        "epoch_images_per_s": rates,
        "cpu_s_per_image": timed_cpu / timed,
        "dali_operators_cpu_s_per_image": None if dali_ops is None else dali_ops / timed,
        "peak_rss_mb": peak.peak,
        "first_batch_s": first_batch_s,
        "rss_growth_pct": growth,
        "total_cpu_s": tree_cpu_seconds() - cpu0,
        "workers": workers,
        "batch_size": batch_size,
        **extra,
    }
