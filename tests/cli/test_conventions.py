"""Command-line conventions: help for every command, 'did you mean', short
flags and --opt=value, the summary line, the formats list, and a progress
bar that fits the terminal (run under a pseudo-terminal)."""
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
from ckptlib import BIN_PATH, Catalog

COMMANDS = ["inspect", "convert", "diff", "verify", "recover"]


def run(*args, **kw):
    return subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True, **kw)


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {f"layers.{i}.weight": rng.standard_normal((64, 64)).astype(np.float32) for i in range(6)}
    arrays["bias"] = np.arange(10, dtype=np.int64)
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(arrays, str(path))
    return path


# ---- help ------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_help_for_every_command(command):
    texts = set()
    for args in (["help", command], [command, "--help"], [command, "-h"], [command, "x", "--help"]):
        r = run(*args)
        assert r.returncode == 0 and r.stderr == "", (args, r.stderr)
        assert r.stdout.startswith(f"usage: ckpt {command} "), args
        texts.add(r.stdout)
    assert len(texts) == 1  # the same text however it is asked for


def test_convert_help_names_every_value_of_to():
    """--help's --to paragraph names every value --to takes, as the refusal
    of an unknown one lists them: `hf` (a GGUF into a Hugging Face model
    directory) was missing from it."""
    r = run("convert", "a.safetensors", "b", "--to", "nonsense")
    assert r.returncode == 2
    taken = r.stderr.split("--to takes ", 1)[1].split(", not ", 1)[0].replace(" or ", ", ").split(", ")
    assert "hf" in taken and "dcp" in taken, r.stderr
    help_text = run("convert", "--help").stdout
    paragraph = help_text.split("\n  --to FORMAT", 1)[1].split("\n  --", 1)[0]
    for value in taken:
        assert re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", paragraph), (value, paragraph)


def test_cli_md_names_every_family_the_help_converts_back():
    """docs/CLI.md's GGUF → Hugging Face bullet lists the families that
    `ckpt convert --help` says it converts back: it named four of nine."""
    help_text = " ".join(run("convert", "--help").stdout.split())
    families = help_text.split("And back: SRC a llama.cpp GGUF (", 1)[1].split(")", 1)[0]
    names = [re.sub(r"'s too$", "", f.strip()) for f in families.split(",")]
    assert "gemma3" in names and "qwen3moe" in names, names
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "CLI.md").read_text().split())
    bullet = doc.split("— and back: a llama.cpp GGUF (", 1)[1].split(")", 1)[0]
    for name in names:
        assert re.search(rf"\b{re.escape(name)}\b", bullet), (name, bullet)


def test_checksums_help_says_safetensors_output_only(tmp_path):
    """--checksums and --verify are refused for every output but
    safetensors; their help said nothing of it, and CLI.md said "every
    output file"."""
    safetensors.numpy.save_file({"w": np.ones(4, np.float32)}, str(tmp_path / "w.safetensors"))
    for flag in ("--checksums", "--verify"):
        r = run("convert", tmp_path / "w.safetensors", tmp_path / "w.pt", flag)
        assert r.returncode == 2 and "no metadata to record checksums in" in r.stderr, r.stderr
    help_text = run("convert", "--help").stdout
    for flag in ("--checksums", "--verify"):
        paragraph = " ".join(help_text.split(f"\n  {flag} ", 1)[1].split("\n  --", 1)[0].split())
        assert "safetensors output only" in paragraph, (flag, paragraph)
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "CLI.md").read_text().split())
    assert "Both are for safetensors output only" in doc


def test_general_help():
    for args in (["help"], ["--help"], ["-h"], ["help", "help"]):
        r = run(*args)
        assert r.returncode == 0 and r.stdout.startswith("usage: ckpt <command>"), args
        for command in COMMANDS:
            assert f"\n  {command} " in r.stdout
    assert run("-V").stdout == run("--version").stdout != ""
    r = run()
    assert r.returncode == 2 and r.stderr.startswith("usage: ckpt") and r.stdout == ""


@pytest.mark.parametrize("typed,meant", [("inpsect", "inspect"), ("conver", "convert"), ("verfiy", "verify"),
                                         ("dif", "diff"), ("conv", "convert"), ("hlep", "help")])
def test_typo_in_command_suggests_and_nothing_more(typed, meant):
    r = run(typed, "x")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"ckpt: unknown command '{typed}'\ndid you mean '{meant}'?\n"
    r = run("help", typed)
    assert r.returncode == 2 and r.stderr == f"ckpt: unknown command '{typed}'\ndid you mean '{meant}'?\n"


def test_unknown_command_far_from_any():
    r = run("frobnicate")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["ckpt: unknown command 'frobnicate'", "Try 'ckpt help' for the list of commands."]
    r = run("--hlep")
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["ckpt: unknown option '--hlep' (did you mean '--help'?)", "Try 'ckpt --help'."]


@pytest.mark.parametrize("command,args,typed,meant", [
    ("convert", ["a", "b"], "--forse", "--force"),
    ("convert", ["a", "b"], "--max-shard=1GB", "--max-shard-size"),
    ("convert", ["a", "b"], "--no_sync", "--no-sync"),
    ("convert", ["a", "b"], "--dtypes=bf16", "--dtype"),
    ("inspect", ["a"], "--jsn", "--json"),
    ("diff", ["a", "b"], "--jason", "--json"),
    ("verify", ["a"], "--quite", "--quiet"),
])
def test_unknown_option_suggests(command, args, typed, meant):
    r = run(command, *args, typed)
    assert r.returncode == 2 and r.stdout == ""
    shown = typed.split("=")[0]
    assert r.stderr.splitlines() == [f"ckpt {command}: unknown option '{shown}' (did you mean '{meant}'?)",
                                     f"Try 'ckpt {command} --help'."]


def test_unknown_option_without_suggestion_and_one_dash_long_options():
    r = run("convert", "a", "b", "--zzzzzz")
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["ckpt convert: unknown option '--zzzzzz'", "Try 'ckpt convert --help'."]
    r = run("convert", "a", "b", "-x")
    assert r.returncode == 2 and r.stderr.splitlines()[0] == "ckpt convert: unknown option '-x'"
    # Not "-f -o rce": a long option written with one dash is refused.
    r = run("convert", "a", "b", "-force")
    assert r.returncode == 2 and "did you mean '--force'" in r.stderr
    assert "Try 'ckpt convert --help'." in r.stderr


def test_option_values_and_flags_are_checked():
    r = run("convert", "a", "b", "--force=yes")
    assert r.returncode == 2 and "option '--force' takes no value" in r.stderr
    r = run("convert", "a", "-o")
    assert r.returncode == 2 and "option '-o' needs a value" in r.stderr
    r = run("convert", "a", "b", "--prefix")
    assert r.returncode == 2 and "option '--prefix' needs a value" in r.stderr


# ---- short flags and --opt=value ------------------------------------------------


def test_output_flag_and_positional_destination(model, tmp_path):
    for args in (["-o", tmp_path / "a"], [f"-o{tmp_path / 'b'}"], [f"--output={tmp_path / 'c'}"],
                 ["--output", tmp_path / "d"], [tmp_path / "e"]):
        r = run("convert", model, *args)
        assert r.returncode == 0, (args, r.stderr)
    for d in "abcde":
        assert (tmp_path / d / "model.safetensors").read_bytes() == model.read_bytes()
    r = run("convert", model, tmp_path / "x", "-o", tmp_path / "y")
    assert r.returncode == 2 and "DST given twice" in r.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    r = run("convert", "-o", tmp_path / "y", model)  # options anywhere
    assert r.returncode == 0, r.stderr


def test_force_quiet_and_clusters(model, tmp_path):
    out = tmp_path / "out.safetensors"
    assert run("convert", model, out).returncode == 0
    r = run("convert", model, out, "--select", "bias")
    assert r.returncode == 1 and "[CKPT_E_EXISTS]" in r.stderr
    r = run("convert", model, out, "--select", "bias", "-f", "-q")
    assert r.returncode == 0 and r.stderr == "" and r.stdout == ""
    with Catalog(out) as cat:
        assert cat.names() == ["bias"]
    r = run("convert", model, "-qfo", out)  # one cluster: -q -f -o DST
    assert r.returncode == 0 and r.stderr == ""
    with Catalog(out) as cat:
        assert len(cat.names()) == 7
    r = run("convert", "--", model, tmp_path / "-dash")  # after --, names that begin with a dash
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "-dash" / "model.safetensors").exists()


def test_every_value_option_takes_equals(model, tmp_path):
    out = tmp_path / "eq"
    r = run("convert", model, out, "--max-shard-size=40KB", "--prefix=w", "--select=layers.*", "--exclude=*.5.*",
            "--rename=layers.=l.", "--dtype=*.0.*=bf16", "--slice=*.1.*=0:1/2", "--transpose=*.2.*",
            "--layout=*.3.*=OI:IO", "-q")
    assert r.returncode == 0, r.stderr
    names = sorted(os.listdir(out))
    assert names[-1] == "w.safetensors.index.json" and names[0].startswith("w-00001-of-")
    with Catalog(out) as cat:
        info = {n: cat.info(n) for n in cat.names()}
    assert sorted(info) == [f"l.{i}.weight" for i in range(5)]
    assert info["l.0.weight"]["dtype"] == "BF16"
    assert info["l.1.weight"]["shape"] == [32, 64]


def test_verify_quiet(model, tmp_path):
    out = tmp_path / "v.safetensors"
    assert run("convert", model, out, "--checksums", "-q").returncode == 0
    r = run("verify", "-q", out)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    data = bytearray(out.read_bytes())
    data[-3] ^= 1
    out.write_bytes(bytes(data))
    r = run("verify", "-q", out)
    assert r.returncode == 1 and "[CKPT_E_CHECKSUM/CKPT_D_CHECKSUM]" in r.stderr


# ---- the summary line ---------------------------------------------------------------

SUMMARY = re.compile(r"^ckpt: (wrote|verified) ([\d,]+) tensors?, ([\d.]+ (?:B|KiB|MiB|GiB)) in (\d+) files? "
                     r"(?:to (.*) )?in (\d+\.\d+) s(?: \((\d+\.\d+) ([MG])B/s\))?$")


def test_summary_line_after_convert(model, tmp_path):
    out = tmp_path / "minilm"
    r = run("convert", model, out, "--max-shard-size", "40KB")
    assert r.returncode == 0 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    m = SUMMARY.match(lines[0])
    assert m, lines[0]
    shards = [n for n in os.listdir(out) if n.endswith(".safetensors")]
    assert m[1] == "wrote" and m[2] == "7" and m[3] == "96.1 KiB" and int(m[4]) == len(shards) == 3
    assert m[5] == f"{out}/"
    seconds, rate = float(m[6]), float(m[7]) * (1e9 if m[8] == "G" else 1e6)
    if seconds > 0.05:  # the rate is bytes over time, as rounded
        assert abs(rate * seconds - 96.1 * 1024) / (96.1 * 1024) < 0.2
    # A single file; a torch source whose tied weights are written once.
    import torch
    w = torch.ones(4, 4)
    torch.save({"a": w, "b": w, "c": torch.zeros(3)}, tmp_path / "tied.bin")
    r = run("convert", tmp_path / "tied.bin", tmp_path / "tied.safetensors")
    assert r.returncode == 0, r.stderr
    m = SUMMARY.match(r.stderr.splitlines()[-1])
    assert m and m[2] == "2" and m[3] == "76 B" and m[4] == "1" and m[5] == str(tmp_path / "tied.safetensors")
    # --verify adds its own line; -q says nothing at all.
    r = run("convert", model, tmp_path / "v", "--verify")
    assert r.returncode == 0 and SUMMARY.match(r.stderr.splitlines()[0]) and "verified 7 tensors" in r.stderr
    r = run("convert", model, tmp_path / "q", "--verify", "-q")
    assert r.returncode == 0 and r.stderr == ""


def test_summary_counts_the_files_written_with_a_prefix_beside_another_checkpoint(model, tmp_path):
    out = tmp_path / "both"
    assert run("convert", model, out, "-q").returncode == 0  # model.safetensors
    r = run("convert", model, out, "--prefix", "other", "--max-shard-size", "40KB", "--select", "layers.*")
    assert r.returncode == 0, r.stderr
    m = SUMMARY.match(r.stderr.strip())
    assert m and m[2] == "6" and m[4] == "3", r.stderr


def test_summary_line_after_verify(model, tmp_path):
    out = tmp_path / "c"
    assert run("convert", model, out, "--checksums", "--max-shard-size", "40KB", "-q").returncode == 0
    r = run("verify", out)
    # One summary, on stdout: stderr is the progress bar's (on a terminal)
    # and the errors'.
    assert r.returncode == 0 and r.stderr == "", r.stderr
    m = re.fullmatch(r"(.*): OK: structure valid \(7 tensors in 3 files\); checked the XXH3-64 of 7 tensors and 3 "
                     r"headers, covering all 7 tensors: 96\.1 KiB re-read in (\d+\.\d+) s(?: \((\d+\.\d+) ([MG])B/s\))?\n",
                     r.stdout)
    assert m and m[1] == str(out), r.stdout


# ---- formats, in one list ------------------------------------------------------------


def test_help_lists_every_format_ckpt_reads():
    needles = [".safetensors file", "*.safetensors.index.json", "torch.save", "legacy", "re-zipped",
               "pytorch_model.bin.index.json", ".gguf", ".npy", ".npz", "msgpack", "torch.distributed.checkpoint",
               "https://", "directory in the Hugging Face layout"]
    blocks = []
    for command in ("inspect", "convert", "diff", "verify"):
        text = run(command, "--help").stdout
        for needle in needles:
            assert needle in text, (command, needle)
        start = text.index("  - safetensors")
        blocks.append(text[start:text.index("directory in the Hugging Face layout", start)])
    assert len(set(blocks)) == 1  # one list, shared


# ---- the progress bar, on a pseudo-terminal ---------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _winsize(fd, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))


def _read_some(fd, timeout):
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        return b""
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the other side is closed
        return None


def _spawn(args, cols, env=None):
    master, slave = os.openpty()
    _winsize(slave, cols)
    p = subprocess.Popen([BIN_PATH, *map(str, args)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=slave, env={**os.environ, **(env or {})})
    os.close(slave)
    return p, master


def _drain(p, master, out=b""):
    while True:
        chunk = _read_some(master, 30)
        if not chunk:
            break
        out += chunk
    p.wait(timeout=60)
    os.close(master)
    return out.decode()


def _segments(text):
    """What each redraw of the bar put on the line."""
    return [ANSI.sub("", s) for s in text.split("\r") if ANSI.sub("", s).startswith(("converting", "verifying", "comparing"))]


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "big.safetensors"
    safetensors.numpy.save_file({f"t{i}": np.full((32, 1 << 20), i, np.uint8) for i in range(4)}, str(path))
    return path


def test_bar_fits_a_narrow_terminal_and_says_syncing(big, tmp_path):
    start = time.monotonic()
    p, master = _spawn(["convert", big, tmp_path / "out"], 40, {"LANG": "C.UTF-8", "LC_ALL": ""})
    text = _drain(p, master)
    wall = time.monotonic() - start
    assert p.returncode == 0, text
    bars = _segments(text)
    assert len(bars) >= 2, text
    for bar in bars:
        assert len(bar) <= 39 and "\n" not in bar, repr(bar)  # never the last column: no wrap
    assert bars[0].startswith("converting [") and "0%" in bars[0]
    assert bars[-1].endswith("100%  syncing…"), bars[-1]
    # At most one redraw per 100 ms, plus the first and the last.
    assert len(bars) <= wall / 0.1 + 2
    # The bar is erased and the summary takes its line.
    assert ANSI.sub("", text.rstrip().split("\r")[-1]).startswith("ckpt: wrote 4 tensors, 128.0 MiB in 1 file")
    # Not syncing without fsync; "..." where the locale is not UTF-8.
    p, master = _spawn(["convert", big, tmp_path / "nosync", "--no-sync"], 100, {"LANG": "C", "LC_ALL": ""})
    text = _drain(p, master)
    assert p.returncode == 0 and "syncing" not in text
    assert all(len(b) <= 99 for b in _segments(text))
    assert "100%" in _segments(text)[-1] and "128.0 MiB / 128.0 MiB" in _segments(text)[-1]
    p, master = _spawn(["convert", big, tmp_path / "ascii", "-f"], 60, {"LANG": "C", "LC_ALL": ""})
    text = _drain(p, master)
    assert _segments(text)[-1].endswith("syncing...")


@pytest.mark.parametrize("cols", [12, 25, 60, 200])
def test_bar_never_wider_than_the_terminal(big, tmp_path, cols):
    p, master = _spawn(["diff", big, big], cols)
    text = _drain(p, master)
    assert p.returncode == 0
    bars = _segments(text)
    assert bars and all(len(b) <= cols - 1 for b in bars), bars
    if cols >= 60:
        assert "[" in bars[-1] and "100%" in bars[-1]


def test_bar_follows_a_resize(big, tmp_path):
    for attempt in range(5):
        p, master = _spawn(["convert", big, tmp_path / f"r{attempt}"], 120)
        before = b""
        while b"converting" not in before:
            chunk = _read_some(master, 30)
            assert chunk, before
            before += chunk
        # Stop it, narrow the terminal, tell it, let it go on.
        os.kill(p.pid, signal.SIGSTOP)
        while chunk := _read_some(master, 0.2):  # what it wrote before it stopped
            before += chunk
        _winsize(master, 40)
        os.kill(p.pid, signal.SIGWINCH)
        os.kill(p.pid, signal.SIGCONT)
        text = _drain(p, master)
        assert p.returncode == 0, text
        if b"100%" not in before:
            break  # else it finished before it could be stopped (a loaded machine): again
    wide = _segments(before.decode())
    assert wide and max(len(b) for b in wide) > 60  # it did use the width
    after = _segments(text)
    assert after and after[-1].startswith("converting") and "100%" in after[-1]
    assert all(len(b) <= 39 for b in after), after


def test_no_bar_when_stderr_is_not_a_terminal(big, tmp_path):
    r = run("convert", big, tmp_path / "p")
    assert r.returncode == 0 and "\r" not in r.stderr and "converting" not in r.stderr
    r = run("verify", big)
    assert r.returncode == 0 and "\r" not in r.stderr
    r = run("diff", big, big)
    assert r.returncode == 0 and r.stderr == ""


# ---- --dry-run -------------------------------------------------------------


def test_dry_run_lists_what_convert_would_write(model, tmp_path):
    out = tmp_path / "out"
    rules = ["--max-shard-size", "20KB", "--exclude", "bias", "--rename", "layers.=l.", "--dtype", "layers.1.*=bf16"]
    r = run("convert", model, out, "--dry-run", *rules)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "DTYPE", "SHAPE", "SIZE", "FILE"]
    # After every rule: new names, new dtypes, the excluded tensor gone.
    row = next(line for line in lines if line.startswith("l.1.weight "))
    assert row.split()[1:4] == ["BF16", "[64,", "64]"] and "(from layers.1.weight)" in row
    assert not any(line.startswith("bias") for line in lines)
    assert "Would write" in r.stdout and "model.safetensors.index.json  (index)" in r.stdout
    assert lines[-1] == "Dry run: nothing written."
    # -n and --json: the same plan as data; then the real conversion
    # writes exactly those files, sizes and tensors.
    j = run("convert", model, "-o", out, "-n", "--json", *rules)
    assert j.returncode == 0, j.stderr
    listing = json.loads(j.stdout)
    assert not out.exists()
    assert run("convert", model, out, "-q", *rules).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f["name"] for f in listing["files"]] + listing["side_files"])
    for f in listing["files"]:
        assert (out / f["name"]).stat().st_size == f["size"], f
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {t["name"]: t["file"] for t in listing["tensors"]}
    with Catalog(out) as cat:
        written = {n: (cat.info(n)["dtype"], cat.info(n)["shape"]) for n in cat.names()}
    assert written == {t["name"]: (t["dtype"], t["shape"]) for t in listing["tensors"]}
    assert listing["totals"]["parameters"] == 6 * 64 * 64
    # The same checks as the conversion: the checkpoint is there now.
    again = run("convert", model, out, "--dry-run", *rules)
    assert again.returncode == 1 and "--force" in again.stderr and again.stdout == ""
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.iterdir()}
    forced = json.loads(run("convert", model, out, "-n", "-f", "--json", *rules).stdout)
    assert sorted(forced["replaces"]) == sorted(p.name for p in out.iterdir())
    assert before == {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.iterdir()}


def test_dry_run_usage(model, tmp_path):
    r = run("convert", model, tmp_path / "o", "--json")
    assert r.returncode == 2 and "--dry-run" in r.stderr
    r = run("convert", model, tmp_path / "o", "--dry-run", "--verify")
    assert r.returncode == 2 and not (tmp_path / "o").exists()
    r = run("convert", model, tmp_path / "o", "--dry-run", "--select", "nomatch*")
    assert r.returncode == 1 and "nomatch*" in r.stderr and not (tmp_path / "o").exists()
    assert "--dry-run" in run("convert", "--help").stdout


def test_dry_run_names_with_escapes(tmp_path):
    """The listing is JSON from the library, read by the CLI's own reader:
    quotes, backslashes and non-ASCII names come through as they are, control
    characters escaped as every human output shows them ("\\x01"); --json
    keeps them exact."""
    names = ['a"b', "c\\d", "e\u00e9\u4e2d", "f\x01g", "h\U0001F600"]
    safetensors.numpy.save_file({n: np.zeros(2, np.float32) for n in names}, str(tmp_path / "m.safetensors"))
    r = subprocess.run([BIN_PATH, "convert", str(tmp_path / "m.safetensors"), str(tmp_path / "o.safetensors"), "-n"],
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    for n in names:
        shown = n.replace("\x01", "\\x01")
        assert any(line.startswith(shown + " ") for line in out.splitlines()), shown
    listing = json.loads(run("convert", tmp_path / "m.safetensors", tmp_path / "o.safetensors", "-n", "--json").stdout)
    assert sorted(t["name"] for t in listing["tensors"]) == sorted(names)


@pytest.mark.parametrize("dst,args,files", [
    ("out", ["--max-shard-size", "40KB", "--checksums"], 3),
    ("out.gguf", ["--split-max-size", "40KB"], 3),
    ("out.npz", [], 1),
    ("out.msgpack", [], 1),
    ("out", ["--to", "dcp", "--dcp-ranks", "3"], 3),
], ids=["shards-checksums", "gguf-splits", "npz", "msgpack", "dcp"])
def test_dry_run_predicts_every_output_format(model, tmp_path, dst, args, files):
    """Each output format's dry run names exactly the files the conversion
    then writes, with their sizes."""
    work = tmp_path / "work"
    work.mkdir()
    listing = json.loads(run("convert", model, dst, "-n", "--json", *args, cwd=work).stdout)
    assert sorted(os.listdir(work)) == []
    r = run("convert", model, dst, "-q", *args, cwd=work)
    assert r.returncode == 0, r.stderr
    predicted = {os.path.normpath(f["path"]): f["size"] for f in listing["files"]}
    base = os.path.dirname(next(iter(predicted)))
    predicted.update({os.path.join(base, n): None for n in listing["side_files"]})
    written = {os.path.normpath(os.path.relpath(os.path.join(d, n), work))
               for d, _, names in os.walk(work) for n in names}
    assert written == set(predicted), (written, predicted)
    for path, size in predicted.items():
        if size is not None:
            assert (work / path).stat().st_size == size, path
    assert listing["totals"]["tensors"] == 7 and len(listing["files"]) == files
