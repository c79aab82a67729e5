"""The cost of carrying masks and boxes against images alone, on both backends (issue 35).

    PYTHONPATH=. python scripts/targets_cost.py [--images 96] [--size 320 256] [--workers 2] [--epochs 3]

One synthetic MVTec AD category (``test``: good and defect images with masks) and one COCO-annotated
folder of the same size; each loader runs ``--epochs`` passes of the same recipe (RandomResizedCrop,
flip, rotation, affine, colour) after one warm-up pass, the passes of images alone (the same index
without targets) and of images with targets alternating, so that a busy machine slows both; the best
pass's img/s and the least CPU per image of the process tree (the loaders' workers included: steadier
than img/s on a shared machine) are reported for: images alone, with masks, with boxes. A short
measurement: rerun on a quiet machine for numbers to quote.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path


def arguments(description: str) -> argparse.ArgumentParser:
    """The options both cost scripts take (this one and ``targets_remote_cost.py``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--images", type=int, default=96, help="images per set (default 96)")
    ap.add_argument("--size", type=int, nargs=2, default=(320, 256), metavar=("W", "H"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--backends", nargs="+", default=["torch", "dali"])
    return ap


def mvtec_set(folder: Path, images: int, size) -> Path:
    """One synthetic MVTec AD category under ``folder``: ``images`` test images, a third good, and its masks."""
    from dali_backend.core.defects import generate_mvtec

    per_kind = max(1, images // 3)
    return generate_mvtec(folder, n_train=1, n_good=images - 2 * per_kind, n_defect=per_kind, size=tuple(size))


def per_sample(masks, boxes, spec, batch_size: int = 16, repeats: int = 5) -> None:
    """The fallback's cost per sample in this process, on one torch thread as in a loader worker (best of
    ``repeats`` over the set, ms): a sample's
    image (read, decode, operations), its mask read (PNG decode and checks), its mask through the
    operations' kernels, and a sample's boxes through theirs; the issue's goal is mask read + kernels
    within the mask's decode plus one nearest pass (the ratio printed)."""
    import cv2
    import numpy as np

    from dali_backend import ImageDataset
    from dali_backend.transforms.targets import Boxes, move_masks, move_targets
    from scripts.mask_kernels_cost import best_ms  # PYTHONPATH=. as the usage line says

    def best(fn, items) -> float:
        return best_ms(fn, list(items), repeats)

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a DataLoader worker: the resize's torch.mm on one thread

    ds = ImageDataset(masks, spec)
    reader = ds.reader
    t = masks.annotations
    with_mask = [i for i in range(len(masks)) if t.mask_path(i) is not None]
    size = {i: (int(masks.heights[i]), int(masks.widths[i])) for i in range(len(masks))}
    params = {i: spec.make_params(0, 0, i, size[i]) for i in with_mask}
    read = {i: t.read_mask(reader, i, size[i]) for i in with_mask}
    out = spec.transforms[0].size
    mx, my = (a.astype(np.float32) for a in np.meshgrid(np.arange(out[1], dtype=np.float32),
                                                        np.arange(out[0], dtype=np.float32)))
    image_ms = best(lambda i: ds.load_draw_with_params(i), with_mask)
    read_ms = best(lambda i: t.read_mask(reader, i, size[i]), with_mask)
    data = {i: np.frombuffer(t.mask_bytes(reader, i)[0], np.uint8) for i in with_mask}
    decode_ms = best(lambda i: cv2.imdecode(data[i], cv2.IMREAD_UNCHANGED), with_mask)
    batches = [with_mask[k:k + batch_size] for k in range(0, len(with_mask), batch_size)]  # as a loader moves them
    kernel_ms = batch_ms = float("inf")
    for _ in range(repeats):  # alternated: a busy spell slows both
        kernel_ms = min(kernel_ms, best_ms(lambda i: move_targets(spec.transforms, params[i], read[i]), with_mask, 1))
        batch_ms = min(batch_ms, best_ms(lambda b: move_masks([(spec.transforms, params[i], read[i]) for i in b]),
                                         batches, 1) * len(batches) / len(with_mask))
    # the same chain without its warps (rotation, affine): crops, flips and resizes, one gather together
    from dali_backend.transforms import RandomAffine, RandomRotation

    keep = [k for k, op in enumerate(spec.transforms) if not isinstance(op, (RandomRotation, RandomAffine))]
    flat_ops = [spec.transforms[k] for k in keep]
    flat = {i: [params[i][k] for k in keep] for i in with_mask}
    flat_ms = best_ms(lambda b: move_masks([(flat_ops, flat[i], read[i]) for i in b]), batches, repeats) * len(
        batches) / len(with_mask)
    nearest_ms = best(lambda i: cv2.remap(read[i], mx, my, cv2.INTER_NEAREST), with_mask)
    b = boxes.annotations
    bsize = {i: (int(boxes.heights[i]), int(boxes.widths[i])) for i in range(len(boxes))}
    bparams = {i: spec.make_params(0, 0, i, bsize[i]) for i in range(len(boxes))}
    box_ms = best(lambda i: move_targets(spec.transforms, bparams[i], None, Boxes.of_index(*b.boxes_of(i), bsize[i])),
                  range(len(boxes)))
    from dali_backend.dali.targetgraph import mask_wire, moved_boxes  # the DALI reader worker's share

    wire_ms = best(lambda i: mask_wire(spec, params[i], size[i]), with_mask)
    note_ms = best(lambda i: moved_boxes(spec, bparams[i], b, i, bsize[i], ds.box_policy), range(len(boxes)))
    torch.set_num_threads(threads)
    print(f"\nfallback, per sample in one process (best of {repeats}): image {image_ms:.2f} ms; mask read "
          f"{read_ms:.2f} ms (its PNG decode {decode_ms:.2f} ms) + mask kernels {kernel_ms:.2f} ms alone, "
          f"{batch_ms:.2f} ms in batches of {batch_size} as the loader moves them (one plain nearest pass "
          f"{nearest_ms:.3f} ms): {(read_ms + batch_ms) / (decode_ms + nearest_ms):.2f}x the mask's decode + "
          f"one nearest pass; boxes {box_ms:.3f} ms ({100 * box_ms / image_ms:.1f} % of the image's)")
    print(f"without the warps (rotation, affine): mask kernels {flat_ms:.2f} ms in batches: "
          f"{(read_ms + flat_ms) / (decode_ms + nearest_ms):.2f}x the mask's decode + one nearest pass")
    print(f"DALI reader worker, per sample: a mask's steps (sizes, matrices) {wire_ms:.3f} ms beside its read; "
          f"boxes moved into the note {note_ms:.3f} ms")


def batch_stages(masks, boxes, spec, batch_size: int = 16, repeats: int = 5) -> None:
    """Where a torch batch's extra time goes beyond its images (ms per batch, best of ``repeats``): the
    worker's collation of the targets (``collate_targets``: masks stacked, boxes concatenated), their
    pickling across the worker queue (torch's ``ForkingPickler``, dumped and loaded in this process:
    tensors by shared memory, the rest by value), the boxes as one array against a tensor per image
    (the form before), and the training process's split of the boxes into per-image tensors."""
    import io
    import pickle

    import numpy as np
    import torch
    import torch.multiprocessing  # noqa: F401  (registers the tensor reductions on ForkingPickler)
    from multiprocessing.reduction import ForkingPickler  # what a DataLoader worker's queue pickles with

    from dali_backend import ImageDataset
    from fallback.samples import collate_targets, split_boxes
    from scripts.mask_kernels_cost import best_ms

    def crossing(batch) -> None:
        buf = io.BytesIO()
        ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(batch)
        pickle.loads(buf.getvalue())

    for name, index in (("masks", masks), ("boxes", boxes)):
        ds = ImageDataset(index, spec)
        targets = [ds.load_draw_with_params(i, targets=True)[4] for i in range(batch_size)]
        collate = best_ms(lambda t: collate_targets(t, None), [targets], repeats)
        full = collate_targets(targets, None)
        ipc = best_ms(crossing, [full], repeats)
        line = f"torch batch of {batch_size} with {name}: collate {collate:.3f} ms, queue pickling {ipc:.3f} ms"
        if name == "boxes":
            old = [torch.from_numpy(np.array(t["boxes"], np.float32)) for t in targets]
            old_ipc = best_ms(crossing, [old + [torch.from_numpy(np.array(t["box_labels"])) for t in targets]], repeats)
            line += f" (a tensor per image: {old_ipc:.3f} ms), split {best_ms(split_boxes, [full], repeats):.3f} ms"
        print(line, flush=True)


def tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process and every process below it (the loaders' workers): on a
    machine shared with other jobs, CPU per image moves far less than img/s (docs: FACTS, peers)."""
    parents: dict[int, int] = {}
    spent: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            parents[int(name)] = int(fields[1])
            spent[int(name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += spent.get(pid, 0.0)
        todo += [c for c, p in parents.items() if p == pid]
    return total


def main() -> None:
    from dali_backend import AugmentSpec, DaliLoader, ImageDataset, SampleIndex
    from dali_backend import transforms as T
    from dali_backend.core.defects import generate_detection
    from dali_backend.targets import read_coco

    args = arguments(__doc__.splitlines()[0]).parse_args()
    warnings.simplefilter("ignore")
    tmp = Path(tempfile.mkdtemp(prefix="targets-cost-"))
    root = mvtec_set(tmp / "mvtec", args.images, args.size)
    masks = SampleIndex.from_mvtec(root, "plate", "test")
    det = tmp / "det"
    boxes = SampleIndex.from_annotations(det, read_coco(generate_detection(det, n=args.images, size=tuple(args.size)), det))
    plain_masks = SampleIndex.from_folder(root / "plate", split="test")
    plain_boxes = SampleIndex(boxes.root, boxes.paths, boxes.labels, boxes.classes, boxes.sizes, boxes.mtimes,
                              boxes.widths, boxes.heights)  # the same files, without targets
    spec = AugmentSpec(ops=[T.RandomResizedCrop(224, scale=(0.5, 1.0)), T.RandomHorizontalFlip(), T.RandomRotation(15),
                            T.RandomAffine(10, translate=(0.05, 0.05), scale=(0.9, 1.1), shear=5),
                            T.ColorJitter(0.3, 0.3)], color="rgb")
    per_sample(masks, boxes, spec, args.batch_size)
    batch_stages(masks, boxes, spec, args.batch_size)
    rows = []
    for backend in args.backends:
        for (name, index), (what, with_targets) in ((("images (MVTec set)", plain_masks), ("+ masks", masks)),
                                                    (("images (COCO set)", plain_boxes), ("+ boxes", boxes))):
            loaders = [DaliLoader(ImageDataset(ix, spec), batch_size=args.batch_size, shuffle=True, seed=0,
                                  num_workers=args.workers, backend=backend, telemetry=False)
                       for ix in (index, with_targets)]
            rates: list[list[float]] = [[], []]
            cpu: list[list[float]] = [[], []]  # CPU ms per image of the process tree, per pass
            for epoch in range(args.epochs + 1):  # the two loaders' passes alternate: the machine's load hits both
                for k, loader in enumerate(loaders):
                    loader.set_epoch(epoch)
                    t0, c0, n = time.perf_counter(), tree_cpu_s(), 0
                    for batch in loader:
                        n += len(batch["image"] if isinstance(batch, dict) else batch[0])
                    if epoch:  # the first pass warms up (workers, caches)
                        rates[k].append(n / (time.perf_counter() - t0))
                        cpu[k].append(1e3 * (tree_cpu_s() - c0) / n)
            for loader in loaders:
                loader.close()
            for label, r, c in zip((name, what), rates, cpu):
                rows.append((backend, label, max(r), min(c)))
                print(f"{backend:6s} {label:20s} {max(r):8.1f} img/s (best of {len(r)}; median {sorted(r)[len(r) // 2]:.1f}); "
                      f"CPU {min(c):.2f} ms/img (least; median {sorted(c)[len(c) // 2]:.2f})", flush=True)
    print("\ncost against images alone (best pass of each, passes alternated):")
    for k in range(0, len(rows), 2):
        (backend, _, base, base_cpu), (_, what, with_t, with_cpu) = rows[k], rows[k + 1]
        print(f"{backend:6s} {what:8s} {100 * (1 - with_t / base):6.1f} % of the throughput lost; "
              f"{100 * (with_cpu / base_cpu - 1):6.1f} % more CPU per image")

if __name__ == "__main__":
    main()
