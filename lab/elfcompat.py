"""Let a binary built against glibc 2.38 load on an older glibc when the only 2.38
symbols it needs are the C23 `__isoc23_*` number parsers.

Debian sid's runc (and trixie's) is built with gcc 14, which turns `strtol` into
glibc 2.38's `__isoc23_strtol`; bookworm's glibc is 2.36, so the binary does not even
load ("version `GLIBC_2.38' not found"). The C23 variants differ from the classic ones
only in accepting a `0b` binary prefix, which runc never parses. So, in the binary's
dynamic symbol table: `__isoc23_strtol@GLIBC_2.38` becomes `strtol@GLIBC_2.2.5` (the
name by pointing into the same string, the version by its index), and the GLIBC_2.38
requirement becomes a second GLIBC_2.2.5 one (same name string and hash; marking it weak
instead makes glibc 2.36 print a warning on every exec). Nothing else of the file changes;
anything else needing 2.38 is refused.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ISOC23 = "__isoc23_"
NEWER = "GLIBC_2.38"
BASE = "GLIBC_2.2.5"
VER_FLG_WEAK = 0x2
SHT_DYNSYM = 11
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF


class ElfCompatError(ValueError):
    """The binary is not one this patch knows how to make loadable."""


@dataclass(frozen=True)
class _Section:
    type: int
    offset: int
    size: int
    link: int


def _sections(b: bytes | bytearray) -> list[_Section]:
    if b[:4] != b"\x7fELF" or b[4] != 2 or b[5] != 1:
        raise ElfCompatError("not a little-endian 64-bit ELF file")
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", b, 0x3A)
    out = []
    for k in range(shnum):
        _, typ, _, _, off, size, link = struct.unpack_from("<IIQQQQI", b, shoff + k * shentsize)
        out.append(_Section(typ, off, size, link))
    return out


def _cstr(b: bytes | bytearray, off: int) -> str:
    return bytes(b[off : b.index(b"\0", off)]).decode()


def _one(secs: list[_Section], typ: int, what: str) -> _Section:
    found = [s for s in secs if s.type == typ]
    if len(found) != 1:
        raise ElfCompatError(f"expected one {what} section, found {len(found)}")
    return found[0]


def needs_patch(data: bytes) -> bool:
    """Whether the binary asks for GLIBC_2.38 (and not as a weak requirement)."""
    return any(name == NEWER and not weak for name, _, weak, _ in _vernaux(data))


def _vernaux(b: bytes | bytearray) -> list[tuple[str, int, bool, int]]:
    """(version name, version index, weak, file offset of the entry) of every needed version."""
    secs = _sections(b)
    try:
        vn = _one(secs, SHT_GNU_VERNEED, ".gnu.version_r")
    except ElfCompatError:
        return []  # a static binary needs no versions
    strtab = secs[vn.link].offset
    out = []
    off = vn.offset
    while True:
        _, cnt, _, aux, nxt = struct.unpack_from("<HHIII", b, off)
        a = off + aux
        for _ in range(cnt):
            _, flags, other, name, anext = struct.unpack_from("<IHHII", b, a)
            out.append((_cstr(b, strtab + name), other, bool(flags & VER_FLG_WEAK), a))
            a += anext
        if not nxt:
            return out
        off += nxt


def patch(data: bytes) -> bytes:
    """The binary with its `__isoc23_*@GLIBC_2.38` imports made classic and 2.38 weak.

    Returns the bytes unchanged when the binary does not need GLIBC_2.38; raises
    ElfCompatError when it needs 2.38 for anything but the C23 parsers.
    """
    if not needs_patch(data):
        return data
    b = bytearray(data)
    secs = _sections(b)
    dynsym = _one(secs, SHT_DYNSYM, ".dynsym")
    versym = _one(secs, SHT_GNU_VERSYM, ".gnu.version")
    strtab = secs[dynsym.link].offset
    needed = _vernaux(b)
    newer = {idx for name, idx, _, _ in needed if name == NEWER}
    base = [idx for name, idx, _, _ in needed if name == BASE]
    base_entry = [entry for name, _, _, entry in needed if name == BASE]
    if not base:
        raise ElfCompatError(f"the binary needs no {BASE} to rebind the C23 parsers to")
    for k in range(dynsym.size // 24):
        ver_off = versym.offset + 2 * k
        if struct.unpack_from("<H", b, ver_off)[0] & 0x7FFF not in newer:
            continue
        name_off = struct.unpack_from("<I", b, dynsym.offset + 24 * k)[0]
        name = _cstr(b, strtab + name_off)
        if not name.startswith(ISOC23):
            raise ElfCompatError(f"{name}@{NEWER} is not a C23 parser; refusing to rebind it")
        struct.pack_into("<I", b, dynsym.offset + 24 * k, name_off + len(ISOC23))
        struct.pack_into("<H", b, ver_off, base[0])
    base_hash, _, _, base_name, _ = struct.unpack_from("<IHHII", b, base_entry[0])
    for name, _, _, entry in needed:
        if name == NEWER:  # vna_hash and vna_name: now a requirement of GLIBC_2.2.5
            struct.pack_into("<I", b, entry, base_hash)
            struct.pack_into("<I", b, entry + 8, base_name)
    return bytes(b)
