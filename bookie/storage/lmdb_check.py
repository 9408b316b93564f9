"""A structural check of the LMDB index file, run before LMDB maps it.

LMDB trusts its file: a flipped bit in a page number or a node offset makes it read past a
page or past the end of the file, and the process dies of SIGBUS or SIGSEGV, answering
nothing. So before the bookie opens its index, :func:`check_index_file` walks the file as
LMDB would (the newest meta page, then every B-tree page of every table and of the free
list) and checks every number LMDB would follow: page numbers inside the file and equal to
the page's own, page kinds, node pointers and sizes inside their page, child depth,
overflow runs inside the file. A file that fails is refused with one error naming the file
and the page; the bookie then refuses to start, and ``python -m bookie --rebuild-index``
builds a new index from the entry logs.

What it does not check is the meaning of keys and values: those rows carry their own
checksums (bookie/storage/index.py ``seal``) and are audited after opening
(bookie/storage/index_audit.py).

Layout (LMDB 0.9, 64-bit): a page starts with ``pgno:u64 pad:u16 flags:u16`` and then
``lower:u16 upper:u16`` (branch and leaf pages) or ``pages:u32`` (the first page of an
overflow run); node pointers (``u16`` offsets) follow from byte 16 up to ``lower``, nodes
lie between ``upper`` and the page end as ``lo:u16 hi:u16 flags:u16 ksize:u16`` then key
then data. Pages 0 and 1 are meta pages; the one with the higher transaction id is current.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from bookie.storage.journal_files import StorageIOError

_HEADER = struct.Struct("<QHHHH")  # pgno, pad, flags, lower, upper
_OVERFLOW_PAGES = struct.Struct("<I")  # at offset 12 of an overflow page
_NODE = struct.Struct("<HHHH")  # lo, hi, flags, ksize
_DB = struct.Struct("<IHHQQQQQ")  # pad (psize in meta), flags, depth, branch, leaf, ovf, n, root
_META = struct.Struct("<IIQQ")  # magic, version, address, mapsize
_PGNO = struct.Struct("<Q")
_PAGE_HEADER = 16
_NODE_SIZE = 8
_MAGIC = 0xBEEFC0DE
_VERSION = 1
_P_BRANCH, _P_LEAF, _P_OVERFLOW, _P_META, _P_LEAF2 = 0x01, 0x02, 0x04, 0x08, 0x20
_F_BIGDATA, _F_SUBDATA, _F_DUPDATA = 0x01, 0x02, 0x04
_P_INVALID = 0xFFFFFFFFFFFFFFFF
_MAX_DEPTH = 32  # LMDB's cursor stack


class _Damaged(Exception):
    """A check failed (turned into one StorageIOError naming the file)."""


class _File:
    """The mapped file and the current meta page's limits."""

    def __init__(self, data: mmap.mmap | bytes, psize: int, last_pg: int) -> None:
        self.data = data
        self.psize = psize
        self.last_pg = last_pg

    def page(self, pgno: int, what: str) -> int:
        """The byte offset of page ``pgno``, checked to be inside the file."""
        if not 2 <= pgno <= self.last_pg:
            raise _Damaged(f"{what} names page {pgno}, outside 2..{self.last_pg}")
        offset = pgno * self.psize
        if offset + self.psize > len(self.data):
            raise _Damaged(f"{what} names page {pgno}, past the end of the file")
        stored = _PGNO.unpack_from(self.data, offset)[0]
        if stored != pgno:
            raise _Damaged(f"page {pgno} says it is page {stored}")
        return offset


def _check_tree(file: _File, root: int, depth: int, name: str, free_list: bool) -> None:
    """Every page of the B-tree at ``root`` of height ``depth`` (iterative, no recursion)."""
    if root == _P_INVALID:
        if depth != 0:
            raise _Damaged(f"table {name}: empty but of depth {depth}")
        return
    if not 1 <= depth <= _MAX_DEPTH:
        raise _Damaged(f"table {name}: depth {depth}")
    stack = [(root, 1)]
    seen: set[int] = set()
    while stack:
        pgno, level = stack.pop()
        if pgno in seen:
            raise _Damaged(f"table {name}: page {pgno} is reached twice")
        seen.add(pgno)
        where = f"table {name} page {pgno}"
        base = file.page(pgno, f"table {name}")
        _, _, flags, lower, upper = _HEADER.unpack_from(file.data, base)
        leaf = level == depth
        want = _P_LEAF if leaf else _P_BRANCH
        if flags & (_P_BRANCH | _P_LEAF | _P_OVERFLOW | _P_META | _P_LEAF2) != want:
            raise _Damaged(f"{where}: flags {flags:#x}, expected a {'leaf' if leaf else 'branch'}")
        if not _PAGE_HEADER <= lower <= upper <= file.psize or (lower - _PAGE_HEADER) % 2:
            raise _Damaged(f"{where}: bounds {lower}..{upper}")
        count = (lower - _PAGE_HEADER) // 2
        pointers = struct.unpack_from(f"<{count}H", file.data, base + _PAGE_HEADER)
        for index, pointer in enumerate(pointers):
            node = f"{where} node {index}"
            if not upper <= pointer <= file.psize - _NODE_SIZE:
                raise _Damaged(f"{node}: offset {pointer} outside {upper}..{file.psize}")
            lo, hi, node_flags, ksize = _NODE.unpack_from(file.data, base + pointer)
            key_end = pointer + _NODE_SIZE + ksize
            if key_end > file.psize:
                raise _Damaged(f"{node}: key of {ksize} bytes leaves the page")
            if not leaf:
                child = lo | hi << 16 | node_flags << 32
                stack.append((child, level + 1))
                continue
            size = lo | hi << 16
            # walog's tables are plain (no duplicates, no nested tables below MAIN).
            if node_flags & ~_F_BIGDATA and not (name == "MAIN" and node_flags == _F_SUBDATA):
                raise _Damaged(f"{node}: flags {node_flags:#x}")
            if node_flags & _F_BIGDATA:
                if key_end + 8 > file.psize:
                    raise _Damaged(f"{node}: overflow pointer leaves the page")
                run = _PGNO.unpack_from(file.data, base + key_end)[0]
                _check_overflow(file, run, size, node)
                if free_list:  # a long free list spills onto overflow pages
                    _check_free_ids(file, run * file.psize + _PAGE_HEADER, size, node)
                continue
            if key_end + size > file.psize:
                raise _Damaged(f"{node}: {size} data bytes leave the page")
            if node_flags & _F_SUBDATA:
                if size != _DB.size:
                    raise _Damaged(f"{node}: table record of {size} bytes")
                sub_name = bytes(file.data[base + pointer + _NODE_SIZE : key_end]).decode(
                    "ascii", "replace"
                )
                _, db_flags, sub_depth, *_, sub_root = _DB.unpack_from(file.data, base + key_end)
                if db_flags & 0x04:  # MDB_DUPSORT: not a walog table
                    raise _Damaged(f"{node}: table {sub_name} has duplicates")
                _check_tree(file, sub_root, sub_depth, sub_name, free_list=False)
            elif free_list:
                _check_free_ids(file, base + key_end, size, node)


def _check_overflow(file: _File, pgno: int, size: int, node: str) -> None:
    base = file.page(pgno, node)
    flags = _HEADER.unpack_from(file.data, base)[2]
    pages = _OVERFLOW_PAGES.unpack_from(file.data, base + 12)[0]
    if not flags & _P_OVERFLOW or pages < 1:
        raise _Damaged(f"{node}: page {pgno} is no overflow run")
    if pgno + pages - 1 > file.last_pg or (pgno + pages) * file.psize > len(file.data):
        raise _Damaged(f"{node}: overflow run {pgno}+{pages} leaves the file")
    if size > pages * file.psize - _PAGE_HEADER:
        raise _Damaged(f"{node}: {size} bytes in {pages} overflow pages")


def _check_free_ids(file: _File, offset: int, size: int, node: str) -> None:
    """A free-list record: a count, then that many page numbers of free pages."""
    if size < 8 or size % 8:
        raise _Damaged(f"{node}: free-list record of {size} bytes")
    count = _PGNO.unpack_from(file.data, offset)[0]
    if count != size // 8 - 1:
        raise _Damaged(f"{node}: free-list count {count} in {size} bytes")
    for (pgno,) in struct.iter_unpack("<Q", file.data[offset + 8 : offset + size]):
        if not 2 <= pgno <= file.last_pg:
            raise _Damaged(f"{node}: free page {pgno} outside the file")


def _current_meta(data: mmap.mmap | bytes) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """``(psize, last_pg, free db, main db)`` of the meta page LMDB would pick."""
    metas: list[tuple[int, int, tuple[int, ...], tuple[int, ...], int]] = []
    for page in (0, 1):
        psize = _DB.unpack_from(data, _PAGE_HEADER + _META.size)[0] if page == 0 else metas[0][0]
        if psize not in (4096, 8192, 16384, 32768, 65536) or len(data) < 2 * psize:
            raise _Damaged(f"meta page {page}: page size {psize}")
        base = page * psize
        # LMDB finds page 1 by page 0's size but maps the file by the size the meta page
        # it picks names: a meta page naming another size is damage.
        own = _DB.unpack_from(data, base + _PAGE_HEADER + _META.size)[0]
        if own != psize:
            raise _Damaged(f"meta page {page}: page size {own}, meta page 0 says {psize}")
        flags = _HEADER.unpack_from(data, base)[2]
        magic, version, _, _ = _META.unpack_from(data, base + _PAGE_HEADER)
        if not flags & _P_META or magic != _MAGIC or version != _VERSION:
            raise _Damaged(f"meta page {page}: not an LMDB 0.9 meta page")
        dbs_at = base + _PAGE_HEADER + _META.size
        free_db = _DB.unpack_from(data, dbs_at)
        main_db = _DB.unpack_from(data, dbs_at + _DB.size)
        last_pg, txnid = struct.unpack_from("<QQ", data, dbs_at + 2 * _DB.size)
        metas.append((psize, last_pg, free_db, main_db, txnid))
    # As mdb_env_pick_meta: the higher transaction id wins, page 0 on a tie.
    psize, last_pg, free_db, main_db, _ = max(metas, key=lambda m: m[4])
    return psize, last_pg, free_db, main_db


def check_index_file(path: Path) -> None:
    """Check the LMDB file ``path`` (``data.mdb``) so that LMDB can map it safely.

    Raises:
        StorageIOError: naming the file and the first damage found.
    """
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            if size == 0:
                return  # LMDB formats an empty file
            data: mmap.mmap | bytes = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        return  # a new index
    except OSError as exc:
        raise StorageIOError(f"index file {path} cannot be read: {exc}") from exc
    try:
        psize, last_pg, free_db, main_db = _current_meta(data)
        file = _File(data, psize, last_pg)
        if (last_pg + 1) * psize > size:
            raise _Damaged(f"last page {last_pg} lies past the end of the file ({size} bytes)")
        _check_tree(file, free_db[7], free_db[2], "FREE", free_list=True)
        _check_tree(file, main_db[7], main_db[2], "MAIN", free_list=False)
    except (_Damaged, struct.error) as exc:
        raise StorageIOError(
            f"index file {path} is damaged ({exc}); the bookie will not open it. Rebuild "
            "it from the entry logs with 'python -m bookie --rebuild-index ...'"
        ) from None
    finally:
        if isinstance(data, mmap.mmap):
            data.close()


__all__ = ["check_index_file"]
