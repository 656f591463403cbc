"""Inputs that amplify metadata (issue 26, section 5): small files whose
parse would take memory out of proportion to them.  The library charges
what its parsers allocate to one budget per catalog, 8 times the input plus
64 MiB, and refuses beyond it with CKPT_E_LIMIT.  Each of these amplified
before that bound.  Used by tests/cli/test_amplification.py and by the
hardened suite of `make bench` (bench/hardened_suite.py).

    path = INPUTS["msgpack-nils"](folder)   # writes the file, returns its path"""
import struct

MiB = 1 << 20
FACTOR, BASE = 8, 64 * MiB  # the bound: FACTOR × the input's bytes + BASE

LEGACY_MAGIC = bytes([0x6C, 0xFC, 0x9C, 0x46, 0xF9, 0x20, 0x6A, 0xA8, 0x50, 0x19])


def bound(size):
    return FACTOR * size + BASE


def tiny_safetensors(d):
    """What the process itself takes: a one-byte tensor."""
    header = b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    path = d / "tiny.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x07")
    return path


def msgpack_nils(d):
    """A Flax msgpack document: an array of 4 M nils (4 MB)."""
    n = 4_000_000  # the document's limit on values: an array and its nils
    path = d / "nils.msgpack"
    path.write_bytes(b"\xdd" + struct.pack(">I", n - 1) + b"\xc0" * (n - 1))
    return path


def gguf_empty_arrays(d):
    """A GGUF whose one key is an array of a million empty arrays (12 MB)."""
    m = 1_000_000
    path = d / "arrays.gguf"
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1))  # version, tensors, key-values
        f.write(struct.pack("<Q", 1) + b"k" + struct.pack("<I", 9))  # "k": an array
        f.write(struct.pack("<IQ", 9, m))  # of a million arrays
        f.write(struct.pack("<IQ", 0, 0) * m)  # each of no u8
    return path


def pickle_nones(d):
    """A legacy torch.save file whose object is a list of 4 M Nones (4 MB)."""
    n = 4_000_000
    path = d / "nones.pt"
    with open(path, "wb") as f:
        f.write(b"\x80\x02\x8a\x0a" + LEGACY_MAGIC + b".")
        f.write(b"\x80\x02M" + struct.pack("<H", 1001) + b".")
        f.write(b"\x80\x02}.")
        f.write(b"\x80\x02(" + b"N" * n + b"l.")
        f.write(b"\x80\x02].")
    return path


def json_zeros(d):
    """A safetensors header (16 MB) of an array of zeros."""
    body = b'{"x":[' + b",".join([b"0"] * (8 * MiB)) + b"]}"
    path = d / "zeros.safetensors"
    path.write_bytes(struct.pack("<Q", len(body)) + body)
    return path


INPUTS = {"msgpack-nils": msgpack_nils, "gguf-empty-arrays": gguf_empty_arrays, "pickle-nones": pickle_nones,
          "safetensors-zeros": json_zeros}
