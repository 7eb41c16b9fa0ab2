"""The chunk replica file, format v2 (storage/storage_chunk.h), as the tests
read and patch it, independent of storage/: the one reader of test/ (used by
heal_tool.py files|blockoff|data|divergent and imported by the python tests:
sys.path.insert(0, '<src>/test/lib'); import chunkfile).

Layout: a 4 KiB header (magic "ZLCHUNK2"; u32 metadata page count at byte
28; u64 data offset at byte 40), then per metadata page two 4 KiB slots
("ZLMP", u64 sequence at 8, u64 version at 16, u32 crc32c of the slot less
its bytes 28..31 at 28, then 508 u64 entries whose low u32 is a block's
crc32c), then the data blocks of 4 KiB."""
import os
import struct

MAGIC = b'ZLCHUNK2'
PAGE = 4096
BLOCKS_PER_PAGE = 508


class NotAChunk(Exception):
    pass


def header(f, path):
    """(metadata pages, data offset) of the open chunk file f."""
    f.seek(0)
    hdr = f.read(PAGE)
    if hdr[:8] != MAGIC:
        raise NotAChunk('%s: not a format v2 chunk file (magic %r)' % (path, hdr[:8]))
    return struct.unpack_from('<I', hdr, 28)[0], struct.unpack_from('<Q', hdr, 40)[0]


def data_offset(path):
    with open(path, 'rb') as f:
        return header(f, path)[1]


def block_offset(path, block, byte=0):
    """File offset of byte BYTE of data block BLOCK."""
    return data_offset(path) + block * PAGE + byte


def read_data(f, path, off, length):
    """length bytes at offset off of the chunk's data (zeros where the sparse
    file holds nothing)."""
    f.seek(header(f, path)[1] + off)
    data = f.read(length)
    return data + b'\0' * (length - len(data))


def data(path, off, length):
    with open(path, 'rb') as f:
        return read_data(f, path, off, length)


def version(f, path):
    """The highest version of the metadata slots (0: none)."""
    pages = header(f, path)[0]
    ver = 0
    for p in range(2 * pages):
        f.seek(PAGE * (1 + p))
        slot = f.read(32)
        if slot[:4] == b'ZLMP':
            ver = max(ver, struct.unpack_from('<Q', slot, 16)[0])
    return ver


CRC_T = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    CRC_T.append(_c)


def crc32c(b):
    c = 0xffffffff
    for x in b:
        c = CRC_T[(c ^ x) & 0xff] ^ (c >> 8)
    return c ^ 0xffffffff


def divergent(path, block, byte):
    """Inverts one byte of a data block and rewrites the block's crc (and the
    slot's crc) in the current metadata slot: a copy that verifies but holds
    other data at the same version."""
    with open(path, 'r+b') as f:
        data_off = header(f, path)[1]
        page, idx = block // BLOCKS_PER_PAGE, block % BLOCKS_PER_PAGE
        slots = []
        for s in (0, 1):
            f.seek(PAGE * (1 + 2 * page + s))
            img = bytearray(f.read(PAGE))
            ok = img[:4] == b'ZLMP' and struct.unpack_from('<I', img, 28)[0] == crc32c(img[:28] + img[32:])
            if ok:
                slots.append((struct.unpack_from('<Q', img, 8)[0], s, img))
        if not slots:
            raise NotAChunk('%s: no valid metadata slot for block %d' % (path, block))
        _, s, img = max(slots)
        f.seek(data_off + block * PAGE)
        blk = bytearray(f.read(PAGE))
        blk[byte] ^= 0xff
        f.seek(data_off + block * PAGE)
        f.write(blk)
        struct.pack_into('<I', img, 32 + 8 * idx, crc32c(blk))
        struct.pack_into('<I', img, 28, crc32c(img[:28] + img[32:]))
        f.seek(PAGE * (1 + 2 * page + s))
        f.write(img)
        f.flush()
        os.fsync(f.fileno())
