/* reader.c — positional read batches (io_uring or pread) and file facts. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "file.h"
#include "reader.h"

#ifdef CKPT_HAVE_URING
#include <liburing.h>
#endif

enum { QUEUE_DEPTH = 64 };

void ckpt__reader_init(ckpt__reader *r, bool want_uring) {
    memset(r, 0, sizeof *r);
#ifdef CKPT_HAVE_URING
    if (!want_uring) return;
    struct io_uring *ring = ckpt__malloc(sizeof *ring);
    if (!ring) return;
    if (io_uring_queue_init(QUEUE_DEPTH, ring, 0) == 0) r->uring = ring;
    else free(ring);
#else
    (void)want_uring;
#endif
}

void ckpt__reader_free(ckpt__reader *r) {
#ifdef CKPT_HAVE_URING
    if (r->uring) {
        io_uring_queue_exit(r->uring);
        free(r->uring);
    }
#endif
    r->uring = NULL;
}

/* Reads at least req->need bytes (up to len) from `done` on, with pread
 * (or through the source when the request has no descriptor). */
static ckpt_status finish_pread(ckpt__reader *r, const ckpt__read_req *q, uint64_t done, ckpt_error *err) {
    unsigned char *dst = q->dst;
    if (q->fd < 0) {
        uint64_t n = (q->need < q->len ? q->need : q->len) - done;
        ckpt_status st = ckpt__source_read(q->src, dst + done, n, q->offset + done, err);
        r->reads++;
        if (st == CKPT_OK) r->bytes += n;
        return st;
    }
    uint64_t before = done;
    while (done < q->len) {
        ssize_t got = ckpt__io_pread(q->fd, dst + done, (size_t)(q->len - done), (off_t)(q->offset + done));
        r->reads++;
        if (got < 0) {
            if (errno == EINTR) continue;
            return ckpt__fail_errno(err, errno, q->src->name, (int64_t)(q->offset + done), "cannot read %s%s%s",
                                    q->tensor ? "tensor \"" : "", q->tensor ? q->tensor : "the file", q->tensor ? "\"" : "");
        }
        if (got == 0) break;
        done += (uint64_t)got;
        r->bytes += (uint64_t)got;
    }
    ckpt__source_count(q->src, done - before);
    if (done < q->need) {
        /* Cut short after it was opened: name where it ends now (a read
         * past the end sees only that it is not there). */
        struct stat sb;
        uint64_t end = q->offset + done;
        if (fstat(q->fd, &sb) == 0 && (uint64_t)sb.st_size < end) end = (uint64_t)sb.st_size;
        return ckpt__fail(err, CKPT_E_TRUNCATED, q->src->name, q->tensor, (int64_t)end,
                          "the file ends at byte %llu, inside data that runs to byte %llu", (unsigned long long)end,
                          (unsigned long long)(q->offset + q->need));
    }
    return CKPT_OK;
}

#ifdef CKPT_HAVE_URING
/* Submits what is queued and waits for a completion; after a failure (*st
 * set) nothing more is submitted, it only waits for what is in flight (the
 * buffers are the caller's).  False when the ring broke while draining:
 * nothing more can arrive. */
static bool uring_wait(struct io_uring *ring, const char *name, int64_t at, ckpt_status *st, ckpt_error *err) {
    struct io_uring_cqe *cqe;
    int rc = *st == CKPT_OK ? io_uring_submit_and_wait(ring, 1) : io_uring_wait_cqe(ring, &cqe);
    if (rc >= 0 || rc == -EINTR || rc == -EAGAIN) return true;
    if (*st != CKPT_OK) return false;
    *st = ckpt__fail_errno(err, -rc, name, at, "io_uring submission failed");
    return true;
}

/* A completion already in, if any: its request, and the read's result. */
static ckpt__read_req *uring_next(struct io_uring *ring, int *res) {
    struct io_uring_cqe *cqe;
    if (io_uring_peek_cqe(ring, &cqe) != 0) return NULL;
    ckpt__read_req *q = io_uring_cqe_get_data(cqe);
    *res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    return q;
}

/* A completed read: counted, and finished with pread when it came back
 * short. */
static ckpt_status uring_complete(ckpt__reader *r, ckpt__read_req *q, int res, ckpt_error *err) {
    r->reads++;
    if (res < 0 && res != -EINTR && res != -EAGAIN)
        return ckpt__fail_errno(err, -res, q->src->name, (int64_t)q->offset, "cannot read %s%s%s",
                                q->tensor ? "tensor \"" : "", q->tensor ? q->tensor : "the file", q->tensor ? "\"" : "");
    uint64_t got = res > 0 ? (uint64_t)res : 0;
    r->bytes += got;
    ckpt__source_count(q->src, got);
    if (got < q->len && (got < q->need || res <= 0)) return finish_pread(r, q, got, err); /* short: rare */
    return CKPT_OK;
}

static ckpt_status run_uring(ckpt__reader *r, ckpt__read_req *reqs, size_t n, ckpt_error *err) {
    struct io_uring *ring = r->uring;
    ckpt_status st = CKPT_OK;
    size_t next = 0, inflight = 0;
    while ((st == CKPT_OK && next < n) || inflight) {
        while (st == CKPT_OK && next < n && inflight < QUEUE_DEPTH) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            if (!sqe) break;
            ckpt__read_req *q = &reqs[next];
            io_uring_prep_read(sqe, q->fd, q->dst, (unsigned)q->len, q->offset);
            io_uring_sqe_set_data(sqe, q);
            next++, inflight++;
        }
        if (!uring_wait(ring, reqs[0].src->name, -1, &st, err)) break;
        ckpt__read_req *q;
        int res;
        while (inflight && (q = uring_next(ring, &res))) {
            inflight--;
            if (st == CKPT_OK) st = uring_complete(r, q, res, err);
        }
    }
    return st;
}

/* ckpt__reader_stream with io_uring: a slot is refilled as soon as its
 * piece has been handed to done(). */
static ckpt_status stream_uring(ckpt__reader *r, ckpt__source *src, int fd, uint64_t offset, uint64_t len,
                                unsigned char *buf, size_t slots, uint64_t piece, const char *tensor,
                                ckpt__piece_fn done, void *user, ckpt_error *err) {
    struct io_uring *ring = r->uring;
    ckpt__read_req reqs[QUEUE_DEPTH];
    size_t free_slot[QUEUE_DEPTH], nfree = 0, inflight = 0;
    for (size_t i = slots; i-- > 0;) free_slot[nfree++] = i;
    ckpt_status st = CKPT_OK;
    uint64_t next = 0;
    while ((st == CKPT_OK && next < len) || inflight) {
        while (st == CKPT_OK && next < len && nfree) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            if (!sqe) break;
            size_t s = free_slot[--nfree];
            uint64_t n = len - next < piece ? len - next : piece;
            reqs[s] = (ckpt__read_req){src, fd, offset + next, n, n, buf + s * piece, tensor};
            io_uring_prep_read(sqe, fd, reqs[s].dst, (unsigned)n, reqs[s].offset);
            io_uring_sqe_set_data(sqe, &reqs[s]);
            next += n, inflight++;
        }
        if (!uring_wait(ring, src->name, (int64_t)(offset + next), &st, err)) break;
        ckpt__read_req *q;
        int res;
        while (inflight && (q = uring_next(ring, &res))) {
            inflight--;
            free_slot[nfree++] = (size_t)(q - reqs);
            if (st != CKPT_OK) continue;
            st = uring_complete(r, q, res, err);
            if (st == CKPT_OK) done(q->offset, q->dst, q->len, user);
        }
    }
    return st;
}
#endif

ckpt_status ckpt__reader_stream(ckpt__reader *r, ckpt__source *src, int fd, uint64_t offset, uint64_t len,
                                unsigned char *buf, size_t slots, uint64_t piece, const char *tensor,
                                ckpt__piece_fn done, void *user, ckpt_error *err) {
    if (slots == 0 || piece == 0 || len == 0) return CKPT_OK;
#ifdef CKPT_HAVE_URING
    if (r->uring && fd >= 0)
        return stream_uring(r, src, fd, offset, len, buf, slots < QUEUE_DEPTH ? slots : QUEUE_DEPTH, piece, tensor,
                            done, user, err);
#endif
    /* pread: one read fills every slot. */
    uint64_t step = slots * piece;
    for (uint64_t at = 0; at < len; at += step) {
        uint64_t n = len - at < step ? len - at : step;
        ckpt__read_req q = {src, fd, offset + at, n, n, buf, tensor};
        ckpt_status st = finish_pread(r, &q, 0, err);
        if (st) return st;
        done(offset + at, buf, n, user);
    }
    return CKPT_OK;
}

/* Requests without a descriptor, in runs of one source: read_many where
 * the source has it (for a remote source even one request: its read is
 * also the formats' reads of metadata, which a Hub file serves by range,
 * and the engine's are data, which it serves from the file's download). */
static ckpt_status run_sources(ckpt__reader *r, ckpt__read_req *reqs, size_t n, ckpt_error *err) {
    for (size_t i = 0; i < n;) {
        ckpt__source *src = reqs[i].src;
        size_t j = i + 1;
        while (j < n && reqs[j].fd < 0 && reqs[j].src == src) j++;
        ckpt_status st = CKPT_OK;
        if (src->ops->read_many && (j - i > 1 || (src->caps & CKPT__SRC_REMOTE))) {
            st = ckpt__source_read_many(src, reqs + i, j - i, err);
            for (size_t k = i; k < j && st == CKPT_OK; k++) {
                r->reads++, r->bytes += reqs[k].len;
                ckpt__source_count(src, reqs[k].len);
            }
        } else {
            for (size_t k = i; k < j && st == CKPT_OK; k++) st = finish_pread(r, &reqs[k], 0, err);
        }
        if (st) return st;
        i = j;
    }
    return CKPT_OK;
}

ckpt_status ckpt__reader_run(ckpt__reader *r, ckpt__read_req *reqs, size_t n, ckpt_error *err) {
    /* Descriptor reads first (io_uring keeps them in flight together), then
     * the others by source; a batch is one or the other in practice. */
    size_t with_fd = 0;
    for (size_t i = 0; i < n; i++) with_fd += reqs[i].fd >= 0;
    if (with_fd < n) {
        if (with_fd == 0) return run_sources(r, reqs, n, err);
        for (size_t i = 0; i < n; i++) {
            ckpt_status st =
                reqs[i].fd >= 0 ? ckpt__reader_run(r, &reqs[i], 1, err) : run_sources(r, &reqs[i], 1, err);
            if (st) return st;
        }
        return CKPT_OK;
    }
#ifdef CKPT_HAVE_URING
    if (r->uring && n > 0) return run_uring(r, reqs, n, err);
#endif
    for (size_t i = 0; i < n; i++) {
        ckpt_status st = finish_pread(r, &reqs[i], 0, err);
        if (st) return st;
    }
    return CKPT_OK;
}

int ckpt__open_direct(const char *path, int fd, uint32_t *align) {
    /* By name again: O_NONBLOCK so that a FIFO put in its place meanwhile
     * cannot block (the inode check below refuses anything else). */
    int dfd = open(path, O_RDONLY | O_DIRECT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (dfd < 0) return -1;
    struct stat a, b;
    if (fstat(fd, &a) != 0 || fstat(dfd, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
        close(dfd);
        return -1;
    }
    ckpt__fd_blocking(dfd);
    uint32_t need = 4096;
#ifdef STATX_DIOALIGN
    struct statx sx;
    if (statx(dfd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
        if (sx.stx_dio_offset_align == 0) { /* the file system refuses direct I/O for this file */
            close(dfd);
            return -1;
        }
        need = sx.stx_dio_offset_align > sx.stx_dio_mem_align ? sx.stx_dio_offset_align : sx.stx_dio_mem_align;
    }
#endif
    *align = need < 512 ? 512 : need;
    return dfd;
}

bool ckpt__is_remote_fs(int fd) {
    struct statfs s;
    if (fstatfs(fd, &s) != 0) return true; /* cannot tell: be careful */
    switch ((unsigned long)s.f_type) {
    case 0x6969:     /* NFS */
    case 0x517B:     /* SMB */
    case 0xFF534D42: /* CIFS */
    case 0xFE534D42: /* SMB2 */
    case 0x65735546: /* FUSE */
    case 0x01021997: /* 9P / virtiofs over 9p */
    case 0x00C36400: /* Ceph */
    case 0x47504653: /* GPFS */
    case 0x0BD00BD0: /* Lustre */
    case 0x6E667364: /* nfsd */
        return true;
    default:
        return false;
    }
}

double ckpt__cached_fraction(int fd, uint64_t file_size, uint64_t offset, uint64_t len) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || len == 0 || file_size == 0) return 1.0;
    void *map = mmap(NULL, (size_t)file_size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return 1.0;
    enum { SAMPLES = 64 };
    unsigned resident = 0, seen = 0;
    for (unsigned i = 0; i < SAMPLES; i++) {
        uint64_t at = offset + len / SAMPLES * i;
        at -= at % (uint64_t)page;
        if (at >= file_size) break;
        unsigned char v = 0;
        if (mincore((char *)map + at, 1, &v) != 0) continue;
        seen++;
        resident += v & 1;
    }
    munmap(map, (size_t)file_size);
    return seen ? (double)resident / seen : 1.0;
}
