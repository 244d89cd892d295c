"""Reading recordings that may be hostile, and writing what they hold into a
folder of ours: decompression with a cap on its output (a gzip bomb is
inflated only up to the cap, then refused), and writes that stay in their folder (never
through a symlink, never half done).

A recording is data from elsewhere: a HAR saved from a page, an archive
downloaded with a page set. Nothing in it may choose where satbench writes
or how much memory it takes.
"""

from __future__ import annotations

import os
import secrets
import zlib
from pathlib import Path

#: The most a recording's archive may hold once decompressed (bytes).
MAX_ARCHIVE_BYTES = 2 << 30
#: The most one response body may hold once decoded, or be filled to when a recording left it out.
MAX_BODY_BYTES = 512 << 20
#: The most the distinct bodies of one site may hold in all.
MAX_SITE_BYTES = 4 << 30
#: The most gzip members one stream may hold (real files have one; concatenated ones a few).
MAX_MEMBERS = 10_000
#: How much compressed input is fed at a time.
CHUNK = 16 << 10


class TooLarge(ValueError):
    """Decompressed data over its cap."""


def _zlib(data: bytes, wbits: int, cap: int) -> bytes:
    """``data`` inflated, fed in chunks so that no member costs more than a chunk's copy (gzip may hold
    several members one after another, RFC 1952 2.2; zlib and raw deflate one)."""
    out = bytearray()
    view, pos, members = memoryview(data), 0, 0
    while True:
        members += 1
        if members > MAX_MEMBERS:
            raise ValueError(f"over {MAX_MEMBERS} gzip members")
        d = zlib.decompressobj(wbits)
        while not d.eof:
            if d.unconsumed_tail:
                chunk: bytes | memoryview = d.unconsumed_tail
            elif pos < len(data):
                chunk = view[pos:pos + CHUNK]
                pos += len(chunk)
            else:
                raise ValueError("truncated compressed data")
            out += d.decompress(chunk, cap + 1 - len(out))
            if len(out) > cap:
                raise TooLarge(f"over {cap} bytes once decompressed")
        pos -= len(d.unused_data)  # where the next member starts
        if wbits != 31 or pos >= len(data):
            return bytes(out)
        if data[pos] == 0:  # zero padding after the last member
            if data.count(0, pos) == len(data) - pos:
                return bytes(out)
            raise ValueError("bytes after the compressed data")


def inflate(data: bytes, encoding: str, cap: int) -> bytes:
    """``data`` decoded from ``encoding`` (gzip, deflate as zlib or raw, br), at most ``cap``
    bytes: raises :class:`TooLarge` beyond it, ValueError if the data is not what it says."""
    try:
        if encoding == "gzip":
            return _zlib(data, 31, cap)
        if encoding == "deflate":
            try:
                return _zlib(data, 15, cap)
            except zlib.error:
                return _zlib(data, -15, cap)  # raw deflate, as some servers send it
    except zlib.error as e:
        raise ValueError(f"not {encoding}: {e}") from None
    if encoding == "br":
        import brotli  # noqa: PLC0415 - only an archive of brotli bodies needs it

        d = brotli.Decompressor()
        try:
            out = bytearray(d.process(data, output_buffer_limit=cap + 1))
            while len(out) <= cap and not d.is_finished() and not d.can_accept_more_data():
                out += d.process(b"", output_buffer_limit=cap + 1 - len(out))
        except brotli.error as e:
            raise ValueError(f"not brotli: {e}") from None
        if len(out) > cap:
            raise TooLarge(f"over {cap} bytes once decompressed")
        if not d.is_finished():
            raise ValueError("truncated brotli data")
        return bytes(out)
    raise ValueError(f"unknown content encoding {encoding!r}")


def write_new(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all: a file of a random name beside it (created, never
    followed through a symlink), renamed over it. A symlink at ``path`` is replaced, not
    followed; a symlink as ``path``'s folder is refused (OSError)."""
    folder = path.parent
    if folder.is_symlink():
        raise OSError(f"{folder} is a symlink; satbench writes only into real folders")
    tmp = folder / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def real_folder(path: Path) -> Path:
    """Make ``path`` (and its parents) a folder; refuse (OSError) a symlink in its place."""
    if path.is_symlink():
        raise OSError(f"{path} is a symlink; satbench writes only into real folders")
    path.mkdir(parents=True, exist_ok=True)
    return path


__all__ = ["MAX_ARCHIVE_BYTES", "MAX_BODY_BYTES", "MAX_SITE_BYTES", "TooLarge", "inflate", "real_folder",
           "write_new"]
