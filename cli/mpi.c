/* mpi.c — `ckpt convert` on many ranks: `mpirun -np N ckpt convert SRC DST`
 * (or --mpi).  The CLI is built without MPI: it loads libckpt_mpi at run
 * time (CKPT_MPI_LIBRARY, beside the executable, ../lib, or the system's
 * libckpt_mpi.so.0), which initialises MPI and gives a ckpt_comm.  Rank 0
 * parses the headers and lays out the output; every rank converts its
 * range of the output's bytes; rank 0 commits once all succeeded. */
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_collective.h" /* the communicator mpi gives */
#include "cli.h"

typedef ckpt_status (*world_fn)(ckpt_comm *comm, ckpt_error *err);
typedef void (*world_end_fn)(ckpt_comm *comm, int exit_code);

int mpi_env_ranks(void) {
    ckpt_comm c;
    ckpt_error err;
    if (ckpt_comm_from_env(&c, -1, 0, &err) != CKPT_OK) return 1;
    return c.nranks;
}

static void *try_open(const char *path, char *tried, size_t cap) {
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL); /* Open MPI's plugins need its symbols global */
    if (!h) {
        size_t n = strlen(tried);
        if (snprintf(tried + n, cap - n, "\n  %s: %s", path, dlerror()) < 0) tried[n] = '\0';
    }
    return h;
}

static void *load_library(char *tried, size_t cap) {
    const char *env = getenv("CKPT_MPI_LIBRARY");
    if (env && *env) return try_open(env, tried, cap);
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        static const char *const rel[] = {"libckpt_mpi.so", "../lib/libckpt_mpi.so", "../lib64/libckpt_mpi.so"};
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
            if (snprintf(path, sizeof path, "%s/%s", exe, rel[i]) >= (int)sizeof path) continue;
            if (access(path, R_OK) != 0) continue;
            void *h = try_open(path, tried, cap);
            if (h) return h;
        }
    }
    return try_open("libckpt_mpi.so.0", tried, cap);
}

/* One line per rank that has something of its own to say: a rank that
 * failed because another did stays quiet unless it is rank 0. */
static int report(const ckpt_comm *comm, const ckpt_error *err) {
    if (err->detail == CKPT_D_PEER_FAILED && comm->rank != 0) return EXIT_ERROR;
    char status[96];
    fprintf(stderr, "ckpt: rank %d of %d: %s [%s]\n", comm->rank, comm->nranks, printable(err->message),
            status_text(err, status, sizeof status));
    return EXIT_ERROR;
}

int convert_mpi(const char *src, const char *dst, const ckpt_catalog_options *copt, const ckpt_writer_options *opt,
                int show_progress,
                int (*apply)(ckpt_plan *plan, void *user, ckpt_error *err), void *user) {
    char tried[4096] = "";
    void *lib = load_library(tried, sizeof tried);
    if (!lib) {
        fprintf(stderr,
                "ckpt: a collective convert needs libckpt_mpi (built where Open MPI is installed: apt-get install "
                "libopenmpi-dev, then rebuild ckpt), or set CKPT_MPI_LIBRARY; tried:%s\n",
                tried);
        return EXIT_ERROR;
    }
    world_fn world = (world_fn)(uintptr_t)dlsym(lib, "ckpt_mpi_world");
    world_end_fn world_end = (world_end_fn)(uintptr_t)dlsym(lib, "ckpt_mpi_world_end");
    if (!world || !world_end) {
        fprintf(stderr, "ckpt: the libckpt_mpi loaded lacks ckpt_mpi_world: %s\n", dlerror());
        return EXIT_ERROR;
    }
    ckpt_comm comm;
    ckpt_error err;
    ckpt_error_clear(&err);
    if (world(&comm, &err) != CKPT_OK) {
        char status[96];
        fprintf(stderr, "ckpt: %s [%s]\n", printable(err.message), status_text(&err, status, sizeof status));
        return EXIT_ERROR;
    }
    int rc = EXIT_OK;
    ckpt_catalog *cat = NULL;
    ckpt_plan *plan = NULL;
    ckpt_collective_stats stats;
    ckpt_status st = ckpt_catalog_open_collective(src, copt, &comm, NULL, &cat, &err);
    if (st == CKPT_OK) st = ckpt_plan_create(cat, &plan, &err);
    /* The rules are the same on every rank (the same command line); a rule
     * that fails, fails everywhere alike. */
    if (st == CKPT_OK && apply) {
        rc = apply(plan, user, &err);
        if (rc != EXIT_OK) st = err.status ? err.status : CKPT_E_INVALID_ARGUMENT;
    }
    progress_bar bar;
    progress_start(&bar, "converting (rank 0)", comm.rank == 0 ? show_progress : 0);
    ckpt_writer_options o = *opt;
    o.progress = progress_update, o.user = &bar;
    if (st == CKPT_OK) st = ckpt_convert_collective(plan, dst, &o, &comm, NULL, &stats, &err);
    progress_finish(&bar, st == CKPT_OK);
    if (st != CKPT_OK && rc == EXIT_OK) rc = report(&comm, &err);
    if (st == CKPT_OK && getenv("CKPT_MPI_STATS"))
        fprintf(stderr, "ckpt: rank %d of %d: read %llu bytes, wrote %llu bytes, %.3f s I/O, %.3f s waiting\n",
                comm.rank, comm.nranks, (unsigned long long)stats.bytes_read, (unsigned long long)stats.bytes_written,
                stats.io_seconds, stats.comm_seconds);
    ckpt_plan_free(plan);
    ckpt_catalog_close(cat);
    world_end(&comm, rc); /* MPI_Abort when a rank died or hangs */
    return rc;
}
