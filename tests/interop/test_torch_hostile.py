"""Hostile and corrupt torch files: refused with a clear status, and
nothing in them ever runs."""
import os
import pickle
import struct
import subprocess
import sys
import zipfile

import pytest
import torch
from ckptlib import BIN_PATH, Catalog, CkptError
from statuses import status_of


def torch_zip(path, pickle_bytes, extra=None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/version", "3\n")
        for name, data in (extra or {}).items():
            z.writestr(name, data)


def attacks(marker):
    cmd = f"touch {marker}"

    class OsSystem:
        def __reduce__(self):
            return (os.system, (cmd,))

    class Eval:
        def __reduce__(self):
            return (eval, (f"__import__('os').system({cmd!r})",))

    class Exec:
        def __reduce__(self):
            return (exec, (f"import os; os.system({cmd!r})",))

    class Popen:
        def __reduce__(self):
            return (subprocess.Popen, (["touch", str(marker)],))

    m = str(marker).encode()
    return {
        "os.system GLOBAL+REDUCE p2": pickle.dumps({"w": OsSystem()}, protocol=2),
        "os.system STACK_GLOBAL p4": pickle.dumps({"w": OsSystem()}, protocol=4),
        "builtins.eval p2": pickle.dumps(Eval(), protocol=2),
        "builtins.exec p4": pickle.dumps(Exec(), protocol=4),
        "subprocess.Popen p2": pickle.dumps(Popen(), protocol=2),
        "INST os.system": b"(X" + struct.pack("<I", len(cmd)) + cmd.encode() + b"ios\nsystem\n.",
        "OBJ os.system": b"(cos\nsystem\nX" + struct.pack("<I", len(cmd)) + cmd.encode() + b"o.",
        "NEWOBJ subprocess.Popen": b"\x80\x02csubprocess\nPopen\n](X\x05\x00\x00\x00touchX"
                                   + struct.pack("<I", len(m)) + m + b"e\x85\x81.",
    }


@pytest.mark.parametrize("name", list(attacks("/x")))
def test_code_execution_attempts_are_refused_without_side_effect(tmp_path, name):
    live_marker, marker = tmp_path / "live", tmp_path / "pwned"
    # The attack is real: plain pickle runs it (NEWOBJ only reaches
    # Popen.__new__, which runs nothing; it must be refused all the same).
    payload = attacks(live_marker)[name]
    subprocess.run([sys.executable, "-c", "import pickle,sys; pickle.loads(open(sys.argv[1],'rb').read())",
                    str(_write(tmp_path / "live.pkl", payload))], capture_output=True)
    assert live_marker.exists() or name.startswith("NEWOBJ"), "the hostile pickle should be live"
    path = tmp_path / "evil.pt"
    torch_zip(path, attacks(marker)[name])
    r = subprocess.run([BIN_PATH, "inspect", str(path)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "[CKPT_E_FORBIDDEN/CKPT_D_PICKLE_FORBIDDEN]" in r.stderr
    assert "archive/data.pkl: pickle byte" in r.stderr and "at byte" in r.stderr
    assert not marker.exists()
    r = subprocess.run([BIN_PATH, "convert", str(path), str(tmp_path / "out.safetensors")], capture_output=True)
    assert r.returncode == 1 and not marker.exists() and not (tmp_path / "out.safetensors").exists()


def _write(path, data):
    path.write_bytes(data)
    return path


def nested(depth):
    return b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."


def fan_out(levels):
    # l0 = []; l(i) = [l(i-1), l(i-1)] through the memo: 2**levels paths.
    out = b"\x80\x02]q\x000"
    for i in range(1, levels + 1):
        out += b"(h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"lq" + bytes([i]) + (b"0" if i < levels else b"")
    return out + b"."


@pytest.mark.parametrize("label,data,status", [
    ("deep nesting", nested(100_000), "CKPT_E_LIMIT"),
    ("self-containing list", b"\x80\x02]q\x00h\x00a.", "CKPT_E_LIMIT"),
    ("fan-out through the memo", fan_out(60), "CKPT_E_LIMIT"),
    ("memo index abuse", b"\x80\x02Nr\xff\xff\xff\x7f.", "CKPT_E_LIMIT"),
    ("huge declared length", b"\x80\x04\x8d" + (2**62).to_bytes(8, "little") + b".", "CKPT_E_CORRUPT/CKPT_D_PICKLE_INVALID"),
    ("storage outside the archive", pickle.dumps({"w": 1}, protocol=2)[:-1] + b".", None),
])
def test_resource_attacks(tmp_path, label, data, status):
    path = tmp_path / "evil.pt"
    torch_zip(path, data)
    if status is None:
        Catalog(path).close()
        return
    with pytest.raises(CkptError) as e:
        Catalog(path)
    assert status_of(e.value) == status


def real_file(tmp_path):
    path = tmp_path / "good.pt"
    torch.save({"w": torch.arange(64, dtype=torch.float32).reshape(8, 8), "b": torch.ones(8)}, path)
    return path


def test_truncations_and_corruptions(tmp_path):
    path = real_file(tmp_path)
    data = path.read_bytes()
    for cut in (10, 100, len(data) // 2, len(data) - 30, len(data) - 1):
        bad = tmp_path / f"cut{cut}.pt"
        bad.write_bytes(data[:cut])
        with pytest.raises(CkptError) as e:
            Catalog(bad)
        assert status_of(e.value) in ("CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID", "CKPT_E_TRUNCATED"), (cut, e.value)
    # Local header offset of the first central entry pointed past the data.
    first_cd = data.find(b"PK\x01\x02")
    bad = bytearray(data)
    bad[first_cd + 42:first_cd + 46] = struct.pack("<I", len(data) - 10)
    (tmp_path / "offset.pt").write_bytes(bytes(bad))
    with pytest.raises(CkptError) as e:
        Catalog(tmp_path / "offset.pt")
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID"
    # A lying size: the storage record claims to run past the data area.
    bad = bytearray(data)
    pos = first_cd
    while True:
        name_len = struct.unpack("<H", data[pos + 28:pos + 30])[0]
        name = data[pos + 46:pos + 46 + name_len]
        if name.endswith(b"data/0"):
            break
        pos = data.find(b"PK\x01\x02", pos + 4)
    bad[pos + 20:pos + 28] = struct.pack("<II", 1 << 30, 1 << 30)
    (tmp_path / "size.pt").write_bytes(bytes(bad))
    with pytest.raises(CkptError) as e:
        Catalog(tmp_path / "size.pt")
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID" and e.value.tensor.endswith("data/0")


def test_archive_layout_lies(tmp_path):
    good = zipfile.ZipFile(real_file(tmp_path))
    entries = {i.filename: good.read(i) for i in good.infolist()}
    folder = next(iter(entries)).split("/")[0]

    def build(name, mutate, compression=zipfile.ZIP_STORED):
        path = tmp_path / name
        with zipfile.ZipFile(path, "w", compression) as z:
            for n, d in mutate(dict(entries)).items():
                z.writestr(n, d)
        return path

    outside = build("outside.pt", lambda e: {**e, "elsewhere/x": b"1"})
    with pytest.raises(CkptError) as e:
        Catalog(outside)
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID"

    short = build("short.pt", lambda e: {**e, f"{folder}/data/0": e[f"{folder}/data/0"][:100]})
    with pytest.raises(CkptError) as e:
        Catalog(short)
    assert status_of(e.value) == "CKPT_E_TRUNCATED"

    bad_version = build("version.pt", lambda e: {**e, f"{folder}/.storage_alignment": b"sixty-four"})
    with pytest.raises(CkptError) as e:
        Catalog(bad_version)
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID" and e.value.tensor.endswith(".storage_alignment")

    missing = build("missing.pt", lambda e: {k: v for k, v in e.items() if not k.endswith("data/1")})
    with pytest.raises(CkptError) as e:
        Catalog(missing)
    assert status_of(e.value) == "CKPT_E_NOT_FOUND"

    path = tmp_path / "dup.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n, d in entries.items():
            z.writestr(n, d)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            z.writestr(f"{folder}/data/0", entries[f"{folder}/data/0"])
    with pytest.raises(CkptError) as e:
        Catalog(path)
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_DUPLICATE_NAME"

    deflated = build("deflated.pt", lambda e: e, zipfile.ZIP_DEFLATED)
    # A re-zipped (DEFLATE) file reads exactly, through zlib; views are refused.
    ref = torch.load(deflated, weights_only=True)
    with Catalog(deflated) as cat:
        for name, t in ref.items():
            assert cat.info(name)["compressed"]
            assert cat.read(name) == t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            assert cat.read(name, 4, 8) == t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()[4:12]
        with pytest.raises(CkptError) as e:
            cat.view("w")
        assert status_of(e.value) == "CKPT_E_INVALID_ARGUMENT"
    out = tmp_path / "deflated.safetensors"
    assert subprocess.run([BIN_PATH, "convert", str(deflated), str(out)]).returncode == 0
    import safetensors.torch
    for name, t in safetensors.torch.load_file(str(out)).items():
        assert torch.equal(t, ref[name]), name
