/* mpi_sim.c — the many-rank simulation of the distributed suite
 * (`mpirun --oversubscribe -np N ckpt_mpi_sim MANY_DIR OUT_DIR`): what
 * changes as ranks grow, measured on small files so that the machine's 2
 * cores and disk do not hide the coordination.  Rank 0 prints one JSON
 * line:
 *   open_each     every rank parses the headers itself (ckpt_catalog_open)
 *   open_bcast    rank 0 parses, the others build from its broadcast
 *   vote          one ckpt agree (the commit's vote)
 *   save          a shard-writer save of 64 tensors split by rows over the
 *                 ranks into 4 shard files, and the files each rank opens
 * Times are the slowest rank's (barriers around each step), medians of
 * several repetitions. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt_mpi.h"

static int rank, nranks;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n - 3; /* ".", "..", the DIR's own */
}

static void die(const char *what, const ckpt_error *err) {
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, err->message);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Header bytes a parse reads: the index, and 8 + header of every shard. */
static unsigned long long header_bytes(const char *dir) {
    DIR *d = opendir(dir);
    unsigned long long total = 0;
    struct dirent *e;
    char path[4096];
    while (d && (e = readdir(d))) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        size_t n = strlen(e->d_name);
        if (n > 11 && !strcmp(e->d_name + n - 11, ".index.json")) total += (unsigned long long)sb.st_size;
        else if (n > 12 && !strcmp(e->d_name + n - 12, ".safetensors")) {
            FILE *f = fopen(path, "rb");
            unsigned char h[8] = {0};
            if (f && fread(h, 1, 8, f) == 8) {
                unsigned long long len = 0;
                for (int i = 0; i < 8; i++) len |= (unsigned long long)h[i] << (8 * i);
                total += 8 + len;
            }
            if (f) fclose(f);
        }
    }
    if (d) closedir(d);
    return total;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: ckpt_mpi_sim MANY_DIR OUT_DIR\n");
        return 2;
    }
    ckpt_comm comm;
    ckpt_error err;
    if (ckpt_mpi_world(&comm, &err) != CKPT_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    rank = comm.rank, nranks = comm.nranks;
    enum { REPS = 5, VOTES = 30 };
    double each[REPS], bcast[REPS], votes[VOTES], saves[3];
    ckpt_collective_options co;
    ckpt_collective_options_init(&co);
    co.timeout_ms = 600000;
    size_t tensors = 0;
    for (int i = 0; i < REPS; i++) {
        ckpt_catalog *c;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (ckpt_catalog_open(argv[1], &c, &err) != CKPT_OK) die("open", &err);
        MPI_Barrier(MPI_COMM_WORLD);
        each[i] = MPI_Wtime() - t0;
        tensors = ckpt_catalog_tensor_count(c);
        ckpt_catalog_close(c);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        if (ckpt_catalog_open_collective(argv[1], NULL, &comm, &co, &c, &err) != CKPT_OK) die("open_collective", &err);
        MPI_Barrier(MPI_COMM_WORLD);
        bcast[i] = MPI_Wtime() - t0;
        if (ckpt_catalog_tensor_count(c) != tensors) die("open_collective: tensor count", &err);
        ckpt_catalog_close(c);
    }
    /* The agreement step alone: every rank votes through libckpt_mpi. */
    for (int i = 0; i < VOTES; i++) {
        ckpt_vote v;
        memset(&v, 0, sizeof v);
        v.rank = -1;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (comm.agree(comm.user, &v, co.timeout_ms, &err) != CKPT_OK || v.status != CKPT_OK) die("agree", &err);
        MPI_Barrier(MPI_COMM_WORLD);
        votes[i] = MPI_Wtime() - t0;
    }
    /* A save: 64 tensors of 256 KiB, rows split over the ranks, 4 shards. */
    int fds_extra = 0;
    for (int rep = 0; rep < 3; rep++) {
        char out[4096];
        snprintf(out, sizeof out, "%s/save-%d-%d", argv[2], nranks, rep);
        ckpt_writer_options o;
        ckpt_writer_options_init(&o);
        o.max_shard_size = 4u << 20;
        o.no_sync = 1;
        o.overwrite = 1;
        ckpt_shard_writer *sw;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (ckpt_shard_writer_create(out, &o, &comm, &co, &sw, &err) != CKPT_OK) die("create", &err);
        enum { T = 64, ROWS = 256, COLS = 512 }; /* u16: 256 KiB each */
        static unsigned char buf[ROWS * COLS * 2];
        memset(buf, rank + 1, sizeof buf);
        uint64_t shape[2] = {ROWS, COLS}, start[2], count[2];
        start[0] = (uint64_t)rank * ROWS / (uint64_t)nranks;
        count[0] = (uint64_t)(rank + 1) * ROWS / (uint64_t)nranks - start[0];
        start[1] = 0, count[1] = COLS;
        for (int t = 0; t < T; t++) {
            char name[64];
            snprintf(name, sizeof name, "model.layers.%d.weight", t);
            if (count[0] && ckpt_shard_writer_add(sw, name, CKPT_U16, 2, shape, start, count, NULL, &err) != CKPT_OK)
                die("add", &err);
        }
        int fds0 = open_fds();
        if (ckpt_shard_writer_begin(sw, &err) != CKPT_OK) die("begin", &err);
        int fds1 = open_fds();
        if (fds1 - fds0 > fds_extra) fds_extra = fds1 - fds0;
        for (int t = 0; count[0] && t < T; t++)
            if (ckpt_shard_writer_write(sw, (size_t)t, 0, buf, count[0] * COLS * 2, &err) != CKPT_OK) die("write", &err);
        if (ckpt_shard_writer_commit(sw, &err) != CKPT_OK) die("commit", &err);
        ckpt_shard_writer_free(sw);
        MPI_Barrier(MPI_COMM_WORLD);
        saves[rep] = MPI_Wtime() - t0;
    }
    int fds_max = 0;
    MPI_Reduce(&fds_extra, &fds_max, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    ckpt_catalog *c;
    ckpt_status st = ckpt_catalog_open(argv[1], &c, &err);
    if (rank == 0 && st == CKPT_OK) {
        unsigned long long hb = header_bytes(argv[1]);
        printf("{\"ranks\": %d, \"tensors\": %zu, \"files\": %zu, \"header_bytes\": %llu, "
               "\"open_each_s\": %.6f, \"open_bcast_s\": %.6f, \"header_bytes_read_each\": %llu, "
               "\"header_bytes_read_bcast\": %llu, \"vote_s\": %.6f, \"save_s\": %.6f, \"save_bytes\": %d, "
               "\"save_files\": 4, \"files_open_per_rank\": %d}\n",
               nranks, tensors, ckpt_catalog_file_count(c), hb, median(each, REPS), median(bcast, REPS),
               hb * (unsigned long long)nranks, hb, median(votes, VOTES), median(saves, 3), 64 * 256 * 1024, fds_max);
        fflush(stdout);
    }
    ckpt_catalog_close(c);
    ckpt_mpi_world_end(&comm, 0);
    return 0;
}
