/*
 * ckpt._ckpt — the CPython extension under the `ckpt` package.
 *
 * A thin layer over the public header (include/ckpt.h) and nothing else:
 * the catalog, plans and the load engine, the writer, and a private
 * copy-on-write mapping for zero-copy torch/numpy tensors.  Every call that
 * reads, writes or converts data releases the GIL.  Frameworks are not
 * touched here: data leaves through the buffer protocol (owner objects that
 * keep catalogs, plans and library buffers alive), and the Python modules
 * turn it into numpy arrays or torch tensors.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_collective.h" /* includes ckpt.h */
#include "ckpt_dcp.h"
#include "ckpt_gguf.h"
#include "ckpt_device.h"
#define XXH_INLINE_ALL /* the digest ckpt records (XXH3-64), from the header alone */
#include <xxhash.h>

static PyObject *Error;          /* ckpt.Error, the base of every ckpt exception */
static PyTypeObject *TensorRowType; /* named rows of Catalog.tensors() */
static PyTypeObject *PlanRowType;   /* named rows of Plan.items() */

static PyStructSequence_Field tensor_row_fields[] = {
    {"name", "the tensor's name"},
    {"dtype", "its safetensors dtype name"},
    {"shape", "a tuple"},
    {"nbytes", "bytes of data"},
    {"file", "the index of its data file"},
    {"offset", "byte offset of its data in the file"},
    {"storage", "tensors sharing bytes share this number"},
    {"direct", "the bytes in the file are the tensor as loaded (a view can show them)"},
    {NULL, NULL}};
static PyStructSequence_Desc tensor_row_desc = {"ckpt._ckpt.TensorRow", "One tensor of a catalog.", tensor_row_fields, 8};

static PyStructSequence_Field plan_row_fields[] = {
    {"name", "the name after renames"},
    {"source", "the catalog index of the source tensor"},
    {"dtype", "the dtype after casts"},
    {"shape", "the shape after slices and permutations"},
    {"nbytes", "bytes it loads into"},
    {"transform", "loading converts its bytes (cast, axis order, byte order, gather)"},
    {NULL, NULL}};
static PyStructSequence_Desc plan_row_desc = {"ckpt._ckpt.PlanRow", "One tensor of a plan.", plan_row_fields, 6};

/* A struct sequence from `n` new references (stolen, NULL-checked). */
static PyObject *make_row(PyTypeObject *type, PyObject **items, Py_ssize_t n) {
    PyObject *row = PyStructSequence_New(type);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!items[i] || !row) {
            for (Py_ssize_t k = i; k < n; k++) Py_XDECREF(items[k]);
            Py_XDECREF(row);
            return NULL;
        }
        PyStructSequence_SET_ITEM(row, i, items[i]);
    }
    return row;
}
static PyObject *error_classes;  /* status name → subclass, registered by the package */

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

/* A file's format errors (a file that breaks its format's rules, holds what
 * ckpt does not read or asks for a forbidden global; a DCP path that leaves
 * its directory; truncations, limits and unknown formats) are raised as the
 * class of the format the file was read as: "format:torch", "format:gguf", …
 * (ckpt_detect_format on the file the error names; "format:none" for no
 * checkpoint at all).  NULL when the status is another kind, or the file
 * cannot be read again (the detail's or the status's class then applies). */
static PyObject *format_class_for(const ckpt_error *e) {
    int format_status = e->status == CKPT_E_CORRUPT || e->status == CKPT_E_FORBIDDEN ||
                        (e->status == CKPT_E_UNSUPPORTED && e->detail != CKPT_D_UNSUPPORTED_SOURCE) ||
                        e->detail == CKPT_D_DCP_PATH || e->status == CKPT_E_TRUNCATED || e->status == CKPT_E_LIMIT ||
                        e->status == CKPT_E_UNKNOWN_FORMAT;
    if (!format_status || !e->path[0]) return NULL;
    ckpt_format f;
    ckpt_error probe;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_detect_format(e->path, NULL, &f, &probe);
    Py_END_ALLOW_THREADS
    /* No checkpoint at all; one named .safetensors is a bad safetensors
     * file to whoever named it so (`except SafetensorError` catches it, as
     * with the safetensors package). */
    size_t len = strlen(e->path);
    int named_safetensors = len >= 12 && !strcmp(e->path + len - 12, ".safetensors");
    char key[64];
    if (st == CKPT_OK) snprintf(key, sizeof key, "format:%s", ckpt_format_name(f));
    else if (st == CKPT_E_UNKNOWN_FORMAT) snprintf(key, sizeof key, named_safetensors ? "format:safetensors" : "format:none");
    else return NULL;
    return PyDict_GetItemString(error_classes, key);
}

/* The class registered for "STATUS:errno" (CKPT_E_IO:13, EACCES: a
 * PermissionError), else for the format of the file a format error names,
 * else for the detail, else for the status, else ckpt.Error. */
static PyObject *error_class_for(const ckpt_error *e) {
    if (error_classes) {
        PyObject *cls = NULL;
        if (e->sys_errno) {
            char key[96];
            snprintf(key, sizeof key, "%s:%d", ckpt_status_name(e->status), e->sys_errno);
            cls = PyDict_GetItemString(error_classes, key);
        }
        if (!cls) cls = format_class_for(e);
        if (!cls && e->detail) cls = PyDict_GetItemString(error_classes, ckpt_detail_name(e->detail));
        if (!cls) cls = PyDict_GetItemString(error_classes, ckpt_status_name(e->status));
        if (cls) return cls;
    }
    return Error;
}

/* Raises the ckpt exception for a failed call, with the error's fields as
 * attributes (status, code, detail, detail_code, path, tensor, offset,
 * errno). */
static PyObject *raise_ckpt(const ckpt_error *e) {
    if (PyErr_Occurred()) return NULL; /* a Python exception (from a callback) wins */
    PyObject *cls = error_class_for(e);
    const char *msg = e->message[0] ? e->message : ckpt_status_message(e->status);
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    if (!exc) return NULL;
    PyObject *v;
#define SET(name, value)                                    \
    do {                                                    \
        v = (value);                                        \
        if (!v || PyObject_SetAttrString(exc, name, v) < 0) \
            PyErr_Clear();                                  \
        Py_XDECREF(v);                                      \
    } while (0)
    SET("status", PyUnicode_FromString(ckpt_status_name(e->status)));
    SET("code", PyLong_FromLong((long)e->status));
    SET("detail", e->detail ? PyUnicode_FromString(ckpt_detail_name(e->detail)) : Py_NewRef(Py_None));
    SET("detail_code", PyLong_FromLong((long)e->detail));
    SET("path", e->path[0] ? PyUnicode_DecodeFSDefault(e->path) : Py_NewRef(Py_None));
    SET("tensor", e->tensor[0] ? PyUnicode_FromString(e->tensor) : Py_NewRef(Py_None));
    SET("offset", e->offset >= 0 ? PyLong_FromLongLong(e->offset) : Py_NewRef(Py_None));
    if (e->sys_errno) {
        SET("errno", PyLong_FromLong(e->sys_errno));
        SET("strerror", PyUnicode_FromString(strerror(e->sys_errno)));
    }
    if (e->path[0]) SET("filename", PyUnicode_DecodeFSDefault(e->path));
#undef SET
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *register_errors(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyDict_Check(arg)) return PyErr_Format(PyExc_TypeError, "expected a dict");
    Py_XSETREF(error_classes, Py_NewRef(arg));
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------ */
/* Buffer: bytes owned by (or borrowed from) another object                 */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *owner;       /* keeps the memory alive (catalog, plan, map), or NULL */
    void *data;
    Py_ssize_t size;
    int readonly;
    void (*release)(void *); /* frees `data` on deallocation, or NULL */
} Buffer;

static char empty_bytes[1];
static PyTypeObject CatalogType;
typedef struct Catalog Catalog;
static void catalog_use(Catalog *c);
static void catalog_unuse(Catalog *c);

static int Buffer_getbuffer(Buffer *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : empty_bytes, self->size,
                             self->readonly, flags);
}

static void Buffer_dealloc(Buffer *self) {
    if (self->release) self->release(self->data);
    if (self->owner && Py_IS_TYPE(self->owner, &CatalogType)) catalog_unuse((Catalog *)self->owner);
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Buffer_as_buffer = {(getbufferproc)Buffer_getbuffer, NULL};
static Py_ssize_t Buffer_len(Buffer *self) { return self->size; }
static PySequenceMethods Buffer_as_sequence = {.sq_length = (lenfunc)Buffer_len};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt._ckpt.Buffer",
    .tp_basicsize = sizeof(Buffer),
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_as_sequence = &Buffer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes of a checkpoint: a view of a file, or a buffer the library allocated.",
};

static PyObject *buffer_new(PyObject *owner, void *data, uint64_t size, int readonly, void (*release)(void *)) {
    Buffer *b = PyObject_New(Buffer, &BufferType);
    if (!b) {
        if (release) release(data);
        return NULL;
    }
    b->owner = Py_XNewRef(owner);
    if (owner && Py_IS_TYPE(owner, &CatalogType)) catalog_use((Catalog *)owner);
    b->data = data;
    b->size = (Py_ssize_t)size;
    b->readonly = readonly;
    b->release = release;
    return (PyObject *)b;
}

/* ------------------------------------------------------------------------ */
/* Progress: Python callables and Ctrl-C                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject *callable; /* may be NULL: then only signals are checked */
} progress_ctx;

/* Called by the library (on the thread that entered it, GIL released):
 * takes the GIL, runs pending signal handlers and the callable. */
static int progress_trampoline(uint64_t done, uint64_t total, void *user) {
    progress_ctx *p = user;
    PyGILState_STATE g = PyGILState_Ensure();
    int stop = 0;
    if (PyErr_CheckSignals() < 0) stop = 1;
    else if (p->callable && p->callable != Py_None) {
        PyObject *r = PyObject_CallFunction(p->callable, "KK", (unsigned long long)done, (unsigned long long)total);
        if (!r) stop = 1;
        else {
            if (r != Py_None && PyObject_IsTrue(r)) stop = 1;
            Py_DECREF(r);
        }
    }
    /* A pending exception stays in this thread's state (the caller's
     * thread), and raise_ckpt lets it through when the library returns. */
    PyGILState_Release(g);
    return stop;
}

/* ------------------------------------------------------------------------ */
/* Catalog                                                                  */
/* ------------------------------------------------------------------------ */

struct Catalog {
    PyObject_HEAD
    ckpt_catalog *catalog;
    Py_ssize_t users;  /* views and plans that point into the catalog */
    int closing;       /* close() was called while users remained */
    PyObject *download_progress; /* callable(done, total) for whole downloads, or NULL */
    /* A catalog of bytes in memory (Catalog(name, data=...)): the library's
     * memory source reads the buffer, held until the catalog closes. */
    Py_buffer data;
    ckpt_memory_source memory;
};

static void catalog_use(Catalog *c) { c->users++; }

/* Closes the catalog, then lets its bytes go. */
static void catalog_release(Catalog *c) {
    ckpt_catalog *catalog = c->catalog;
    c->catalog = NULL;
    /* Without the GIL (as io.FileIO closes its descriptor): closing stops a
     * Hub download still under way and waits for its thread, which may be
     * waiting for the GIL to call download_progress. */
    Py_BEGIN_ALLOW_THREADS
    ckpt_catalog_close(catalog);
    Py_END_ALLOW_THREADS
    if (c->data.obj) PyBuffer_Release(&c->data);
}

static void catalog_unuse(Catalog *c) {
    if (--c->users == 0 && c->closing) catalog_release(c);
}

/* Seconds (a number, or None: left as it is) as milliseconds, more than 0
 * (or 0 itself, when `zero_ok`); -1 on a bad value. */
static int seconds_ms(PyObject *v, const char *name, int zero_ok, uint32_t *ms) {
    if (v == Py_None) return 0;
    double s = PyFloat_AsDouble(v);
    if (s == -1.0 && PyErr_Occurred()) return -1;
    if (!(s > 0 || (zero_ok && s == 0)) || s > 86400.0) {
        PyErr_Format(PyExc_ValueError, "%s must be a number of seconds in %s0, 86400]", name, zero_ok ? "[" : "(");
        return -1;
    }
    *ms = (uint32_t)(s * 1000 + 0.5);
    if (!*ms && s > 0) *ms = 1;
    return 0;
}

/* A count (an int, or None: left as it is) in [0, max]; -1 on a bad value. */
static int count_in(PyObject *v, const char *name, unsigned long max, uint32_t *out) {
    if (v == Py_None) return 0;
    unsigned long n = PyLong_AsUnsignedLong(v);
    if (n == (unsigned long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s must be in [0, %lu]", name, max);
        }
        return -1;
    }
    if (n > max) {
        PyErr_Format(PyExc_ValueError, "%s must be in [0, %lu]", name, max);
        return -1;
    }
    *out = (uint32_t)n;
    return 0;
}

/* A boolean option: True or False (numpy's bool_, and the ints 0 and 1, as
 * well), anything else a TypeError naming `where` ("Writer: overwrite").
 * The "p" format took any object by its truth, so overwrite="no" or
 * check_crc="false" meant True and did what the caller meant to stop.
 * 1 or 0; -1 with the error set. */
static int flag_value(PyObject *v, const char *where) {
    if (v == Py_True) return 1;
    if (v == Py_False) return 0;
    const char *type = Py_TYPE(v)->tp_name;
    if (!strcmp(type, "numpy.bool") || !strcmp(type, "numpy.bool_")) return PyObject_IsTrue(v);
    if (PyIndex_Check(v) && !PyFloat_Check(v)) { /* int, numpy's integers */
        PyObject *n = PyNumber_Index(v);
        if (!n) return -1;
        int overflow = 0;
        long x = PyLong_AsLongAndOverflow(n, &overflow);
        Py_DECREF(n);
        if (x == -1 && PyErr_Occurred()) return -1;
        if (!overflow && (x == 0 || x == 1)) return (int)x;
    }
    PyErr_Format(PyExc_TypeError, "%s must be a bool, not %s %R", where, type, v);
    return -1;
}

/* The "O&" converter of a boolean option, in place of "p": FLAG("Writer:
 * overwrite", overwrite) is its two arguments, the int set to 1 or 0. */
typedef struct {
    const char *where;
    int *out;
} flag_arg;

static int flag_convert(PyObject *v, void *p) {
    flag_arg *f = p;
    int on = flag_value(v, f->where);
    if (on < 0) return 0;
    *f->out = on;
    return 1;
}
#define FLAG(where, var) flag_convert, &(flag_arg){where, &(var)}

/* download_progress(done, total) from whichever thread reads (an engine
 * thread during a load): takes the GIL.  Ctrl-C (seen on the main thread,
 * which is then the caller's: its exception is raised when the library
 * returns) or a true result stops the downloads; so does an exception of
 * the callable, reported as unraisable (this thread may not be the
 * caller's, whose call then fails with CancelledError). */
static int download_trampoline(uint64_t done, uint64_t total, void *user) {
    Catalog *self = user;
    PyGILState_STATE g = PyGILState_Ensure();
    int stop = 0;
    if (PyErr_CheckSignals() < 0) stop = 1;
    else if (self->download_progress) {
        PyObject *r = PyObject_CallFunction(self->download_progress, "KK", (unsigned long long)done,
                                            (unsigned long long)total);
        if (!r) {
            PyErr_WriteUnraisable(self->download_progress);
            stop = 1;
        } else {
            if (r != Py_None && PyObject_IsTrue(r)) stop = 1;
            Py_DECREF(r);
        }
    }
    PyGILState_Release(g);
    return stop;
}

/* Catalog(path, *, io=0, cache_dir=None, bearer_token=None,
 * timeout=None, connect_timeout=None, retries=None, max_connections=None,
 * min_speed=None, min_speed_time=None, retry_deadline=None,
 * download_progress=None, hf_cache=None): the options of ckpt_catalog_options (remote
 * files, how local files are read: a ckpt_io_mode); None keeps a default. */
/* Opens `path`, or, with `data`, the bytes of `data` named `path` (the
 * library's memory source, no file; the buffer is held while the catalog
 * is open). */
static ckpt_status catalog_open(Catalog *self, const char *path, PyObject *data, const ckpt_catalog_options *o,
                                ckpt_catalog **c, ckpt_error *e) {
    if (!data) {
        ckpt_status st;
        Py_BEGIN_ALLOW_THREADS
        st = ckpt_catalog_open_ex(path, o, c, e);
        Py_END_ALLOW_THREADS
        return st;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) != 0) return CKPT_E_INVALID_ARGUMENT;
    ckpt_catalog_close(self->catalog); /* what reads the old buffer goes first */
    self->catalog = NULL;
    if (self->data.obj) PyBuffer_Release(&self->data);
    self->data = view;
    self->memory = (ckpt_memory_source){view.buf, (uint64_t)view.len};
    return ckpt_catalog_open_source(&ckpt_memory_source_ops, &self->memory, path, o, c, e);
}

static int Catalog_init(Catalog *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "allowed_globals", "io", "cache_dir", "bearer_token", "timeout",
                             "connect_timeout", "retries", "max_connections", "min_speed", "min_speed_time",
                             "retry_deadline", "download_progress", "data", "hf_cache", NULL};
    PyObject *path_obj, *globals = NULL, *cache_obj = NULL, *hf_cache_obj = NULL, *timeout = Py_None,
                        *connect_timeout = Py_None, *retries = Py_None, *min_speed = Py_None, *min_speed_time = Py_None,
                        *retry_deadline = Py_None, *download = Py_None, *data = NULL;
    int io = 0;
    const char *token = NULL;
    unsigned int connections = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O$iO&zOOOIOOOOOO&", kwlist, PyUnicode_FSConverter, &path_obj,
                                     &globals, &io, PyUnicode_FSConverter, &cache_obj, &token, &timeout,
                                     &connect_timeout, &retries, &connections, &min_speed, &min_speed_time,
                                     &retry_deadline, &download, &data, PyUnicode_FSConverter, &hf_cache_obj))
        return -1;
    if (download != Py_None && !PyCallable_Check(download)) {
        Py_DECREF(path_obj);
        Py_XDECREF(cache_obj);
        Py_XDECREF(hf_cache_obj);
        PyErr_SetString(PyExc_TypeError, "download_progress must be a callable(done, total) or None");
        return -1;
    }
    /* The callable lives as long as the catalog (a download may come with
     * any read); the trampoline also watches Ctrl-C without one. */
    Py_XINCREF(download == Py_None ? NULL : download);
    Py_XSETREF(self->download_progress, download == Py_None ? NULL : download);
    ckpt_catalog_options o;
    ckpt_catalog_options_init(&o);
    o.download_progress = download_trampoline;
    o.download_progress_user = self;
    o.io = (ckpt_io_mode)io;
    o.bearer_token = token;
    o.max_connections = connections;
    if (cache_obj && cache_obj != Py_None) o.cache_dir = PyBytes_AS_STRING(cache_obj);
    if (hf_cache_obj) o.hf_cache_dir = PyBytes_AS_STRING(hf_cache_obj);
    int bad = seconds_ms(timeout, "timeout", 0, &o.read_timeout_ms) ||
              seconds_ms(connect_timeout, "connect_timeout", 0, &o.connect_timeout_ms) ||
              seconds_ms(min_speed_time, "min_speed_time", 0, &o.min_speed_time_ms) ||
              seconds_ms(retry_deadline, "retry_deadline", 1, &o.retry_deadline_ms) ||
              count_in(retries, "retries", 100, &o.retries) ||
              count_in(min_speed, "min_speed", UINT32_MAX, &o.min_speed_bytes);
    PyObject *fast = NULL;
    const char **names = NULL;
    if (!bad && globals && globals != Py_None) {
        fast = PySequence_Fast(globals, "allowed_globals must be a sequence of 'module.Name' strings");
        Py_ssize_t n = fast ? PySequence_Fast_GET_SIZE(fast) : 0;
        names = fast ? PyMem_Calloc((size_t)n + 1, sizeof *names) : NULL;
        for (Py_ssize_t i = 0; names && i < n; i++)
            if (!(names[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(fast, i)))) PyMem_Free(names), names = NULL;
        if (!names) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
            bad = 1;
        } else {
            o.allowed_globals = names;
            o.allowed_global_count = (size_t)n;
        }
    }
    if (bad) {
        Py_XDECREF(fast);
        Py_DECREF(path_obj);
        Py_XDECREF(cache_obj);
        Py_XDECREF(hf_cache_obj);
        return -1;
    }
    ckpt_error e;
    ckpt_status st;
    ckpt_catalog *c = NULL;
    st = catalog_open(self, PyBytes_AS_STRING(path_obj), data == Py_None ? NULL : data, &o, &c, &e);
    Py_DECREF(path_obj);
    Py_XDECREF(cache_obj);
    Py_XDECREF(hf_cache_obj);
    PyMem_Free(names);
    Py_XDECREF(fast);
    if (st != CKPT_OK) {
        if (!PyErr_Occurred()) raise_ckpt(&e);
        return -1;
    }
    ckpt_catalog_close(self->catalog);
    self->catalog = c;
    return 0;
}

static void Catalog_dealloc(Catalog *self) {
    catalog_release(self);
    Py_CLEAR(self->download_progress);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int catalog_ready(Catalog *self) {
    if (self->catalog) return 1;
    PyErr_SetString(PyExc_ValueError, "the catalog is not open");
    return 0;
}

static PyObject *shape_tuple(uint32_t ndim, const uint64_t *shape) {
    PyObject *t = PyTuple_New(ndim);
    if (!t) return NULL;
    for (uint32_t i = 0; i < ndim; i++) {
        PyObject *d = PyLong_FromUnsignedLongLong(shape[i]);
        if (!d) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, d);
    }
    PyObject_GC_UnTrack(t); /* ints only: see untracked_row */
    return t;
}

/* The dtype's name as a str, one object per dtype (rows share it). */
static PyObject *dtype_str(ckpt_dtype d) {
    static PyObject *cache[256];
    unsigned i = (unsigned)d;
    if (i >= sizeof cache / sizeof *cache) return PyUnicode_FromString(ckpt_dtype_name(d));
    if (!cache[i] && !(cache[i] = PyUnicode_InternFromString(ckpt_dtype_name(d)))) return NULL;
    return Py_NewRef(cache[i]);
}

/* Rows hold only strings, ints and untracked shape tuples: untracked, the
 * cyclic collector does not walk them each time it runs (every 700 new
 * objects), which was more than half the cost of building 30k rows. */
static PyObject *untracked_row(PyObject *row) {
    if (row) PyObject_GC_UnTrack(row);
    return row;
}

static PyObject *tensor_row(const ckpt_catalog *c, const ckpt_tensor_info *t) {
    PyObject *items[8] = {
        PyUnicode_FromString(t->name), dtype_str(t->dtype), shape_tuple(t->ndim, t->shape),
        PyLong_FromUnsignedLongLong(t->nbytes), PyLong_FromUnsignedLong(t->file), PyLong_FromUnsignedLongLong(t->offset),
        PyLong_FromUnsignedLong(t->storage),
        PyBool_FromLong(!t->strides && !t->big_endian && !t->compressed && ckpt_catalog_chunk_count(c, t) == 1)};
    return untracked_row(make_row(TensorRowType, items, 8));
}

/* Rows: the catalog's tensors as a sequence of TensorRow, each built when
 * it is asked for (opening 30,000 tensors builds none). */
typedef struct {
    PyObject_HEAD
    Catalog *catalog;
    Py_ssize_t count;
} Rows;

static void Rows_dealloc(Rows *self) {
    Py_XDECREF(self->catalog);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t Rows_len(Rows *self) { return self->count; }

static PyObject *Rows_item(Rows *self, Py_ssize_t i) {
    if (i < 0 || i >= self->count) return PyErr_Format(PyExc_IndexError, "tensor index %zd out of range", i);
    if (!catalog_ready(self->catalog)) return NULL;
    return tensor_row(self->catalog->catalog, ckpt_catalog_tensor(self->catalog->catalog, (size_t)i));
}

static PySequenceMethods Rows_as_sequence = {.sq_length = (lenfunc)Rows_len, .sq_item = (ssizeargfunc)Rows_item};

static PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt._ckpt.Rows",
    .tp_basicsize = sizeof(Rows),
    .tp_dealloc = (destructor)Rows_dealloc,
    .tp_as_sequence = &Rows_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_SEQUENCE,
    .tp_doc = "The tensors of a catalog, as TensorRow built on access.",
};

/* tensors() → a sequence of TensorRow(name, dtype, shape, nbytes, file,
 * offset, storage, direct) in catalog order, built lazily; `direct` is true
 * when the bytes on disk are the tensor as loaded (dense, little-endian,
 * uncompressed). */
static PyObject *Catalog_tensors(Catalog *self, PyObject *unused) {
    (void)unused;
    if (!catalog_ready(self)) return NULL;
    Rows *rows = PyObject_New(Rows, &RowsType);
    if (!rows) return NULL;
    rows->catalog = (Catalog *)Py_NewRef(self);
    rows->count = (Py_ssize_t)ckpt_catalog_tensor_count(self->catalog);
    return (PyObject *)rows;
}

/* infos(cls, files) → {name: cls(name, dtype, shape, nbytes, files[file],
 * offset)}: every tensor as an instance of a 6-field namedtuple class
 * (ckpt.TensorInfo), filled here without a Python call per tensor. */
static PyObject *Catalog_infos(Catalog *self, PyObject *args) {
    PyTypeObject *cls;
    PyObject *files;
    if (!catalog_ready(self) || !PyArg_ParseTuple(args, "O!O!", &PyType_Type, &cls, &PyList_Type, &files)) return NULL;
    if (!PyType_IsSubtype(cls, &PyTuple_Type) || cls->tp_basicsize != PyTuple_Type.tp_basicsize)
        return PyErr_Format(PyExc_TypeError, "infos needs a namedtuple class");
    size_t n = ckpt_catalog_tensor_count(self->catalog);
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(self->catalog, i);
        if ((Py_ssize_t)t->file >= PyList_GET_SIZE(files)) {
            PyErr_SetString(PyExc_IndexError, "files is shorter than the catalog's");
            Py_CLEAR(d);
            break;
        }
        PyObject *name = PyUnicode_FromString(t->name);
        PyObject *row = name ? cls->tp_alloc(cls, 6) : NULL;
        PyObject *items[6] = {name ? Py_NewRef(name) : NULL, dtype_str(t->dtype), shape_tuple(t->ndim, t->shape),
                              PyLong_FromUnsignedLongLong(t->nbytes), Py_NewRef(PyList_GET_ITEM(files, t->file)),
                              PyLong_FromUnsignedLongLong(t->offset)};
        int ok = row != NULL;
        for (int k = 0; k < 6; k++) {
            if (!items[k]) ok = 0;
            if (ok) PyTuple_SET_ITEM(row, k, items[k]);
            else Py_XDECREF(items[k]);
        }
        if (ok) untracked_row(row);
        if (!ok || PyDict_SetItem(d, name, row) < 0) Py_CLEAR(d);
        Py_XDECREF(row);
        Py_XDECREF(name);
    }
    return d;
}

/* names() → [name], without building rows. */
static PyObject *Catalog_names(Catalog *self, PyObject *unused) {
    (void)unused;
    if (!catalog_ready(self)) return NULL;
    size_t n = ckpt_catalog_tensor_count(self->catalog);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *name = PyUnicode_FromString(ckpt_catalog_tensor(self->catalog, i)->name);
        if (!name) Py_CLEAR(list);
        else PyList_SET_ITEM(list, (Py_ssize_t)i, name);
    }
    return list;
}

/* find(name) → the tensor's index, or None (a hash lookup in C). */
static PyObject *Catalog_find(Catalog *self, PyObject *arg) {
    if (!catalog_ready(self)) return NULL;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    const ckpt_tensor_info *t = ckpt_catalog_find(self->catalog, name);
    if (!t) Py_RETURN_NONE;
    return PyLong_FromSsize_t(t - ckpt_catalog_tensor(self->catalog, 0));
}

/* row(i) → one TensorRow. */
static PyObject *Catalog_row(Catalog *self, PyObject *arg) {
    if (!catalog_ready(self)) return NULL;
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    const ckpt_tensor_info *t = i >= 0 ? ckpt_catalog_tensor(self->catalog, (size_t)i) : NULL;
    if (!t) return PyErr_Format(PyExc_IndexError, "tensor index %zd out of range", i);
    return tensor_row(self->catalog, t);
}

static PyObject *Catalog_metadata(Catalog *self, PyObject *unused) {
    (void)unused;
    if (!catalog_ready(self)) return NULL;
    PyObject *d = PyDict_New();
    size_t n = ckpt_catalog_metadata_count(self->catalog);
    for (size_t i = 0; d && i < n; i++) {
        const char *k, *v;
        if (ckpt_catalog_metadata_entry(self->catalog, i, &k, &v) != CKPT_OK) continue;
        PyObject *value = PyUnicode_FromString(v);
        if (!value || PyDict_SetItemString(d, k, value) < 0) Py_CLEAR(d);
        Py_XDECREF(value);
    }
    return d;
}

static PyObject *Catalog_files(Catalog *self, PyObject *unused) {
    (void)unused;
    if (!catalog_ready(self)) return NULL;
    size_t n = ckpt_catalog_file_count(self->catalog);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *item = Py_BuildValue("(NK)", PyUnicode_DecodeFSDefault(ckpt_catalog_file_path(self->catalog, i)),
                                       (unsigned long long)ckpt_catalog_file_size(self->catalog, i));
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

static PyObject *Catalog_info(Catalog *self, PyObject *unused) {
    (void)unused;
    if (!catalog_ready(self)) return NULL;
    const char *tree = ckpt_catalog_tree_json(self->catalog);
    const char *index = ckpt_catalog_index_path(self->catalog);
    return Py_BuildValue("{s:i,s:N,s:N}", "format", (int)ckpt_catalog_format(self->catalog), "tree_json",
                         tree ? PyUnicode_FromString(tree) : Py_NewRef(Py_None), "index_path",
                         index ? PyUnicode_DecodeFSDefault(index) : Py_NewRef(Py_None));
}

static ckpt_dtype dtype_arg(const char *name);

/* gguf_hf_config(dtype=None) -> str: the config.json `ckpt convert
 * model.gguf dir/` writes for this llama.cpp GGUF (ckpt_gguf_hf_config). */
static PyObject *Catalog_gguf_hf_config(Catalog *self, PyObject *args) {
    const char *name = NULL;
    if (!catalog_ready(self) || !PyArg_ParseTuple(args, "|z", &name)) return NULL;
    ckpt_dtype d = name ? dtype_arg(name) : CKPT_DTYPE_INVALID;
    if (name && d == CKPT_DTYPE_INVALID) return NULL;
    char *json = NULL;
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_gguf_hf_config(self->catalog, d, &json, &e);
    Py_END_ALLOW_THREADS
    if (st != CKPT_OK) return raise_ckpt(&e);
    PyObject *text = PyUnicode_FromString(json);
    ckpt_free(json);
    return text;
}

static const ckpt_tensor_info *tensor_at(Catalog *self, Py_ssize_t i) {
    const ckpt_tensor_info *t = i >= 0 ? ckpt_catalog_tensor(self->catalog, (size_t)i) : NULL;
    if (!t) PyErr_Format(PyExc_IndexError, "tensor index %zd out of range", i);
    return t;
}

/* read(index, out, byte_offset=0): fills the writable buffer `out` with the
 * tensor's bytes from byte_offset (dense, little-endian; gathers, swaps and
 * inflates as needed). */
static PyObject *Catalog_read(Catalog *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"index", "out", "byte_offset", NULL};
    Py_ssize_t index;
    Py_buffer out;
    unsigned long long offset = 0;
    if (!catalog_ready(self)) return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "nw*|K", kwlist, &index, &out, &offset)) return NULL;
    const ckpt_tensor_info *t = tensor_at(self, index);
    if (!t) {
        PyBuffer_Release(&out);
        return NULL;
    }
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_catalog_read(self->catalog, t, offset, out.buf, (uint64_t)out.len, &e);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    if (st != CKPT_OK) return raise_ckpt(&e);
    Py_RETURN_NONE;
}

/* view(index) → a read-only Buffer on the catalog's shared mapping. */
static PyObject *Catalog_view(Catalog *self, PyObject *arg) {
    if (!catalog_ready(self)) return NULL;
    Py_ssize_t index = PyLong_AsSsize_t(arg);
    if (index == -1 && PyErr_Occurred()) return NULL;
    const ckpt_tensor_info *t = tensor_at(self, index);
    if (!t) return NULL;
    const void *data;
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_catalog_view(self->catalog, t, &data, &e);
    Py_END_ALLOW_THREADS
    if (st != CKPT_OK) return raise_ckpt(&e);
    return buffer_new((PyObject *)self, (void *)data, t->nbytes, 1, NULL);
}

/* verify(progress=None, report=False) → the tensors whose XXH3-64 matched,
 * or with report, what ckpt_verify checked as a dict. */
static PyObject *Catalog_verify(Catalog *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"progress", "report", NULL};
    progress_ctx p = {NULL};
    int want_report = 0;
    if (!catalog_ready(self)) return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO&", kwlist, &p.callable, FLAG("verify: report", want_report))) return NULL;
    ckpt_error e;
    ckpt_status st;
    ckpt_verify_report r = {.size = sizeof r};
    ckpt_verify_options vo;
    ckpt_verify_options_init(&vo);
    vo.progress = progress_trampoline, vo.user = &p;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_verify(self->catalog, &vo, &r, &e);
    Py_END_ALLOW_THREADS
    if (st != CKPT_OK) return raise_ckpt(&e);
    if (!want_report) return PyLong_FromSize_t(r.tensor_digests);
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:K,s:n}", "tensor_digests", (Py_ssize_t)r.tensor_digests,
                         "chunk_digests", (Py_ssize_t)r.chunk_digests, "header_digests", (Py_ssize_t)r.header_digests,
                         "zip_crc32", (Py_ssize_t)r.zip_crc32, "file_sha256", (Py_ssize_t)r.file_sha256, "bytes",
                         (unsigned long long)r.bytes, "tensors", (Py_ssize_t)r.tensors);
}

/* convert(dst, max_shard_size=0, prefix=None, overwrite=False,
 * no_sync=False, checksums=False, progress=None, …, check_crc=True), shared
 * by Catalog (plain copy) and Plan (with its rules): `run` is the library
 * call. */
typedef ckpt_status (*convert_fn)(void *source, const char *dst, const ckpt_writer_options *o, ckpt_error *err);

/* The whole catalog: a plan with no rule. */
static ckpt_status run_catalog_convert(void *source, const char *dst, const ckpt_writer_options *o, ckpt_error *err) {
    ckpt_plan *plan = NULL;
    ckpt_status st = ckpt_plan_create(source, &plan, err);
    if (st == CKPT_OK) st = ckpt_convert_plan(plan, dst, o, err);
    ckpt_plan_free(plan);
    return st;
}

static ckpt_status run_plan_convert(void *source, const char *dst, const ckpt_writer_options *o, ckpt_error *err) {
    return ckpt_convert_plan(source, dst, o, err);
}

/* Sets d[key] = value, taking the reference; false (an exception set) when
 * value is NULL or the set fails. */
static bool put(PyObject *d, const char *key, PyObject *value) {
    bool ok = value && PyDict_SetItemString(d, key, value) == 0;
    Py_XDECREF(value);
    return ok;
}

/* Appends value to list, taking the reference; false (an exception set)
 * when value is NULL or the append fails. */
static bool put_item(PyObject *list, PyObject *value) {
    bool ok = value && PyList_Append(list, value) == 0;
    Py_XDECREF(value);
    return ok;
}

/* A list of the dry-run writer's names of one kind. */
static PyObject *writer_names(const ckpt_writer *w, ckpt_writer_names which) {
    size_t n = ckpt_writer_name_count(w, which);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t k = 0; list && k < n; k++) {
        PyObject *name = PyUnicode_DecodeFSDefault(ckpt_writer_name_at(w, which, k));
        if (!name) Py_CLEAR(list);
        else PyList_SET_ITEM(list, (Py_ssize_t)k, name);
    }
    return list;
}

/* Dry-run tensor i as a dict (its name, source name, dtype, shape, bytes,
 * file or the tensor written in its place, and parts); *per_file counts it
 * in each file it lies in, *params adds its elements when it is written. */
static PyObject *preview_tensor(const ckpt_writer *w, const ckpt_plan *plan, size_t i, Py_ssize_t *per_file,
                                unsigned long long *params) {
    ckpt_writer_tensor_info t = {.size = sizeof t};
    ckpt_writer_tensor_info_at(w, i, &t);
    PyObject *d = PyDict_New(), *shape = PyList_New(0), *parts = t.part_count > 1 ? PyList_New(0) : NULL;
    bool ok = d && shape && (t.part_count < 2 || parts);
    unsigned long long numel = 1;
    for (uint32_t k = 0; ok && k < t.ndim; k++) {
        numel *= t.shape[k];
        ok = put_item(shape, PyLong_FromUnsignedLongLong(t.shape[k]));
    }
    size_t f, last = SIZE_MAX;
    uint64_t begin, nbytes;
    for (uint32_t k = 0; ok && ckpt_writer_tensor_part(w, i, k, &f, &begin, &nbytes, NULL); last = f, k++) {
        if (f != last) per_file[f]++;
        if (parts)
            ok = put_item(parts, Py_BuildValue("{s:N,s:K,s:K}", "file",
                                               PyUnicode_DecodeFSDefault(ckpt_writer_name_at(w, CKPT_WRITER_DATA_FILES, f)),
                                               "begin", (unsigned long long)begin, "nbytes", (unsigned long long)nbytes));
    }
    if (t.file != SIZE_MAX && !t.part_count) per_file[t.file]++;
    if (t.file != SIZE_MAX) *params += numel;
    ok = ok && put(d, "name", PyUnicode_DecodeFSDefault(t.name)) &&
         put(d, "source", PyUnicode_DecodeFSDefault(ckpt_plan_item_at(plan, i)->source->name)) &&
         put(d, "dtype", PyUnicode_FromString(ckpt_dtype_name(t.dtype))) && PyDict_SetItemString(d, "shape", shape) == 0 &&
         put(d, "nbytes", PyLong_FromUnsignedLongLong(t.nbytes));
    if (ok && t.file == SIZE_MAX)
        ok = PyDict_SetItemString(d, "file", Py_None) == 0 && put(d, "same_as", PyUnicode_DecodeFSDefault(t.kept));
    else if (ok)
        ok = put(d, "file", PyUnicode_DecodeFSDefault(ckpt_writer_name_at(w, CKPT_WRITER_DATA_FILES, t.file)));
    if (ok && parts) ok = PyDict_SetItemString(d, "parts", parts) == 0;
    Py_XDECREF(shape);
    Py_XDECREF(parts);
    if (!ok) Py_CLEAR(d);
    return d;
}

/* A dry-run writer (ckpt_convert_plan_preview) as the dict ckpt.convert's
 * dry_run returns: the fields and order of `ckpt convert --dry-run --json`. */
static PyObject *preview_dict(const ckpt_writer *w, const ckpt_plan *plan) {
    size_t files = ckpt_writer_file_count(w), count = ckpt_writer_tensor_count(w);
    Py_ssize_t *per_file = PyMem_Calloc(files + 1, sizeof *per_file);
    unsigned long long params = 0, written = 0;
    PyObject *d = PyDict_New(), *tensors = PyList_New(0), *list = PyList_New(0);
    bool ok = per_file && d && tensors && list;
    for (size_t i = 0; ok && i < count; i++) {
        ok = put_item(tensors, preview_tensor(w, plan, i, per_file, &params));
        written += ckpt_writer_tensor_file(w, i) != SIZE_MAX;
    }
    for (size_t f = 0; ok && f < files; f++)
        ok = put_item(list, Py_BuildValue("{s:N,s:N,s:K,s:n}", "name",
                                          PyUnicode_DecodeFSDefault(ckpt_writer_name_at(w, CKPT_WRITER_DATA_FILES, f)),
                                          "path", PyUnicode_DecodeFSDefault(ckpt_writer_file_path(w, f)), "size",
                                          (unsigned long long)ckpt_writer_file_size(w, f), "tensors", per_file[f]));
    ok = ok && put(d, "path", PyUnicode_DecodeFSDefault(ckpt_writer_path(w))) &&
         put(d, "format", PyUnicode_FromString(ckpt_format_name(ckpt_writer_format(w)))) &&
         put(d, "directory", PyBool_FromLong(ckpt_writer_is_directory(w))) &&
         put(d, "open", PyUnicode_DecodeFSDefault(ckpt_writer_open_path(w))) &&
         PyDict_SetItemString(d, "files", list) == 0 && put(d, "side_files", writer_names(w, CKPT_WRITER_SIDE_FILES)) &&
         put(d, "copied_files", writer_names(w, CKPT_WRITER_COPIED_FILES)) &&
         put(d, "replaces", writer_names(w, CKPT_WRITER_REPLACED_FILES)) &&
         PyDict_SetItemString(d, "tensors", tensors) == 0 &&
         put(d, "totals", Py_BuildValue("{s:n,s:K,s:K,s:K}", "tensors", (Py_ssize_t)count, "written", written,
                                        "parameters", params, "bytes", (unsigned long long)ckpt_writer_total_bytes(w)));
    Py_XDECREF(list);
    Py_XDECREF(tensors);
    PyMem_Free(per_file);
    if (!ok) Py_CLEAR(d);
    if (!ok && !PyErr_Occurred()) PyErr_NoMemory();
    return d;
}

/* With dry_run (plans only): nothing is written; returns what would be,
 * read from ckpt_convert_plan_preview's writer (preview_dict). */
static PyObject *convert_call(void *source, convert_fn run, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"dst", "max_shard_size", "prefix", "overwrite", "no_sync", "checksums", "progress",
                             "copy_files_from", "format", "dcp_ranks", "dry_run", "check_crc",
                             "source_metadata", NULL};
    PyObject *dst, *prefix = NULL, *extra = NULL;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    unsigned long long shard = 0;
    unsigned int dcp_ranks = 0; /* with format CKPT_FORMAT_DCP: the ranks that appear to have saved it */
    int overwrite = 0, no_sync = 0, checksums = 0, format = 0, dry_run = 0, check_crc = 1, source_metadata = 0;
    progress_ctx p = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|KO&O&O&O&OO&iIO&O&O&", kwlist, PyUnicode_FSConverter, &dst,
                                     &shard, PyUnicode_FSConverter, &prefix, FLAG("convert: overwrite", overwrite),
                                     FLAG("convert: no_sync", no_sync), FLAG("convert: checksums", checksums),
                                     &p.callable, PyUnicode_FSConverter, &extra, &format, &dcp_ranks,
                                     FLAG("convert: dry_run", dry_run), FLAG("convert: check_crc", check_crc),
                                     FLAG("convert: source_metadata", source_metadata)))
        return NULL;
    o.skip_crc_check = !check_crc;
    o.max_shard_size = shard, o.overwrite = overwrite, o.no_sync = no_sync, o.checksums = checksums;
    o.source_metadata = source_metadata;
    o.format = (ckpt_format)format;
    ckpt_dcp_writer_options dcp;
    ckpt_dcp_writer_options_init(&dcp);
    dcp.ranks = dcp_ranks;
    o.dcp = &dcp;
    o.prefix = prefix ? PyBytes_AS_STRING(prefix) : NULL;
    o.copy_files_from = extra ? PyBytes_AS_STRING(extra) : NULL;
    o.progress = progress_trampoline, o.user = &p;
    ckpt_error e;
    ckpt_status st;
    ckpt_writer *w = NULL;
    if (dry_run && run != run_plan_convert) {
        Py_DECREF(dst);
        Py_XDECREF(prefix);
        Py_XDECREF(extra);
        PyErr_SetString(PyExc_TypeError, "dry_run is for Plan.convert");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    st = dry_run ? ckpt_convert_plan_preview(source, PyBytes_AS_STRING(dst), &o, &w, &e)
                 : run(source, PyBytes_AS_STRING(dst), &o, &e);
    Py_END_ALLOW_THREADS
    Py_DECREF(dst);
    Py_XDECREF(prefix);
    Py_XDECREF(extra);
    if (st != CKPT_OK) return raise_ckpt(&e);
    if (!dry_run) Py_RETURN_NONE;
    PyObject *listing = preview_dict(w, source);
    ckpt_writer_free(w);
    return listing;
}

static PyObject *Catalog_convert(Catalog *self, PyObject *args, PyObject *kw) {
    if (!catalog_ready(self)) return NULL;
    return convert_call(self->catalog, run_catalog_convert, args, kw);
}

static PyObject *Catalog_close(Catalog *self, PyObject *unused) {
    (void)unused;
    /* Views and plans point into the catalog: it closes when the last of
     * them goes. */
    if (self->users == 0) catalog_release(self);
    else
        self->closing = 1;
    Py_RETURN_NONE;
}

/* recorded_digests() → [int or None]: the XXH3-64 each tensor's file records. */
static PyObject *Catalog_recorded_digests(Catalog *self, PyObject *unused) {
    (void)unused;
    if (!catalog_ready(self)) return NULL;
    size_t n = ckpt_catalog_tensor_count(self->catalog);
    uint64_t *digests = PyMem_Malloc((n ? n : 1) * sizeof *digests);
    unsigned char *recorded = PyMem_Malloc(n ? n : 1);
    if (!digests || !recorded) {
        PyMem_Free(digests);
        PyMem_Free(recorded);
        return PyErr_NoMemory();
    }
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_catalog_recorded_digests(self->catalog, digests, recorded, &e);
    Py_END_ALLOW_THREADS
    PyObject *out = st == CKPT_OK ? PyList_New((Py_ssize_t)n) : NULL;
    for (size_t i = 0; out && i < n; i++) {
        PyObject *v = recorded[i] ? PyLong_FromUnsignedLongLong(digests[i]) : Py_NewRef(Py_None);
        if (!v) Py_CLEAR(out);
        else PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    PyMem_Free(digests);
    PyMem_Free(recorded);
    if (st != CKPT_OK) return raise_ckpt(&e);
    return out;
}

/* recorded_chunks() → [None or (chunk_bytes, phase, (digest, …))]: the chunk
 * digests each tensor's file records (ckpt_catalog_recorded_chunks). */
static PyObject *Catalog_recorded_chunks(Catalog *self, PyObject *unused) {
    (void)unused;
    if (!catalog_ready(self)) return NULL;
    size_t n = ckpt_catalog_tensor_count(self->catalog), total = 0;
    ckpt_chunk_record *records = PyMem_Malloc((n ? n : 1) * sizeof *records);
    uint64_t *digests = NULL;
    if (!records) return PyErr_NoMemory();
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_catalog_recorded_chunks(self->catalog, records, NULL, 0, &total, &e);
    Py_END_ALLOW_THREADS
    if (st == CKPT_OK && !(digests = PyMem_Malloc((total ? total : 1) * sizeof *digests))) {
        PyMem_Free(records);
        return PyErr_NoMemory();
    }
    if (st == CKPT_OK) {
        Py_BEGIN_ALLOW_THREADS
        st = ckpt_catalog_recorded_chunks(self->catalog, records, digests, total, &total, &e);
        Py_END_ALLOW_THREADS
    }
    PyObject *out = st == CKPT_OK ? PyList_New((Py_ssize_t)n) : NULL;
    for (size_t i = 0; out && i < n; i++) {
        const ckpt_chunk_record *r = &records[i];
        PyObject *chunks = r->chunk_bytes ? PyTuple_New((Py_ssize_t)r->count) : NULL, *v = NULL;
        for (size_t k = 0; chunks && k < r->count; k++) {
            PyObject *d = PyLong_FromUnsignedLongLong(digests[r->first + k]);
            if (!d) Py_CLEAR(chunks);
            else PyTuple_SET_ITEM(chunks, (Py_ssize_t)k, d);
        }
        if (!r->chunk_bytes) v = Py_NewRef(Py_None);
        else if (chunks) v = Py_BuildValue("(KKN)", (unsigned long long)r->chunk_bytes, (unsigned long long)r->phase, chunks);
        if (!v) Py_CLEAR(out);
        else PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    PyMem_Free(records);
    PyMem_Free(digests);
    if (st != CKPT_OK) return raise_ckpt(&e);
    return out;
}

static PyMethodDef Catalog_methods[] = {
    {"tensors", (PyCFunction)Catalog_tensors, METH_NOARGS,
     "tensors() -> [TensorRow(name, dtype, shape, nbytes, file, offset, storage, direct)]"},
    {"names", (PyCFunction)Catalog_names, METH_NOARGS, "names() -> [name], in catalog order"},
    {"infos", (PyCFunction)Catalog_infos, METH_VARARGS, "infos(cls, files) -> {name: cls(name, dtype, shape, "
                                                          "nbytes, files[file], offset)}"},
    {"find", (PyCFunction)Catalog_find, METH_O, "find(name) -> index or None"},
    {"recorded_digests", (PyCFunction)Catalog_recorded_digests, METH_NOARGS,
     "recorded_digests() -> [XXH3-64 or None]: what each tensor's file records (ckpt_catalog_recorded_digests)"},
    {"recorded_chunks", (PyCFunction)Catalog_recorded_chunks, METH_NOARGS,
     "recorded_chunks() -> [None or (chunk_bytes, phase, digests)]: each tensor's recorded chunk digests "
     "(ckpt_catalog_recorded_chunks)"},
    {"row", (PyCFunction)Catalog_row, METH_O, "row(i) -> TensorRow"},
    {"metadata", (PyCFunction)Catalog_metadata, METH_NOARGS, "metadata() -> dict of str"},
    {"files", (PyCFunction)Catalog_files, METH_NOARGS, "files() -> [(path, size)]"},
    {"info", (PyCFunction)Catalog_info, METH_NOARGS, "info() -> {format, tree_json, index_path}"},
    {"gguf_hf_config", (PyCFunction)Catalog_gguf_hf_config, METH_VARARGS,
     "gguf_hf_config(dtype=None) -> the config.json text ckpt_gguf_hf_plan writes for this llama.cpp GGUF "
     "(ckpt_gguf_hf_config)"},
    {"read", (PyCFunction)(void (*)(void))Catalog_read, METH_VARARGS | METH_KEYWORDS,
     "read(index, out, byte_offset=0): copy a tensor's bytes into a writable buffer"},
    {"view", (PyCFunction)Catalog_view, METH_O, "view(index) -> read-only Buffer on the file's mapping"},
    {"verify", (PyCFunction)(void (*)(void))Catalog_verify, METH_VARARGS | METH_KEYWORDS,
     "verify(progress=None, report=False) -> number of tensors whose XXH3-64 matched; with report, a dict of\n"
     "        what was checked: tensor_digests, header_digests, zip_crc32, bytes, tensors"},
    {"convert", (PyCFunction)(void (*)(void))Catalog_convert, METH_VARARGS | METH_KEYWORDS,
     "convert(dst, max_shard_size=0, prefix=None, overwrite=False, no_sync=False, checksums=False, progress=None, "
     "copy_files_from=None, format=0, dcp_ranks=0, check_crc=True, source_metadata=False)"},
    {"close", (PyCFunction)Catalog_close, METH_NOARGS, "close(): release files (once no view refers to them)"},
    {NULL}};

static PyTypeObject CatalogType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt._ckpt.Catalog",
    .tp_basicsize = sizeof(Catalog),
    .tp_dealloc = (destructor)Catalog_dealloc,
    .tp_methods = Catalog_methods,
    .tp_init = (initproc)Catalog_init,
    .tp_new = PyType_GenericNew,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Catalog(path): what a checkpoint holds, without its data.",
};

/* ------------------------------------------------------------------------ */
/* Map: the library's private, copy-on-write mapping of a data file         */
/* ------------------------------------------------------------------------ */

/* Tensors handed to frameworks as if freshly allocated must be writable;
 * writes to a private mapping copy the page and never reach the file.  The
 * mapping (and its prefetch) is the library's: ckpt_catalog_map_file. */
typedef struct {
    PyObject_HEAD
    ckpt_mapping *mapping;
} Map;

static int Map_init(Map *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"catalog", "file", "prefetch", NULL};
    Catalog *c;
    Py_ssize_t file;
    int prefetch = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!n|O&", kwlist, &CatalogType, &c, &file, FLAG("Map: prefetch", prefetch))) return -1;
    if (!catalog_ready(c)) return -1;
    ckpt_error e;
    ckpt_status st;
    ckpt_mapping *m = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = file < 0 ? CKPT_E_INVALID_ARGUMENT
                  : ckpt_catalog_map_file(c->catalog, (size_t)file, prefetch ? CKPT_MAP_PREFETCH : 0, &m, &e);
    Py_END_ALLOW_THREADS
    if (file < 0) {
        PyErr_SetString(PyExc_IndexError, "file index out of range");
        return -1;
    }
    if (st != CKPT_OK) {
        raise_ckpt(&e);
        return -1;
    }
    ckpt_mapping_free(self->mapping);
    self->mapping = m;
    return 0;
}

static void Map_dealloc(Map *self) {
    ckpt_mapping_free(self->mapping);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Map_getbuffer(Map *self, Py_buffer *view, int flags) {
    void *data = ckpt_mapping_data(self->mapping);
    return PyBuffer_FillInfo(view, (PyObject *)self, data ? data : empty_bytes,
                             (Py_ssize_t)ckpt_mapping_size(self->mapping), 0, flags);
}

static Py_ssize_t Map_len(Map *self) { return (Py_ssize_t)ckpt_mapping_size(self->mapping); }

static PyObject *Map_prefetching(Map *self, void *unused) {
    (void)unused;
    return PyBool_FromLong(ckpt_mapping_prefetching(self->mapping));
}

static PyGetSetDef Map_getset[] = {
    {"prefetching", (getter)Map_prefetching, NULL, "whether a background prefetch was started", NULL}, {NULL}};
static PyBufferProcs Map_as_buffer = {(getbufferproc)Map_getbuffer, NULL};
static PySequenceMethods Map_as_sequence = {.sq_length = (lenfunc)Map_len};

static PyTypeObject MapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt._ckpt.Map",
    .tp_basicsize = sizeof(Map),
    .tp_dealloc = (destructor)Map_dealloc,
    .tp_as_buffer = &Map_as_buffer,
    .tp_as_sequence = &Map_as_sequence,
    .tp_getset = Map_getset,
    .tp_init = (initproc)Map_init,
    .tp_new = PyType_GenericNew,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Map(catalog, file, prefetch=False): a private copy-on-write mapping of a catalog's data file (writes "
              "never reach the file); prefetch reads it into the page cache in the background.",
};

/* ------------------------------------------------------------------------ */
/* Device                                                                   */
/* ------------------------------------------------------------------------ */

/* A CUDA device as a load destination (ckpt_device.h): its ring of pinned
 * slots lives as long as the object. */
typedef struct {
    PyObject_HEAD
    ckpt_device *device;
} Device;

static int Device_init(Device *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"name", "slots", "slot_bytes", "cufile", NULL};
    const char *name;
    ckpt_device_options o;
    ckpt_device_options_init(&o);
    unsigned slots = 0;
    unsigned long long slot_bytes = 0;
    int cufile = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|IKO&", kwlist, &name, &slots, &slot_bytes, FLAG("Device: cufile", cufile))) return -1;
    if (slots) o.slots = slots;
    if (slot_bytes) o.slot_bytes = slot_bytes;
    o.cufile = cufile;
    ckpt_error e;
    ckpt_status st;
    ckpt_device *d;
    Py_BEGIN_ALLOW_THREADS /* loading the runtime and pinning the slots take a while */
    st = ckpt_device_open(name, &o, &d, &e);
    Py_END_ALLOW_THREADS
    if (st != CKPT_OK) {
        raise_ckpt(&e);
        return -1;
    }
    ckpt_device_close(self->device);
    self->device = d;
    return 0;
}

static void Device_dealloc(Device *self) {
    ckpt_device_close(self->device);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int device_ready(Device *self) {
    if (self->device) return 1;
    PyErr_SetString(PyExc_ValueError, "the device is not open");
    return 0;
}

static PyObject *Device_name(Device *self, void *unused) {
    (void)unused;
    return device_ready(self) ? PyUnicode_FromString(ckpt_device_name(self->device)) : NULL;
}

static PyObject *Device_stats(Device *self, PyObject *args) {
    int reset = 0;
    if (!device_ready(self) || !PyArg_ParseTuple(args, "|O&", FLAG("Device.stats: reset", reset))) return NULL;
    ckpt_device_stats s = {.size = sizeof s};
    ckpt_device_stats_get(self->device, &s, reset);
    static const char *const paths[] = {"none", "staged", "direct", "mixed"};
    return Py_BuildValue("{s:s,s:O,s:O,s:I,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "path",
                         (unsigned)s.path < 4 ? paths[s.path] : "none", "cufile_found",
                         s.cufile_found ? Py_True : Py_False, "cufile_open", s.cufile_open ? Py_True : Py_False,
                         "slots", s.slots, "slot_bytes", (unsigned long long)s.slot_bytes, "copies",
                         (unsigned long long)s.copies, "bytes_copied", (unsigned long long)s.bytes_copied, "slot_waits",
                         (unsigned long long)s.slot_waits, "direct_reads", (unsigned long long)s.direct_reads,
                         "bytes_direct", (unsigned long long)s.bytes_direct, "cufile_files_refused",
                         (unsigned long long)s.cufile_files_refused);
}

static PyMethodDef Device_methods[] = {
    {"stats", (PyCFunction)Device_stats, METH_VARARGS,
     "stats(reset=False) -> {path ('none', 'staged', 'direct' or 'mixed'), cufile_found, cufile_open, slots, "
     "slot_bytes, copies, bytes_copied, slot_waits, direct_reads, bytes_direct, cufile_files_refused}"},
    {NULL}};

static PyGetSetDef Device_getset[] = {{"name", (getter)Device_name, NULL, "the device's name, e.g. 'cuda:0'", NULL},
                                      {NULL}};

static PyTypeObject DeviceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt._ckpt.Device",
    .tp_basicsize = sizeof(Device),
    .tp_dealloc = (destructor)Device_dealloc,
    .tp_methods = Device_methods,
    .tp_getset = Device_getset,
    .tp_init = (initproc)Device_init,
    .tp_new = PyType_GenericNew,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Device(name, slots=0, slot_bytes=0, cufile=True): a CUDA device opened as a load destination, with its "
              "ring of pinned host slots (0: the library's defaults) and GPUDirect Storage where libcufile and the "
              "file allow (cufile=False: never); libcudart and libcufile are loaded at run time (CKPT_CUDART and "
              "CKPT_CUFILE name them).",
};

/* ------------------------------------------------------------------------ */
/* Plan                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    Catalog *catalog;
    ckpt_plan *plan;
    Py_buffer *buffers; /* caller buffers, per item (obj NULL when none) */
    size_t buffer_count;
    PyObject *devices; /* the Devices items load into (kept alive with the plan), or NULL */
} Plan;

static void plan_release_buffers(Plan *self) {
    for (size_t i = 0; i < self->buffer_count; i++)
        if (self->buffers[i].obj) PyBuffer_Release(&self->buffers[i]);
    PyMem_Free(self->buffers);
    self->buffers = NULL;
    self->buffer_count = 0;
}

static int Plan_init(Plan *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"catalog", NULL};
    Catalog *c;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!", kwlist, &CatalogType, &c)) return -1;
    if (!catalog_ready(c)) return -1;
    ckpt_error e;
    ckpt_plan *p;
    if (ckpt_plan_create(c->catalog, &p, &e) != CKPT_OK) {
        raise_ckpt(&e);
        return -1;
    }
    plan_release_buffers(self);
    ckpt_plan_free(self->plan);
    c->users++;
    if (self->catalog) catalog_unuse(self->catalog);
    Py_XSETREF(self->catalog, (Catalog *)Py_NewRef(c));
    self->plan = p;
    return 0;
}

static void Plan_dealloc(Plan *self) {
    ckpt_plan_free(self->plan);
    plan_release_buffers(self);
    Py_XDECREF(self->devices);
    if (self->catalog) catalog_unuse(self->catalog);
    Py_XDECREF(self->catalog);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int plan_ready(Plan *self) {
    if (self->plan) return 1;
    PyErr_SetString(PyExc_ValueError, "the plan is not initialised");
    return 0;
}

#define PLAN_CALL(call)                              \
    do {                                             \
        ckpt_error e;                                \
        if ((call) != CKPT_OK) return raise_ckpt(&e); \
        Py_RETURN_NONE;                              \
    } while (0)

static ckpt_dtype dtype_arg(const char *name) {
    ckpt_dtype d = ckpt_dtype_from_name(name);
    if (d == CKPT_DTYPE_INVALID) PyErr_Format(PyExc_ValueError, "unknown dtype '%s'", name);
    return d;
}

static PyObject *Plan_set_flags(Plan *self, PyObject *arg) {
    if (!plan_ready(self)) return NULL;
    unsigned long flags = PyLong_AsUnsignedLong(arg);
    if (PyErr_Occurred()) return NULL;
    ckpt_plan_set_flags(self->plan, (unsigned)flags);
    Py_RETURN_NONE;
}

/* last_rule() → (matched, skipped) of the last rule. */
static PyObject *Plan_last_rule(Plan *self, PyObject *unused) {
    (void)unused;
    if (!plan_ready(self)) return NULL;
    size_t matched, skipped;
    ckpt_plan_last_rule(self->plan, &matched, &skipped);
    return Py_BuildValue("(nn)", (Py_ssize_t)matched, (Py_ssize_t)skipped);
}

/* ---- the object tree's values as Python objects ---------------------------- */

/*
 * The Python objects json_loads gives for the JSON of a value (the schema
 * of ckpt_catalog_tree_json: {"__dict__": [[key, value], …]}, lists as
 * lists, {"__tensor__": name} …), made from the library's values through
 * ckpt.h's accessors, without the text.  The containers being filled wait
 * on a heap stack, never on the C stack, however deep the tree.
 */

/* {tag: value}, stealing value. */
static PyObject *py_tagged(const char *tag, PyObject *value) {
    PyObject *d = value ? PyDict_New() : NULL;
    if (d && PyDict_SetItemString(d, tag, value) < 0) Py_CLEAR(d);
    Py_XDECREF(value);
    return d;
}

static PyObject *py_hex(const char *tag, const ckpt_value *v) {
    static const char digits[] = "0123456789abcdef";
    size_t n;
    const unsigned char *bytes = (const unsigned char *)ckpt_value_text(v, &n);
    PyObject *s = PyUnicode_New((Py_ssize_t)(2 * n), 127);
    if (!s) return NULL;
    Py_UCS1 *p = PyUnicode_1BYTE_DATA(s);
    for (size_t i = 0; i < n; i++)
        p[2 * i] = (Py_UCS1)digits[bytes[i] >> 4], p[2 * i + 1] = (Py_UCS1)digits[bytes[i] & 15];
    return py_tagged(tag, s);
}

/* The text of a text kind as a str. */
static PyObject *py_text(const ckpt_value *v) {
    size_t n;
    const char *s = ckpt_value_text(v, &n);
    return PyUnicode_FromStringAndSize(s, (Py_ssize_t)n);
}

/* A value with no items. */
static PyObject *py_leaf(const ckpt_value *v) {
    switch (ckpt_value_kind_of(v)) {
    case CKPT_VALUE_NULL: return Py_NewRef(Py_None);
    case CKPT_VALUE_BOOL: return PyBool_FromLong(ckpt_value_bool(v));
    case CKPT_VALUE_INT: return PyLong_FromLongLong(ckpt_value_int(v));
    case CKPT_VALUE_FLOAT: {
        double f = ckpt_value_float(v);
        if (isfinite(f)) return PyFloat_FromDouble(f);
        return py_tagged("__float__", PyUnicode_FromString(isnan(f) ? "nan" : f > 0 ? "inf" : "-inf"));
    }
    case CKPT_VALUE_NUMBER: {
        const char *digits = ckpt_value_text(v, NULL);
        if (!strpbrk(digits, ".eE")) return PyLong_FromString(digits, NULL, 10);
        PyObject *text = py_text(v), *f = text ? PyFloat_FromString(text) : NULL;
        Py_XDECREF(text);
        return f;
    }
    case CKPT_VALUE_STRING: return py_text(v);
    case CKPT_VALUE_BYTES: return py_hex("__bytes__", v);
    case CKPT_VALUE_BIGINT: return py_hex("__int_le__", v);
    case CKPT_VALUE_TENSOR: return py_tagged("__tensor__", py_text(v));
    case CKPT_VALUE_GLOBAL: return py_tagged("__global__", py_text(v));
    default: return PyErr_Format(PyExc_ValueError, "an object tree value of unknown kind %d", ckpt_value_kind_of(v));
    }
}

static bool py_is_container(const ckpt_value *v) { return ckpt_value_kind_of(v) >= CKPT_VALUE_LIST; }

/* A container being filled: its items' list (a LIST itself; a tuple's,
 * set's, dict's or call's tagged list), its dict (NULL for a LIST), the
 * [key, value] pair waiting for its value. */
typedef struct py_frame {
    const ckpt_value *v;
    ckpt_value_kind kind;
    PyObject *list, *dict, *pair; /* borrowed: the tree holds them */
    size_t next, count;
    bool in_state;
} py_frame;

/* The frames of a walk, on the heap. */
typedef struct py_frames {
    py_frame *at;
    size_t len, cap;
} py_frames;

static py_frame *py_top(py_frames *fs) { return fs->len ? &fs->at[fs->len - 1] : NULL; }

/* Puts obj (stolen) where the top frame's next child goes, or as the root. */
static int py_place(py_frame *f, PyObject **root, PyObject *obj) {
    if (!obj) return -1;
    if (!f) return *root = obj, 0;
    int rc;
    if (f->in_state) {
        rc = PyDict_SetItemString(f->dict, f->kind == CKPT_VALUE_DICT ? "__state__" : "state", obj);
    } else if (f->kind == CKPT_VALUE_OBJECT) {
        PyObject *k = py_text(ckpt_value_key(f->v, f->next - 1));
        rc = k ? PyDict_SetItem(f->dict, k, obj) : -1;
        Py_XDECREF(k);
    } else {
        rc = PyList_Append(f->pair ? f->pair : f->list, obj);
        f->pair = NULL;
    }
    Py_DECREF(obj);
    return rc;
}

/* dict[key] = text. */
static int py_set_text(PyObject *dict, const char *key, const char *text) {
    PyObject *s = PyUnicode_FromString(text);
    int rc = s ? PyDict_SetItemString(dict, key, s) : -1;
    Py_XDECREF(s);
    return rc;
}

/* The tag of a container's items in its dict. */
static const char *py_items_tag(ckpt_value_kind kind) {
    switch (kind) {
    case CKPT_VALUE_TUPLE: return "__tuple__";
    case CKPT_VALUE_SET: return "__set__";
    case CKPT_VALUE_DICT: return "__dict__";
    case CKPT_VALUE_CALL: return "args";
    default: return NULL;
    }
}

static int py_push(py_frames *fs, py_frame f) {
    if (fs->len == fs->cap) {
        size_t cap = fs->cap ? 2 * fs->cap : 16;
        py_frame *at = PyMem_Realloc(fs->at, cap * sizeof *at);
        if (!at) return PyErr_NoMemory(), -1;
        fs->at = at, fs->cap = cap;
    }
    fs->at[fs->len++] = f;
    return 0;
}

/* v placed: a leaf whole, a container empty with its frame pushed. */
static int py_open(py_frames *fs, PyObject **root, const ckpt_value *v) {
    if (!py_is_container(v)) return py_place(py_top(fs), root, py_leaf(v));
    py_frame f = {.v = v, .kind = ckpt_value_kind_of(v), .count = ckpt_value_len(v)};
    const char *cls = ckpt_value_class(v);
    PyObject *obj;
    if (f.kind == CKPT_VALUE_LIST) {
        obj = f.list = PyList_New(0);
    } else {
        obj = f.dict = PyDict_New();
        const char *tag = py_items_tag(f.kind);
        if (obj && cls && py_set_text(obj, f.kind == CKPT_VALUE_CALL ? "__call__" : "__class__", cls) < 0)
            Py_CLEAR(obj);
        if (obj && tag) {
            f.list = PyList_New(0);
            if (!f.list || PyDict_SetItemString(obj, tag, f.list) < 0) Py_CLEAR(obj);
            Py_XDECREF(f.list); /* the dict holds it */
        }
    }
    if (!obj || py_place(py_top(fs), root, obj) < 0) return -1;
    return py_push(fs, f);
}

/* One step of the top frame: its next item, its state, or its end. */
static int py_step(py_frames *fs, PyObject **root) {
    py_frame *f = py_top(fs);
    const ckpt_value *v = f->v;
    if (f->in_state || (f->next == f->count && !ckpt_value_state(v))) {
        fs->len--;
        return 0;
    }
    if (f->next == f->count) {
        f->in_state = true;
        return py_open(fs, root, ckpt_value_state(v));
    }
    size_t i = f->next++;
    if (f->kind == CKPT_VALUE_DICT) {
        PyObject *pair = PyList_New(0), *key = pair ? py_leaf(ckpt_value_key(v, i)) : NULL;
        int rc = key && PyList_Append(pair, key) == 0 && PyList_Append(f->list, pair) == 0 ? 0 : -1;
        Py_XDECREF(key);
        Py_XDECREF(pair); /* the list holds it */
        if (rc) return -1;
        f->pair = pair;
        return py_open(fs, root, ckpt_value_at(v, i));
    }
    return py_open(fs, root, f->kind == CKPT_VALUE_OBJECT ? ckpt_value_at(v, i) : ckpt_value_item(v, i));
}

static PyObject *value_to_py(const ckpt_value *v) {
    py_frames fs = {0};
    PyObject *root = NULL;
    int rc = py_open(&fs, &root, v);
    while (!rc && fs.len) rc = py_step(&fs, &root);
    PyMem_Free(fs.at);
    if (rc) Py_CLEAR(root);
    return root;
}

/* tree() → the catalog's own object tree as the plan's output has it, as
 * the Python objects json_loads(tree_json()) gives, made from the
 * library's values (no JSON); None when the catalog has none. */
static PyObject *Plan_tree(Plan *self, PyObject *unused) {
    (void)unused;
    if (!plan_ready(self)) return NULL;
    const ckpt_value *tree = NULL;
    ckpt_error e;
    if (ckpt_plan_tree(self->plan, &tree, &e) != CKPT_OK) return raise_ckpt(&e);
    return tree ? value_to_py(tree) : Py_NewRef(Py_None);
}

/* tree_json(tree=None) → the object tree `tree` (default: the catalog's)
 * as the plan's output has it, or None. */
static PyObject *Plan_tree_json(Plan *self, PyObject *args) {
    const char *tree = NULL;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "|z", &tree)) return NULL;
    char *json = NULL;
    ckpt_error e;
    if (ckpt_plan_tree_json(self->plan, tree, &json, &e) != CKPT_OK) return raise_ckpt(&e);
    if (!json) Py_RETURN_NONE;
    PyObject *text = PyUnicode_FromString(json);
    ckpt_free(json);
    return text;
}

static PyObject *Plan_select(Plan *self, PyObject *args) {
    const char *pattern;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "s", &pattern)) return NULL;
    PLAN_CALL(ckpt_plan_select(self->plan, pattern, &e));
}

static PyObject *Plan_exclude(Plan *self, PyObject *args) {
    const char *pattern;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "s", &pattern)) return NULL;
    PLAN_CALL(ckpt_plan_exclude(self->plan, pattern, &e));
}

static PyObject *Plan_rename(Plan *self, PyObject *args) {
    const char *from, *to;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "ss", &from, &to)) return NULL;
    PLAN_CALL(ckpt_plan_rename(self->plan, from, to, &e));
}

static PyObject *Plan_cast(Plan *self, PyObject *args) {
    const char *pattern, *dtype;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "zs", &pattern, &dtype)) return NULL;
    ckpt_dtype d = dtype_arg(dtype);
    if (d == CKPT_DTYPE_INVALID) return NULL;
    PLAN_CALL(ckpt_plan_cast(self->plan, pattern, d, &e));
}

static PyObject *Plan_slice(Plan *self, PyObject *args) {
    const char *pattern;
    int dim;
    unsigned long long start, stop;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "ziKK", &pattern, &dim, &start, &stop)) return NULL;
    PLAN_CALL(ckpt_plan_slice(self->plan, pattern, dim, start, stop, &e));
}

static PyObject *Plan_split(Plan *self, PyObject *args) {
    const char *pattern;
    int dim;
    unsigned long long rank, parts;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "ziKK", &pattern, &dim, &rank, &parts)) return NULL;
    PLAN_CALL(ckpt_plan_split(self->plan, pattern, dim, rank, parts, &e));
}

static PyObject *Plan_permute(Plan *self, PyObject *args) {
    const char *pattern;
    PyObject *seq;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "zO", &pattern, &seq)) return NULL;
    PyObject *fast = PySequence_Fast(seq, "perm must be a sequence of ints");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    uint32_t perm[CKPT_MAX_DIMS];
    if (n > CKPT_MAX_DIMS) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "at most %d axes", CKPT_MAX_DIMS);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v < 0 || v >= CKPT_MAX_DIMS) {
            Py_DECREF(fast);
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "axis %ld out of range", v);
            return NULL;
        }
        perm[i] = (uint32_t)v;
    }
    Py_DECREF(fast);
    PLAN_CALL(ckpt_plan_permute(self->plan, pattern, (uint32_t)n, perm, &e));
}

static PyObject *Plan_transpose(Plan *self, PyObject *args) {
    const char *pattern;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "z", &pattern)) return NULL;
    PLAN_CALL(ckpt_plan_transpose(self->plan, pattern, &e));
}

static PyObject *Plan_layout(Plan *self, PyObject *args) {
    const char *pattern, *from, *to;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "zss", &pattern, &from, &to)) return NULL;
    PLAN_CALL(ckpt_plan_layout(self->plan, pattern, from, to, &e));
}

/* items() → [PlanRow(name, source, dtype, shape, nbytes, transform)] */
static PyObject *Plan_items(Plan *self, PyObject *unused) {
    (void)unused;
    if (!plan_ready(self)) return NULL;
    size_t n = ckpt_plan_count(self->plan);
    const ckpt_tensor_info *first = ckpt_catalog_tensor(self->catalog->catalog, 0);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        const ckpt_plan_item *it = ckpt_plan_item_at(self->plan, i);
        PyObject *items[6] = {PyUnicode_FromString(it->name), PyLong_FromSsize_t(it->source - first),
                              PyUnicode_FromString(ckpt_dtype_name(it->dtype)), shape_tuple(it->ndim, it->shape),
                              PyLong_FromUnsignedLongLong(it->nbytes), PyBool_FromLong(it->transform)};
        PyObject *row = make_row(PlanRowType, items, 6);
        if (!row) Py_CLEAR(list);
        else PyList_SET_ITEM(list, (Py_ssize_t)i, row);
    }
    return list;
}

/* perm(i) → item i's axis order: output axis k is source axis perm[k]. */
static PyObject *Plan_perm(Plan *self, PyObject *arg) {
    if (!plan_ready(self)) return NULL;
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    const ckpt_plan_item *it = i >= 0 ? ckpt_plan_item_at(self->plan, (size_t)i) : NULL;
    if (!it) return PyErr_Format(PyExc_IndexError, "item %zd out of range", i);
    PyObject *t = PyTuple_New(it->ndim);
    for (uint32_t d = 0; t && d < it->ndim; d++) {
        PyObject *v = PyLong_FromUnsignedLong(it->perm[d]);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, d, v);
    }
    return t;
}

/* match(expected, flags=0) with expected = [(name, dtype or None, shape)]
 * → [(kind, name, expected_index or None, item_index or None)]. */
static PyObject *Plan_match(Plan *self, PyObject *args) {
    PyObject *seq;
    unsigned flags = 0;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "O|I", &seq, &flags)) return NULL;
    PyObject *fast = PySequence_Fast(seq, "expected must be a sequence");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    ckpt_expected *ex = PyMem_Calloc((size_t)n + 1, sizeof *ex);
    uint64_t *dims = NULL;
    size_t total_dims = 0;
    PyObject *result = NULL;
    if (!ex) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *shape = PyTuple_Check(PySequence_Fast_GET_ITEM(fast, i)) &&
                                  PyTuple_GET_SIZE(PySequence_Fast_GET_ITEM(fast, i)) == 3
                              ? PyTuple_GET_ITEM(PySequence_Fast_GET_ITEM(fast, i), 2)
                              : NULL;
        if (!shape || !PyTuple_Check(shape)) {
            PyErr_SetString(PyExc_TypeError, "expected entries are (name, dtype or None, shape tuple)");
            goto done;
        }
        total_dims += (size_t)PyTuple_GET_SIZE(shape);
    }
    dims = PyMem_Calloc(total_dims + 1, sizeof *dims);
    if (!dims) goto done;
    size_t used = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PySequence_Fast_GET_ITEM(fast, i);
        PyObject *name = PyTuple_GET_ITEM(entry, 0), *dtype = PyTuple_GET_ITEM(entry, 1),
                 *shape = PyTuple_GET_ITEM(entry, 2);
        ex[i].name = PyUnicode_AsUTF8(name);
        if (!ex[i].name) goto done;
        ex[i].dtype = CKPT_DTYPE_INVALID;
        if (dtype != Py_None) {
            const char *dn = PyUnicode_AsUTF8(dtype);
            if (!dn || (ex[i].dtype = dtype_arg(dn)) == CKPT_DTYPE_INVALID) goto done;
        }
        ex[i].ndim = (uint32_t)PyTuple_GET_SIZE(shape);
        ex[i].shape = dims + used;
        for (uint32_t d = 0; d < ex[i].ndim; d++) {
            dims[used++] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(shape, d));
            if (PyErr_Occurred()) goto done;
        }
    }
    const ckpt_match_entry *entries;
    size_t count;
    ckpt_error e;
    if (ckpt_plan_match(self->plan, ex, (size_t)n, flags, &entries, &count, &e) != CKPT_OK) {
        raise_ckpt(&e);
        goto done;
    }
    result = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; result && i < count; i++) {
        const ckpt_match_entry *m = &entries[i];
        PyObject *item = Py_BuildValue(
            "(isNN)", (int)m->kind, m->name,
            m->expected == SIZE_MAX ? Py_NewRef(Py_None) : PyLong_FromSize_t(m->expected),
            m->item == SIZE_MAX ? Py_NewRef(Py_None) : PyLong_FromSize_t(m->item));
        if (!item) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, item);
    }
done:
    PyMem_Free(ex);
    PyMem_Free(dims);
    Py_DECREF(fast);
    return result;
}

/* set_buffer(i, out): item i loads into the writable, contiguous buffer
 * `out` (kept referenced until the plan is released or reset). */
static PyObject *Plan_set_buffer(Plan *self, PyObject *args) {
    Py_ssize_t i;
    PyObject *obj;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "nO", &i, &obj)) return NULL;
    size_t n = ckpt_plan_count(self->plan);
    if (i < 0 || (size_t)i >= n) return PyErr_Format(PyExc_IndexError, "item %zd out of range", i);
    if (self->buffer_count < n) {
        Py_buffer *grown = PyMem_Realloc(self->buffers, n * sizeof *grown);
        if (!grown) return PyErr_NoMemory();
        memset(grown + self->buffer_count, 0, (n - self->buffer_count) * sizeof *grown);
        self->buffers = grown;
        self->buffer_count = n;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    ckpt_error e;
    if (ckpt_plan_set_buffer(self->plan, (size_t)i, view.buf, (uint64_t)view.len, &e) != CKPT_OK) {
        PyBuffer_Release(&view);
        return raise_ckpt(&e);
    }
    if (self->buffers[i].obj) PyBuffer_Release(&self->buffers[i]);
    self->buffers[i] = view;
    Py_RETURN_NONE;
}

/* set_device_buffer(i, device, address, capacity): item i loads into the
 * device memory at `address` (an int: a torch tensor's data_ptr()) of
 * `capacity` bytes on `device` (a Device, kept alive with the plan).  The
 * caller keeps that memory alive through the load. */
static PyObject *Plan_set_device_buffer(Plan *self, PyObject *args) {
    Py_ssize_t i;
    Device *dev;
    unsigned long long address, capacity;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "nO!KK", &i, &DeviceType, &dev, &address, &capacity)) return NULL;
    if (!device_ready(dev)) return NULL;
    size_t n = ckpt_plan_count(self->plan);
    if (i < 0 || (size_t)i >= n) return PyErr_Format(PyExc_IndexError, "item %zd out of range", i);
    if (!self->devices && !(self->devices = PySet_New(NULL))) return NULL;
    if (PySet_Add(self->devices, (PyObject *)dev) < 0) return NULL;
    ckpt_error e;
    if (ckpt_plan_set_device_buffer(self->plan, (size_t)i, dev->device, (void *)(uintptr_t)address, capacity, &e) !=
        CKPT_OK)
        return raise_ckpt(&e);
    if ((size_t)i < self->buffer_count && self->buffers[i].obj) PyBuffer_Release(&self->buffers[i]);
    Py_RETURN_NONE;
}

/* release_buffers(): the items of the current selection forget the
 * buffers given with set_buffer (the library allocates again), and the
 * plan lets go of them — before the selection changes, so that a plan
 * loaded in batches holds no batch's memory after its turn. */
static PyObject *Plan_release_buffers(Plan *self, PyObject *unused) {
    (void)unused;
    if (!plan_ready(self)) return NULL;
    size_t n = ckpt_plan_count(self->plan);
    for (size_t i = 0; i < self->buffer_count; i++) {
        if (!self->buffers[i].obj) continue;
        if (i < n) ckpt_plan_set_buffer(self->plan, i, NULL, 0, NULL);
        PyBuffer_Release(&self->buffers[i]);
    }
    Py_RETURN_NONE;
}

/* item_done(i) from the engine's threads: each takes the GIL for the call;
 * the first exception is kept (a worker's thread state is not the
 * caller's) and cancels the load, to be raised by the caller. */
typedef struct {
    PyObject *callable;
    PyObject *type, *value, *traceback;
} item_done_ctx;

static int item_done_trampoline(size_t item, void *user) {
    item_done_ctx *d = user;
    PyGILState_STATE g = PyGILState_Ensure();
    int stop = 0;
    PyObject *r = PyObject_CallFunction(d->callable, "n", (Py_ssize_t)item);
    if (!r) {
        stop = 1;
        if (!d->type) PyErr_Fetch(&d->type, &d->value, &d->traceback);
        else PyErr_Clear();
    } else {
        if (r != Py_None && PyObject_IsTrue(r)) stop = 1;
        Py_DECREF(r);
    }
    PyGILState_Release(g);
    return stop;
}

/* threads= of a load: 0 (one per CPU) or a count.  "I" took -1 (joblib's
 * "all cores") as 4294967295, silently: the engine then ran a thread per
 * task, whatever the number of tasks. */
static int thread_count(PyObject *obj, void *out) {
    long long n = PyLong_AsLongLong(obj);
    if (n == -1 && PyErr_Occurred()) return 0;
    if (n < 0 || n > UINT_MAX) {
        PyErr_Format(PyExc_ValueError, "threads=%lld: give 0 (one per CPU) or a number of threads", n);
        return 0;
    }
    *(unsigned *)out = (unsigned)n;
    return 1;
}

static PyObject *Plan_load(Plan *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"threads", "chunk_bytes", "io_uring", "views", "progress", "item_done", "check_crc", NULL};
    ckpt_load_options o;
    ckpt_load_options_init(&o);
    int uring = 0, views = 0, check_crc = 1;
    unsigned long long chunk = 0;
    progress_ctx p = {NULL};
    item_done_ctx d = {NULL, NULL, NULL, NULL};
    if (!plan_ready(self)) return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&KiiOOO&", kwlist, thread_count, &o.threads, &chunk, &uring, &views,
                                     &p.callable, &d.callable, FLAG("load: check_crc", check_crc)))
        return NULL;
    o.chunk_bytes = chunk, o.io_uring = uring, o.views = views;
    o.skip_crc_check = !check_crc;
    o.progress = progress_trampoline, o.user = &p;
    if (d.callable && d.callable != Py_None) o.item_done = item_done_trampoline, o.item_done_user = &d;
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_load(self->plan, &o, &e);
    Py_END_ALLOW_THREADS
    if (d.type) { /* the callback's own exception, not the cancellation it caused */
        PyErr_Restore(d.type, d.value, d.traceback);
        return NULL;
    }
    if (st != CKPT_OK) return raise_ckpt(&e);
    Py_RETURN_NONE;
}

/* data(i) → the loaded bytes of item i: a writable Buffer that now owns a
 * library allocation, a read-only Buffer for a view, or None for a caller
 * buffer (which holds the data). */
static PyObject *Plan_data(Plan *self, PyObject *arg) {
    if (!plan_ready(self)) return NULL;
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    const ckpt_plan_item *it = i >= 0 ? ckpt_plan_item_at(self->plan, (size_t)i) : NULL;
    if (!it) return PyErr_Format(PyExc_IndexError, "item %zd out of range", i);
    if (it->is_view) /* private (copy-on-write) views are writable; the plan keeps their mappings */
        return buffer_new((PyObject *)self, it->data, it->nbytes, it->is_view != CKPT_VIEWS_PRIVATE, NULL);
    void *owned = ckpt_plan_take(self->plan, (size_t)i);
    if (owned) return buffer_new(NULL, owned, it->nbytes, 0, ckpt_free);
    if (it->nbytes == 0 && !((size_t)i < self->buffer_count && self->buffers[i].obj))
        return buffer_new(NULL, NULL, 0, 0, NULL);
    Py_RETURN_NONE;
}

static PyObject *Plan_stats(Plan *self, PyObject *unused) {
    (void)unused;
    if (!plan_ready(self)) return NULL;
    ckpt_load_stats s;
    ckpt_plan_stats(self->plan, &s);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:I,s:K,s:O,s:O,s:K}", "bytes_needed", (unsigned long long)s.bytes_needed,
                         "bytes_read", (unsigned long long)s.bytes_read, "reads", (unsigned long long)s.reads, "tasks",
                         (unsigned long long)s.tasks, "threads", s.threads, "ring_bytes",
                         (unsigned long long)s.ring_bytes, "direct", s.direct ? Py_True : Py_False, "io_uring",
                         s.io_uring ? Py_True : Py_False, "views", (unsigned long long)s.views);
}

/* gguf_llamacpp(model_dir, dtype=None, text=None): the plan becomes
 * llama.cpp's conversion of a Hugging Face
 * model directory, as `ckpt convert MODEL_DIR OUT.gguf --dtype TEXT` makes
 * it (cli/convert.c's llamacpp_plan): `dtype`, a dtype name, is the
 * script's --outtype unless it is a block type other than Q8_0; such a
 * type, or a `text` that names no dtype (q4_k_m, q6_k…), is
 * llama-quantize's mix of that name, refused by the library when it has
 * none.  Neither: the script's auto. */
static PyObject *Plan_gguf_llamacpp(Plan *self, PyObject *args) {
    PyObject *dir;
    const char *name = NULL, *text = NULL;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "O&|zz", PyUnicode_FSConverter, &dir, &name, &text)) return NULL;
    ckpt_dtype d = name ? ckpt_dtype_from_name(name) : CKPT_DTYPE_INVALID;
    if (name && d == CKPT_DTYPE_INVALID) {
        Py_DECREF(dir);
        return PyErr_Format(PyExc_ValueError, "unknown dtype '%s'", name);
    }
    bool mix = (text && d == CKPT_DTYPE_INVALID) || (ckpt_dtype_is_block(d) && d != CKPT_Q8_0);
    const char *mix_name = text ? text : name;
    ckpt_error e;
    ckpt_status st;
    /* No key-values as JSON text: the plan carries them in GGUF's own
     * encoding to the writer, as the CLI's conversion does. */
    Py_BEGIN_ALLOW_THREADS
    st = mix ? ckpt_gguf_llamacpp_plan_mix(self->plan, PyBytes_AS_STRING(dir), mix_name, NULL, &e)
             : ckpt_gguf_llamacpp_plan(self->plan, PyBytes_AS_STRING(dir), d, NULL, &e);
    Py_END_ALLOW_THREADS
    Py_DECREF(dir);
    if (st != CKPT_OK) return raise_ckpt(&e);
    Py_RETURN_NONE;
}

/* gguf_hf(dtype=None, files=True, joined=False): the plan over a llama.cpp
 * GGUF becomes the Hugging Face model it was converted from
 * (ckpt_gguf_hf_plan): Hugging Face's names, llama's Q/K rows put back,
 * every tensor `dtype` (None: the GGUF's float type, else BF16), and with
 * `files` config.json and the tokenizer's files written beside a
 * conversion's tensors; without, the tensors alone, for a load
 * (ckpt_gguf_hf_plan_tensors), and with `joined` too, a mixture of
 * experts' tensors as transformers' model holds them
 * (ckpt_gguf_hf_plan_joined).  The plan needs nothing a load refuses:
 * ckpt_load reads it too. */
static PyObject *Plan_gguf_hf(Plan *self, PyObject *args) {
    const char *name = NULL;
    int files = 1, joined = 0;
    if (!plan_ready(self) || !PyArg_ParseTuple(args, "|zO&O&", &name, FLAG("gguf_hf: files", files),
                                                      FLAG("gguf_hf: joined", joined))) return NULL;
    ckpt_dtype d = name ? dtype_arg(name) : CKPT_DTYPE_INVALID;
    if (name && d == CKPT_DTYPE_INVALID) return NULL;
    if (files && joined) {
        PyErr_SetString(PyExc_ValueError, "gguf_hf: joined experts are a load's (files=False)");
        return NULL;
    }
    PLAN_CALL(files    ? ckpt_gguf_hf_plan(self->plan, d, &e)
              : joined ? ckpt_gguf_hf_plan_joined(self->plan, d, &e)
                       : ckpt_gguf_hf_plan_tensors(self->plan, d, &e));
}

static PyObject *Plan_convert(Plan *self, PyObject *args, PyObject *kw) {
    if (!plan_ready(self)) return NULL;
    return convert_call(self->plan, run_plan_convert, args, kw);
}

static PyMethodDef Plan_methods[] = {
    {"set_flags", (PyCFunction)Plan_set_flags, METH_O, "set_flags(flags): 1 ignores patterns that match nothing"},
    {"last_rule", (PyCFunction)Plan_last_rule, METH_NOARGS, "last_rule() -> (matched, skipped)"},
    {"select", (PyCFunction)Plan_select, METH_VARARGS, "select(pattern)"},
    {"exclude", (PyCFunction)Plan_exclude, METH_VARARGS, "exclude(pattern)"},
    {"rename", (PyCFunction)Plan_rename, METH_VARARGS, "rename(from, to)"},
    {"cast", (PyCFunction)Plan_cast, METH_VARARGS, "cast(pattern or None, dtype)"},
    {"slice", (PyCFunction)Plan_slice, METH_VARARGS, "slice(pattern or None, dim, start, stop)"},
    {"split", (PyCFunction)Plan_split, METH_VARARGS, "split(pattern or None, dim, rank, parts)"},
    {"permute", (PyCFunction)Plan_permute, METH_VARARGS, "permute(pattern or None, perm)"},
    {"transpose", (PyCFunction)Plan_transpose, METH_VARARGS, "transpose(pattern or None)"},
    {"layout", (PyCFunction)Plan_layout, METH_VARARGS, "layout(pattern or None, from, to)"},
    {"tree", (PyCFunction)Plan_tree, METH_NOARGS,
     "tree() -> the catalog's object tree as the plan's output has it, as json_loads(tree_json()) gives it "
     "(made from the library's values, without JSON), or None"},
    {"tree_json", (PyCFunction)Plan_tree_json, METH_VARARGS,
     "tree_json(tree=None) -> the object tree (default: the catalog's) as the plan's output has it, or None"},
    {"items", (PyCFunction)Plan_items, METH_NOARGS, "items() -> [PlanRow(name, source, dtype, shape, nbytes, transform)]"},
    {"set_device_buffer", (PyCFunction)Plan_set_device_buffer, METH_VARARGS,
     "set_device_buffer(i, device, address, capacity): item i loads into device memory (ckpt_device.h)"},
    {"perm", (PyCFunction)Plan_perm, METH_O, "perm(i) -> item i's axis order (output axis k is source axis perm[k])"},
    {"match", (PyCFunction)Plan_match, METH_VARARGS, "match(expected, flags=0) -> [(kind, name, expected, item)]"},
    {"set_buffer", (PyCFunction)Plan_set_buffer, METH_VARARGS, "set_buffer(i, writable_buffer)"},
    {"release_buffers", (PyCFunction)Plan_release_buffers, METH_NOARGS,
     "release_buffers(): the current items forget their set_buffer buffers"},
    {"load", (PyCFunction)(void (*)(void))Plan_load, METH_VARARGS | METH_KEYWORDS,
     "load(threads=0, chunk_bytes=0, io_uring=0, views=0, progress=None, item_done=None, check_crc=True):\n"
     "        views 1 read-only, 2 private; check_crc checks ZIP members read whole"},
    {"data", (PyCFunction)Plan_data, METH_O, "data(i) -> Buffer, or None for a caller buffer"},
    {"stats", (PyCFunction)Plan_stats, METH_NOARGS, "stats() -> dict of the last load"},
    {"gguf_llamacpp", (PyCFunction)Plan_gguf_llamacpp, METH_VARARGS,
     "gguf_llamacpp(model_dir, dtype=None, text=None): llama.cpp's conversion of a Hugging Face model (ckpt_gguf.h)"},
    {"gguf_hf", (PyCFunction)Plan_gguf_hf, METH_VARARGS,
     "gguf_hf(dtype=None, files=True, joined=False): a llama.cpp GGUF as its Hugging Face model "
     "(ckpt_gguf_hf_plan; files=False: its tensors alone, for a load; joined=True too: experts as transformers' "
     "models hold them, ckpt_gguf_hf_plan_joined)"},
    {"convert", (PyCFunction)(void (*)(void))Plan_convert, METH_VARARGS | METH_KEYWORDS,
     "convert(dst, max_shard_size=0, prefix=None, overwrite=False, no_sync=False, checksums=False, progress=None,\n"
     "        copy_files_from=None, format=0, dcp_ranks=0, dry_run=False, check_crc=True, source_metadata=False):\n"
     "        with dry_run, writes nothing and returns what it would write (a dict, see ckpt_convert_plan_preview)"},
    {NULL}};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt._ckpt.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_dealloc = (destructor)Plan_dealloc,
    .tp_methods = Plan_methods,
    .tp_init = (initproc)Plan_init,
    .tp_new = PyType_GenericNew,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Plan(catalog): which tensors to load, and how.",
};

/* ------------------------------------------------------------------------ */
/* Writer                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    ckpt_writer *writer;
} Writer;

static int Writer_init(Writer *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "max_shard_size", "prefix", "overwrite", "no_sync", "checksums", "exact_file",
                             "write_back", NULL};
    PyObject *path, *prefix = NULL;
    unsigned long long shard = 0;
    int overwrite = 0, no_sync = 0, checksums = 0, exact_file = 0, write_back = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|KO&O&O&O&O&O&", kwlist, PyUnicode_FSConverter, &path, &shard,
                                     PyUnicode_FSConverter, &prefix, FLAG("Writer: overwrite", overwrite),
                                     FLAG("Writer: no_sync", no_sync), FLAG("Writer: checksums", checksums),
                                     FLAG("Writer: exact_file", exact_file), FLAG("Writer: write_back", write_back)))
        return -1;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = shard, o.overwrite = overwrite, o.no_sync = no_sync, o.checksums = checksums;
    o.exact_file = exact_file, o.write_back = write_back;
    o.prefix = prefix ? PyBytes_AS_STRING(prefix) : NULL;
    ckpt_error e;
    ckpt_writer *w;
    ckpt_status st = ckpt_writer_create(PyBytes_AS_STRING(path), &o, &w, &e);
    Py_DECREF(path);
    Py_XDECREF(prefix);
    if (st != CKPT_OK) {
        raise_ckpt(&e);
        return -1;
    }
    ckpt_writer_free(self->writer);
    self->writer = w;
    return 0;
}

static void Writer_dealloc(Writer *self) {
    ckpt_writer_free(self->writer);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int writer_ready(Writer *self) {
    if (self->writer) return 1;
    PyErr_SetString(PyExc_ValueError, "the writer is closed");
    return 0;
}

static PyObject *Writer_set_metadata(Writer *self, PyObject *args) {
    const char *k, *v;
    int checkpoint = 0;
    if (!writer_ready(self) ||
        !PyArg_ParseTuple(args, "ss|O&", &k, &v, FLAG("Writer.set_metadata: checkpoint", checkpoint))) return NULL;
    ckpt_error e;
    ckpt_status st = checkpoint ? ckpt_writer_set_checkpoint_metadata(self->writer, k, v, &e)
                                : ckpt_writer_set_metadata(self->writer, k, v, &e);
    if (st != CKPT_OK) return raise_ckpt(&e);
    Py_RETURN_NONE;
}

/* add(name, dtype, shape, storage=None) with storage = (id, nbytes, begin,
 * end, contiguous): where the tensor lies in memory, for deduplication. */
static PyObject *Writer_add(Writer *self, PyObject *args) {
    const char *name, *dtype;
    PyObject *shape, *storage = Py_None;
    if (!writer_ready(self) || !PyArg_ParseTuple(args, "ssO|O", &name, &dtype, &shape, &storage)) return NULL;
    ckpt_dtype d = dtype_arg(dtype);
    if (d == CKPT_DTYPE_INVALID) return NULL;
    ckpt_tensor_storage where = {0};
    if (storage != Py_None) {
        unsigned long long id, nbytes, begin, end;
        int contiguous;
        if (!PyArg_ParseTuple(storage, "KKKKO&", &id, &nbytes, &begin, &end,
                              FLAG("Writer.add: storage's contiguous", contiguous))) return NULL;
        where = (ckpt_tensor_storage){id, nbytes, begin, end, contiguous};
    }
    PyObject *fast = PySequence_Fast(shape, "shape must be a sequence of ints");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > CKPT_MAX_DIMS) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "tensor %s has more than %d axes", name, CKPT_MAX_DIMS);
    }
    uint64_t dims[CKPT_MAX_DIMS];
    for (Py_ssize_t i = 0; i < n; i++) {
        dims[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (PyErr_Occurred()) {
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    size_t index;
    ckpt_error e;
    if (ckpt_writer_add_tensor_shared(self->writer, name, d, (uint32_t)n, dims, storage == Py_None ? NULL : &where,
                                      &index, &e) != CKPT_OK)
        return raise_ckpt(&e);
    return PyLong_FromSize_t(index);
}

/* kept(index) → None when the tensor is written, else the name written in
 * its place (after begin). */
static PyObject *Writer_kept(Writer *self, PyObject *arg) {
    if (!writer_ready(self)) return NULL;
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    const char *kept = i >= 0 ? ckpt_writer_tensor_kept(self->writer, (size_t)i) : NULL;
    if (!kept) Py_RETURN_NONE;
    return PyUnicode_FromString(kept);
}

/* A list of `n` paths, the i-th from path(w, i). */
static PyObject *path_list(const ckpt_writer *w, size_t n, const char *(*path)(const ckpt_writer *, size_t)) {
    PyObject *files = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; files && i < n; i++) {
        PyObject *p = PyUnicode_DecodeFSDefault(path(w, i));
        if (!p) {
            Py_CLEAR(files);
            break;
        }
        PyList_SET_ITEM(files, (Py_ssize_t)i, p);
    }
    return files;
}

static PyObject *Writer_begin(Writer *self, PyObject *unused) {
    (void)unused;
    if (!writer_ready(self)) return NULL;
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_writer_begin(self->writer, &e);
    Py_END_ALLOW_THREADS
    if (st != CKPT_OK) return raise_ckpt(&e);
    return path_list(self->writer, ckpt_writer_file_count(self->writer), ckpt_writer_file_path);
}

static PyObject *Writer_write(Writer *self, PyObject *args) {
    Py_ssize_t index;
    Py_buffer data;
    if (!writer_ready(self) || !PyArg_ParseTuple(args, "ny*", &index, &data)) return NULL;
    if (!PyBuffer_IsContiguous(&data, 'C')) {
        PyBuffer_Release(&data);
        return PyErr_Format(PyExc_ValueError, "data must be contiguous");
    }
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_writer_write(self->writer, (size_t)index, data.buf, (size_t)data.len, &e);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (st != CKPT_OK) return raise_ckpt(&e);
    Py_RETURN_NONE;
}

/* tensor_chunks(index) -> (chunk_bytes, phase, count), count 0 for a
 * tensor without chunk digests: ckpt_writer_tensor_chunks. */
static PyObject *Writer_tensor_chunks(Writer *self, PyObject *arg) {
    Py_ssize_t index = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (!writer_ready(self) || (index == -1 && PyErr_Occurred())) return NULL;
    uint64_t chunk, phase;
    size_t count;
    ckpt_error e;
    if (ckpt_writer_tensor_chunks(self->writer, (size_t)index, &chunk, &phase, &count, &e) != CKPT_OK)
        return raise_ckpt(&e);
    return Py_BuildValue("(KKn)", (unsigned long long)chunk, (unsigned long long)phase, (Py_ssize_t)count);
}

/* give_digests(index, xxh3, chunks): ckpt_writer_give_digests. */
static PyObject *Writer_give_digests(Writer *self, PyObject *args) {
    Py_ssize_t index;
    unsigned long long xxh3;
    PyObject *seq;
    if (!writer_ready(self) || !PyArg_ParseTuple(args, "nKO", &index, &xxh3, &seq)) return NULL;
    PyObject *fast = PySequence_Fast(seq, "chunks must be a sequence of digests");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    uint64_t *chunks = PyMem_Malloc((n ? (size_t)n : 1) * sizeof *chunks);
    if (!chunks) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < n; k++) chunks[k] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, k));
    Py_DECREF(fast);
    if (PyErr_Occurred()) {
        PyMem_Free(chunks);
        return NULL;
    }
    ckpt_error e;
    ckpt_status st = ckpt_writer_give_digests(self->writer, (size_t)index, (uint64_t)xxh3, n ? chunks : NULL,
                                              (size_t)n, &e);
    PyMem_Free(chunks);
    if (st != CKPT_OK) return raise_ckpt(&e);
    Py_RETURN_NONE;
}

/* copy_tensor(index, catalog, src_index, xxh3): ckpt_writer_copy_tensor;
 * copy_range(index, catalog, src_index, nbytes): ckpt_writer_copy_range
 * (`range`). */
static PyObject *writer_copy(Writer *self, PyObject *args, bool range) {
    Py_ssize_t index, src_index;
    Catalog *cat;
    unsigned long long number;
    if (!writer_ready(self) || !PyArg_ParseTuple(args, "nO!nK", &index, &CatalogType, &cat, &src_index, &number))
        return NULL;
    if (!catalog_ready(cat)) return NULL;
    ckpt_error e;
    ckpt_status st;
    catalog_use(cat);
    Py_BEGIN_ALLOW_THREADS
    st = range ? ckpt_writer_copy_range(self->writer, (size_t)index, cat->catalog, (size_t)src_index, number, &e)
               : ckpt_writer_copy_tensor(self->writer, (size_t)index, cat->catalog, (size_t)src_index, number, &e);
    Py_END_ALLOW_THREADS
    catalog_unuse(cat);
    if (st != CKPT_OK) return raise_ckpt(&e);
    Py_RETURN_NONE;
}

/* shares_blocks(catalog, file) -> bool: ckpt_writer_shares_blocks. */
static PyObject *Writer_shares_blocks(Writer *self, PyObject *args) {
    Py_ssize_t file;
    Catalog *cat;
    if (!writer_ready(self) || !PyArg_ParseTuple(args, "O!n", &CatalogType, &cat, &file)) return NULL;
    if (!catalog_ready(cat)) return NULL;
    ckpt_error e;
    ckpt_status st;
    int shares = 0;
    catalog_use(cat);
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_writer_shares_blocks(self->writer, cat->catalog, (size_t)file, &shares, &e);
    Py_END_ALLOW_THREADS
    catalog_unuse(cat);
    if (st != CKPT_OK) return raise_ckpt(&e);
    return PyBool_FromLong(shares);
}

static PyObject *Writer_copy_tensor(Writer *self, PyObject *args) { return writer_copy(self, args, false); }
static PyObject *Writer_copy_range(Writer *self, PyObject *args) { return writer_copy(self, args, true); }

static PyObject *Writer_commit(Writer *self, PyObject *unused) {
    (void)unused;
    if (!writer_ready(self)) return NULL;
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_writer_commit(self->writer, &e);
    Py_END_ALLOW_THREADS
    PyObject *published = st == CKPT_OK ? path_list(self->writer, ckpt_writer_published_count(self->writer),
                                                    ckpt_writer_published_path)
                                        : NULL;
    ckpt_writer_free(self->writer);
    self->writer = NULL;
    if (st != CKPT_OK) return raise_ckpt(&e);
    return published;
}

/* abort(): drop the temporaries; the destination stays as it was. */
static PyObject *Writer_abort(Writer *self, PyObject *unused) {
    (void)unused;
    ckpt_writer_free(self->writer);
    self->writer = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef Writer_methods[] = {
    {"set_metadata", (PyCFunction)Writer_set_metadata, METH_VARARGS,
     "set_metadata(key, value, checkpoint=False): a file (or checkpoint-level) metadata entry"},
    {"add", (PyCFunction)Writer_add, METH_VARARGS,
     "add(name, dtype, shape, storage=None) -> index; storage = (id, nbytes, begin, end, contiguous)"},
    {"kept", (PyCFunction)Writer_kept, METH_O, "kept(index) -> None, or the name written in its place"},
    {"begin", (PyCFunction)Writer_begin, METH_NOARGS, "begin() -> final paths of the output files"},
    {"write", (PyCFunction)Writer_write, METH_VARARGS, "write(index, data): the next bytes of a tensor"},
    {"copy_tensor", (PyCFunction)Writer_copy_tensor, METH_VARARGS,
     "copy_tensor(index, catalog, src_index, xxh3): the tensor whole from a checkpoint, by the kernel"},
    {"tensor_chunks", (PyCFunction)Writer_tensor_chunks, METH_O,
     "tensor_chunks(index) -> (chunk_bytes, phase, count): how its chunk digests lie (count 0: none)"},
    {"give_digests", (PyCFunction)Writer_give_digests, METH_VARARGS,
     "give_digests(index, xxh3, chunks): the tensor's digests, known from memory"},
    {"copy_range", (PyCFunction)Writer_copy_range, METH_VARARGS,
     "copy_range(index, catalog, src_index, nbytes): its next bytes from a checkpoint's tensor, by the kernel"},
    {"shares_blocks", (PyCFunction)Writer_shares_blocks, METH_VARARGS,
     "shares_blocks(catalog, file) -> whether the output's file system can share that file's blocks (a reflink)"},
    {"commit", (PyCFunction)Writer_commit, METH_NOARGS,
     "commit() -> every path published (data files, side files such as an index, copied files): fsync and rename "
     "into place"},
    {"abort", (PyCFunction)Writer_abort, METH_NOARGS, "abort(): remove the temporaries"},
    {NULL}};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt._ckpt.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
    .tp_init = (initproc)Writer_init,
    .tp_new = PyType_GenericNew,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Writer(path, max_shard_size=0, prefix=None, overwrite=False, no_sync=False, checksums=False, "
              "exact_file=False, write_back=False)",
};

/* ------------------------------------------------------------------------ */
/* Collective operations (ckpt.distributed)                                 */
/* ------------------------------------------------------------------------ */

/*
 * Comm(impl, rank, nranks): a ckpt_comm whose operations call back into a
 * Python object — ckpt.distributed's torch.distributed adapter — with the
 * GIL taken: impl.broadcast(memoryview, root, timeout_s),
 * impl.allgather(memoryview, block, timeout_s), impl.barrier(timeout_s),
 * impl.agree(status, rank, message, timeout_s) -> (status, rank, message).
 * An exception becomes the operation's failure: its `ckpt_status`
 * attribute (CKPT_E_PEER when absent; CKPT_E_TIMEOUT for a step that timed
 * out) and `rank` (the rank it blames).
 * impl None makes a "none" communicator.  The library calls these only
 * from the thread that entered it.
 */
typedef struct {
    PyObject_HEAD
    PyObject *impl;
    ckpt_comm comm;
} Comm;

static PyTypeObject CommType;

static void comm_error_from_exception(ckpt_error *err, ckpt_vote *vote) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    ckpt_status st = CKPT_E_PEER;
    long rank = -1;
    if (value && PyErr_GivenExceptionMatches(type, PyExc_KeyboardInterrupt)) st = CKPT_E_CANCELLED;
    PyObject *a = value ? PyObject_GetAttrString(value, "ckpt_status") : NULL;
    if (a && PyLong_Check(a)) st = (ckpt_status)PyLong_AsLong(a);
    Py_XDECREF(a);
    PyErr_Clear();
    a = value ? PyObject_GetAttrString(value, "rank") : NULL;
    if (a && PyLong_Check(a)) rank = PyLong_AsLong(a);
    Py_XDECREF(a);
    PyErr_Clear();
    const char *text = NULL, *tname = type ? ((PyTypeObject *)type)->tp_name : "error";
    PyObject *s = value ? PyObject_Str(value) : NULL;
    if (s) text = PyUnicode_AsUTF8(s);
    PyErr_Clear();
    if (err) {
        memset(err, 0, sizeof *err);
        err->status = st;
        err->detail = st == CKPT_E_TIMEOUT ? CKPT_D_PEER_TIMEOUT : st == CKPT_E_PEER ? CKPT_D_COMM : CKPT_D_NONE;
        err->offset = -1;
        snprintf(err->message, sizeof err->message, "%s: %s", tname, text ? text : "(no message)");
    }
    if (vote) vote->rank = (int32_t)rank;
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* Calls impl.<method>(*args); on an exception fills err.  Steals args. */
static ckpt_status comm_call(Comm *c, const char *method, PyObject *args, ckpt_vote *vote, ckpt_error *err,
                             PyObject **result) {
    ckpt_status st = CKPT_OK;
    PyObject *fn = args ? PyObject_GetAttrString(c->impl, method) : NULL;
    PyObject *r = fn ? PyObject_CallObject(fn, args) : NULL;
    Py_XDECREF(fn);
    Py_XDECREF(args);
    if (!r) {
        comm_error_from_exception(err, vote);
        st = err ? err->status : CKPT_E_PEER;
        if (st == CKPT_OK) st = CKPT_E_PEER;
    }
    if (result) *result = r;
    else Py_XDECREF(r);
    return st;
}

static PyObject *memview(void *data, uint64_t n) {
    return PyMemoryView_FromMemory(data ? (char *)data : empty_bytes, (Py_ssize_t)n, PyBUF_WRITE);
}

static void memview_release(PyObject *mv) {
    if (!mv) return;
    PyObject *r = PyObject_CallMethod(mv, "release", NULL);
    if (!r) PyErr_Clear(); /* still exported (a tensor kept it): the memory outlives this call anyway */
    Py_XDECREF(r);
    Py_DECREF(mv);
}

static ckpt_status comm_broadcast(void *user, void *data, uint64_t nbytes, int root, uint32_t timeout_ms,
                                  ckpt_error *err) {
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *mv = memview(data, nbytes);
    ckpt_status st = comm_call(user, "broadcast", mv ? Py_BuildValue("(Oid)", mv, root, timeout_ms / 1000.0) : NULL,
                               NULL, err, NULL);
    memview_release(mv);
    PyGILState_Release(g);
    return st;
}

static ckpt_status comm_allgather(void *user, void *data, uint64_t block, uint32_t timeout_ms, ckpt_error *err) {
    Comm *c = user;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *mv = memview(data, block * (uint64_t)c->comm.nranks);
    ckpt_status st = comm_call(c, "allgather", mv ? Py_BuildValue("(OKd)", mv, (unsigned long long)block,
                                                                  timeout_ms / 1000.0)
                                                  : NULL,
                               NULL, err, NULL);
    memview_release(mv);
    PyGILState_Release(g);
    return st;
}

static ckpt_status comm_barrier(void *user, uint32_t timeout_ms, ckpt_error *err) {
    PyGILState_STATE g = PyGILState_Ensure();
    ckpt_status st = comm_call(user, "barrier", Py_BuildValue("(d)", timeout_ms / 1000.0), NULL, err, NULL);
    PyGILState_Release(g);
    return st;
}

static ckpt_status comm_agree(void *user, ckpt_vote *vote, uint32_t timeout_ms, ckpt_error *err) {
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = NULL;
    vote->message[sizeof vote->message - 1] = '\0';
    ckpt_status st = comm_call(user, "agree",
                               Py_BuildValue("(iisd)", (int)vote->status, (int)vote->rank, vote->message,
                                             timeout_ms / 1000.0),
                               vote, err, &r);
    if (st == CKPT_OK) {
        int status, rank;
        const char *msg;
        if (!PyArg_ParseTuple(r, "iis", &status, &rank, &msg)) {
            comm_error_from_exception(err, NULL);
            st = CKPT_E_PEER;
        } else {
            vote->status = (ckpt_status)status;
            vote->rank = rank;
            snprintf(vote->message, sizeof vote->message, "%.*s", (int)sizeof vote->message - 1, msg);
        }
    }
    Py_XDECREF(r);
    PyGILState_Release(g);
    return st;
}

static int Comm_init(Comm *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"impl", "rank", "nranks", NULL};
    PyObject *impl;
    int rank, nranks;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oii", kwlist, &impl, &rank, &nranks)) return -1;
    if (impl == Py_None && rank < 0) {
        /* "none" from the environment: RANK/WORLD_SIZE, OMPI_*, PMI_*, SLURM_* */
        ckpt_error e;
        if (ckpt_comm_from_env(&self->comm, -1, 0, &e) != CKPT_OK) {
            raise_ckpt(&e);
            return -1;
        }
        Py_XSETREF(self->impl, Py_NewRef(impl));
        return 0;
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        PyErr_Format(PyExc_ValueError, "rank %d of %d ranks", rank, nranks);
        return -1;
    }
    Py_XSETREF(self->impl, Py_NewRef(impl));
    ckpt_comm_init(&self->comm);
    self->comm.rank = rank;
    self->comm.nranks = nranks;
    if (impl != Py_None) {
        self->comm.user = self;
        self->comm.broadcast = comm_broadcast;
        self->comm.allgather = comm_allgather;
        self->comm.barrier = comm_barrier;
        self->comm.agree = comm_agree;
    }
    return 0;
}

static void Comm_dealloc(Comm *self) {
    Py_XDECREF(self->impl);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Comm_get_rank(Comm *self, void *closure) {
    (void)closure;
    return PyLong_FromLong(self->comm.rank);
}

static PyObject *Comm_get_nranks(Comm *self, void *closure) {
    (void)closure;
    return PyLong_FromLong(self->comm.nranks);
}

static PyGetSetDef Comm_getset[] = {
    {"rank", (getter)Comm_get_rank, NULL, "this rank", NULL},
    {"nranks", (getter)Comm_get_nranks, NULL, "the number of ranks", NULL},
    {NULL}};

static PyTypeObject CommType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt._ckpt.Comm",
    .tp_getset = Comm_getset,
    .tp_basicsize = sizeof(Comm),
    .tp_dealloc = (destructor)Comm_dealloc,
    .tp_init = (initproc)Comm_init,
    .tp_new = PyType_GenericNew,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Comm(impl, rank, nranks): a communicator calling impl's broadcast/allgather/barrier/agree; "
              "Comm(None, rank, nranks) the 'none' one (Comm(None, -1, 0): from RANK/WORLD_SIZE, OMPI_*, PMI_*, "
              "SLURM_*)",
};

static int collective_options(ckpt_collective_options *co, double timeout, const char *replicated) {
    ckpt_collective_options_init(co);
    if (timeout < 0 || timeout > 4e6) {
        PyErr_Format(PyExc_ValueError, "timeout %g s is not in [0, 4e6]", timeout);
        return -1;
    }
    co->timeout_ms = (uint32_t)(timeout * 1000.0);
    if (timeout > 0 && co->timeout_ms == 0) co->timeout_ms = 1;
    if (!replicated || !strcmp(replicated, "broadcast")) co->replicated = CKPT_REPLICATED_BROADCAST;
    else if (!strcmp(replicated, "read")) co->replicated = CKPT_REPLICATED_READ;
    else {
        PyErr_Format(PyExc_ValueError, "replicated must be 'broadcast' or 'read', not '%s'", replicated);
        return -1;
    }
    return 0;
}

static PyObject *stats_dict(const ckpt_collective_stats *s) {
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:K}", "bytes_needed", (unsigned long long)s->bytes_needed,
                         "bytes_read", (unsigned long long)s->bytes_read, "bytes_written",
                         (unsigned long long)s->bytes_written, "bytes_received", (unsigned long long)s->bytes_received,
                         "bytes_sent", (unsigned long long)s->bytes_sent, "replicated_bytes",
                         (unsigned long long)s->replicated_bytes, "collectives", (unsigned long long)s->collectives,
                         "io_seconds", s->io_seconds, "comm_seconds", s->comm_seconds, "files_synced",
                         (unsigned long long)s->files_synced);
}

/* open_collective(path, comm, timeout=0, io=0) -> Catalog: rank 0 parses,
 * the others build theirs from its bytes; each reads its files as `io` (a
 * ckpt_io_mode) says. */
static PyObject *mod_open_collective(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kwlist[] = {"path", "comm", "timeout", "io", NULL};
    PyObject *path_obj;
    Comm *comm;
    double timeout = 0;
    ckpt_catalog_options o;
    ckpt_catalog_options_init(&o);
    int io = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O!|di", kwlist, PyUnicode_FSConverter, &path_obj, &CommType, &comm,
                                     &timeout, &io))
        return NULL;
    o.io = (ckpt_io_mode)io;
    ckpt_collective_options co;
    if (collective_options(&co, timeout, NULL) < 0) {
        Py_DECREF(path_obj);
        return NULL;
    }
    ckpt_error e;
    ckpt_status st;
    ckpt_catalog *c = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_catalog_open_collective(PyBytes_AS_STRING(path_obj), &o, &comm->comm, &co, &c, &e);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    if (st != CKPT_OK) return raise_ckpt(&e);
    Catalog *cat = (Catalog *)CatalogType.tp_alloc(&CatalogType, 0);
    if (!cat) {
        ckpt_catalog_close(c);
        return NULL;
    }
    cat->catalog = c;
    return (PyObject *)cat;
}

/* load_collective(plan, comm, threads=0, replicated="broadcast",
 * timeout=0) -> stats: every rank's plan loaded, replicated tensors read
 * once and broadcast. */
static PyObject *mod_load_collective(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kwlist[] = {"plan", "comm", "threads", "replicated", "timeout", "progress", NULL};
    Plan *plan;
    Comm *comm;
    ckpt_load_options o;
    ckpt_load_options_init(&o);
    const char *replicated = NULL;
    double timeout = 0;
    progress_ctx p = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!|IzdO", kwlist, &PlanType, &plan, &CommType, &comm, &o.threads,
                                     &replicated, &timeout, &p.callable))
        return NULL;
    if (!plan_ready(plan)) return NULL;
    ckpt_collective_options co;
    if (collective_options(&co, timeout, replicated) < 0) return NULL;
    o.progress = progress_trampoline, o.user = &p;
    ckpt_collective_stats s;
    memset(&s, 0, sizeof s);
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_load_collective(plan->plan, &o, &comm->comm, &co, &s, &e);
    Py_END_ALLOW_THREADS
    if (st != CKPT_OK) return raise_ckpt(&e);
    return stats_dict(&s);
}

/* convert_collective(plan, dst, comm, max_shard_size=0, prefix=None,
 * overwrite=False, no_sync=False, timeout=0) -> stats. */
static PyObject *mod_convert_collective(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kwlist[] = {"plan", "dst", "comm", "max_shard_size", "prefix", "overwrite", "no_sync", "timeout",
                             "progress", NULL};
    Plan *plan;
    Comm *comm;
    PyObject *dst, *prefix = NULL;
    unsigned long long shard = 0;
    int overwrite = 0, no_sync = 0;
    double timeout = 0;
    progress_ctx p = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O&O!|KO&O&O&dO", kwlist, &PlanType, &plan, PyUnicode_FSConverter,
                                     &dst, &CommType, &comm, &shard, PyUnicode_FSConverter, &prefix,
                                     FLAG("convert_collective: overwrite", overwrite),
                                     FLAG("convert_collective: no_sync", no_sync), &timeout, &p.callable))
        return NULL;
    ckpt_collective_options co;
    if (!plan_ready(plan) || collective_options(&co, timeout, NULL) < 0) {
        Py_DECREF(dst);
        Py_XDECREF(prefix);
        return NULL;
    }
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = shard, o.overwrite = overwrite, o.no_sync = no_sync;
    o.prefix = prefix ? PyBytes_AS_STRING(prefix) : NULL;
    ckpt_collective_stats s;
    memset(&s, 0, sizeof s);
    ckpt_error e;
    ckpt_status st;
    o.progress = progress_trampoline, o.user = &p;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_convert_collective(plan->plan, PyBytes_AS_STRING(dst), &o, &comm->comm, &co, &s, &e);
    Py_END_ALLOW_THREADS
    Py_DECREF(dst);
    Py_XDECREF(prefix);
    if (st != CKPT_OK) return raise_ckpt(&e);
    return stats_dict(&s);
}

/* ShardWriter: ckpt_shard_writer_* for ckpt.distributed.save. */
typedef struct {
    PyObject_HEAD
    ckpt_shard_writer *w;
    Comm *comm; /* kept alive: the writer calls it */
} ShardWriter;

static int ShardWriter_init(ShardWriter *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "comm", "max_shard_size", "prefix", "overwrite", "no_sync", "timeout", NULL};
    PyObject *path, *prefix = NULL;
    Comm *comm;
    unsigned long long shard = 0;
    int overwrite = 0, no_sync = 0;
    double timeout = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O!|KO&O&O&d", kwlist, PyUnicode_FSConverter, &path, &CommType, &comm,
                                     &shard, PyUnicode_FSConverter, &prefix, FLAG("ShardWriter: overwrite", overwrite),
                                     FLAG("ShardWriter: no_sync", no_sync), &timeout))
        return -1;
    ckpt_collective_options co;
    int rc = collective_options(&co, timeout, NULL);
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = shard, o.overwrite = overwrite, o.no_sync = no_sync;
    o.prefix = prefix ? PyBytes_AS_STRING(prefix) : NULL;
    ckpt_error e;
    ckpt_shard_writer *w = NULL;
    if (rc == 0 && ckpt_shard_writer_create(PyBytes_AS_STRING(path), &o, &comm->comm, &co, &w, &e) != CKPT_OK) {
        raise_ckpt(&e);
        rc = -1;
    }
    Py_DECREF(path);
    Py_XDECREF(prefix);
    if (rc < 0) return -1;
    ckpt_shard_writer_free(self->w);
    self->w = w;
    Py_XSETREF(self->comm, (Comm *)Py_NewRef(comm));
    return 0;
}

static void ShardWriter_dealloc(ShardWriter *self) {
    ckpt_shard_writer_free(self->w);
    Py_XDECREF(self->comm);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int shard_writer_ready(ShardWriter *self) {
    if (self->w) return 1;
    PyErr_SetString(PyExc_ValueError, "the shard writer is closed");
    return 0;
}

static PyObject *ShardWriter_set_metadata(ShardWriter *self, PyObject *args) {
    const char *k, *v;
    int checkpoint = 0;
    if (!shard_writer_ready(self) ||
        !PyArg_ParseTuple(args, "ss|O&", &k, &v, FLAG("ShardWriter.set_metadata: checkpoint", checkpoint))) return NULL;
    ckpt_error e;
    ckpt_status st = checkpoint ? ckpt_shard_writer_set_checkpoint_metadata(self->w, k, v, &e)
                                : ckpt_shard_writer_set_metadata(self->w, k, v, &e);
    return st == CKPT_OK ? Py_NewRef(Py_None) : raise_ckpt(&e);
}

static int u64_list(PyObject *seq, uint64_t *out, Py_ssize_t *n, const char *what) {
    PyObject *f = PySequence_Fast(seq, what);
    if (!f) return -1;
    *n = PySequence_Fast_GET_SIZE(f);
    if (*n > CKPT_MAX_DIMS) {
        Py_DECREF(f);
        PyErr_Format(PyExc_ValueError, "%s has more than %d axes", what, CKPT_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        out[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(f, i));
        if (PyErr_Occurred()) {
            Py_DECREF(f);
            return -1;
        }
    }
    Py_DECREF(f);
    return 0;
}

/* add(name, dtype, shape, start, count) -> index */
static PyObject *ShardWriter_add(ShardWriter *self, PyObject *args) {
    const char *name, *dtype;
    PyObject *shape_o, *start_o, *count_o;
    if (!shard_writer_ready(self) || !PyArg_ParseTuple(args, "ssOOO", &name, &dtype, &shape_o, &start_o, &count_o))
        return NULL;
    uint64_t shape[CKPT_MAX_DIMS], start[CKPT_MAX_DIMS], count[CKPT_MAX_DIMS];
    Py_ssize_t n1, n2, n3;
    if (u64_list(shape_o, shape, &n1, "shape") < 0 || u64_list(start_o, start, &n2, "start") < 0 ||
        u64_list(count_o, count, &n3, "count") < 0)
        return NULL;
    if (n1 != n2 || n1 != n3) return PyErr_Format(PyExc_ValueError, "shape, start and count differ in length");
    ckpt_dtype d = dtype_arg(dtype);
    if (d == CKPT_DTYPE_INVALID) return NULL;
    size_t index;
    ckpt_error e;
    if (ckpt_shard_writer_add(self->w, name, d, (uint32_t)n1, shape, start, count, &index, &e) != CKPT_OK)
        return raise_ckpt(&e);
    return PyLong_FromSize_t(index);
}

static PyObject *ShardWriter_begin(ShardWriter *self, PyObject *unused) {
    (void)unused;
    if (!shard_writer_ready(self)) return NULL;
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_shard_writer_begin(self->w, &e);
    Py_END_ALLOW_THREADS
    return st == CKPT_OK ? Py_NewRef(Py_None) : raise_ckpt(&e);
}

/* write(index, at, buffer): the part's bytes [at, at + len). */
static PyObject *ShardWriter_write(ShardWriter *self, PyObject *args) {
    Py_ssize_t index;
    unsigned long long at;
    Py_buffer b;
    if (!shard_writer_ready(self) || !PyArg_ParseTuple(args, "nKy*", &index, &at, &b)) return NULL;
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_shard_writer_write(self->w, (size_t)index, at, b.buf, (uint64_t)b.len, &e);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    return st == CKPT_OK ? Py_NewRef(Py_None) : raise_ckpt(&e);
}

/* order() -> [index]: this rank's parts in the order to write them
 * (ckpt_shard_writer_order). */
static PyObject *ShardWriter_order(ShardWriter *self, PyObject *args) {
    Py_ssize_t count;
    if (!shard_writer_ready(self) || !PyArg_ParseTuple(args, "n", &count)) return NULL;
    if (count < 0) return PyErr_Format(PyExc_ValueError, "count must not be negative");
    size_t *order = PyMem_Malloc(((size_t)count ? (size_t)count : 1) * sizeof *order);
    if (!order) return PyErr_NoMemory();
    ckpt_error e;
    if (ckpt_shard_writer_order(self->w, order, (size_t)count, &e) != CKPT_OK) {
        PyMem_Free(order);
        return raise_ckpt(&e);
    }
    PyObject *out = PyList_New(count);
    for (Py_ssize_t i = 0; out && i < count; i++) {
        PyObject *v = PyLong_FromSize_t(order[i]);
        if (!v) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, v);
    }
    PyMem_Free(order);
    return out;
}

static PyObject *ShardWriter_commit(ShardWriter *self, PyObject *unused) {
    (void)unused;
    if (!shard_writer_ready(self)) return NULL;
    ckpt_error e;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_shard_writer_commit(self->w, &e);
    Py_END_ALLOW_THREADS
    return st == CKPT_OK ? Py_NewRef(Py_None) : raise_ckpt(&e);
}

/* abort(message): this rank's failure, voted at the next collective step. */
static PyObject *ShardWriter_abort(ShardWriter *self, PyObject *args) {
    const char *message;
    if (!shard_writer_ready(self) || !PyArg_ParseTuple(args, "s", &message)) return NULL;
    ckpt_error reason, e;
    memset(&reason, 0, sizeof reason);
    reason.status = CKPT_E_CANCELLED;
    reason.offset = -1;
    snprintf(reason.message, sizeof reason.message, "%.*s", (int)sizeof reason.message - 1, message);
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_shard_writer_abort(self->w, &reason, &e);
    Py_END_ALLOW_THREADS
    (void)st; /* this rank already has its own exception to raise */
    Py_RETURN_NONE;
}

static PyObject *ShardWriter_stats(ShardWriter *self, PyObject *unused) {
    (void)unused;
    if (!shard_writer_ready(self)) return NULL;
    ckpt_collective_stats s;
    ckpt_shard_writer_stats(self->w, &s);
    return stats_dict(&s);
}

static PyObject *ShardWriter_close(ShardWriter *self, PyObject *unused) {
    (void)unused;
    ckpt_shard_writer_free(self->w);
    self->w = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef ShardWriter_methods[] = {
    {"set_metadata", (PyCFunction)ShardWriter_set_metadata, METH_VARARGS,
     "set_metadata(key, value, checkpoint=False): rank 0's entries are written"},
    {"add", (PyCFunction)ShardWriter_add, METH_VARARGS, "add(name, dtype, shape, start, count) -> index"},
    {"begin", (PyCFunction)ShardWriter_begin, METH_NOARGS, "begin(): collective: agree on the layout"},
    {"order", (PyCFunction)ShardWriter_order, METH_VARARGS,
     "order(count) -> [index]: this rank's parts in the order to write them"},
    {"write", (PyCFunction)ShardWriter_write, METH_VARARGS, "write(index, at, buffer)"},
    {"commit", (PyCFunction)ShardWriter_commit, METH_NOARGS, "commit(): collective: one status, one commit"},
    {"abort", (PyCFunction)ShardWriter_abort, METH_VARARGS, "abort(message): fail every rank at the next step"},
    {"stats", (PyCFunction)ShardWriter_stats, METH_NOARGS, "stats() -> dict of this rank's work"},
    {"close", (PyCFunction)ShardWriter_close, METH_NOARGS, "close(): free (rank 0: uncommitted temporaries go)"},
    {NULL}};

static PyTypeObject ShardWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ckpt._ckpt.ShardWriter",
    .tp_basicsize = sizeof(ShardWriter),
    .tp_dealloc = (destructor)ShardWriter_dealloc,
    .tp_methods = ShardWriter_methods,
    .tp_init = (initproc)ShardWriter_init,
    .tp_new = PyType_GenericNew,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ShardWriter(path, comm, max_shard_size=0, prefix=None, overwrite=False, no_sync=False, timeout=0)",
};

#define COLLECTIVE_METHODS                                                                                    \
    {"open_collective", (PyCFunction)(void (*)(void))mod_open_collective, METH_VARARGS | METH_KEYWORDS,       \
     "open_collective(path, comm, timeout=0, io=0) -> Catalog"},                                                   \
        {"load_collective", (PyCFunction)(void (*)(void))mod_load_collective, METH_VARARGS | METH_KEYWORDS,   \
         "load_collective(plan, comm, threads=0, replicated='broadcast', timeout=0) -> stats"},         \
        {"convert_collective", (PyCFunction)(void (*)(void))mod_convert_collective,                           \
         METH_VARARGS | METH_KEYWORDS, "convert_collective(plan, dst, comm, ...) -> stats"},

static int collective_init(PyObject *m) {
    PyTypeObject *types[] = {&CommType, &ShardWriterType};
    const char *names[] = {"Comm", "ShardWriter"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (PyType_Ready(types[i]) < 0 || PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0) return -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Module functions                                                         */
/* ------------------------------------------------------------------------ */

static PyObject *mod_parse_size(PyObject *self, PyObject *arg) {
    (void)self;
    const char *text = PyUnicode_AsUTF8(arg);
    if (!text) return NULL;
    uint64_t bytes;
    ckpt_error e;
    if (ckpt_parse_size(text, &bytes, &e) != CKPT_OK) return raise_ckpt(&e);
    return PyLong_FromUnsignedLongLong(bytes);
}

/* format_size(n) → "86.6 MiB" (ckpt_format_size). */
static PyObject *mod_format_size(PyObject *self, PyObject *arg) {
    (void)self;
    unsigned long long n = PyLong_AsUnsignedLongLong(arg);
    if (n == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    char buf[32];
    return PyUnicode_FromString(ckpt_format_size(n, buf, sizeof buf));
}

/* progress_line(width, label, done, total, elapsed, note=None) → the
 * library's progress line (ckpt_progress_line), as the CLI draws it. */
static PyObject *mod_progress_line(PyObject *self, PyObject *args) {
    (void)self;
    unsigned int width;
    const char *label, *note = NULL;
    unsigned long long done, total;
    double elapsed;
    if (!PyArg_ParseTuple(args, "IsKKd|z", &width, &label, &done, &total, &elapsed, &note)) return NULL;
    char line[1024];
    size_t n = ckpt_progress_line(line, sizeof line, width, label, done, total, elapsed, note);
    return PyUnicode_DecodeUTF8(line, (Py_ssize_t)n, "replace");
}

/* format_name(id) -> the format's short name, or None. */
static PyObject *mod_format_name(PyObject *self, PyObject *arg) {
    (void)self;
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    const char *name = id > 0 && id < 256 ? ckpt_format_name((ckpt_format)id) : NULL;
    if (!name) Py_RETURN_NONE;
    return PyUnicode_FromString(name);
}

/* format_from_name(name) -> its id, 0 when no format has that name. */
static PyObject *mod_format_from_name(PyObject *self, PyObject *arg) {
    (void)self;
    const char *name = PyUnicode_AsUTF8(arg);
    return name ? PyLong_FromLong((long)ckpt_format_from_name(name)) : NULL;
}

/* format_for_path(path) -> the id its suffix names for writing, or 0. */
static PyObject *mod_format_for_path(PyObject *self, PyObject *arg) {
    (void)self;
    PyObject *path;
    if (!PyUnicode_FSConverter(arg, &path)) return NULL;
    ckpt_format f = ckpt_format_for_path(PyBytes_AS_STRING(path));
    Py_DECREF(path);
    return PyLong_FromLong((long)f);
}

/* destination(path, format=0) -> (format id, directory): the library's
 * destination rule (ckpt_destination_resolve); ckpt.Error when refused. */
static PyObject *mod_destination(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kwlist[] = {"path", "format", NULL};
    PyObject *path;
    int format = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|i", kwlist, PyUnicode_FSConverter, &path, &format)) return NULL;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.format = (ckpt_format)format;
    ckpt_format out;
    int directory;
    ckpt_error e;
    ckpt_status st = ckpt_destination_resolve(PyBytes_AS_STRING(path), &o, &out, &directory, &e);
    Py_DECREF(path);
    if (st != CKPT_OK) return raise_ckpt(&e);
    return Py_BuildValue("(iO)", (int)out, directory ? Py_True : Py_False);
}

static PyObject *mod_dtype_bits(PyObject *self, PyObject *arg) {
    (void)self;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    ckpt_dtype d = dtype_arg(name);
    if (d == CKPT_DTYPE_INVALID) return NULL;
    return PyLong_FromUnsignedLong(ckpt_dtype_bits(d));
}

static PyObject *mod_can_cast(PyObject *self, PyObject *args) {
    (void)self;
    const char *from, *to;
    if (!PyArg_ParseTuple(args, "ss", &from, &to)) return NULL;
    return PyBool_FromLong(ckpt_can_cast(ckpt_dtype_from_name(from), ckpt_dtype_from_name(to)));
}

/* cast(from, src, to, dst, count): converts count elements between buffers. */
static PyObject *mod_cast(PyObject *self, PyObject *args) {
    (void)self;
    const char *from, *to;
    Py_buffer src, dst;
    unsigned long long count;
    if (!PyArg_ParseTuple(args, "sy*sw*K", &from, &src, &to, &dst, &count)) return NULL;
    ckpt_dtype f = dtype_arg(from), t = f ? dtype_arg(to) : CKPT_DTYPE_INVALID;
    PyObject *result = NULL;
    if (f && t) {
        /* Bytes of `count` elements: bits for element types, whole blocks for
         * ggml's block types (GGUF). */
        unsigned long long need_src = ckpt_dtype_is_block(f) ? count / ckpt_dtype_block_elems(f) * ckpt_dtype_block_bytes(f)
                                                              : (count * ckpt_dtype_bits(f) + 7) / 8;
        unsigned long long need_dst = ckpt_dtype_is_block(t) ? count / ckpt_dtype_block_elems(t) * ckpt_dtype_block_bytes(t)
                                                              : (count * ckpt_dtype_bits(t) + 7) / 8;
        if ((unsigned long long)src.len < need_src || (unsigned long long)dst.len < need_dst)
            PyErr_SetString(PyExc_ValueError, "buffers are smaller than count elements");
        else {
            ckpt_error e;
            ckpt_status st;
            Py_BEGIN_ALLOW_THREADS
            st = ckpt_cast(f, src.buf, t, dst.buf, count, &e);
            Py_END_ALLOW_THREADS
            result = st == CKPT_OK ? Py_NewRef(Py_None) : raise_ckpt(&e);
        }
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

/* redact_name(name): ckpt_redact_name, the one redaction of names. */
static PyObject *mod_redact_name(PyObject *self, PyObject *name) {
    (void)self;
    PyObject *bytes;
    if (!PyUnicode_FSConverter(name, &bytes)) return NULL;
    const char *s = PyBytes_AS_STRING(bytes);
    size_t n = ckpt_redact_name(s, NULL, 0);
    char *out = PyMem_Malloc(n + 1);
    PyObject *r = NULL;
    if (!out) PyErr_NoMemory();
    else {
        ckpt_redact_name(s, out, n + 1);
        r = PyUnicode_DecodeFSDefaultAndSize(out, (Py_ssize_t)n);
        PyMem_Free(out);
    }
    Py_DECREF(bytes);
    return r;
}

/* status_names() and detail_names(), built from the table of statuses
 * (ckpt_status.h): {name: number} and {name: (number, category name)}. */
static int put_code(PyObject *d, const char *name, PyObject *v) {
    int rc = v ? PyDict_SetItemString(d, name, v) : -1;
    Py_XDECREF(v);
    return rc;
}

static PyObject *mod_status_names(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    PyObject *d = PyDict_New();
#define PUT(name, number, message) \
    if (d && put_code(d, #name, PyLong_FromLong(number)) < 0) Py_CLEAR(d);
    CKPT_CATEGORIES(PUT)
#undef PUT
    return d;
}

static PyObject *mod_detail_names(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    PyObject *d = PyDict_New();
#define PUT(name, number, category, message) \
    if (d && put_code(d, #name, Py_BuildValue("(is)", number, #category)) < 0) Py_CLEAR(d);
    CKPT_DETAILS(PUT)
#undef PUT
    return d;
}

/* ---- JSON from the library (object trees, typed key-values) ------------------ */

/*
 * json_loads(text) -> (value, depth): the JSON the library hands out
 * (ckpt_catalog_tree_json, GGUF key-values) as Python objects, and how
 * deep its arrays and objects nest.  CPython's json module recurses on
 * the C stack for each level of nesting: a tree 500 levels deep (which the
 * library accepts) overflows a thread with a 64 KiB stack (musl's default
 * is 128 KiB).  This reader keeps the open containers on the heap.
 */

typedef struct json_reader {
    const char *s, *end;
    char *scratch; /* a string's decoded bytes */
    size_t scratch_cap;
} json_reader;

static PyObject *json_error(const json_reader *r, const char *start, const char *why) {
    PyErr_Format(PyExc_ValueError, "invalid JSON at byte %zd: %s", (Py_ssize_t)(r->s - start), why);
    return NULL;
}

static void json_space(json_reader *r) {
    while (r->s < r->end && (*r->s == ' ' || *r->s == '\n' || *r->s == '\r' || *r->s == '\t')) r->s++;
}

static int json_hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 1;
}

/* The string at r->s (its opening quote), decoded. */
static PyObject *json_string(json_reader *r, const char *start) {
    const char *p = ++r->s;
    size_t need = 0;
    while (p < r->end && *p != '"') p += *p == '\\' ? 2 : 1, need++;
    if (p >= r->end) return json_error(r, start, "unterminated string");
    if (need * 4 + 1 > r->scratch_cap) {
        char *grown = PyMem_Realloc(r->scratch, need * 4 + 1);
        if (!grown) return PyErr_NoMemory();
        r->scratch = grown, r->scratch_cap = need * 4 + 1;
    }
    char *o = r->scratch;
    while (*r->s != '"') {
        char c = *r->s++;
        if (c != '\\') {
            *o++ = c;
            continue;
        }
        c = *r->s++;
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c && simple) {
            *o++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        unsigned cp, lo;
        if (c != 'u' || r->end - r->s < 4 || !json_hex4(r->s, &cp)) return json_error(r, start, "invalid escape");
        r->s += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && r->end - r->s >= 6 && r->s[0] == '\\' && r->s[1] == 'u' &&
            json_hex4(r->s + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            r->s += 6;
        }
        if (cp < 0x80) *o++ = (char)cp;
        else if (cp < 0x800) *o++ = (char)(0xC0 | cp >> 6), *o++ = (char)(0x80 | (cp & 0x3F));
        else if (cp < 0x10000)
            *o++ = (char)(0xE0 | cp >> 12), *o++ = (char)(0x80 | (cp >> 6 & 0x3F)), *o++ = (char)(0x80 | (cp & 0x3F));
        else
            *o++ = (char)(0xF0 | cp >> 18), *o++ = (char)(0x80 | (cp >> 12 & 0x3F)),
            *o++ = (char)(0x80 | (cp >> 6 & 0x3F)), *o++ = (char)(0x80 | (cp & 0x3F));
    }
    r->s++;
    /* surrogatepass: a lone surrogate escape comes back as it was written */
    return PyUnicode_DecodeUTF8(r->scratch, o - r->scratch, "surrogatepass");
}

/* A number, true, false or null at r->s. */
static PyObject *json_literal(json_reader *r, const char *start) {
    static const struct { const char *text; size_t len; } words[] = {{"true", 4}, {"false", 5}, {"null", 4}};
    for (int i = 0; i < 3; i++)
        if ((size_t)(r->end - r->s) >= words[i].len && !memcmp(r->s, words[i].text, words[i].len)) {
            r->s += words[i].len;
            return Py_NewRef(i == 0 ? Py_True : i == 1 ? Py_False : Py_None);
        }
    const char *p = r->s;
    int real = 0;
    while (p < r->end && *p && strchr("+-.0123456789eE", *p)) real |= *p == '.' || *p == 'e' || *p == 'E', p++;
    if (p == r->s || p - r->s > 400) return json_error(r, start, "unexpected character");
    char text[401], *stop = NULL;
    memcpy(text, r->s, (size_t)(p - r->s));
    text[p - r->s] = '\0';
    PyObject *v;
    if (real) {
        double d = PyOS_string_to_double(text, &stop, NULL);
        v = PyErr_Occurred() ? NULL : PyFloat_FromDouble(d);
    } else {
        v = PyLong_FromString(text, &stop, 10);
    }
    if (v && *stop) Py_CLEAR(v);
    if (!v) {
        PyErr_Clear();
        return json_error(r, start, "invalid number");
    }
    r->s = p;
    return v;
}

/* The containers being read, innermost last: the list, or the dict and
 * the key of its next value. */
typedef struct json_open {
    PyObject *container, *key;
} json_open;

typedef struct json_stack {
    json_open *open;
    Py_ssize_t depth, cap, deepest;
    PyObject *doc;
    PyObject *keys; /* each object key once ("__dict__", "__tensor__" …), as the json module keeps them */
} json_stack;

/* Puts a value where it belongs (stealing it): into the innermost open
 * container, or as the document. */
static int json_place(json_stack *k, PyObject *v) {
    if (!v) return -1;
    if (!k->depth) return k->doc = v, 0;
    json_open *o = &k->open[k->depth - 1];
    int rc = o->key ? PyDict_SetItem(o->container, o->key, v) : PyList_Append(o->container, v);
    Py_CLEAR(o->key);
    Py_DECREF(v);
    return rc;
}

/* A new list or dict, placed and opened. */
static int json_push(json_stack *k, int dict) {
    if (k->depth == k->cap) {
        Py_ssize_t cap = k->cap ? 2 * k->cap : 64;
        json_open *grown = PyMem_Realloc(k->open, (size_t)cap * sizeof *grown);
        if (!grown) return PyErr_NoMemory(), -1;
        k->open = grown, k->cap = cap;
    }
    PyObject *c = dict ? PyDict_New() : PyList_New(0);
    if (!c || json_place(k, Py_NewRef(c)) < 0) {
        Py_XDECREF(c);
        return -1;
    }
    k->open[k->depth++] = (json_open){c, NULL};
    if (k->depth > k->deepest) k->deepest = k->depth;
    return 0;
}

/* After a value or an opening bracket: closing brackets, then ',' (or,
 * first in a container, nothing) and an object's next key and ':'.
 * *done: the document is complete. */
static int json_between(json_reader *r, const char *start, json_stack *k, int *done) {
    for (;;) {
        json_space(r);
        if (!k->depth) return *done = 1, 0;
        json_open *o = &k->open[k->depth - 1];
        int dict = PyDict_Check(o->container);
        Py_ssize_t size = dict ? PyDict_GET_SIZE(o->container) : PyList_GET_SIZE(o->container);
        if (r->s < r->end && *r->s == (dict ? '}' : ']')) {
            r->s++;
            Py_DECREF(o->container);
            k->depth--;
            continue;
        }
        if (size && (r->s >= r->end || *r->s != ','))
            return json_error(r, start, "expected ',' or a closing bracket"), -1;
        if (size) r->s++, json_space(r);
        if (!dict) return 0;
        if (r->s >= r->end || *r->s != '"') return json_error(r, start, "expected a key"), -1;
        PyObject *key = json_string(r, start), *same = key ? PyDict_SetDefault(k->keys, key, key) : NULL;
        Py_XDECREF(key);
        if (!same) return -1;
        o->key = Py_NewRef(same);
        json_space(r);
        if (r->s >= r->end || *r->s++ != ':') return json_error(r, start, "expected ':'"), -1;
        return 0;
    }
}

static PyObject *mod_json_loads(PyObject *self, PyObject *arg) {
    (void)self;
    Py_ssize_t len;
    const char *start = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, &len) : NULL;
    if (!start) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "json_loads needs a str");
    json_reader r = {start, start + len, NULL, 0};
    json_stack k = {NULL, 0, 0, 0, NULL, PyDict_New()};
    int rc = k.keys ? 0 : -1, done = 0;
    while (!rc && !done) {
        json_space(&r);
        if (r.s >= r.end) rc = (json_error(&r, start, "unexpected end"), -1);
        else if (*r.s == '{' || *r.s == '[') rc = json_push(&k, *r.s++ == '{');
        else rc = json_place(&k, *r.s == '"' ? json_string(&r, start) : json_literal(&r, start));
        if (!rc) rc = json_between(&r, start, &k, &done);
    }
    if (!rc && r.s != r.end) rc = (json_error(&r, start, "trailing characters"), -1);
    for (Py_ssize_t i = 0; i < k.depth; i++) Py_DECREF(k.open[i].container), Py_XDECREF(k.open[i].key);
    PyMem_Free(k.open);
    PyMem_Free(r.scratch);
    Py_XDECREF(k.keys);
    if (rc) {
        Py_CLEAR(k.doc);
        return NULL;
    }
    PyObject *out = Py_BuildValue("(Nn)", k.doc, k.deepest);
    return out;
}

static PyObject *mod_commit_recover(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kwlist[] = {"dir", "check", NULL};
    PyObject *dir = NULL;
    int check = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O&", kwlist, PyUnicode_FSConverter, &dir,
                                     FLAG("commit_recover: check", check))) return NULL;
    ckpt_error err;
    ckpt_error_clear(&err);
    int found = 0;
    ckpt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ckpt_commit_recover(PyBytes_AS_STRING(dir), check ? CKPT_RECOVER_CHECK : 0, &found, &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(dir);
    if (st != CKPT_OK) return raise_ckpt(&err);
    return PyBool_FromLong(found);
}

/* Chunk k's end in a tensor of n bytes whose chunks of `chunk` have their
 * edges `phase` bytes before the tensor's multiples of it (the library's
 * base/chunk_hash.h, which the module does not link). */
static uint64_t chunk_end(uint64_t n, uint64_t chunk, uint64_t phase, size_t k) {
    uint64_t hi = (uint64_t)(k + 1) * chunk - phase;
    return hi < n ? hi : n;
}

/* The digests being computed: the whole's, and each chunk's when asked. */
typedef struct hashing {
    XXH3_state_t *whole, *chunk;
    uint64_t n, size, phase, at, end;
    uint64_t *digests;
    size_t count, k;
} hashing;

static void hashing_update(hashing *h, const unsigned char *p, size_t len) {
    XXH3_64bits_update(h->whole, p, len);
    while (h->chunk && len) {
        uint64_t room = h->end - h->at;
        size_t take = room < len ? (size_t)room : len;
        XXH3_64bits_update(h->chunk, p, take);
        p += take, len -= take, h->at += take;
        if (h->at == h->end && h->at < h->n) {
            h->digests[h->k++] = XXH3_64bits_digest(h->chunk);
            XXH3_64bits_reset(h->chunk);
            h->end = chunk_end(h->n, h->size, h->phase, h->k);
        }
    }
}

/* xxh3_64(data or iterable of data, nbytes=0, chunk_bytes=0, phase=0,
 * count=0) -> int: the XXH3-64 of the bytes, in order (what a writer with
 * checksums records), the GIL released; with count > 0, (int, [int]):
 * also that of each of the count chunks of an nbytes tensor
 * (CKPT_CHUNK_METADATA_KEY: a writer's tensor_chunks). */
static PyObject *mod_xxh3_64(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *arg;
    unsigned long long n = 0, size = 0, phase = 0;
    Py_ssize_t count = 0;
    if (!PyArg_ParseTuple(args, "O|KKKn", &arg, &n, &size, &phase, &count)) return NULL;
    if (count < 0 || (count && (!size || phase >= size || (unsigned long long)count != n / size + (n % size != 0) + 1)))
        return PyErr_Format(PyExc_ValueError, "chunks need chunk_bytes > phase and count = ceil(nbytes / chunk_bytes) + 1");
    hashing h = {.whole = XXH3_createState(), .chunk = count ? XXH3_createState() : NULL, .n = n, .size = size,
                 .phase = phase, .count = (size_t)count};
    h.digests = count ? PyMem_Malloc((size_t)count * sizeof *h.digests) : NULL;
    if (!h.whole || XXH3_64bits_reset(h.whole) == XXH_ERROR || (count && (!h.chunk || !h.digests ||
                                                                          XXH3_64bits_reset(h.chunk) == XXH_ERROR))) {
        XXH3_freeState(h.whole), XXH3_freeState(h.chunk), PyMem_Free(h.digests);
        return PyErr_NoMemory();
    }
    if (count) h.end = chunk_end(n, size, phase, 0);
    /* One buffer, or an iterable of them taken one at a time (pieces made
     * on the fly are released as soon as they are hashed). */
    PyObject *items = PyObject_CheckBuffer(arg) ? PyTuple_Pack(1, arg) : NULL;
    PyObject *it = PyObject_GetIter(items ? items : arg), *item;
    bool ok = it != NULL;
    while (ok && (item = PyIter_Next(it))) {
        Py_buffer b;
        ok = PyObject_GetBuffer(item, &b, PyBUF_C_CONTIGUOUS) == 0;
        Py_DECREF(item);
        if (!ok) break;
        Py_BEGIN_ALLOW_THREADS
        hashing_update(&h, b.buf, (size_t)b.len);
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&b);
    }
    ok = ok && !PyErr_Occurred();
    PyObject *out = ok ? PyLong_FromUnsignedLongLong(XXH3_64bits_digest(h.whole)) : NULL;
    if (out && count) { /* the last chunk, and the empty ones after it */
        for (; h.k < h.count; h.k++) {
            h.digests[h.k] = XXH3_64bits_digest(h.chunk);
            XXH3_64bits_reset(h.chunk);
        }
        PyObject *list = PyList_New(count);
        for (Py_ssize_t k = 0; list && k < count; k++) {
            PyObject *d = PyLong_FromUnsignedLongLong(h.digests[k]);
            if (!d) Py_CLEAR(list);
            else PyList_SET_ITEM(list, k, d);
        }
        if (list) out = Py_BuildValue("(NN)", out, list); /* N: both references taken */
        else Py_CLEAR(out);
    }
    Py_XDECREF(it);
    Py_XDECREF(items);
    XXH3_freeState(h.whole), XXH3_freeState(h.chunk), PyMem_Free(h.digests);
    return out;
}

/* flag(value, where) -> bool: the one rule of a boolean option (flag_value),
 * for the options the Python layer reads before they reach a call here. */
static PyObject *mod_flag(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *v;
    const char *where;
    if (!PyArg_ParseTuple(args, "Os", &v, &where)) return NULL;
    int on = flag_value(v, where);
    if (on < 0) return NULL;
    return PyBool_FromLong(on);
}

static PyMethodDef module_methods[] = {
    {"flag", mod_flag, METH_VARARGS,
     "flag(value, where) -> bool: True, False, numpy's bool_, 0 or 1; anything else a TypeError naming `where`"},
    {"parse_size", mod_parse_size, METH_O, "parse_size(text) -> bytes (\"5GB\", \"512MiB\", 1000)"},
    {"format_size", mod_format_size, METH_O, "format_size(n) -> \"86.6 MiB\""},
    {"progress_line", mod_progress_line, METH_VARARGS,
     "progress_line(width, label, done, total, elapsed, note=None) -> the progress line the CLI draws"},
    {"format_name", mod_format_name, METH_O, "format_name(id) -> 'safetensors', 'torch', … or None"},
    {"format_from_name", mod_format_from_name, METH_O, "format_from_name(name) -> id (0: none)"},
    {"format_for_path", mod_format_for_path, METH_O, "format_for_path(path) -> the id its suffix names (0: none)"},
    {"destination", (PyCFunction)(void (*)(void))mod_destination, METH_VARARGS | METH_KEYWORDS,
     "destination(path, format=0) -> (format id, directory): ckpt_destination_resolve"},
    {"dtype_bits", mod_dtype_bits, METH_O, "dtype_bits(name) -> bits per element"},
    {"can_cast", mod_can_cast, METH_VARARGS, "can_cast(from, to) -> bool"},
    {"cast", mod_cast, METH_VARARGS, "cast(from, src, to, dst, count)"},
    {"status_names", mod_status_names, METH_NOARGS, "status_names() -> {name: code}"},
    {"xxh3_64", mod_xxh3_64, METH_VARARGS,
     "xxh3_64(data or [data, …], nbytes=0, chunk_bytes=0, phase=0, count=0) -> the XXH3-64 of the bytes in "
     "order; with count, (it, [each chunk's])"},
    {"detail_names", mod_detail_names, METH_NOARGS, "detail_names() -> {name: (code, status name)}"},
    {"json_loads", mod_json_loads, METH_O,
     "json_loads(text) -> (value, depth): the library's JSON (object trees) without recursion on the C stack"},
    {"redact_name", mod_redact_name, METH_O, "redact_name(name) -> the name as it may be shown (ckpt_redact_name)"},
    {"commit_recover", (PyCFunction)(void (*)(void))mod_commit_recover, METH_VARARGS | METH_KEYWORDS,
     "commit_recover(dir, check=False) -> bool: ckpt_commit_recover (True: a journal was there)"},
    {"_register_errors", register_errors, METH_O, "internal: status name -> exception class"},
    COLLECTIVE_METHODS
    {NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "ckpt._ckpt",
                                        "The C core of ckpt (see the ckpt package).", -1, module_methods};

PyMODINIT_FUNC PyInit__ckpt(void) {
    PyTypeObject *types[] = {&BufferType, &MapType, &CatalogType, &PlanType, &WriterType, &RowsType, &DeviceType};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (PyType_Ready(types[i]) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (!(TensorRowType = PyStructSequence_NewType(&tensor_row_desc)) ||
        !(PlanRowType = PyStructSequence_NewType(&plan_row_desc)) ||
        PyModule_AddObjectRef(m, "TensorRow", (PyObject *)TensorRowType) < 0 ||
        PyModule_AddObjectRef(m, "PlanRow", (PyObject *)PlanRowType) < 0)
        goto fail;
    Error = PyErr_NewExceptionWithDoc("ckpt.Error",
                                      "A ckpt failure.  Attributes: status (e.g. 'CKPT_E_TRUNCATED'), code, "
                                      "path, tensor, offset (None where they do not apply), errno.",
                                      NULL, NULL);
    if (!Error || PyModule_AddObjectRef(m, "Error", Error) < 0) goto fail;
    const char *names[] = {"Buffer", "Map", "Catalog", "Plan", "Writer", "Rows", "Device"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0) goto fail;
    if (PyModule_AddStringConstant(m, "version", ckpt_version()) < 0) goto fail;
    if (collective_init(m) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
