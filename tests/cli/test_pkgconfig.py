"""pkg-config files as installed (issue 27, item 17): `pkg-config --static
ckpt` expands the private libraries of libcurl and the other dependencies
(Requires.private); `ckpt-static` links libckpt.a while the dependencies
stay shared (Debian ships no static libgssapi_krb5, libldap, librtmp,
libssh2, libpsl or libnghttp2, so a fully static link cannot be made
there); `ckpt_mpi` gives libckpt_mpi with MPI's flags."""
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
from ckptlib import LIB_PATH

BUILD = Path(LIB_PATH).parent

APP = r"""
#include <ckpt.h>
#include <stdio.h>
int main(int argc, char **argv) {
    ckpt_catalog *cat;
    ckpt_error err;
    if (argc != 2 || ckpt_catalog_open(argv[1], &cat, &err) != CKPT_OK) return 1;
    printf("%zu tensors\n", ckpt_catalog_tensor_count(cat));
    ckpt_catalog_close(cat);
    return 0;
}
"""


def sh(*args, env=None, check=True):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env)
    if check:
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    for tool in ("cmake", "pkg-config", "cc"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    dest = tmp_path_factory.mktemp("prefix")
    sh("cmake", "--install", BUILD, "--prefix", dest)
    pcdir = next(dest.glob("lib*/pkgconfig"))
    env = dict(os.environ, PKG_CONFIG_PATH=str(pcdir))
    return dest, env


def pkg(env, *args):
    return sh("pkg-config", *args, env=env).stdout.split()


def test_static_flags_expand_the_dependencies_private_libraries(prefix):
    _, env = prefix
    flags = pkg(env, "--static", "--libs", "ckpt")
    assert "-lckpt" in flags and "-lpthread" in flags
    for lib in ("libcurl", "libxxhash", "zlib", "liburing"):
        if sh("pkg-config", "--exists", lib, check=False).returncode:
            continue
        for flag in pkg(os.environ, "--static", "--libs-only-l", lib):
            assert flag in flags, (lib, flag, flags)  # e.g. libcurl's -lgssapi_krb5, -lssl, -lnghttp2
    assert pkg(env, "--libs", "ckpt")[-1] == "-lckpt"  # a shared link still names libckpt alone


def static_archive(lib):
    """The compiler's path to lib<name>.a, or None."""
    name = sh("cc", f"-print-file-name=lib{lib}.a").stdout.strip()
    return name if os.path.isabs(name) else None


def test_fully_static_link_where_every_archive_exists(prefix, tmp_path):
    dest, env = prefix
    libs = [f[2:] for f in pkg(env, "--static", "--libs-only-l", "ckpt")]
    missing = sorted({lib for lib in libs if lib != "ckpt" and not static_archive(lib)})
    if missing:
        pytest.skip("no static archive of " + ", ".join(f"lib{m}.a" for m in missing) +
                    " (Debian ships none for libcurl's GSSAPI, LDAP, RTMP, SSH, PSL and HTTP/2 libraries): "
                    "test_libckpt_static_with_shared_dependencies covers the link that works there")
    (tmp_path / "app.c").write_text(APP)
    sh("cc", tmp_path / "app.c", "-o", tmp_path / "app", "-static", *pkg(env, "--cflags", "--static", "--libs", "ckpt"))


def test_libckpt_static_with_shared_dependencies(prefix, tmp_path):
    dest, env = prefix
    (tmp_path / "app.c").write_text(APP)
    model = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"a": np.zeros(3, np.float32), "b": np.ones(2, np.int64)}, str(model))
    sh("cc", tmp_path / "app.c", "-o", tmp_path / "app", *pkg(env, "--cflags", "--libs", "ckpt-static"))
    needed = sh("ldd", tmp_path / "app").stdout
    assert "libckpt" not in needed, needed  # libckpt is inside the program
    clean = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    assert sh(tmp_path / "app", model, env=clean).stdout == "2 tensors\n"


def test_ckpt_mpi_has_a_pc_file(prefix, tmp_path):
    dest, env = prefix
    if not list(BUILD.glob("libckpt_mpi.so*")):
        pytest.skip("libckpt_mpi is not built (no MPI found)")
    assert "ckpt" in sh("pkg-config", "--print-requires", "ckpt_mpi", env=env).stdout.split()
    (tmp_path / "world.c").write_text(r"""
#include <ckpt_mpi.h>
#include <stdio.h>
int main(void) {
    ckpt_comm comm;
    ckpt_error err;
    if (ckpt_mpi_world(&comm, &err) != CKPT_OK) return printf("%s\n", err.message), 1;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank); /* MPI's own flags come along */
    printf("rank %d of ckpt %s\n", rank, ckpt_version());
    ckpt_mpi_world_end(&comm, 0);
    return 0;
}
""")
    libdir = pkg(env, "--variable=libdir", "ckpt_mpi")[0]
    sh("cc", tmp_path / "world.c", "-o", tmp_path / "world", *pkg(env, "--cflags", "--libs", "ckpt_mpi"),
       f"-Wl,-rpath,{libdir}")
    run_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run([str(tmp_path / "world")], capture_output=True, text=True, env=run_env, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("rank 0 of ckpt "), (out.stdout, out.stderr)


def test_the_companion_headers_are_installed(prefix, tmp_path):
    # <ckpt_gguf.h>, <ckpt_dcp.h>, <ckpt_collective.h> and <ckpt_device.h> sit beside
    # <ckpt.h> (issue 28 §6, issue 31): a program that includes them builds against the
    # installed files (the static library's Libs.private bring -ldl for the device's dlopen).
    dest, env = prefix
    (tmp_path / "both.c").write_text(r"""
#include <ckpt_collective.h>
#include <ckpt_dcp.h>
#include <ckpt_device.h>
#include <ckpt_gguf.h>
#include <stdlib.h>
#include <stdio.h>
int main(void) {
    ckpt_comm comm;
    ckpt_error err;
    if (ckpt_comm_from_env(&comm, 0, 1, &err) != CKPT_OK) return printf("%s\n", err.message), 1;
    ckpt_dcp_writer_options dcp;
    ckpt_dcp_writer_options_init(&dcp);
    printf("%s %d %d\n", ckpt_kv_type_name(CKPT_KV_STRING), ckpt_dtype_ggml_type(CKPT_F16), dcp.size > 0);
    ckpt_device *dev;
    setenv("CKPT_CUDART", "/nonexistent/libcudart.so", 1);
    printf("%s\n", ckpt_status_name(ckpt_device_open("cuda:0", NULL, &dev, &err)));
    return 0;
}
""")
    sh("cc", tmp_path / "both.c", "-o", tmp_path / "both", *pkg(env, "--cflags", "--libs", "ckpt-static"))
    assert sh(tmp_path / "both").stdout == "string 1 1\nCKPT_E_NOT_FOUND\n"
