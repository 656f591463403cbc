"""Boolean options are bools: overwrite="no", check_crc="false" are true to
`if` and to the "p" format the extension used to parse them with, so a
string passed as overwrite overwrote.  Every boolean option of every public
entry point refuses anything but a bool (numpy's bool_, 0 and 1 pass) with
a TypeError naming the function and the option, before anything is read or
written."""
import os

import numpy as np
import pytest

import ckpt
import ckpt.numpy
from ckpt import _ckpt

torch = pytest.importorskip("torch")
import ckpt.torch  # noqa: E402

OLD = {"w": np.zeros(4, np.float32)}
NEW = {"w": np.ones(4, np.float32)}


@pytest.fixture
def place(tmp_path):
    """A source checkpoint, an existing output (which nothing may replace),
    and a snapshot of the directory to compare with afterwards."""
    src = tmp_path / "src.safetensors"
    ckpt.save(NEW, src)
    out = tmp_path / "out.safetensors"
    ckpt.save(OLD, out)
    return src, out


def listing(d):
    return {p: open(os.path.join(d, p), "rb").read() for p in sorted(os.listdir(d))}


def _module():
    return torch.nn.Linear(2, 2, bias=False)


# (where the message names, option, call(src, out, value))
CASES = [
    *[("ckpt.save", f, lambda s, o, v, f=f: ckpt.save(NEW, o, **{f: v}))
      for f in ("overwrite", "checksums", "no_sync", "background", "return_stats")],
    *[("ckpt.convert", f, lambda s, o, v, f=f: ckpt.convert(s, o, **{f: v}))
      for f in ("overwrite", "checksums", "no_sync", "extra_files", "ignore_unmatched", "direct", "dry_run",
                "check_crc", "source_metadata", "raw")],
    *[("ckpt.load", f, lambda s, o, v, f=f: ckpt.load(s, "numpy", **{f: v}))
      for f in ("nested", "copy", "mmap", "ignore_unmatched", "direct", "check_crc")],
    *[("ckpt.load_into", f, lambda s, o, v, f=f: ckpt.load_into({"w": np.zeros(4, np.float32)}, s, **{f: v}))
      for f in ("strict", "assign", "copy", "ignore_unmatched", "direct", "check_crc")],
    ("ckpt.open", "direct", lambda s, o, v: ckpt.open(s, direct=v)),
    ("ckpt.shapes", "nested", lambda s, o, v: ckpt.shapes(s, nested=v)),
    ("ckpt.shapes", "direct", lambda s, o, v: ckpt.shapes(s, direct=v)),
    ("Checkpoint.verify", "report", lambda s, o, v: ckpt.open(s).verify(report=v)),
    ("ckpt.recover", "check", lambda s, o, v: ckpt.recover(os.path.dirname(o), check=v)),
    ("safe_open", "direct", lambda s, o, v: ckpt.numpy.safe_open(s, direct=v)),
    ("safe_open", "direct", lambda s, o, v: ckpt.torch.load_file(s, direct=v)),
    ("ckpt.torch.save_model", "force_contiguous", lambda s, o, v: ckpt.torch.save_model(_module(), o,
                                                                                        force_contiguous=v)),
    ("ckpt.torch.load_model", "strict", lambda s, o, v: ckpt.torch.load_model(_module(), s, strict=v)),
    ("ckpt.distributed.save", "overwrite", lambda s, o, v: _distributed().save(NEW, o, overwrite=v)),
    ("ckpt.distributed.convert", "no_sync", lambda s, o, v: _distributed().convert(s, o, no_sync=v)),
    # The extension's own calls, under whatever calls them:
    ("Writer", "overwrite", lambda s, o, v: _ckpt.Writer(os.fspath(o), overwrite=v)),
    ("convert", "overwrite", lambda s, o, v: _ckpt.Plan(_ckpt.Catalog(os.fspath(s))).convert(os.fspath(o),
                                                                                              overwrite=v)),
    ("load", "check_crc", lambda s, o, v: _ckpt.Plan(_ckpt.Catalog(os.fspath(s))).load(check_crc=v)),
    ("commit_recover", "check", lambda s, o, v: _ckpt.commit_recover(os.path.dirname(o), check=v)),
]


def _distributed():
    return pytest.importorskip("ckpt.distributed")


@pytest.mark.parametrize("value", ["no", "false", None, 2, [True]])
@pytest.mark.parametrize("where,option,call", CASES, ids=[f"{w}-{o}" for w, o, _ in CASES])
def test_a_flag_that_is_not_a_bool_is_refused_and_nothing_is_written(place, where, option, call, value):
    src, out = place
    if value is None and option == "mmap":
        pytest.skip("mmap=None is its default: views unless copy=True")
    before = listing(out.parent)
    with pytest.raises(TypeError) as e:
        call(src, out, value)
    assert str(e.value) == f"{where}: {option} must be a bool, not {type(value).__name__} {value!r}"
    assert listing(out.parent) == before  # the existing output untouched, nothing new beside it


def test_progress_that_is_neither_a_bool_nor_a_callable_is_refused(place):
    src, out = place
    before = listing(out.parent)
    with pytest.raises(TypeError, match=r"^convert: progress must be None, a bool or a callable\(done, total\), "
                                        r"not str 'no'$"):
        ckpt.convert(src, out, overwrite=True, progress="no")
    assert listing(out.parent) == before


@pytest.mark.parametrize("yes,no", [(True, False), (np.True_, np.False_), (1, 0)])
def test_bools_numpy_bools_and_0_1_are_flags(place, yes, no):
    src, out = place
    with pytest.raises(ckpt.ExistsError):
        ckpt.save(NEW, out, overwrite=no)
    np.testing.assert_array_equal(ckpt.load(out, "numpy")["w"], OLD["w"])
    ckpt.save(NEW, out, overwrite=yes)
    np.testing.assert_array_equal(ckpt.load(out, "numpy", copy=yes, check_crc=no)["w"], NEW["w"])
    assert ckpt.convert(src, out, overwrite=yes, dry_run=yes)["replaces"]
