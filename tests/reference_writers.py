"""Checkpoints written by the reference writers, for the tests of any folder."""
import pytest


def gguf_split(path, tensors, max_tensors):
    """`tensors` ({name: numpy array}) as gguf-split parts beside `path`
    (model.gguf: model-00001-of-0000N.gguf, …), written by the gguf package
    with `max_tensors` a part; the parts' paths, in order."""
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama", split_max_tensors=max_tensors)
    for name, t in tensors.items():
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sorted(path.parent.glob(path.stem + "-*-of-*.gguf"))
