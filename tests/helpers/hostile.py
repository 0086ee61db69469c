"""Hostile input files, made cheaply at test time (none is stored in git): gzip bombs, array
headers that claim terabytes, IDX headers whose dimensions overflow.

Each maker writes a small file (kilobytes to a few megabytes) that a reader without bounds would
turn into gigabytes or terabytes of memory.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

#: One gzip member: `_MEMBER_MIB` MiB of zeros (deflate keeps about 1 byte in 1000 of them).
_MEMBER_MIB = 64


def gzip_bomb(path: Path, inflated: int, *, head: bytes = b"") -> Path:
    """Write a gzip file of about `inflated` / 1000 bytes that inflates to `inflated` bytes:
    `head`, then zeros.

    The zeros are deflated once, streaming (zlib, `_MEMBER_MIB` MiB at most at a time), into one
    gzip member that is then repeated: RFC 1952 allows concatenated members and every gzip
    reader inflates them in turn, so a 4 GiB bomb costs one 64 MiB compression.
    """
    block = 1 << 20
    member_bytes = min(_MEMBER_MIB << 20, inflated)
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    zeros = bytes(block)
    parts = [deflater.compress(zeros) for _ in range(member_bytes // block)]
    parts.append(deflater.compress(bytes(member_bytes % block)))
    member = b"".join(parts) + deflater.flush()
    count, rest = divmod(inflated - len(head), member_bytes)
    with open(path, "wb") as out:
        if head:
            out.write(zlib.compress(head, wbits=31))
        for _ in range(count):
            out.write(member)
        if rest:
            out.write(zlib.compress(bytes(rest), wbits=31))
    return path


def idx_header(shape: tuple[int, ...]) -> bytes:
    """The IDX header of an unsigned-byte array of `shape` (each dimension below 2**32)."""
    return bytes([0, 0, 0x08, len(shape)]) + b"".join(int(d).to_bytes(4, "big") for d in shape)


def npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    """An ``.npy`` version 1.0 header claiming an array of `shape` and `descr`, data omitted."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    text += " " * (63 - (10 + len(text)) % 64) + "\n"  # the header ends on a 64-byte boundary
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin-1")


def npz_claiming(path: Path, members: dict[str, bytes]) -> Path:
    """Write an ``.npz`` (a zip, deflated) of the raw ``.npy`` member bytes `members`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(f"{name}.npy", data)
    path.write_bytes(buffer.getvalue())
    return path


#: 64 TiB of float64: the shape a hostile ``.npz`` member claims.
SHAPE_64_TIB = (8 << 40,)
