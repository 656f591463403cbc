/* DCP: the tiling check on chunk geometries torch writes and on lies; the
 * writer through the public API, read back by the reader (every byte, every
 * chunk); refusals that name the tensor.  The interop tests (against torch
 * itself) are in tests/interop/test_dcp.py. */
#include <string.h>

#include "ckpt_dcp.h"
#include "ckpt_gguf.h"
#include "formats/dcp.h"
#include "helpers.h"

static ckpt_status tile(uint32_t ndim, const uint64_t *shape, const uint64_t (*boxes)[2][4], size_t n, ckpt_error *err) {
    ckpt__dcp_chunk chunks[64];
    for (size_t i = 0; i < n; i++) chunks[i] = (ckpt__dcp_chunk){boxes[i][0], boxes[i][1], "__0_0.distcp"};
    return ckpt__dcp_check_tiling("x/.metadata", "w", ndim, shape, chunks, n, err);
}

static void test_tilings_torch_writes(void **state) {
    (void)state;
    ckpt_error err;
    uint64_t shape[2] = {7, 6};
    /* Shard(0) over 4 ranks: 2, 2, 2, 1 rows. */
    const uint64_t rows[4][2][4] = {{{0, 0}, {2, 6}}, {{2, 0}, {2, 6}}, {{4, 0}, {2, 6}}, {{6, 0}, {1, 6}}};
    assert_int_equal(tile(2, shape, rows, 4, &err), CKPT_OK);
    /* Shard(1) over 3 ranks, and a 2x2 grid (in any order). */
    const uint64_t cols[3][2][4] = {{{0, 4}, {7, 2}}, {{0, 0}, {7, 2}}, {{0, 2}, {7, 2}}};
    assert_int_equal(tile(2, shape, cols, 3, &err), CKPT_OK);
    const uint64_t grid[4][2][4] = {{{4, 3}, {3, 3}}, {{0, 0}, {4, 3}}, {{0, 3}, {4, 3}}, {{4, 0}, {3, 3}}};
    assert_int_equal(tile(2, shape, grid, 4, &err), CKPT_OK);
    /* Empty chunks (more ranks than rows) tile nothing and are allowed. */
    uint64_t small[1] = {2};
    const uint64_t uneven[4][2][4] = {{{0}, {1}}, {{1}, {1}}, {{2}, {0}}, {{2}, {0}}};
    assert_int_equal(tile(1, small, uneven, 4, &err), CKPT_OK);
    /* A scalar is one chunk with no axes. */
    const uint64_t scalar[1][2][4] = {{{0}, {0}}};
    assert_int_equal(tile(0, NULL, scalar, 1, &err), CKPT_OK);
    /* An empty tensor with an empty chunk. */
    uint64_t none[2] = {0, 4};
    const uint64_t empty[1][2][4] = {{{0, 0}, {0, 4}}};
    assert_int_equal(tile(2, none, empty, 1, &err), CKPT_OK);
}

static void test_tiling_lies(void **state) {
    (void)state;
    ckpt_error err;
    uint64_t shape[2] = {4, 6};
    const uint64_t hole[2][2][4] = {{{0, 0}, {2, 6}}, {{3, 0}, {1, 6}}};
    assert_code(tile(2, shape, hole, 2, &err), err, CKPT__D(DCP_CHUNK_HOLE));
    assert_string_equal(err.tensor, "w");
    assert_non_null(strstr(err.message, "cover 18 of its 24 elements"));
    const uint64_t overlap[2][2][4] = {{{0, 0}, {3, 6}}, {{2, 0}, {2, 6}}};
    assert_code(tile(2, shape, overlap, 2, &err), err, CKPT__D(DCP_CHUNK_OVERLAP));
    assert_non_null(strstr(err.message, "chunks 0 (offsets [0, 0], sizes [3, 6]"));
    /* Overlaps found along the other axis too (a column meets a row). */
    const uint64_t cross[3][2][4] = {{{0, 0}, {4, 3}}, {{0, 3}, {2, 3}}, {{1, 2}, {3, 4}}};
    assert_code(tile(2, shape, cross, 3, &err), err, CKPT__D(DCP_CHUNK_OVERLAP));
    const uint64_t twice[2][2][4] = {{{0, 0}, {4, 6}}, {{0, 0}, {4, 6}}};
    assert_code(tile(2, shape, twice, 2, &err), err, CKPT__D(DCP_CHUNK_OVERLAP));
    const uint64_t outside[2][2][4] = {{{0, 0}, {2, 6}}, {{2, 1}, {2, 6}}};
    assert_code(tile(2, shape, outside, 2, &err), err, CKPT__D(DCP_CHUNK_BOUNDS));
    assert_non_null(strstr(err.message, "axis 1"));
    const uint64_t wrap[1][2][4] = {{{UINT64_MAX, 0}, {2, 6}}};
    assert_code(tile(2, shape, wrap, 1, &err), err, CKPT__D(DCP_CHUNK_BOUNDS));
    const uint64_t scalars[2][2][4] = {{{0}, {0}}, {{0}, {0}}};
    assert_code(tile(0, NULL, scalars, 2, &err), err, CKPT__D(DCP_CHUNK_OVERLAP));
    assert_code(tile(0, NULL, scalars, 0, &err), err, CKPT__D(DCP_CHUNK_HOLE));
}

static void test_many_chunks_sweep(void **state) {
    (void)state;
    /* 64 column chunks of a 1-row-high tensor: the sweep picks axis 1. */
    enum { N = 64 };
    static uint64_t offs[N][2], sizes[N][2];
    ckpt__dcp_chunk chunks[N];
    uint64_t shape[2] = {3, 6400};
    for (int i = 0; i < N; i++) {
        offs[i][0] = 0, offs[i][1] = (uint64_t)(N - 1 - i) * 100, sizes[i][0] = 3, sizes[i][1] = 100;
        chunks[i] = (ckpt__dcp_chunk){offs[i], sizes[i], "f"};
    }
    ckpt_error err;
    assert_int_equal(ckpt__dcp_check_tiling("p", "w", 2, shape, chunks, N, &err), CKPT_OK);
    sizes[10][1] = 101; /* one column more: meets its neighbour */
    assert_code(ckpt__dcp_check_tiling("p", "w", 2, shape, chunks, N, &err), err, CKPT__D(DCP_CHUNK_OVERLAP));
}

/* Writes a checkpoint through the public writer as DCP on `ranks` ranks
 * and reads every tensor and chunk back. */
static void write_and_read(const char *dir, uint32_t ranks) {
    const char *out = in_dir(dir, ranks == 1 ? "one" : "many");
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.format = CKPT_FORMAT_DCP;
    ckpt_dcp_writer_options d;
    ckpt_dcp_writer_options_init(&d);
    d.ranks = ranks;
    o.dcp = &d;
    o.no_sync = 1;
    ckpt_writer *w;
    ckpt_error err;
    assert_int_equal(ckpt_writer_create(out, &o, &w, &err), CKPT_OK);
    d.ranks = 1000; /* the writer has its own copy of the caller's format options */
    uint64_t s_rows[2] = {9, 5}, s_vec[1] = {2};
    size_t a, b, c;
    assert_int_equal(ckpt_writer_add_tensor(w, "rows", CKPT_F32, 2, s_rows, &a, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "vec", CKPT_BF16, 1, s_vec, &b, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "scalar", CKPT_I64, 0, NULL, &c, &err), CKPT_OK);
    assert_code(ckpt_writer_add_tensor(w, "rows", CKPT_F32, 2, s_rows, NULL, &err), err, CKPT__D(DUPLICATE_NAME));
    assert_int_equal(ckpt_writer_set_checkpoint_metadata(
                         w, "ckpt.torch_tree",
                         "{\"__dict__\": [[\"rows\", {\"__tensor__\": \"rows\"}], [\"epoch\", 4], "
                         "[\"cfg\", {\"__dict__\": [[\"lr\", 0.25], [\"betas\", {\"__tuple__\": [0.9, 0.99]}]]}]]}",
                         &err),
                     CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_file_count(w), ranks);
    float rows[45];
    for (int i = 0; i < 45; i++) rows[i] = (float)i * 0.5f;
    uint16_t vec[2] = {0x3f80, 0xc000};
    int64_t scalar = -7;
    /* Bytes in two calls, the second across a chunk boundary. */
    assert_int_equal(ckpt_writer_write(w, a, rows, 7 * sizeof(float), &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, a, rows + 7, 38 * sizeof(float), &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, b, vec, sizeof vec, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, c, &scalar, 8, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, c, &scalar, 1, &err), CKPT_E_OUT_OF_RANGE);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);

    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(out, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(cat), CKPT_FORMAT_DCP);
    /* Every rank has its file; the catalog opens those that hold items
     * (rank 3 of 4 has no row of a 9-row tensor, and nothing else). */
    assert_true(file_exists(in_dir(out, ranks == 1 ? "__0_0.distcp" : "__3_0.distcp")));
    assert_int_equal(ckpt_catalog_file_count(cat), ranks == 1 ? 1 : 3);
    const ckpt_tensor_info *t = ckpt_catalog_find(cat, "rows");
    assert_non_null(t);
    /* ceil(9 / ranks) rows per rank */
    size_t want_chunks = ranks == 1 ? 1 : ranks == 4 ? 3 : 0;
    assert_int_equal(ckpt_catalog_chunk_count(cat, t), want_chunks);
    ckpt_chunk_info ch;
    assert_int_equal(ckpt_catalog_chunk(cat, t, want_chunks - 1, &ch, &err), CKPT_OK);
    assert_int_equal(ch.start[0], ranks == 1 ? 0 : 6);
    assert_int_equal(ckpt_catalog_chunk(cat, t, want_chunks, &ch, &err), CKPT_E_OUT_OF_RANGE);
    float back[45];
    assert_int_equal(ckpt_catalog_read(cat, t, 0, back, sizeof back, &err), CKPT_OK);
    assert_memory_equal(back, rows, sizeof rows);
    assert_int_equal(ckpt_catalog_read(cat, t, 13, back, 60, &err), CKPT_OK); /* across chunks, unaligned */
    assert_memory_equal(back, (const char *)rows + 13, 60);
    uint16_t v2[2];
    assert_int_equal(ckpt_catalog_read(cat, ckpt_catalog_find(cat, "vec"), 0, v2, 4, &err), CKPT_OK);
    assert_memory_equal(v2, vec, 4);
    int64_t s2;
    assert_int_equal(ckpt_catalog_read(cat, ckpt_catalog_find(cat, "scalar"), 0, &s2, 8, &err), CKPT_OK);
    assert_int_equal(s2, -7);
    const char *tree = ckpt_catalog_tree_json(cat);
    assert_non_null(tree);
    assert_non_null(strstr(tree, "[\"epoch\", 4]"));
    assert_non_null(strstr(tree, "{\"__tuple__\": [0.9, 0.99]}"));
    ckpt_catalog_close(cat);
}

static void test_writer_round_trip(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_and_read(dir, 1);
    write_and_read(dir, 4);
    scratch_free(dir);
}

static void test_writer_refusals(void **state) {
    (void)state;
    char *dir = scratch_dir();
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.format = CKPT_FORMAT_DCP;
    o.no_sync = 1;
    ckpt_writer *w;
    ckpt_error err;
    uint64_t shape[1] = {4};
    /* One format's options asking for something while another is written. */
    ckpt_writer_options other;
    ckpt_writer_options_init(&other);
    ckpt_dcp_writer_options dcp;
    ckpt_dcp_writer_options_init(&dcp);
    dcp.ranks = 2;
    other.dcp = &dcp;
    assert_int_equal(ckpt_writer_create(in_dir(dir, "m.safetensors"), &other, &w, &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "dcp->ranks is for DCP output"));
    ckpt_gguf_writer_options gguf;
    ckpt_gguf_writer_options_init(&gguf);
    gguf.split_max_tensors = 2;
    other.dcp = NULL, other.gguf = &gguf;
    assert_int_equal(ckpt_writer_create(in_dir(dir, "m.safetensors"), &other, &w, &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "gguf->split_max_tensors is for GGUF output"));
    assert_false(file_exists(in_dir(dir, "m.safetensors")));
    /* A dtype torch has no name for. */
    assert_int_equal(ckpt_writer_create(in_dir(dir, "a"), &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "x", CKPT_F6_E2M3, 1, shape, NULL, &err), CKPT_OK);
    assert_code(ckpt_writer_begin(w, &err), err, CKPT__D(UNKNOWN_DTYPE));
    assert_string_equal(err.tensor, "x");
    ckpt_writer_free(w);
    /* An object of a class, and a tensor inside a tuple: refused, and
     * nothing left behind. */
    const char *trees[] = {"{\"__dict__\": [[\"d\", {\"__call__\": \"torch.device\", \"args\": [\"cpu\"]}]]}",
                           "{\"__dict__\": [[\"p\", {\"__tuple__\": [{\"__tensor__\": \"x\"}, 1]}]]}"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ckpt_writer_create(in_dir(dir, "a"), &o, &w, &err), CKPT_OK);
        assert_int_equal(ckpt_writer_add_tensor(w, "x", CKPT_F32, 1, shape, NULL, &err), CKPT_OK);
        assert_int_equal(ckpt_writer_set_checkpoint_metadata(w, "ckpt.torch_tree", trees[i], &err), CKPT_OK);
        assert_code(ckpt_writer_begin(w, &err), err, CKPT__D(DCP_UNSUPPORTED));
        assert_string_equal(err.tensor, i ? "p" : "d");
        ckpt_writer_free(w);
    }
    /* Not every byte written: commit fails, nothing published. */
    assert_int_equal(ckpt_writer_create(in_dir(dir, "a"), &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "x", CKPT_F32, 1, shape, NULL, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    float v[2] = {1, 2};
    assert_int_equal(ckpt_writer_write(w, 0, v, sizeof v, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_E_BAD_STATE);
    ckpt_writer_free(w);
    assert_int_equal(dir_entries(dir), 0);
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tilings_torch_writes), cmocka_unit_test(test_tiling_lies),
        cmocka_unit_test(test_many_chunks_sweep),    cmocka_unit_test(test_writer_round_trip),
        cmocka_unit_test(test_writer_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
