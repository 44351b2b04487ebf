"""A matrix as a PNG image, written with zlib from NumPy (no imaging library): the HTML report
draws each attention head as one, at full resolution while its budget allows, else downsampled.

The image is a palette image (PNG colour type 3): each pixel one byte, an index into a table of
colours, the report's greens of a weight on its row's scale (``overview.head_picture``) and a grey
for the keys the mask hides. A downsampled head is drawn in blocks (``overview.block_means``):
each pixel the mean weight of its block.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np


def _chunk(kind: bytes, data: bytes) -> bytes:
    """A PNG chunk: its length, its type, its data and the CRC of type and data."""
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(indices: np.ndarray, palette: list[tuple[int, int, int]]) -> bytes:  # (h, w) uint8 -> bytes
    """The PNG file of an image whose pixels are ``indices`` into ``palette`` (at most 256 colours):
    8 bits a pixel, each row unfiltered (filter 0), compressed by zlib."""
    h, w = indices.shape
    if not 1 <= len(palette) <= 256 or int(indices.max(initial=0)) >= len(palette):
        raise ValueError(f"{len(palette)} colours for indices up to {int(indices.max(initial=0))}")
    rows = np.hstack([np.zeros((h, 1), dtype=np.uint8), indices.astype(np.uint8)])  # each row's filter byte
    header = struct.pack(">IIBBBBB", w, h, 8, 3, 0, 0, 0)  # 8-bit indices, colour type 3 (palette)
    colours = bytes(c for rgb in palette for c in rgb)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"PLTE", colours)
        + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 9))
        + _chunk(b"IEND", b"")
    )


def read_png(data: bytes) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """The indices and palette of a PNG that ``png`` wrote (unfiltered 8-bit palette rows only):
    what the tests read the report's pictures back with."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    at, chunks = 8, {}
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        chunks[kind] = chunks.get(kind, b"") + data[at + 8 : at + 8 + length]
        at += 12 + length
    w, h, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    if (depth, colour) != (8, 3):
        raise ValueError("not an 8-bit palette PNG")
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), dtype=np.uint8).reshape(h, w + 1)
    if rows[:, 0].any():
        raise ValueError("a filtered row")
    plte = chunks[b"PLTE"]
    return rows[:, 1:].copy(), [tuple(plte[k : k + 3]) for k in range(0, len(plte), 3)]  # type: ignore[misc]


__all__ = ["png", "read_png"]
