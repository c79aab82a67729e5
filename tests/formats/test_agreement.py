"""The agreement table's rule (:mod:`bench.formats_table`): every variant the index accepts decodes to
the same pixels on DALI's CPU decoder and on the fallback's, in RGB and in gray; every variant whose
decoders disagree (or one refuses) is refused at index time with its reason."""

from __future__ import annotations

import pytest

pytest.importorskip("tifffile")
pytest.importorskip("PIL")


@pytest.fixture(scope="module")
def rows():
    from bench.formats_table import table_rows

    return {r["variant"]: r for r in table_rows("cpu")}


def test_accepted_variants_agree_exactly(rows):
    accepted = [name for name, r in rows.items() if r["index"] == "accepted"]
    assert len(accepted) >= 25
    assert {name: rows[name]["agree"] for name in accepted} == {name: "exact" for name in accepted}


def test_variants_the_decoders_read_differently_are_refused_with_the_reason(rows):
    disagree = [name for name, r in rows.items() if r["agree"] != "exact"]
    assert {"TIFF RGBA", "TIFF palette", "TIFF 1-bit", "TIFF tiled 16x16"} <= set(disagree)
    for name in disagree:
        assert rows[name]["index"] != "accepted", name
    expected = {"TIFF RGBA": "alpha channel",
                "TIFF palette": "palette TIFF", "TIFF 1-bit": "1-bit TIFF", "TIFF multi-page": "multi-page TIFF",
                "TIFF tiled 16x16": "tiles of 16x16"}
    for name, reason in expected.items():
        assert reason in rows[name]["index"], (name, rows[name]["index"])


def test_every_variant_of_the_issue_has_a_row(rows):
    for needle in ("PNG gray", "PNG RGB", "PNG RGBA", "PNG palette", "PNG interlaced", "PNG 16-bit gray",
                   "PNG 16-bit RGB", "TIFF multi-page", "TIFF tiled", "TIFF LZW", "TIFF deflate", "TIFF PackBits",
                   "TIFF JPEG-compressed", "WebP lossless", "WebP lossy", "BMP 1-bit", "TIFF 1-bit"):
        assert any(name.startswith(needle) for name in rows), needle
    assert rows["PNG 16-bit RGB"]["bit_depth"] == 16 and rows["PNG 1-bit"]["bit_depth"] == 1


def test_16_bit_variants_are_accepted_and_exact_at_16_bits(rows):
    """Compared as a spec with a Window reads them: DALI's dtype=UINT16 against the fallback's decode_16."""
    for name in ("PNG 16-bit gray", "PNG 16-bit RGB", "TIFF 16-bit gray", "TIFF 16-bit RGB"):
        assert rows[name]["index"] == "accepted" and rows[name]["agree"] == "exact", (name, rows[name])


def test_the_markdown_table_prints(rows, capsys):
    from bench.formats_table import markdown

    text = markdown(list(rows.values()))
    assert text.splitlines()[0].startswith("| variant | index | DALI cpu (RGB) | OpenCV (RGB) | agree")
    assert "| PNG RGBA | accepted | 47x61x3 | 47x61x3 | exact | CPU threads |" in text
