"""Rebinding `__isoc23_*@GLIBC_2.38` imports, on a synthetic ELF's version tables."""

from __future__ import annotations

import struct

import pytest

from lab import elfcompat as ec

pytestmark = pytest.mark.unit


def _elf_hash(name: str) -> int:
    h = 0
    for ch in name.encode():
        h = (h << 4) + ch
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g
    return h


def _elf(symbols: list[tuple[str, str]]) -> bytes:
    """A little-endian ELF64 with only .dynstr, .dynsym, .gnu.version and .gnu.version_r:
    symbols are (name, needed glibc version) imports from libc.so.6."""
    versions = ["GLIBC_2.2.5", "GLIBC_2.38"]
    strs = b"\0"
    off: dict[str, int] = {}
    for s in ["libc.so.6", *versions, *(n for n, _ in symbols)]:
        off[s] = len(strs)
        strs += s.encode() + b"\0"
    sym = bytes(24) + b"".join(struct.pack("<IBBHQQ", off[n], 0x12, 0, 0, 0, 0) for n, _ in symbols)
    index = {v: 2 + k for k, v in enumerate(versions)}
    versym = struct.pack(f"<{len(symbols) + 1}H", 0, *(index[v] for _, v in symbols))
    verneed = struct.pack("<HHIII", 1, len(versions), off["libc.so.6"], 16, 0)
    for k, v in enumerate(versions):
        nxt = 16 if k < len(versions) - 1 else 0
        verneed += struct.pack("<IHHII", _elf_hash(v), 0, index[v], off[v], nxt)
    body = [(3, strs, 0), (11, sym, 1), (0x6FFFFFFF, versym, 2), (0x6FFFFFFE, verneed, 1)]
    data = bytearray(64)
    shdrs = [bytes(64)]
    for typ, blob, link in body:
        shdrs.append(struct.pack("<IIQQQQIIQQ", 0, typ, 0, 0, len(data), len(blob), link, 0, 1, 0))
        data += blob
    shoff = len(data)
    data += b"".join(shdrs)
    data[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", data, 0x28, shoff)
    struct.pack_into("<HHH", data, 0x3A, 64, len(shdrs), 0)
    return bytes(data)


def _imports(data: bytes) -> list[tuple[str, str]]:
    """(name, version) of each import after patching, read back from the tables."""
    secs = ec._sections(data)
    strtab = secs[1].offset
    names = {idx: name for name, idx, _, _ in ec._vernaux(data)}
    out = []
    for k in range(1, secs[2].size // 24):
        name_off = struct.unpack_from("<I", data, secs[2].offset + 24 * k)[0]
        ver = struct.unpack_from("<H", data, secs[3].offset + 2 * k)[0]
        out.append((ec._cstr(data, strtab + name_off), names[ver]))
    return out


def test_c23_parser_is_rebound_to_the_classic_one() -> None:
    """__isoc23_strtol@GLIBC_2.38 becomes strtol@GLIBC_2.2.5; other imports stay."""
    out = ec.patch(_elf([("__isoc23_strtol", "GLIBC_2.38"), ("puts", "GLIBC_2.2.5")]))
    assert _imports(out) == [("strtol", "GLIBC_2.2.5"), ("puts", "GLIBC_2.2.5")]


def test_patched_binary_needs_no_glibc_238() -> None:
    """After the patch no GLIBC_2.38 requirement is left, so glibc 2.36 loads it silently."""
    out = ec.patch(_elf([("__isoc23_strtol", "GLIBC_2.38")]))
    assert not ec.needs_patch(out)
    assert [name for name, _, _, _ in ec._vernaux(out)] == ["GLIBC_2.2.5", "GLIBC_2.2.5"]


def test_binary_without_glibc_238_imports_is_unchanged() -> None:
    """A binary that asks nothing of 2.38 comes back byte for byte."""
    data = _elf([("puts", "GLIBC_2.2.5")])
    data = data.replace(b"GLIBC_2.38", b"GLIBC_2.17")  # the requirement itself is 2.17 now
    assert ec.patch(data) == data


def test_other_glibc_238_symbols_are_refused() -> None:
    """A 2.38 import that is not a C23 parser cannot be rebound, so the patch refuses."""
    with pytest.raises(ec.ElfCompatError, match=r"pidfd_getpid@GLIBC_2\.38 is not a C23 parser"):
        ec.patch(_elf([("pidfd_getpid", "GLIBC_2.38")]))


def test_non_elf_is_refused() -> None:
    """Bytes that are not an ELF64 file are refused."""
    with pytest.raises(ec.ElfCompatError, match="not a little-endian 64-bit ELF"):
        ec.patch(b"#!/bin/sh\n")
