"""``dali-backend demo``: the synthetic defect set (or ``--data``) indexed, train-style epochs, img/s and a
preview; ``--masks`` alone runs a synthetic MVTec AD category instead, and ``--data`` with target flags
(:mod:`.targetflags`) runs (image, mask / boxes) batches of that data."""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

from ..errors import ConfigError, FallbackWarning
from .pictures import save_preview
from .targetflags import SYNTHETIC, indexed_with_targets, wants_targets

log = logging.getLogger("dali_backend.cli")


def demo_spec(size: int, bit_depth: int = 8):
    """The demo's spec: the gray inspection preset; for 12- or 16-bit data the same steps after a
    ``Window`` over the data's whole range (the declared 16-to-8-bit step; ``--bit-depth``)."""
    from ..core.augment import AugmentSpec
    from ..transforms import Clahe, ColorJitter, Grayscale, RandomRotation, Resize, Window

    if bit_depth == 8:
        return AugmentSpec(size=size, color="gray")
    preset = AugmentSpec(size=size, color="gray")
    return AugmentSpec(ops=[Grayscale(3), Window(0, (1 << bit_depth) - 1), Clahe(), Resize((size, size)),
                            RandomRotation(preset.rotate_deg), ColorJitter(preset.brightness, preset.contrast)],
                       mean=preset.mean, std=preset.std)


def demo_masks(args) -> int:
    """``demo --masks``: a synthetic MVTec AD category (defects drawn into image and mask), its test split
    indexed with its masks, epochs of (image, mask) batches (:func:`target_epochs`)."""
    from ..core.defects import generate_mvtec
    from ..index import SampleIndex

    w, h = args.size
    root = generate_mvtec(Path(args.cache) / f"mvtec-{args.images}-{w}x{h}-s{args.seed}", n_good=args.images // 2,
                          n_defect=max(1, args.images // 4), size=(w, h), seed=args.seed)
    return target_epochs(args, SampleIndex.from_mvtec(root, "plate", "test"), root, "test images")


def target_epochs(args, index, root, what: str = "images") -> int:
    """Epochs of batches of an index with targets: img/s, the masks' foreground share, the boxes carried and
    dropped (the recipe: RandomResizedCrop, flip, rotation)."""
    from .._own import own

    from ..core.augment import AugmentSpec
    from ..facade.loader import DaliLoader
    from ..index.report import targets_text
    from ..transforms import RandomHorizontalFlip, RandomResizedCrop, RandomRotation

    spec = AugmentSpec(ops=[RandomResizedCrop(args.out_size, scale=(0.6, 1.0)), RandomHorizontalFlip(),
                            RandomRotation(15)], color="rgb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        loader = DaliLoader(own("fallback.dataset").ImageDataset(index, spec, seed=args.seed),
                            batch_size=args.batch_size, shuffle=True, seed=args.seed, num_workers=args.workers,
                            device=args.device, backend=args.backend)
    print(f"data: {root} ({len(index)} {what}, classes {list(index.classes)}); loader: {loader.backend}")
    print(targets_text(index))
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        t0, n, fg, px, boxes, dropped = time.perf_counter(), 0, 0, 0, 0, 0
        for batch in loader:
            n, dropped = n + len(batch["label"]), dropped + batch["dropped"]
            if "mask" in batch:
                fg, px = fg + int(batch["mask"].count_nonzero()), px + batch["mask"].numel()
            boxes += sum(len(b) for b in batch.get("boxes", ()))
        carried = [f"defect pixels {fg / px:.1%}"] if px else []
        carried += [f"{boxes} boxes ({dropped} dropped by the box policy)"] if "boxes" in index.annotations.kinds else []
        kinds = " and ".join(k for k in ("masks", "boxes") if k in index.annotations.kinds)
        print(f"epoch {epoch}: {n} images with {kinds} in {time.perf_counter() - t0:.2f} s; " + "; ".join(carried))
    loader.close()
    return 0


def cmd_demo(args) -> int:
    import numpy as np

    from .._own import own

    ImageDataset = own("fallback.dataset").ImageDataset

    from ..index import SampleIndex
    from ..facade.loader import DaliLoader, choose_backend
    from ..sampling.sampler import WeightedSampler
    from ..core.synthetic import generate_defect_dataset

    if args.masks == SYNTHETIC:
        if args.data or args.annotations:
            raise ConfigError("demo --masks without a RULE runs a synthetic MVTec AD set; with --data pass the pairing "
                              "rule: --masks mvtec or --masks suffix:SUFFIX (or --annotations FORMAT:PATH for boxes)")
        return demo_masks(args)
    if wants_targets(args) or args.mask_dir or args.mask_classes or args.class_folders or args.box_classes:
        if not args.data:
            raise ConfigError("demo --masks RULE / --annotations need --data DIR (the data they annotate); --masks "
                              "alone runs a synthetic MVTec AD set")
        index = indexed_with_targets(args, args.data, lambda: SampleIndex.from_folder(args.data))
        return target_epochs(args, index, args.data)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.data:
        root = args.data
    else:
        w, h = args.size
        kind = "" if (args.format, args.bit_depth) == ("jpeg", 8) else f"-{args.format}{args.bit_depth}"
        root = Path(args.cache) / f"defects-{args.images}-{w}x{h}-q{args.quality}-s{args.seed}{kind}"
        t0 = time.perf_counter()
        generate_defect_dataset(root, n=args.images, size=args.size, quality=args.quality, seed=args.seed,
                                format=args.format, bit_depth=args.bit_depth)
        print(f"data: {root} [{time.perf_counter() - t0:.1f} s]")  # the library logs what it generated
    t0 = time.perf_counter()
    index = SampleIndex.from_folder(root)  # the library logs the summary
    index.save(out / "index.npz")
    print(f"index: {out / 'index.npz'} [{time.perf_counter() - t0:.2f} s]")
    spec = demo_spec(args.out_size, args.bit_depth)  # the inspection preset: gray on purpose
    ds = ImageDataset(index, spec, seed=args.seed)
    sampler = WeightedSampler(index, seed=args.seed)
    name, _, reason = choose_backend(args.device, args.backend)
    log.debug("backend choice for device=%s backend=%s: %s (%s)", args.device, args.backend, name, reason)
    with warnings.catch_warnings():  # said below in the command's own terms (--backend), not DaliLoader's
        warnings.simplefilter("ignore", FallbackWarning)
        loader = DaliLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                            device=args.device, backend=args.backend)
    batches = f"{len(loader)} batch{'' if len(loader) == 1 else 'es'}"
    print(f"loader: {loader.backend} ({reason}), {batches} of {args.batch_size} per epoch")
    first = None
    counts = np.zeros(len(index.classes), np.int64)
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        t0 = time.perf_counter()
        n = 0
        for b, (images, labels) in enumerate(loader):
            if first is None:
                first = (images[:16], labels[:16], time.perf_counter() - t0)
            n += len(labels)
            counts += np.bincount(labels.cpu().numpy(), minlength=len(index.classes))
            log.debug("epoch %d batch %d: %d images after %.3f s", epoch, b, len(labels), time.perf_counter() - t0)
        dt = time.perf_counter() - t0
        print(f"epoch {epoch}: {n} images in {dt:.2f} s = {n / dt:.1f} img/s")
    share = ", ".join(f"{c} {k / counts.sum():.1%}" for c, k in zip(index.classes, counts))
    stored = ", ".join(f"{c} {k / len(index):.1%}" for c, k in zip(index.classes, index.class_counts()))
    print(f"class balance drawn: {share} (on disk: {stored})")
    print(f"first batch after {first[2]:.2f} s")
    preview = out / "preview.png"
    save_preview(first[0], first[1], index.classes, spec, preview)
    print(f"preview: {preview}")
    loader.close()
    return 0
