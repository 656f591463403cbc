"""ZIP CRC-32s (issue 26, section 3): every member of a torch.save file or an
.npz archive records the CRC-32 of its bytes.  A byte that changed is found
by ckpt.load (copy=True), load_into, convert, `ckpt convert` and `ckpt
verify`, which name the file, the member and the tensor; check_crc=False
(--no-check-crc) reads what is there; a DEFLATE member whose declared size
its stream contradicts is refused; views are not checked, as documented."""
import os
import struct
import warnings
import subprocess
import zipfile
import zlib

import numpy as np
import pytest
import torch

import ckpt
from statuses import status_of

CKPT_BIN = os.environ.get("CKPT_BIN")
needs_cli = pytest.mark.skipif(not CKPT_BIN, reason="CKPT_BIN is not set")


def cli(*args):
    return subprocess.run([CKPT_BIN, *map(str, args)], capture_output=True, text=True)


def local_data_offset(raw, info):
    """Where a member's (stored or compressed) data starts: after its local header."""
    at = info.header_offset
    name_len, extra_len = struct.unpack_from("<HH", raw, at + 26)
    return at + 30 + name_len + extra_len


def flip_stored(path, member, at_in_member):
    """Flips one bit of a stored member's byte, leaving its recorded CRC-32."""
    raw = bytearray(path.read_bytes())
    info = zipfile.ZipFile(path).getinfo(member)
    assert info.compress_type == zipfile.ZIP_STORED and at_in_member < info.file_size
    raw[local_data_offset(raw, info) + at_in_member] ^= 0x10
    path.write_bytes(bytes(raw))


def rewrite_member(path, member, new_bytes, crc=None, declared_size=None):
    """Rewrites the archive with `member` holding new_bytes (compressed as it
    was), then patches its CRC-32 (to `crc`) and declared size in the local
    header and the central directory, as a damaged archive would have them."""
    src = zipfile.ZipFile(path)
    infos = src.infolist()
    contents = {i.filename: src.read(i.filename) for i in infos}
    src.close()
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w") as out:
        for i in infos:
            zi = zipfile.ZipInfo(i.filename, date_time=i.date_time)
            zi.compress_type = i.compress_type
            out.writestr(zi, new_bytes if i.filename == member else contents[i.filename])
    raw = bytearray(tmp.read_bytes())
    z = zipfile.ZipFile(tmp)
    info = z.getinfo(member)
    # Its central directory entry: the one that names it.
    name = member.encode()
    central = None
    pos = 0
    while True:
        pos = raw.find(b"PK\x01\x02", pos)
        if pos < 0:
            break
        n = struct.unpack_from("<H", raw, pos + 28)[0]
        if raw[pos + 46:pos + 46 + n] == name:
            central = pos
        pos += 4
    assert central is not None
    z.close()
    if crc is not None:
        struct.pack_into("<I", raw, info.header_offset + 14, crc)
        struct.pack_into("<I", raw, central + 16, crc)
    if declared_size is not None:
        struct.pack_into("<I", raw, info.header_offset + 22, declared_size)
        struct.pack_into("<I", raw, central + 24, declared_size)
    path.write_bytes(bytes(raw))
    tmp.unlink()


def flip_keeping_crc(path, member, at_in_member):
    """A member (stored or DEFLATE) whose byte at_in_member changed while its
    recorded CRC-32 is still the original's."""
    original = zipfile.ZipFile(path).read(member)
    changed = bytearray(original)
    changed[at_in_member] ^= 0x10
    rewrite_member(path, member, bytes(changed), crc=zlib.crc32(original))


def rezip(path, compression):
    """The archive with every member recompressed (torch reads re-zipped files)."""
    src = zipfile.ZipFile(path)
    members = [(i, src.read(i.filename)) for i in src.infolist()]
    src.close()
    with zipfile.ZipFile(path, "w", compression) as out:
        for i, data in members:
            out.writestr(i.filename, data)


# ---- the checkpoints: (path, {name: array}, member of the damaged tensor, its name, offset in the member)

ARRAY = np.arange(4096, dtype=np.float32).reshape(64, 64) / 7


def make_npz(tmp_path, compressed):
    path = tmp_path / ("c.npz" if compressed else "s.npz")
    (np.savez_compressed if compressed else np.savez)(path, w=ARRAY, b=np.ones(7, dtype=np.float64))
    header = len(zipfile.ZipFile(path).read("w.npy")) - ARRAY.nbytes
    return path, "w.npy", "w", header + 1000


def make_torch(tmp_path, compressed, suffix=".bin"):
    path = tmp_path / ("t" + suffix)
    torch.save({"w": torch.from_numpy(ARRAY.copy()), "b": torch.ones(7, dtype=torch.float64)}, path)
    if compressed:
        rezip(path, zipfile.ZIP_DEFLATED)
    key = torch_storage_member(path, "w")
    return path, key, "w", 1000


def torch_storage_member(path, tensor):
    """The record of a tensor's storage: the first data/N whose size is the tensor's."""
    z = zipfile.ZipFile(path)
    want = ARRAY.nbytes if tensor == "w" else 7 * 8
    return next(i.filename for i in z.infolist() if "/data/" in i.filename and i.file_size == want)


KINDS = {
    "npz": lambda t: make_npz(t, False),
    "npz-compressed": lambda t: make_npz(t, True),
    "torch-bin": lambda t: make_torch(t, False),
    "torch-pt-rezipped": lambda t: make_torch(t, True, ".pt"),
}


def framework(path):
    return "np" if path.suffix == ".npz" else "pt"


def assert_names(e, path, member, tensor):
    assert status_of(e) == "CKPT_E_CHECKSUM/CKPT_D_CHECKSUM", str(e)
    assert e.path == str(path) and e.tensor == tensor, str(e)
    assert f"ZIP member '{member}'" in str(e), str(e)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_changed_byte_is_refused_everywhere(tmp_path, kind):
    path, member, tensor, at = KINDS[kind](tmp_path)
    intact = ckpt.load(path, framework(path), copy=True)
    if "compressed" in kind or "rezipped" in kind:
        flip_keeping_crc(path, member, at)
    else:
        flip_stored(path, member, at)
    if path.suffix == ".npz":  # the reference agrees that the archive is damaged
        with pytest.raises(zipfile.BadZipFile, match="CRC"):
            np.load(path)["w"]

    with pytest.raises(ckpt.Error) as e:
        ckpt.load(path, framework(path), copy=True)
    assert_names(e.value, path, member, tensor)

    target = ({"w": np.zeros_like(ARRAY), "b": np.zeros(7)} if path.suffix == ".npz"
              else {"w": torch.zeros(64, 64), "b": torch.zeros(7, dtype=torch.float64)})
    with pytest.raises(ckpt.Error) as e:
        ckpt.load_into(target, path)
    assert_names(e.value, path, member, tensor)

    out = tmp_path / "out.safetensors"
    with pytest.raises(ckpt.Error) as e:
        ckpt.convert(path, out, progress=False)
    assert_names(e.value, path, member, tensor)
    assert not out.exists()

    # Checking off: the bytes as they are (one of them changed).
    got = ckpt.load(path, framework(path), copy=True, check_crc=False)
    assert np.asarray(got["w"]).tobytes() != np.asarray(intact["w"]).tobytes()
    assert np.array_equal(np.asarray(got["b"]), np.asarray(intact["b"]))
    ckpt.load_into(target, path, check_crc=False)
    ckpt.convert(path, out, progress=False, check_crc=False)
    assert out.exists()
    out.unlink()

    with ckpt.open(path) as c:
        with pytest.raises(ckpt.Error) as e:
            c.verify(progress=False)
        assert_names(e.value, path, member, tensor)
        with pytest.raises(ckpt.Error) as e:
            c.get("w")  # a read of the whole tensor (ckpt_catalog_read)
        assert_names(e.value, path, member, tensor)
        assert np.array_equal(np.asarray(c.get("b")), np.asarray(intact["b"]))

    if CKPT_BIN:
        for args in (["verify", path], ["convert", path, out]):
            r = cli(*args)
            assert r.returncode == 1 and "[CKPT_E_CHECKSUM/CKPT_D_CHECKSUM]" in r.stderr, r.stderr
            assert f"ZIP member '{member}'" in r.stderr and f"tensor '{tensor}'" in r.stderr and str(path) in r.stderr
        assert not out.exists()
        r = cli("convert", path, out, "--no-check-crc", "-q")
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_verify_says_which_checksums_it_checked(tmp_path, kind):
    path, *_ = KINDS[kind](tmp_path)
    members = len(zipfile.ZipFile(path).infolist())
    with ckpt.open(path) as c:
        report = c.verify(progress=False, report=True)
    assert report["zip_crc32"] == members and report["tensors"] == 2 and report["tensor_digests"] == 0
    assert report["bytes"] == sum(i.file_size for i in zipfile.ZipFile(path).infolist())
    if CKPT_BIN:
        r = cli("verify", path)
        assert r.returncode == 0, r.stderr
        assert f"checked the CRC-32 of {members} ZIP members" in r.stdout, r.stdout


@needs_cli
def test_verify_says_when_a_format_records_none(tmp_path):
    import safetensors.numpy
    st = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"w": ARRAY}, str(st))
    npy = tmp_path / "m.npy"
    np.save(npy, ARRAY)
    for path, name in ((st, "safetensors"), (npy, "npy")):
        r = cli("verify", path)
        assert r.returncode == 0 and f"none recorded to check (this {name} checkpoint records no checksums" in r.stdout
        with ckpt.open(path) as c:
            assert c.verify(progress=False, report=True)["zip_crc32"] == 0
    # torch.save with compute_crc32 off records 0 for every record: no checksum.
    torch.serialization.set_crc32_options(False)
    try:
        torch.save({"w": torch.ones(3)}, tmp_path / "nocrc.bin")
    finally:
        torch.serialization.set_crc32_options(True)
    r = cli("verify", tmp_path / "nocrc.bin")
    assert r.returncode == 0 and "none recorded to check (this torch checkpoint" in r.stdout, r.stdout
    assert torch.equal(ckpt.load(tmp_path / "nocrc.bin", copy=True)["w"], torch.ones(3))


def test_a_member_whose_declared_size_its_stream_contradicts(tmp_path):
    # An .npz array member declaring 8 bytes more than its DEFLATE stream gives.
    path, member, tensor, _ = make_npz(tmp_path, True)
    data = zipfile.ZipFile(path).read(member)
    rewrite_member(path, member, data, declared_size=len(data) + 8)
    with pytest.raises(ckpt.Error) as e:
        ckpt.load(path, "np")
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID" and f"ZIP member '{member}' declares {len(data) + 8}" in str(e.value)
    assert e.value.tensor == tensor
    with ckpt.open(path) as c, pytest.raises(ckpt.Error) as e:
        c.verify(progress=False)
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID" and f"ZIP member '{member}'" in str(e.value)
    # A torch storage whose stream holds more than the record declares (and
    # whose CRC-32 is that of the declared bytes).
    path, member, tensor, _ = make_torch(tmp_path, True, ".pt")
    data = zipfile.ZipFile(path).read(member)
    rewrite_member(path, member, data + b"\0" * 16, crc=zlib.crc32(data), declared_size=len(data))
    with pytest.raises(ckpt.Error) as e:
        ckpt.load(path)
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID" and "its DEFLATE stream holds more" in str(e.value)
    assert f"ZIP member '{member}'" in str(e.value) and e.value.tensor == tensor
    if CKPT_BIN:
        r = cli("verify", path)
        assert r.returncode == 1 and "[CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID]" in r.stderr and member in r.stderr
    # A member that is not an array (np.load gives its bytes) is verify's.
    path = tmp_path / "notes.npz"
    np.savez_compressed(path, w=ARRAY)
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as z:
        z.writestr("notes.txt", b"hello " * 100)
    rewrite_member(path, "notes.txt", b"hello " * 100, declared_size=590)
    assert np.array_equal(ckpt.load(path, "np")["w"], ARRAY)
    with ckpt.open(path) as c, pytest.raises(ckpt.Error) as e:
        c.verify(progress=False)
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID" and "ZIP member 'notes.txt' declares 590 bytes" in str(e.value)


def test_a_storage_shared_by_several_tensors_is_checked_once_all_are_read(tmp_path):
    x = torch.arange(100, dtype=torch.float32)
    path = tmp_path / "views.bin"
    torch.save({"head": x[:40], "tail": x[40:], "tied": x, "t": torch.arange(12.).reshape(3, 4).t()}, path)
    members = [i.filename for i in zipfile.ZipFile(path).infolist() if "/data/" in i.filename]
    shared = next(m for m in members if zipfile.ZipFile(path).getinfo(m).file_size == 400)
    flip_stored(path, shared, 4 * 60)  # in "tail" (and "tied")
    with pytest.raises(ckpt.Error) as e:
        ckpt.load(path, copy=True)
    assert status_of(e.value) == "CKPT_E_CHECKSUM/CKPT_D_CHECKSUM" and shared in str(e.value)
    assert e.value.tensor in ("head", "tail", "tied")
    # Without "tied", head and tail still cover the storage together.
    with pytest.raises(ckpt.Error):
        ckpt.load(path, copy=True, exclude="tied")
    # One of them alone does not cover it: documented as unchecked.
    assert torch.equal(ckpt.load(path, copy=True, select="head")["head"], x[:40])
    got = ckpt.load(path, copy=True, select="tail")["tail"]
    assert not torch.equal(got, x[40:])
    # A slice reads part of the storage: unchecked too.
    ckpt.load(path, copy=True, select="tied", slices={"tied": (0, 0, 10)})
    # The transposed view's storage is intact: read whole through its strides, checked, fine.
    assert torch.equal(ckpt.load(path, copy=True, select="t")["t"], torch.arange(12.).reshape(3, 4).t())
    # on_loaded: the shared storage is checked before the last of its tensors is handed over.
    seen = []
    target = {k: torch.zeros_like(v) for k, v in torch.load(path).items()}
    with pytest.raises(ckpt.Error):
        ckpt.load_into(target, path, on_loaded=lambda name, t: seen.append(name), threads=1)
    assert len({"head", "tail", "tied"} & set(seen)) < 3


def test_a_transposed_conversion_checks_the_storage_it_reads_in_scattered_runs(tmp_path):
    # 64 MiB of f32 written transposed: each 8 MiB box of the output takes
    # 2 KiB from every row of the storage, 32768 runs in all.
    w = torch.arange(4096 * 4096, dtype=torch.float32).reshape(4096, 4096)
    path = tmp_path / "big.bin"
    torch.save({"w": w}, path)
    member = next(i.filename for i in zipfile.ZipFile(path).infolist() if "/data/" in i.filename)
    flip_stored(path, member, 40_000_000)
    with pytest.raises(ckpt.Error) as e:
        ckpt.convert(path, tmp_path / "t.safetensors", transpose="w", progress=False)
    assert status_of(e.value) == "CKPT_E_CHECKSUM/CKPT_D_CHECKSUM" and f"ZIP member '{member}'" in str(e.value)


def test_views_are_not_checked_as_documented(tmp_path):
    path, member, tensor, at = make_torch(tmp_path, False)
    flip_stored(path, member, at)
    got = ckpt.load(path)  # copy-on-write views of the file: no byte passes through ckpt
    assert got["w"].untyped_storage().data_ptr() and not torch.equal(got["w"], torch.from_numpy(ARRAY))
    with pytest.raises(ckpt.Error) as e:
        ckpt.load(path, copy=True)
    assert status_of(e.value) == "CKPT_E_CHECKSUM/CKPT_D_CHECKSUM"


def test_dcp_items_record_crcs_too(tmp_path):
    import torch.distributed.checkpoint as dcp
    path = tmp_path / "dcp"
    with warnings.catch_warnings():  # "torch.distributed is disabled …: a single process"
        warnings.simplefilter("ignore")
        dcp.save({"w": torch.from_numpy(ARRAY.copy())}, checkpoint_id=str(path), no_dist=True)
    with ckpt.open(path) as c:
        report = c.verify(progress=False, report=True)
        info = c.tensors["w"]
    assert report["zip_crc32"] > 0 and report["tensors"] == 1
    data_file = path / info.file
    raw = bytearray(data_file.read_bytes())
    raw[info.offset + 1000] ^= 0x10
    data_file.write_bytes(bytes(raw))
    with pytest.raises(ckpt.Error) as e:
        ckpt.load(path, copy=True)
    assert status_of(e.value) == "CKPT_E_CHECKSUM/CKPT_D_CHECKSUM" and e.value.tensor == "w"
    assert torch.equal(ckpt.load(path, copy=True, check_crc=False)["w"].flatten()[:250],
                       torch.from_numpy(ARRAY).flatten()[:250])
