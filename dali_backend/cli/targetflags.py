"""The command line's target options, for every command that builds an index (``index``, ``preview``,
``diagnose``, ``demo --data``): masks by a pairing rule, boxes from annotation files.

* ``--masks mvtec`` (ROOT is an MVTec AD category: ``ground_truth/<defect>/<name>_mask.png``) or
  ``--masks suffix:SUFFIX`` (``<stem><SUFFIX>.png`` beside each image, or under ``--mask-dir`` in the
  same sub-folders); ``--mask-classes N`` reads the mask files as class ids ``0..N-1`` (default: 0
  and one foreground value, read as 0/1, MVTec's 0/255).
* ``--annotations FORMAT:PATH`` (``coco:FILE``, ``yolo:DIR``, ``voc:DIR``, ``csv:FILE``), repeatable:
  boxes. Detection data needs no class folders: with ``--annotations`` alone the index holds exactly
  the annotated images (``SampleIndex.from_annotations``, one class ``image``); ``--class-folders``
  (or any labelling flag: ``--split``, ``--classes``, ``--manifest``, ``--keywords``) labels by the
  usual builder and joins the boxes to it. ``--box-classes`` names VOC / CSV box classes in id order.

Values are checked by ``type=`` functions before any work starts, and the combinations by
:func:`check_target_flags`: each error names the option, the value and the fix (exit status 2).
The readers are :mod:`dali_backend.targets`' own, so an index built here records how to read its
targets again (``index --update``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .cliargs import class_list, int_range

BOX_FORMATS = {"coco": "a COCO JSON file", "yolo": "a folder holding images/ and labels/",
               "voc": "a folder of Pascal VOC .xml files", "csv": "a CSV file with one row per box"}
_FILE_FORMATS = ("coco", "csv")
SYNTHETIC = ("synthetic", None)  # demo's bare --masks: its synthetic MVTec AD set, no rule
TARGET_FLAGS = (("masks", "--masks"), ("mask_dir", "--mask-dir"), ("mask_classes", "--mask-classes"),
                ("annotations", "--annotations"), ("class_folders", "--class-folders"),
                ("box_classes", "--box-classes"))


def mask_rule(text: str) -> tuple[str, str | None]:
    """``--masks``: ``mvtec`` or ``suffix:SUFFIX`` as ``(rule, suffix)``."""
    rule, sep, suffix = text.partition(":")
    if rule == "mvtec" and not sep:
        return "mvtec", None
    if rule == "suffix" and sep and suffix and "/" not in suffix:
        return "suffix", suffix
    raise argparse.ArgumentTypeError(f"{text!r} is not a mask rule; pass mvtec (an MVTec AD category: "
                                     "ground_truth/<defect>/<name>_mask.png) or suffix:SUFFIX (the mask of "
                                     "<stem>.jpg is <stem>SUFFIX.png), e.g. suffix:_mask")


def annotation_source(text: str) -> tuple[str, Path]:
    """``--annotations``: ``FORMAT:PATH`` with FORMAT one of :data:`BOX_FORMATS`, PATH an existing file
    (coco, csv) or folder (yolo, voc), as ``(format, path)``."""
    fmt, sep, path = text.partition(":")
    if fmt not in BOX_FORMATS or not sep or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: pass FORMAT:PATH with FORMAT one of "
                                         f"{', '.join(BOX_FORMATS)}, e.g. coco:annotations.json or yolo:data")
    p = Path(path)
    want_file = fmt in _FILE_FORMATS
    if not (p.is_file() if want_file else p.is_dir()):
        raise argparse.ArgumentTypeError(f"{text!r}: {path!r} is not {BOX_FORMATS[fmt]}"
                                         f"{'' if p.exists() else ' (it does not exist)'}; check the path")
    return fmt, p


def add_target_arguments(p: argparse.ArgumentParser, masks: bool = True) -> None:
    """The target options on ``p`` (``masks=False``: the caller defines its own ``--masks``)."""
    g = p.add_argument_group("targets (masks and boxes moved with the images)")
    if masks:
        g.add_argument("--masks", type=mask_rule, metavar="RULE",
                       help="pair each image with its mask: mvtec (the data root is an MVTec AD category, masks in "
                            "ground_truth/<defect>/<name>_mask.png; pass --split test) or suffix:SUFFIX (the mask of "
                            "<stem>.jpg is <stem>SUFFIX.png beside it, or under --mask-dir); images without one are "
                            "all background")
    g.add_argument("--mask-dir", type=_existing_folder, metavar="DIR",
                   help="--masks suffix:...: the masks' folder, with the images' sub-folders (default: beside the images)")
    g.add_argument("--mask-classes", type=int_range(2, 256), metavar="N",
                   help="mask files hold class ids 0..N-1 (default: 0 and one foreground value, read as 0/1)")
    g.add_argument("--annotations", type=annotation_source, action="append", metavar="FORMAT:PATH",
                   help="boxes: coco:FILE.json, yolo:DIR (DIR/images and DIR/labels), voc:DIR (*.xml) or csv:FILE "
                        "(path,x1,y1,x2,y2,label rows); repeatable. Alone, the index holds the annotated images "
                        "(no class folders needed); with --class-folders they are labelled by their class folders")
    g.add_argument("--class-folders", action="store_true",
                   help="with --annotations: label the images by their class folders (ROOT/<class>/...) and join the "
                        "boxes, instead of indexing exactly the annotated images as one class")
    g.add_argument("--box-classes", type=class_list, metavar="NAMES",
                   help="voc: and csv: annotations: box class names in id order (default: VOC's sorted names; a "
                        "CSV's integer ids)")


def _existing_folder(text: str) -> Path:
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder; pass the folder holding the mask files")
    return Path(text)


def rule_of(args) -> tuple[str, str | None] | None:
    """The ``--masks`` rule ``args`` give (``(rule, suffix)``), or None (none, or demo's bare ``--masks``)."""
    rule = getattr(args, "masks", None)
    return None if rule is None or rule == SYNTHETIC else rule


def wants_targets(args) -> bool:
    """Whether ``args`` ask for masks or boxes of their data."""
    return rule_of(args) is not None or bool(getattr(args, "annotations", None))


def check_target_flags(args, labelled: bool = False) -> None:
    """Refuse combinations that do not apply (a ConfigError naming the option and the fix). ``labelled``:
    the command labels by a builder flag of its own (``--split``, ``--classes``, ``--manifest``, ...)."""
    from ..errors import ConfigError

    rule = (rule_of(args) or (None,))[0]
    if args.mask_dir is not None and rule != "suffix":
        raise ConfigError(f"--mask-dir {args.mask_dir} applies to --masks suffix:SUFFIX only; drop it, or pass "
                          "--masks suffix:_mask (for example)")
    if args.mask_classes is not None and rule != "suffix":
        why = "MVTec AD masks are 0/255, read as 0/1" if rule == "mvtec" else "there is no --masks"
        raise ConfigError(f"--mask-classes {args.mask_classes} applies to --masks suffix:SUFFIX only ({why}); drop it")
    if args.class_folders and not args.annotations:
        raise ConfigError("--class-folders applies to --annotations only (masks are joined to the class folders' "
                          "index anyway); drop it")
    if args.box_classes is not None and not any(f in ("voc", "csv") for f, _ in args.annotations or ()):
        raise ConfigError(f"--box-classes {','.join(args.box_classes)} applies to voc: and csv: annotations only (COCO "
                          "and YOLO files number their classes); drop it")
    if args.class_folders and labelled:
        raise ConfigError("--class-folders is implied by --split/--classes/--manifest/--keywords (they label the "
                          "images); drop it")


def target_table(args, root: Path):
    """The one table (:class:`~dali_backend.targets.TargetTable`) the flags describe for data root ``root``,
    read by :mod:`dali_backend.targets`' readers (recorded: ``index --update`` reads it again), or None."""
    from ..errors import ConfigError
    from .. import targets as readers

    tables, named = [], []
    root = Path(root).absolute()  # every path absolute: suffix_masks pairs a relative mask folder wrongly with an
    #                               absolute image folder (its keys would be read from the wrong place)
    if rule_of(args) is not None:
        rule, suffix = rule_of(args)
        if rule == "mvtec":
            tables.append(readers.mvtec_masks(mvtec_root(root)))  # keys "<category>/test/...": the MVTec root's
        else:
            tables.append(readers.suffix_masks(root, None if args.mask_dir is None else args.mask_dir.absolute(),
                                               suffix=suffix))
        named.append(f"--masks {rule}" + (f":{suffix}" if suffix else ""))
    for fmt, path in args.annotations or ():
        path = path.absolute()
        if fmt == "coco":
            tables.append(readers.read_coco(path, root))
        elif fmt == "yolo":
            tables.append(readers.read_yolo(path))
        elif fmt == "voc":
            tables.append(readers.read_voc(path, root, classes=args.box_classes))
        else:
            tables.append(readers.read_box_csv(path, root, classes=args.box_classes))
        named.append(f"--annotations {fmt}:{path}")
    if not tables:
        return None
    bases = {str(Path(t.base or root).resolve()) for t in tables}
    if len(bases) > 1:
        raise ConfigError(f"{' and '.join(named)}: their paths are relative to different folders ({', '.join(sorted(bases))}), "
                          "so one table cannot hold both; keep the masks beside the images (no --mask-dir), or "
                          "index masks and boxes in two indexes")
    return tables[0] if len(tables) == 1 else readers.merge_sources(*tables)


def mvtec_root(root: Path) -> Path:
    """The MVTec AD root above data root ``root``: ``root`` is a category (``<category>/ground_truth``,
    ``train``, ``test``) or one of its splits (``<category>/test``).

    Raises:
        ConfigError: neither, naming the layout and the fix.
    """
    from ..errors import ConfigError

    for category in (root, root.parent):
        if (category / "ground_truth").is_dir() or ((category / "train").is_dir() and (category / "test").is_dir()):
            return category.parent
    raise ConfigError(f"--masks mvtec: {root} is neither an MVTec AD category (<category>/train, test, ground_truth) "
                      "nor one of its splits (<category>/test); pass the category folder (with --split test) or its "
                      "test folder, or pair the masks with --masks suffix:SUFFIX")


def mask_options(args) -> dict:
    """``with_targets``' ``num_classes`` and ``binary`` for the flags."""
    if args.mask_classes is not None:
        return {"num_classes": args.mask_classes, "binary": False}
    return {"num_classes": 2, "binary": rule_of(args) is not None}


def boxes_only(args, labelled: bool = False) -> bool:
    """Whether the index is the annotated images alone (``from_annotations``): boxes, no masks, no labels."""
    return bool(args.annotations) and rule_of(args) is None and not args.class_folders and not labelled


def indexed_with_targets(args, root, build_plain, labelled: bool = False, **options):
    """The index the flags ask for: ``build_plain()`` (the command's own builder or loader) with the targets
    joined (``with_targets``), or, with boxes alone on a data folder, the annotated images
    (``SampleIndex.from_annotations(root, table, **options)``).

    Args:
        root: the data folder (a Path), an ``s3://`` URL, or None when ``build_plain`` loads an index file.
        labelled: a labelling flag of the command was given (``--split``, ``--classes``, ``--manifest``...).
    """
    from ..errors import ConfigError
    from ..index import SampleIndex

    check_target_flags(args, labelled)  # an option of the group without its --masks/--annotations too
    if not wants_targets(args):
        return build_plain()
    if isinstance(root, str):
        raise ConfigError(f"--masks/--annotations with the data root {root}: masks and boxes are read from a local "
                          "folder only (not yet from object storage); index a local copy")
    if root is None and args.class_folders:
        raise ConfigError("--class-folders applies to a data folder; an index file keeps its own labels: drop it")
    if root is not None and boxes_only(args, labelled):
        return SampleIndex.from_annotations(root, target_table(args, root), **options)
    index = build_plain()
    return index.with_targets(target_table(args, Path(index.root)), **mask_options(args))


def load_data_with_targets(args, arg: str = "data"):
    """:func:`~dali_backend.cli.cliargs.load_data` of ``args.<arg>`` (a data folder, URL or index file) with
    the target flags applied (:func:`indexed_with_targets`)."""
    from .cliargs import load_data

    path = getattr(args, arg)
    folder = path if isinstance(path, str) or path.is_dir() else None
    return indexed_with_targets(args, folder, lambda: load_data(path, getattr(args, "root", None),
                                                                getattr(args, "no_check", False), arg=arg))
