"""``python -m bench.index_rate [--files N] [--size WxH]``: how fast SampleIndex builds, per verify mode."""

from __future__ import annotations

import tempfile
import time

from dali_backend.cli.cliargs import OneLineParser, positive_int, size_wxh


def main(argv: list[str] | None = None) -> int:
    from dali_backend import SampleIndex
    from dali_backend.core.synthetic import generate_defect_dataset

    p = OneLineParser(prog="python -m bench.index_rate", description=__doc__)
    p.add_argument("--files", type=positive_int, default=10_000)
    p.add_argument("--size", type=size_wxh, default=(320, 240), help="image size WxH of the generated files")
    p.add_argument("--data", help="index this folder instead of generating one")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.data:
            root = args.data
        else:
            w, h = args.size
            root = generate_defect_dataset(tmp, n=args.files, size=(w, h), seed=1, progress=False)
        for verify in ("header", "header", "decode"):
            t0 = time.perf_counter()
            index = SampleIndex.from_folder(root, verify=verify, progress=False)
            dt = time.perf_counter() - t0
            print(f"verify={verify:7s} {len(index):7d} files in {dt:6.2f} s = {len(index) / dt:8.0f} files/s")
        t0 = time.perf_counter()
        index.save(f"{tmp}/i.npz")
        SampleIndex.load(f"{tmp}/i.npz")
        print(f"save + load (stat check of every file): {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
