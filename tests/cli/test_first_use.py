"""What a new user meets on the command line (issue 27): files that are no
checkpoint called so, diffs against quantized GGUF files that compare
values, the real reason a rule skips a tensor, the object tree as an
outline, one progress line, the help's format lists, long names, sizes,
GGUF floats, `ckpt version`, SIGINT inherited ignored, and what each rank
of a DCP dry run gets."""
import ctypes
import fcntl
import gzip
import http.server
import io
import json
import os
import re
import select
import signal
import struct
import subprocess
import termios
import threading
import time
import zipfile

import gguf
import numpy as np
import pytest
import safetensors.numpy
import torch
from ckptlib import BIN_PATH, LIB_PATH
from gguf import quants

import ckpt
from ckpt import _ckpt, _progress


def run(*args, **kw):
    return subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True, **kw)


@pytest.fixture
def model(tmp_path):
    """Matrices (quantizable), vectors and an integer tensor."""
    rng = np.random.default_rng(0)
    arrays = {}
    for i in range(3):
        arrays[f"layers.{i}.weight"] = rng.standard_normal((64, 256)).astype(np.float32)
        arrays[f"layers.{i}.norm"] = rng.standard_normal(256).astype(np.float32)
    arrays["ids"] = np.arange(10, dtype=np.int64)
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(arrays, str(path))
    return path, arrays


# ---- files that are no checkpoint ------------------------------------------


def test_files_that_are_no_checkpoint_are_called_so(tmp_path):
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("readme.txt", "hello")
    files = {
        "notes.txt": (b"These are my notes about the model.\n" * 3, "text"),
        "noise.bin": (np.random.default_rng(1).bytes(4096), "binary data of no format ckpt knows"),
        "listing.html": (b"<!DOCTYPE html>\n<html><head><title>Index of /</title></head></html>\n", "HTML, a web page"),
        "model.safetensors": (b"<html>\n<head><title>404 Not Found</title></head>\n", "HTML, a web page"),
        "w.bin.gz": (gzip.compress(b"\0" * 100), "gzip-compressed data"),
        "archive.zip": (zipped.getvalue(), "a ZIP archive that is neither torch's nor NumPy's"),
        "pytorch_model.bin": (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 12\n", "a Git LFS pointer"),
    }
    for name, (data, looks) in files.items():
        (tmp_path / name).write_bytes(data)
        r = run("inspect", tmp_path / name)
        assert r.returncode == 1 and r.stdout == "", (name, r.stderr)
        assert f"not a checkpoint ckpt reads (it looks like {looks}" in r.stderr, (name, r.stderr)
        assert "[CKPT_E_UNKNOWN_FORMAT]" in r.stderr and "header length" not in r.stderr
        for read in ("safetensors", "torch.save files (.bin, .pt, .pth)", "GGUF", "NumPy .npy", "NumPy .npz",
                     "Flax msgpack", "torch.distributed.checkpoint", "index of shards"):
            assert read in r.stderr, (name, read)
    # A damaged safetensors file is still judged by safetensors' rules.
    good = tmp_path / "good.safetensors"
    safetensors.numpy.save_file({"a": np.zeros(4, np.float32)}, str(good))
    (tmp_path / "cut.safetensors").write_bytes(good.read_bytes()[:20])
    assert "[CKPT_E_CORRUPT/CKPT_D_HEADER_PAST_END]" in run("inspect", tmp_path / "cut.safetensors").stderr


# ---- diff against quantized GGUF ----------------------------------------------


def ulps_f32(a, b):
    """The largest distance in float32 representable values (sign-magnitude)."""
    x, y = a.view(np.int32).astype(np.int64), b.view(np.int32).astype(np.int64)
    mx, my = x & 0x7FFFFFFF, y & 0x7FFFFFFF
    return int(np.where((x < 0) == (y < 0), np.abs(mx - my), mx + my).max())


def dequantized(path, names):
    """The named tensors of a GGUF file as gguf.quants dequantizes them (float32)."""
    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        if t.name in names:
            shape = tuple(int(d) for d in reversed(t.shape))
            out[t.name] = quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
    return out


def check_diff_figures(src, arrays, quantized, kinds):
    r = run("diff", src, quantized, "--json")
    assert r.returncode == 1, r.stderr
    diffs = {d["name"]: d for d in json.loads(r.stdout)["differences"]}
    want = dequantized(quantized, kinds)
    for name, kind in kinds.items():
        d = diffs[name]
        assert d["kind"] == "dtype" and d["b"]["dtype"] == kind and d["compared"] == "values", d
        a, b = arrays[name], want[name]
        delta = np.abs(a.astype(np.float64) - b.astype(np.float64))
        assert d["elements"] == a.size and d["differ"] == int((a != b).sum())
        assert d["max_abs_diff"] == delta.max()
        assert d["at"] == list(np.unravel_index(int(delta.argmax()), a.shape))
        assert d["rms_diff"] == pytest.approx(float(np.sqrt((delta ** 2).mean())), rel=1e-12)
        assert d["max_ulp_diff"] == ulps_f32(a, b) and d["ulp_dtype"] == "F32"
    text = run("diff", src, quantized).stdout
    line = next(x for x in text.splitlines() if x.startswith(f"~ {next(iter(kinds))} "))
    assert f"dtype F32 -> {next(iter(kinds.values()))}" in line and "ULP of F32, RMS " in line, line


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
def test_diff_dequantizes_a_gguf_written_by_ckpt(model, tmp_path, dtype):
    src, arrays = model
    out = tmp_path / f"m-{dtype}.gguf"
    r = run("convert", src, out, "--dtype", dtype, "-q")
    assert r.returncode == 0, r.stderr
    check_diff_figures(src, arrays, out, {f"layers.{i}.weight": dtype.upper() for i in range(3)})


def test_diff_dequantizes_a_gguf_quantized_by_the_gguf_package(model, tmp_path):
    src, arrays = model
    out = tmp_path / "gguf-py.gguf"
    types = {"layers.0.weight": "Q8_0", "layers.1.weight": "Q4_0", "layers.2.weight": "Q5_1"}
    w = gguf.GGUFWriter(str(out), "llama")
    for name, array in arrays.items():
        kind = types.get(name)
        if kind:
            qtype = gguf.GGMLQuantizationType[kind]
            w.add_tensor(name, quants.quantize(array, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    check_diff_figures(src, arrays, out, types)


# ---- why a broad rule left tensors as they are ---------------------------------


def test_quantization_names_the_real_reason_for_a_skip(model, tmp_path):
    src, _ = model
    r = run("convert", src, tmp_path / "q.gguf", "--dtype", "q8_0")
    assert r.returncode == 0, r.stderr
    line = r.stderr.splitlines()[0]
    assert line.startswith("ckpt: --dtype q8_0: 4 of the 7 matching tensors left as they are: "), line
    assert "not of a dtype it casts" not in line
    assert "1 with a dtype that is not a float, e.g. ids" in line
    assert "3 with fewer than 2 axes (quantization keeps vectors as they are" in line and "e.g. layers.0.norm" in line
    r = run("convert", src, tmp_path / "s.safetensors", "--slice", "1:0:8")
    assert "4 of the 7 matching tensors left as they are: 4 without that dimension, e.g. " in r.stderr


@pytest.mark.parametrize("dst,fmt", [("q.safetensors", "safetensors has no Q8_0 type"),
                                     ("q.pt", "torch has no Q8_0 dtype")])
def test_quantizing_into_a_format_without_block_types_is_refused(model, tmp_path, dst, fmt):
    """--dtype q8_0 into a file that cannot hold Q8_0 is refused by tensor,
    nothing written, as ckpt.convert refuses it: the command line used to
    make the quantized tensors f32 again (the rule for a GGUF source's
    blocks) and wrote the source's values unquantized, silently."""
    src, _ = model
    r = run("convert", src, tmp_path / dst, "--dtype", "q8_0")
    assert r.returncode == 1, r.stderr
    assert f"{tmp_path / dst}: tensor 'layers.0.weight': {fmt}" in r.stderr, r.stderr
    assert "[CKPT_E_UNSUPPORTED/CKPT_D_UNSUPPORTED_DTYPE]" in r.stderr
    assert not (tmp_path / dst).exists()
    r = run("convert", src, tmp_path / "q.gguf", "--dtype", "q8_0", "-q")  # a GGUF holds them
    assert r.returncode == 0, r.stderr
    r = run("convert", tmp_path / "q.gguf", tmp_path / "back.safetensors", "-q")  # a GGUF's blocks: f32
    assert r.returncode == 0, r.stderr
    assert {t.dtype for t in ckpt.open(tmp_path / "back.safetensors").tensors.values()} == {"F32", "I64"}


@pytest.mark.parametrize("rules,named", [
    (["--dtype", "q8_0"], "layers.0.weight"),               # a block type the GGUF's blocks are not: no requantizing
    (["--dtype", "q4_0"], "layers.0.weight"),               # the very type they are
    (["--dtype", "layers.1.*=q4_0"], "layers.1.weight"),    # a rule by pattern: the tensor it names is refused
    (["--dtype", "q8_0", "--dtype", "layers.[02].*=f16"], "layers.1.weight"),  # the last rule naming it decides
])
def test_a_block_type_asked_of_a_gguf_source_into_safetensors_is_refused(model, tmp_path, rules, named):
    """ckpt convert q4.gguf q.safetensors --dtype q8_0 wrote F32 with exit
    0: the rule left the Q4_0 blocks as they are (ckpt does not
    requantize), and the blocks no rule asked anything of were made f32.
    A block type asked for is refused by tensor, the last --dtype rule
    naming a tensor deciding, and nothing is written; the tensors no rule
    touched still become f32."""
    src, arrays = model
    q4 = tmp_path / "q4.gguf"
    assert run("convert", src, q4, "--dtype", "q4_0", "-q").returncode == 0
    dst = tmp_path / "q.safetensors"
    r = run("convert", q4, dst, *rules)
    assert r.returncode == 1, r.stderr
    assert f"{dst}: tensor '{named}': safetensors has no Q4_0 type" in r.stderr, r.stderr
    assert "[CKPT_E_UNSUPPORTED/CKPT_D_UNSUPPORTED_DTYPE]" in r.stderr
    assert not dst.exists() and sorted(os.listdir(tmp_path)) == ["model.safetensors", "q4.gguf"]
    # Blocks no rule touched: f32, as before; those a float rule asked for, that float.
    r = run("convert", q4, dst, "--dtype", "layers.0.*=f16", "-q")
    assert r.returncode == 0, r.stderr
    got = {n: t.dtype for n, t in ckpt.open(dst).tensors.items()}
    assert got["layers.0.weight"] == "F16" and got["layers.1.weight"] == got["layers.2.weight"] == "F32", got


def test_to_hf_refuses_a_file_name_as_to_dcp_does(tmp_path):
    """--to hf writes a directory: a DST named as a file (x.safetensors) is
    refused, as --to dcp refuses it, where it became a directory called
    x.safetensors/; an existing directory of any name is still one."""
    src = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(src), "llama")
    w.add_tensor("token_embd.weight", np.ones((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for name in ("out.safetensors", "out.pt", "out.gguf"):
        r = run("convert", src, tmp_path / name, "--to", "hf")
        assert r.returncode == 2, r.stderr
        assert f"--to hf writes a Hugging Face model directory, and '{tmp_path / name}' names a " in r.stderr
        assert not (tmp_path / name).exists()
    r = run("convert", src, tmp_path / "dcp.safetensors", "--to", "dcp")  # the rule it follows
    assert r.returncode == 2 and "not dcp output" in r.stderr
    (tmp_path / "made.safetensors").mkdir()
    r = run("convert", src, tmp_path / "made.safetensors", "--to", "hf", "--raw", "-q")  # a directory already
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "made.safetensors" / "model.safetensors").is_file()


# ---- the object tree as an outline ------------------------------------------------


def test_inspect_outlines_the_object_tree(tmp_path):
    state = {f"layer{i}.weight": torch.full((2, 2), float(i)) for i in range(30)}
    optim = {"state": {i: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(2)} for i in range(20)},
             "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": list(range(20))}]}
    torch.save({"model": state, "optimizer": optim, "epoch": 3, "note": "x" * 500}, tmp_path / "train.pt")
    assert run("convert", tmp_path / "train.pt", tmp_path / "dcp", "--to", "dcp", "-q").returncode == 0
    for path in (tmp_path / "train.pt", tmp_path / "dcp"):
        r = run("inspect", path)
        assert r.returncode == 0, r.stderr
        outline = r.stdout[r.stdout.index("Object tree:\n"):].splitlines()
        assert max(map(len, r.stdout.splitlines())) < 200  # no line of JSON tens of KB long
        assert outline[1] == "  dict (4 keys)", outline
        assert "    'model': dict (30 keys)" in outline and "      … 20 more" in outline
        assert "      'layer0.weight': tensor model.layer0.weight  F32 [2, 2]" in outline
        assert "    'epoch': 3" in outline
        assert "      'param_groups': list (1 item)" in outline and "        [0]: dict (3 keys)" in outline
        assert any(x.startswith("    'note': 'xxxx") and x.endswith("' (500 bytes)") for x in outline), outline
        # Wider and deeper on request; --json has all of it.
        wide = run("inspect", path, "--tree-width", "0", "--tree-depth", "0").stdout
        assert "'layer29.weight'" in wide and "… 20 more" not in wide and "'lr': 0.1" in wide
        shallow = run("inspect", path, "--tree-depth", "1", "--tree-width", "2").stdout
        assert "'model': dict (30 keys)\n    'optimizer': dict (2 keys)\n    … 2 more\n" in shallow
        assert "layer0" not in shallow.split("Object tree:")[1]
        doc = json.loads(run("inspect", path, "--json").stdout)
        assert len(dict(doc["tree"]["__dict__"])["model"]["__dict__"]) == 30
    r = run("inspect", tmp_path / "train.pt", "--tree-depth", "x")
    assert r.returncode == 2 and "--tree-depth needs a number" in r.stderr


# ---- one progress line ------------------------------------------------------------


def test_python_draws_the_cli_progress_line():
    out = io.StringIO()
    bar = _progress.Bar("loading", stream=out)
    bar(5 << 20, 10 << 20)
    line = out.getvalue()
    assert re.fullmatch(r"\rloading \[#+\.+\]  50%   +5\.0 MiB / 10\.0 MiB  +[\d.]+ [KMGT]?i?B/s  ETA (\d+:\d\d|-:--)",
                        line), repr(line)
    assert " GB" not in line
    # The very line the library draws for the CLI.
    assert _ckpt.progress_line(80, "loading", 5 << 20, 10 << 20, 2.0) == \
        "loading [#########.........]  50%    5.0 MiB / 10.0 MiB    2.5 MiB/s  ETA 0:02"
    assert _ckpt.format_size(1024000) == "1.0 MiB"


def test_cli_bar_keeps_its_layout_as_numbers_grow(tmp_path):
    path = tmp_path / "big.safetensors"
    safetensors.numpy.save_file({f"t{i}": np.full((32, 1 << 20), i, np.uint8) for i in range(4)}, str(path))
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    p = subprocess.Popen([BIN_PATH, "diff", path, path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=slave)
    os.close(slave)
    out = b""
    while select.select([master], [], [], 30)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=60)
    os.close(master)
    bars = [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", x) for x in out.decode().split("\r")]
    bars = [x for x in bars if x.startswith("comparing [")]
    assert len(bars) >= 2, bars
    for mark in ("]", " / ", "/s"):
        assert len({x.index(mark) for x in bars}) == 1, (mark, bars)  # nothing moves
    assert "MiB / 256.0 MiB" in bars[-1] and "ETA " in bars[0]


# ---- help, names, sizes, floats, version ---------------------------------------------


def library_formats():
    lib = ctypes.CDLL(LIB_PATH)
    lib.ckpt_format_at.restype = ctypes.c_int
    lib.ckpt_format_at.argtypes = [ctypes.c_size_t]
    lib.ckpt_format_description.restype = ctypes.c_char_p
    lib.ckpt_format_writable.argtypes = [ctypes.c_int]
    out, i = [], 0
    while lib.ckpt_format_at(i):
        f = lib.ckpt_format_at(i)
        out.append((lib.ckpt_format_description(f).decode(), bool(lib.ckpt_format_writable(f))))
        i += 1
    return out


def test_help_lists_what_the_library_reads_and_writes():
    text = run("--help").stdout
    assert "(safetensors and PyTorch)" not in text
    flat = " ".join(text.split())
    formats = library_formats()
    assert len(formats) >= 9
    for line, _ in formats:
        assert f"- {line}" in flat, line
    writes = flat[flat.index("ckpt convert writes"):]
    for line, writable in formats:
        title = line.split(":")[0]
        assert (title in writes.split(" Exit status")[0]) == writable, title


def test_long_names_lose_their_middle_in_tables(tmp_path):
    long = "model.encoder." + "very_long_module_name_" * 6 + "end.weight"
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({long: np.zeros(3, np.float32), "short": np.zeros(2, np.float32)}, str(path))
    for r in (run("inspect", path), run("convert", path, tmp_path / "o", "-n")):
        rows = [x for x in r.stdout.splitlines() if " F32 " in x and ("[3]" in x or "[2]" in x)]
        assert len(rows) == 2, r.stdout
        assert rows[0].index(" F32 ") == rows[1].index(" F32 ") <= 62, rows
        assert any(x.startswith("model.encoder.very_long_") and "…" in x and "_end.weight  " in x for x in rows), rows
    other = tmp_path / "other.safetensors"
    safetensors.numpy.save_file({long: np.ones(3, np.float32), "short": np.zeros(2, np.float32)}, str(other))
    line = run("diff", path, other).stdout.splitlines()[2]
    assert line.startswith("~ model.encoder.very_long_") and "…" in line and len(line.split("  F32")[0]) <= 52, line
    doc = json.loads(run("inspect", path, "--json").stdout)
    assert long in [t["name"] for t in doc["tensors"]]


def test_sizes_roll_over_to_the_next_unit(tmp_path):
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"a": np.zeros(1024000, np.uint8), "b": np.zeros(1023948, np.uint8)}, str(path))
    out = run("inspect", path).stdout
    assert "1000.0 KiB" not in out
    a = next(x for x in out.splitlines() if x.startswith("a "))
    b = next(x for x in out.splitlines() if x.startswith("b "))
    assert a.split()[-2:] == ["MiB", "m.safetensors"] and "1.0 MiB" in a, a
    assert "999.9 KiB" in b


def test_gguf_floats_print_their_shortest_form(tmp_path):
    path = tmp_path / "k.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32("x.third", 1 / 3)
    w.add_float64("x.tenth", 0.1)
    w.add_tensor("t", np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = run("inspect", path).stdout
    assert "llama.attention.layer_norm_rms_epsilon (f32): 1e-05\n" in out, out
    assert "x.third (f32): 0.33333334\n" in out and "x.tenth (f64): 0.1\n" in out
    doc = json.loads(run("inspect", path, "--json").stdout)
    assert np.float32(doc["gguf"]["x.third"]["value"]) == np.float32(1 / 3)
    assert '"value": 1e-05' in run("inspect", path, "--json").stdout


def test_version_in_every_usual_form():
    want = f"ckpt {ckpt.__version__}\n"
    for args in (["version"], ["-v"], ["-V"], ["--version"]):
        r = run(*args)
        assert r.returncode == 0 and r.stdout == want, (args, r.stdout, r.stderr)
    assert "version" in run("help", "version").stdout
    assert "did you mean 'version'?" in run("verison").stderr


# ---- SIGINT inherited ignored ------------------------------------------------------


class SlowRanges(http.server.BaseHTTPRequestHandler):
    """Serves one file with byte ranges; a request past the first 256 KiB
    (tensor data, after the header) waits until the test releases it."""
    data = b""
    data_asked = threading.Event()
    release = threading.Event()

    def log_message(self, *args):
        pass

    def do_GET(self):
        size = len(self.data)
        start, end = 0, size - 1
        m = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m:
            start, end = int(m[1]), min(int(m[2]) if m[2] else size - 1, size - 1)
        if start >= 1 << 18:
            type(self).data_asked.set()
            type(self).release.wait(30)
        self.send_response(206 if m else 200)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", '"v1"')
        self.send_header("Content-Length", str(end - start + 1))
        if m:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        self.wfile.write(self.data[start:end + 1])

    do_HEAD = do_GET


def convert_interrupted(url, out, ignore):
    SlowRanges.data_asked.clear()
    SlowRanges.release.clear()
    # Each case sets SIGINT itself: the tests may run with it ignored (make
    # test started by `… &` from a script), and the child inherits that.
    pre = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN if ignore else signal.SIG_DFL)  # noqa: E731
    p = subprocess.Popen([BIN_PATH, "convert", url, str(out), "--no-progress"], stderr=subprocess.PIPE, text=True,
                         preexec_fn=pre)
    try:
        assert SlowRanges.data_asked.wait(30), "ckpt never asked for the data"
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)  # as a Ctrl-C meant for the shell's foreground job
        time.sleep(0.3)
    finally:
        SlowRanges.release.set()
    _, err = p.communicate(timeout=60)
    return p.returncode, err


def test_sigint_ignored_by_the_parent_stays_ignored(tmp_path):
    rng = np.random.default_rng(0)
    src = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({f"t{i}": rng.standard_normal((256, 256)).astype(np.float32) for i in range(8)},
                                str(src))
    SlowRanges.data = src.read_bytes()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowRanges)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/m.safetensors"
    try:
        # `ckpt convert … &` in a script: SIGINT arrives ignored, and stays so.
        rc, err = convert_interrupted(url, tmp_path / "bg.safetensors", ignore=True)
        assert rc == 0, err
        assert (tmp_path / "bg.safetensors").read_bytes() == SlowRanges.data
        # In the foreground, Ctrl-C still stops it cleanly.
        rc, err = convert_interrupted(url, tmp_path / "fg.safetensors", ignore=False)
        assert rc == 130 and "interrupted" in err, (rc, err)
        assert not (tmp_path / "fg.safetensors").exists()
    finally:
        server.shutdown()


# ---- what each rank of a DCP dry run gets ------------------------------------------


def test_dcp_dry_run_lists_what_each_rank_gets(tmp_path):
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"big": np.zeros((8, 4), np.float32), "small": np.zeros((2, 4), np.float32),
                                 "scalar": np.zeros((), np.float32)}, str(path))
    r = run("convert", path, tmp_path / "dcp", "--to", "dcp", "--dcp-ranks", "4", "-n")
    assert r.returncode == 0, r.stderr
    rows = {x.split()[0]: x for x in r.stdout.splitlines() if " F32 " in x}
    assert rows["big"].endswith("4 chunks, ranks 0-3"), rows
    assert rows["small"].endswith("__0_0.distcp") and rows["scalar"].endswith("__0_0.distcp"), rows
    assert "dcp/__0_0.distcp  4.7 KiB, 3 tensors" in r.stdout
    for rank in (1, 2, 3):
        assert f"dcp/__{rank}_0.distcp  1.6 KiB, 1 tensor\n" in r.stdout
    # What the conversion writes, inspect shows alike.
    assert run("convert", path, tmp_path / "dcp", "--to", "dcp", "--dcp-ranks", "4", "-q").returncode == 0
    inspect = {x.split()[0]: x for x in run("inspect", tmp_path / "dcp").stdout.splitlines() if " F32 " in x}
    assert inspect["big"].endswith("4 chunks, ranks 0-3") and inspect["small"].endswith("__0_0.distcp")
