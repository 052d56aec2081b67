"""Damage checks for a migration journal, made before SQLite opens it and right after.

SQLite silently drops a write-ahead log cut mid-frame (and every commit after it) and may read a
database file cut mid-page without complaint; a journal that lost commits would have a rerun
send again tasks it had recorded as written, uncounted. These checks find such damage first.
"""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

WAL_MAGIC = (0x377F0682, 0x377F0683)
"""A WAL header's first word: checksums in little-endian (…82) or big-endian (…83) words."""
WAL_HEADER = 32
FRAME_HEADER = 24
DB_HEADER = b"SQLite format 3\x00"


def file_damage(path: Path) -> str | None:
    """What is wrong with the journal's database file or its WAL, read as bytes; None if
    nothing is (a missing or empty file is a new journal)."""
    if path.exists() and path.stat().st_size:
        problem = _database_damage(path)
        if problem is not None:
            return problem
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size:
        return _wal_damage(wal)
    return None


def database_damage(db: sqlite3.Connection) -> str | None:
    """SQLite's own quick_check of an open journal: None when it says ok."""
    rows = [str(row[0]) for row in db.execute("PRAGMA quick_check(5)")]
    if rows == ["ok"]:
        return None
    return "SQLite's quick_check reports: " + "; ".join(rows)


def _database_damage(path: Path) -> str | None:
    with path.open("rb") as handle:
        header = handle.read(100)
    if len(header) < 100 or not header.startswith(DB_HEADER):
        return None  # not SQLite at all: opening it says so

    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    size = path.stat().st_size
    if page_size < 512 or size % page_size:
        return f"the database file is cut mid-page ({size} bytes, pages of {page_size})"
    return None


def _wal_damage(wal: Path) -> str | None:
    """A WAL is damaged when it lost commits: cut inside a frame, or a frame of its current
    generation (matching salts) with a wrong checksum followed by more of them. A process killed
    while writing leaves at most a frame header without its page (SQLite writes the two apart)
    or a last frame half overwritten: uncommitted work, which SQLite rightly drops."""
    data = wal.read_bytes()
    size = len(data)
    if size < WAL_HEADER:
        return f"the write-ahead log is cut inside its header ({size} bytes)"
    magic, _version, page_size, _seq, salt1, salt2 = struct.unpack(">6I", data[:24])
    if magic not in WAL_MAGIC or page_size < 512 or page_size & (page_size - 1):
        return "the write-ahead log has no valid header"
    order = ">" if magic & 1 else "<"
    checksum = _checksum(data[:24], (0, 0), order)
    if checksum != struct.unpack(">2I", data[24:32]):
        return "the write-ahead log's header checksum is wrong"
    frame = FRAME_HEADER + page_size
    if (size - WAL_HEADER) % frame not in (0, FRAME_HEADER):
        return (
            f"the write-ahead log is cut mid-frame ({size} bytes, frames of {frame}): the"
            " commits in that frame and after it are lost"
        )
    bad_at: int | None = None
    for offset in range(WAL_HEADER, size - frame + 1, frame):
        head = data[offset : offset + FRAME_HEADER]
        if struct.unpack(">2I", head[8:16]) != (salt1, salt2):
            break  # an earlier generation's frame: the current one ends here
        if bad_at is not None:
            return (
                f"the write-ahead log has a frame with a wrong checksum at byte {bad_at}"
                " followed by more frames: the commits from there on are lost"
            )
        checksum = _checksum(head[:8], checksum, order)
        checksum = _checksum(data[offset + FRAME_HEADER : offset + frame], checksum, order)
        if checksum != struct.unpack(">2I", head[16:24]):
            bad_at = offset
    return None


def _checksum(data: bytes, seed: tuple[int, int], order: str) -> tuple[int, int]:
    """SQLite's WAL checksum (two 32-bit running sums over pairs of words) of data."""
    s0, s1 = seed
    words = struct.unpack(f"{order}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1
