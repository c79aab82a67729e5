"""The fallback's mask kernels against its image kernels, per geometric operation, in one run (issue 35:
"a mask costs at most its decode plus a nearest-neighbour pass").

    PYTHONPATH=. python scripts/mask_kernels_cost.py [--size 320 256] [--out 224] [--repeats 7]

For each operation of the recipe (RandomResizedCrop, flip, rotation, affine) and the recipe as a chain:
the image kernel (``op.apply`` on an H x W x 3 uint8 image), the mask kernel (``op.kernel_for("mask")`` on
the H x W uint8 mask, bit-exact with DALI's ``INTERP_NN``) and one plain nearest pass of the mask
(``cv2.remap`` INTER_NEAREST on float maps of the output size: the reference), each the best of
``--repeats`` runs of 20 draws, in milliseconds per sample; and the recipe's masks of a batch of 16 moved
together (``move_masks``, as the loaders move them).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def best_ms(fn, draws: list, repeats: int) -> float:
    """The best of ``repeats`` passes of ``fn(draw)`` over ``draws``, in ms per draw."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for d in draws:
            fn(d)
        best = min(best, (time.perf_counter() - t0) / len(draws))
    return 1e3 * best


def recipe(out: int):
    from dali_backend import transforms as T

    return [T.RandomResizedCrop(out, scale=(0.5, 1.0)), T.RandomHorizontalFlip(1.0), T.RandomRotation(15),
            T.RandomAffine(10, translate=(0.05, 0.05), scale=(0.9, 1.1), shear=5)]


def costs(size: tuple[int, int] = (256, 320), out: int = 224, repeats: int = 7, draws: int = 20) -> dict:
    """``{name: (image ms, mask ms, nearest-pass ms)}`` per operation and for the whole ``"recipe"``."""
    import cv2

    from dali_backend.transforms.targets import move_masks, move_targets

    rng = np.random.default_rng(0)
    h, w = size
    image = rng.integers(0, 200, (h, w, 3), np.uint8)
    mask = (rng.random((h, w)) > 0.7).astype(np.uint8)
    ops = recipe(out)
    inputs, rows = [(image, mask)], {}
    for k, op in enumerate(ops):  # each operation on what the previous ones gave (its real input size)
        img_in, mask_in = inputs[-1]
        params = [op.make_params(seed=1, epoch=0, position=j, image_size=img_in.shape[:2]) for j in range(draws)]
        kernel = type(op).kernel_for("mask")
        out_h, out_w = op.output_size(mask_in.shape, params[0])
        mx, my = (a.astype(np.float32) for a in np.meshgrid(np.arange(out_w) * mask_in.shape[1] / out_w,
                                                            np.arange(out_h) * mask_in.shape[0] / out_h))
        rows[type(op).__name__] = (best_ms(lambda p: op.apply(img_in, p), params, repeats),
                                   best_ms(lambda p: kernel(op, mask_in, p), params, repeats),
                                   best_ms(lambda p: cv2.remap(mask_in, mx, my, cv2.INTER_NEAREST), params, repeats))
        inputs.append((op.apply(img_in, params[0]), kernel(op, mask_in, params[0])))
    chains = [[op.make_params(seed=1, epoch=0, position=j, image_size=(h, w)) for op in ops] for j in range(draws)]
    # the chain's parameters come from one spec in the loaders; here each operation draws on the full size,
    # which is the same work (sizes are what the crop gives)
    def images(ps):
        x = image
        for op, p in zip(ops, ps):
            x = op.apply(x, p)
        return x

    rows["recipe"] = (best_ms(images, chains, repeats),
                      best_ms(lambda ps: move_targets(ops, ps, mask), chains, repeats),
                      sum(r[2] for r in rows.values()))
    batch = [[op.make_params(seed=1, epoch=1, position=j, image_size=(h, w)) for op in ops] for j in range(16)]
    rows["recipe, batch of 16"] = (rows["recipe"][0],  # as a loader moves them: the warps share source loops
                                   best_ms(lambda b: move_masks([(ops, ps, mask) for ps in b]), [batch], repeats) / 16,
                                   rows["recipe"][2])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, nargs=2, default=(320, 256), metavar=("W", "H"))
    ap.add_argument("--out", type=int, default=224)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    print(f"{'operation':20s} {'image ms':>9s} {'mask ms':>9s} {'nearest ms':>10s} {'mask/image':>10s}")
    for name, (img, mask, nearest) in costs((args.size[1], args.size[0]), args.out, args.repeats).items():
        print(f"{name:20s} {img:9.3f} {mask:9.3f} {nearest:10.3f} {mask / img:10.2f}")


if __name__ == "__main__":
    main()
