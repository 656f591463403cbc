/*
 * hf_source.c — the hf://org/name[@revision][/path] kind of source: a repo
 * of the Hugging Face Hub, or a folder or file of it, resolved as
 * huggingface_hub resolves it.
 *
 *   - The Hub is $HF_ENDPOINT (https://huggingface.co by default); its API
 *     (GET /api/models/{repo}/revision/{rev}) gives the commit a revision
 *     is at and the repo's files, with an LFS file's SHA-256 and size.
 *   - A checkpoint is read at one commit: opening pins a branch or tag to
 *     its commit once (ckpt__source_kind.pin), and every file is then
 *     asked for at that commit, so that a branch that moves meanwhile
 *     cannot mix two versions.
 *   - A file is GET {endpoint}/{repo}/resolve/{commit}/{path} through the
 *     HTTP machinery (http_source.c: ranges, retries, redirects to the
 *     CDN, validators), with $HF_TOKEN, or the token file that
 *     `hf auth login` writes ($HF_TOKEN_PATH, else $HF_HOME/token), as a
 *     bearer token sent to the endpoint's host only (never to the CDN a
 *     redirect leads to).
 *   - The Hub's own cache (hf.h, hf_cache.c) is used as huggingface_hub
 *     uses it: a file of the commit's snapshot there is read with no
 *     request; otherwise the open reads only the file's first bytes (a
 *     safetensors header), and the first read past them starts the file's
 *     download into the cache (hashed as it streams, checked against the
 *     Hub's SHA-256), which serves the reads as its bytes arrive
 *     (hf_stream.c): a load copies each tensor into place as its bytes
 *     come in, and its end (ckpt__source_settle) waits for the verdict.
 *     A file the first request brings whole (up to 256 KiB: configs,
 *     indexes) goes into the cache at once.
 *   - $HF_HUB_OFFLINE=1: no request at all; revisions are read from
 *     refs/, files from the snapshots.
 *
 * The repo's listing (the API's) is kept per commit, which never changes,
 * for the few opens of one checkpoint (a handful of repos at a time).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/json.h"
#include "beneath.h"
#include "file.h"
#include "hf.h"
#include "http.h"

enum {
    API_LIMIT = 64 << 20,
    MEMO_SIZE = 8,
    TOKEN_LIMIT = 4096,
    HEAD = 16 << 10,          /* asked for at open: a safetensors header of a few hundred tensors */
    RANGE_BUDGET = 4 << 20,   /* read by ranges before a file is downloaded whole… */
    RANGE_READ = 256 << 10,   /* …in reads of at most this (a larger one is data) */
};

/* ---- settings ---------------------------------------------------------------------- */

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* $HF_HUB_OFFLINE as huggingface_hub reads it (1, ON, YES, TRUE). */
static bool offline(void) {
    const char *v = env("HF_HUB_OFFLINE");
    static const char *const yes[] = {"1", "on", "yes", "true"};
    for (size_t i = 0; v && i < 4; i++)
        if (!strcasecmp(v, yes[i])) return true;
    return false;
}

/* The endpoint without a trailing '/' (malloc'ed). */
static char *endpoint(void) {
    const char *e = env("HF_ENDPOINT");
    if (!e) e = "https://huggingface.co";
    size_t n = strlen(e);
    while (n && e[n - 1] == '/') n--;
    return ckpt__strndup(e, n);
}

/* The token `hf auth login` saved: $HF_TOKEN_PATH, else $HF_HOME/token,
 * else ~/.cache/huggingface/token (malloc'ed, blanks trimmed), or NULL. */
static char *saved_token(void) {
    ckpt__buf path = {0};
    const char *p = env("HF_TOKEN_PATH"), *home = env("HF_HOME"), *user = env("HOME"), *xdg = env("XDG_CACHE_HOME");
    if (p) ckpt__buf_puts(&path, p);
    else if (home) ckpt__buf_puts(&path, home), ckpt__buf_puts(&path, "/token");
    else if (xdg) ckpt__buf_puts(&path, xdg), ckpt__buf_puts(&path, "/huggingface/token");
    else if (user) ckpt__buf_puts(&path, user), ckpt__buf_puts(&path, "/.cache/huggingface/token");
    int fd = path.data && !path.failed ? ckpt__io_open(path.data, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) : -1;
    free(path.data);
    if (fd < 0) return NULL;
    struct stat sb;
    char *t = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size < TOKEN_LIMIT ? ckpt__malloc(TOKEN_LIMIT) : NULL;
    ssize_t n = t ? ckpt__io_pread(fd, t, TOKEN_LIMIT - 1, 0) : -1;
    close(fd);
    if (n <= 0) {
        free(t);
        return NULL;
    }
    size_t a = 0, z = (size_t)n;
    while (a < z && strchr(" \t\r\n", t[a])) a++;
    while (z > a && strchr(" \t\r\n", t[z - 1])) z--;
    memmove(t, t + a, z - a);
    t[z - a] = '\0';
    if (!t[0]) {
        free(t);
        return NULL;
    }
    return t;
}

/* The bearer token: the caller's, $HF_TOKEN, or the saved one (malloc'ed;
 * wiped and freed with drop_token). */
static char *token(const ckpt__source_options *o) {
    const char *t = o->bearer_token ? o->bearer_token : env("HF_TOKEN");
    return t ? ckpt__strdup(t) : saved_token();
}

static void drop_token(char *t) {
    if (t) memset(t, 0, strlen(t));
    free(t);
}

/* The Hub's cache: the caller's (ckpt_catalog_options.hf_cache_dir, as
 * transformers' cache_dir= names it), else the environment's (malloc'ed). */
static char *hub_cache(const ckpt__source_options *o) {
    return o && o->hf_cache ? ckpt__strdup(o->hf_cache) : ckpt__hf_cache_dir();
}

/* ---- names -------------------------------------------------------------------------- */

typedef struct hf_name {
    char *repo; /* org/name */
    char *rev;  /* as given, percent-decoded ("main" when none) */
    char *path; /* in the repo ("" for the repo itself) */
} hf_name;

static void name_free(hf_name *n) {
    free(n->repo);
    free(n->rev);
    free(n->path);
    memset(n, 0, sizeof *n);
}

static bool is_commit(const char *rev) { return strlen(rev) == 40 && strspn(rev, "0123456789abcdef") == 40; }

static bool repo_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
}

/* A path in the repo: plain components (no empty, ".", ".." or control
 * character), so that it names a file of the snapshot and nothing else. */
static bool plain_path(const char *p) {
    for (const char *c = p; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == '\\') return false;
    for (const char *c = p; *c;) {
        size_t n = strcspn(c, "/");
        if (!n || (n == 1 && c[0] == '.') || (n == 2 && !strncmp(c, "..", 2))) return false;
        c += n;
        if (*c == '/' && !*++c) return false;
    }
    return true;
}

/* "%2F" and the like of a revision ("refs%2Fpr%2F1"), decoded. */
static char *decode(const char *s, size_t n) {
    char *d = ckpt__malloc(n + 1);
    if (!d) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        char hex[3] = {0};
        if (s[i] == '%' && i + 2 < n) memcpy(hex, s + i + 1, 2);
        if (hex[0] && strspn(hex, "0123456789abcdefABCDEF") == 2 && sscanf(hex, "%2x", &v) == 1) {
            d[k++] = (char)v;
            i += 2;
        } else {
            d[k++] = s[i];
        }
    }
    d[k] = '\0';
    return d;
}

static ckpt_status parse_name(const char *name, hf_name *n, ckpt_error *err) {
    memset(n, 0, sizeof *n);
    const char *p = name + 5, *org = p;
    size_t a = 0;
    while (repo_char(p[a])) a++;
    const char *repo_name = p + a + 1;
    size_t b = 0;
    if (p[a] == '/')
        while (repo_char(repo_name[b])) b++;
    /* As the Hub names repos: no name that starts with '.' or holds "..". */
    bool dots = a && b && (org[0] == '.' || repo_name[0] == '.' || memmem(org, a, "..", 2) || memmem(repo_name, b, "..", 2));
    if (!a || p[a] != '/' || !b || dots)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1,
                          "an hf:// name is hf://ORG/NAME[@REVISION][/PATH] (a repo of the Hugging Face Hub)");
    const char *rest = repo_name + b;
    bool failed = !(n->repo = ckpt__strndup(org, (size_t)(rest - org)));
    const char *rev = NULL;
    size_t rev_len = 0;
    if (*rest == '@') {
        rev = rest + 1;
        rev_len = strcspn(rev, "/");
        rest = rev + rev_len;
    }
    if (*rest && *rest != '/') {
        name_free(n);
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1, "'%c' cannot follow the repo's name", *rest);
    }
    if (*rest == '/') rest++;
    size_t path_len = strlen(rest);
    while (path_len && rest[path_len - 1] == '/') path_len--;
    if (!failed) failed = !(n->rev = rev ? decode(rev, rev_len) : ckpt__strdup("main"));
    if (!failed) failed = !(n->path = ckpt__strndup(rest, path_len));
    if (failed) {
        name_free(n);
        return ckpt__oom(err, name, NULL);
    }
    if ((rev && !rev_len) || !plain_path(n->path) || strchr(n->rev, '\n')) {
        name_free(n);
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1,
                          "an empty revision, or a path with an empty, '.' or '..' component");
    }
    return CKPT_OK;
}

/* hf://org/name@commit[/path] (malloc'ed). */
static char *pinned_name(const hf_name *n, const char *commit, const char *path) {
    ckpt__buf b = {0};
    ckpt__buf_puts(&b, "hf://");
    ckpt__buf_puts(&b, n->repo);
    ckpt__buf_puts(&b, "@");
    ckpt__buf_puts(&b, commit);
    if (*path) ckpt__buf_puts(&b, "/"), ckpt__buf_puts(&b, path);
    return ckpt__buf_text(&b);
}

/* ---- the repo's files at a commit: the API's answer, kept ----------------------------- */

typedef struct hf_file {
    char *path;
    char sha256[65]; /* an LFS file's, or "" */
} hf_file;

typedef struct hf_info {
    char *endpoint, *repo, *commit, *ref;
    hf_file *files;
    size_t count;
} hf_info;

static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;
static hf_info *memo[MEMO_SIZE];
static unsigned memo_next;

static void info_free(hf_info *i) {
    if (!i) return;
    for (size_t k = 0; k < i->count; k++) free(i->files[k].path);
    free(i->files);
    free(i->endpoint);
    free(i->repo);
    free(i->commit);
    free(i->ref);
    free(i);
}

/* Under memo_lock. */
static hf_info *memo_find(const char *ep, const char *repo, const char *commit) {
    for (unsigned k = 0; k < MEMO_SIZE; k++)
        if (memo[k] && !strcmp(memo[k]->endpoint, ep) && !strcmp(memo[k]->repo, repo) && !strcmp(memo[k]->commit, commit))
            return memo[k];
    return NULL;
}

static void memo_put(hf_info *i) {
    pthread_mutex_lock(&memo_lock);
    hf_info *old = memo_find(i->endpoint, i->repo, i->commit);
    if (old) { /* the newer answer wins (it may name a ref) */
        for (unsigned k = 0; k < MEMO_SIZE; k++)
            if (memo[k] == old) memo[k] = i;
    } else {
        old = memo[memo_next];
        memo[memo_next] = i;
        memo_next = (memo_next + 1) % MEMO_SIZE;
    }
    pthread_mutex_unlock(&memo_lock);
    info_free(old);
}

/* What the Hub's refusal means, and what to do. */
static ckpt_status api_error(const char *shown, const char *ep, const hf_name *n, const char *rev,
                             const ckpt__remote_reply *r, bool has_token, ckpt_error *err) {
    const char *code = r->error_code, *msg = r->error_message;
    if (!strcmp(code, "GatedRepo"))
        return ckpt__fail(err, CKPT__D(HTTP_AUTH), shown, NULL, -1,
                          "HTTP %ld: %s is a gated repo%s: accept its terms at %s/%s (logged in), then %s (%s)",
                          r->status, n->repo, has_token ? " and this token's account has no access yet" : "", ep,
                          n->repo,
                          has_token ? "use a token of that account" : "set HF_TOKEN (or run `hf auth login`) with a token of that account",
                          msg[0] ? msg : "the Hub refused access");
    if (!strcmp(code, "RevisionNotFound"))
        return ckpt__fail(err, CKPT_E_NOT_FOUND, shown, NULL, -1, "%s has no revision \"%s\" (a branch, tag or commit)",
                          n->repo, rev);
    if (!strcmp(code, "RepoNotFound") || r->status == 401 || r->status == 403 || r->status == 404)
        return ckpt__fail(err, r->status == 401 || r->status == 403 ? CKPT__D(HTTP_AUTH) : CKPT_E_NOT_FOUND, shown, NULL,
                          -1, "HTTP %ld: %s has no repo %s, or it is private: %s", r->status, ep, n->repo,
                          has_token ? "the token given cannot read it (check HF_TOKEN or `hf auth login`)"
                                    : "set HF_TOKEN (or run `hf auth login`) with a token that can read it");
    return ckpt__fail(err, CKPT__D(HTTP_STATUS), shown, NULL, -1, "HTTP %ld from the Hub's API%s%s", r->status,
                      msg[0] ? ": " : "", msg);
}

/* The API's JSON: "sha" and "siblings" ({"rfilename", "lfs": {"sha256"}}). */
static ckpt_status parse_info(const char *shown, char *text, size_t len, hf_info *i, ckpt_error *err) {
    ckpt__json_doc doc;
    size_t at = 0;
    const char *why = NULL;
    ckpt_status st = ckpt__json_parse(text, len, &doc, &at, &why);
    if (st == CKPT_E_NO_MEMORY) return ckpt__oom(err, shown, NULL);
    if (st) return ckpt__fail(err, CKPT__D(BAD_RESPONSE), shown, NULL, (int64_t)at, "the Hub's API answered with no JSON: %s", why);
    uint32_t sha = doc.nodes[0].kind == CKPT__JSON_OBJECT ? ckpt__json_member(&doc, 0, "sha") : 0;
    uint32_t sib = doc.nodes[0].kind == CKPT__JSON_OBJECT ? ckpt__json_member(&doc, 0, "siblings") : 0;
    if (!sha || doc.nodes[sha].kind != CKPT__JSON_STRING || !is_commit(doc.nodes[sha].str) || !sib ||
        doc.nodes[sib].kind != CKPT__JSON_ARRAY) {
        ckpt__json_free(&doc);
        return ckpt__fail(err, CKPT__D(BAD_RESPONSE), shown, NULL, -1,
                          "the Hub's API answer has no commit (\"sha\") or file list (\"siblings\")");
    }
    i->commit = ckpt__strdup(doc.nodes[sha].str);
    i->files = ckpt__calloc(doc.nodes[sib].count + 1, sizeof *i->files);
    st = i->commit && i->files ? CKPT_OK : ckpt__oom(err, shown, NULL);
    for (uint32_t k = sib + 1; st == CKPT_OK && k < doc.nodes[sib].end; k = doc.nodes[k].end) {
        uint32_t f = doc.nodes[k].kind == CKPT__JSON_OBJECT ? ckpt__json_member(&doc, k, "rfilename") : 0;
        if (!f || doc.nodes[f].kind != CKPT__JSON_STRING || !plain_path(doc.nodes[f].str)) continue; /* never opened */
        hf_file *file = &i->files[i->count];
        if (!(file->path = ckpt__strdup(doc.nodes[f].str))) st = ckpt__oom(err, shown, NULL);
        uint32_t lfs = ckpt__json_member(&doc, k, "lfs");
        uint32_t h = lfs && doc.nodes[lfs].kind == CKPT__JSON_OBJECT ? ckpt__json_member(&doc, lfs, "sha256") : 0;
        if (h && doc.nodes[h].kind == CKPT__JSON_STRING && doc.nodes[h].len == 64 &&
            strspn(doc.nodes[h].str, "0123456789abcdef") == 64)
            memcpy(file->sha256, doc.nodes[h].str, 65);
        i->count++;
    }
    ckpt__json_free(&doc);
    return st;
}

/* Asks the API for the repo at `rev`: its commit and files (kept). */
static ckpt_status fetch_info(const char *shown, const char *ep, const hf_name *n, const char *rev,
                              const ckpt__source_options *o, char commit[41], ckpt_error *err) {
    ckpt__buf url = {0}, body = {0};
    ckpt__buf_puts(&url, ep);
    ckpt__buf_puts(&url, "/api/models/");
    ckpt__buf_puts(&url, n->repo);
    ckpt__buf_puts(&url, "/revision/");
    ckpt__url_encode_into(&url, rev, strlen(rev), "/?#&%+ ");
    ckpt__buf_puts(&url, "?blobs=true");
    char *tok = token(o);
    ckpt__remote_auth auth = {.bearer = tok};
    ckpt__remote_reply reply;
    ckpt_status st = url.failed ? ckpt__oom(err, shown, NULL)
                                : ckpt__remote_request(shown, url.data, &auth, NULL, o, API_LIMIT, &body, &reply, err);
    if (st == CKPT_OK && (reply.status < 200 || reply.status >= 300))
        st = api_error(shown, ep, n, rev, &reply, tok != NULL, err);
    drop_token(tok);
    free(url.data);
    hf_info *i = st == CKPT_OK ? ckpt__calloc(1, sizeof *i) : NULL;
    if (st == CKPT_OK && !i) st = ckpt__oom(err, shown, NULL);
    if (st == CKPT_OK) st = parse_info(shown, body.data ? body.data : (char *)"", body.len, i, err);
    free(body.data);
    if (st == CKPT_OK) {
        i->endpoint = ckpt__strdup(ep);
        i->repo = ckpt__strdup(n->repo);
        i->ref = is_commit(rev) ? NULL : ckpt__strdup(rev);
        if (!i->endpoint || !i->repo || (!is_commit(rev) && !i->ref)) st = ckpt__oom(err, shown, NULL);
    }
    if (st) {
        info_free(i);
        return st;
    }
    memcpy(commit, i->commit, 41);
    memo_put(i);
    return CKPT_OK;
}

/* ---- the snapshot in the cache ------------------------------------------------------- */

/* <cache>/models--org--name/snapshots/<commit> (malloc'ed). */
static char *snapshot_dir(const char *cache, const char *repo, const char *commit) {
    char *folder = ckpt__hf_repo_folder(cache, repo);
    ckpt__buf b = {0};
    ckpt__buf_puts(&b, folder ? folder : "");
    ckpt__buf_puts(&b, "/snapshots/");
    ckpt__buf_puts(&b, commit);
    bool ok = folder && !b.failed;
    free(folder);
    if (!ok) free(b.data);
    return ok ? b.data : NULL;
}

static bool is_dir(const char *path) {
    struct stat sb;
    return path && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The snapshot, opened as a checkpoint directory is (beneath.h: its links
 * followed into the repo's blobs/ only), or NULL. */
static ckpt__beneath *open_snapshot(const char *snap) {
    ckpt__beneath *b = NULL;
    if (!is_dir(snap) || ckpt__beneath_open_root(snap, &b, NULL) != CKPT_OK) return NULL;
    return b;
}

/* ---- pinning ---------------------------------------------------------------------------- */

/* The commit a name's revision is at: a commit is itself (asked of the API
 * only when the cache has no snapshot of it, for its file list and for the
 * Hub's verdict on access); offline, a branch's commit is refs/<branch>. */
static ckpt_status resolve(const char *name, const hf_name *n, const ckpt__source_options *o, char commit[41],
                           ckpt_error *err) {
    char *ep = endpoint(), *cache = hub_cache(o);
    ckpt_status st = ep ? CKPT_OK : ckpt__oom(err, name, NULL);
    if (st == CKPT_OK && is_commit(n->rev)) {
        memcpy(commit, n->rev, 41);
        char *snap = cache ? snapshot_dir(cache, n->repo, commit) : NULL;
        pthread_mutex_lock(&memo_lock);
        bool known = memo_find(ep, n->repo, commit) != NULL;
        pthread_mutex_unlock(&memo_lock);
        if (!known && !offline() && !is_dir(snap)) st = fetch_info(name, ep, n, n->rev, o, commit, err);
        free(snap);
    } else if (st == CKPT_OK && offline()) {
        if (!cache || !ckpt__hf_cache_ref(cache, n->repo, n->rev, commit))
            st = ckpt__fail(err, CKPT_E_NOT_FOUND, name, NULL, -1,
                            "HF_HUB_OFFLINE is set, and the Hub's cache %s has no revision \"%s\" of %s (refs/%s)",
                            cache ? cache : "(no home directory)", n->rev, n->repo, n->rev);
    } else if (st == CKPT_OK) {
        st = fetch_info(name, ep, n, n->rev, o, commit, err);
    }
    free(ep);
    free(cache);
    return st;
}

static ckpt_status hf_pin(const char *name, const ckpt__source_options *o, char **pinned, ckpt_error *err) {
    *pinned = NULL;
    hf_name n;
    char commit[41];
    ckpt_status st = parse_name(name, &n, err);
    if (st == CKPT_OK) st = resolve(name, &n, o, commit, err);
    if (st == CKPT_OK && !(*pinned = pinned_name(&n, commit, n.path))) st = ckpt__oom(err, name, NULL);
    name_free(&n);
    return st;
}

/* ---- what a folder of the repo holds ------------------------------------------------------ */

/* The names directly in folder `dir` of the repo at the name's commit
 * (files, and folders once each), to `add`; `want` instead asks what one
 * path is.  From the API's list when it was asked, else the snapshot's. */
static ckpt_status folder_walk(const char *name, const hf_name *n, const ckpt__source_options *o, const char *dir,
                               const char *want, ckpt_source_kind *kind, int (*add)(void *ctx, const char *name),
                               void *ctx, ckpt_error *err) {
    char *ep = endpoint(), *cache = hub_cache(o);
    if (!ep) return ckpt__oom(err, name, NULL);
    ckpt_status st = CKPT_OK;
    pthread_mutex_lock(&memo_lock);
    hf_info *i = memo_find(ep, n->repo, n->rev);
    size_t dl = strlen(dir), wl = want ? strlen(want) : 0;
    char **names = NULL;
    size_t count = 0;
    if (i && want) {
        *kind = !*want ? CKPT_SOURCE_DIRECTORY : CKPT_SOURCE_MISSING;
        for (size_t k = 0; k < i->count && *kind == CKPT_SOURCE_MISSING; k++) {
            const char *p = i->files[k].path;
            if (!strcmp(p, want)) *kind = CKPT_SOURCE_FILE;
            else if (!strncmp(p, want, wl) && p[wl] == '/') *kind = CKPT_SOURCE_DIRECTORY;
        }
    } else if (i) {
        names = ckpt__calloc(i->count + 1, sizeof *names);
        if (!names) st = ckpt__oom(err, name, NULL);
        for (size_t k = 0; st == CKPT_OK && k < i->count; k++) {
            const char *p = i->files[k].path;
            if (dl && (strncmp(p, dir, dl) || p[dl] != '/')) continue;
            const char *rel = dl ? p + dl + 1 : p;
            size_t len = strcspn(rel, "/");
            bool dup = false;
            for (size_t m = 0; m < count && !dup; m++) dup = strlen(names[m]) == len && !strncmp(names[m], rel, len);
            if (!dup && rel[0] != '.' && !(names[count++] = ckpt__strndup(rel, len))) st = ckpt__oom(err, name, NULL);
        }
    }
    pthread_mutex_unlock(&memo_lock);
    if (!i) { /* the snapshot in the cache */
        char *snap = cache ? snapshot_dir(cache, n->repo, n->rev) : NULL;
        ckpt__beneath *b = open_snapshot(snap);
        char *full = snap ? ckpt__path_join(snap, want ? want : dir) : NULL;
        if (want) {
            int fd = -1;
            uint64_t size;
            *kind = !b || !full ? CKPT_SOURCE_MISSING
                    : !*want    ? CKPT_SOURCE_DIRECTORY
                    : ckpt__beneath_open(b, full, true, &fd, &size, NULL) != CKPT_OK ? CKPT_SOURCE_MISSING
                    : fd < 0 ? CKPT_SOURCE_DIRECTORY
                             : CKPT_SOURCE_FILE;
            if (fd >= 0) close(fd);
        } else if (!b || !full) {
            st = ckpt__fail(err, CKPT_E_NOT_FOUND, name, NULL, -1, "the Hub's cache has no snapshot of %s at %s%s",
                            n->repo, n->rev, offline() ? " (HF_HUB_OFFLINE is set)" : "");
        } else {
            st = ckpt__beneath_list(b, full, false, &names, &count, err);
        }
        ckpt__beneath_close(b);
        free(full);
        free(snap);
    }
    for (size_t k = 0; st == CKPT_OK && k < count; k++)
        if (add(ctx, names[k])) st = CKPT_E_NO_MEMORY; /* the listing says why */
    ckpt__beneath_free_names(names, count);
    free(ep);
    free(cache);
    return st;
}

/* ---- one file ------------------------------------------------------------------------------ */

/* A file being read from the Hub: its first bytes from the open, the rest
 * from its download as the bytes arrive (stream), then from its blob in the
 * cache (local). */
typedef struct hf_remote {
    ckpt__source *remote, *local;
    ckpt__hf_stream *stream; /* started by the first read of data; kept until the close */
    /* Streams of runs that failed, stopped: the next read starts another
     * (resuming the partial blob) rather than failing on the old one's
     * error for as long as the file is open.  A reader of the failed run
     * may still hold one, so each lives until the close. */
    ckpt__hf_stream **retired;
    size_t retired_count, retired_cap;
    pthread_mutex_t lock;
    char *cache, *repo, *commit, *path, *ref;
    char sha256[65];
    ckpt__source_options options;
    uint64_t ranged; /* bytes past the first ones read by ranges (atomic) */
} hf_remote;

static void hf_remote_free(hf_remote *h) {
    if (!h) return;
    ckpt__hf_stream_free(h->stream); /* before the remote file its download reads */
    for (size_t i = 0; i < h->retired_count; i++) ckpt__hf_stream_free(h->retired[i]);
    free(h->retired);
    ckpt__source_close(h->remote);
    ckpt__source_close(h->local);
    pthread_mutex_destroy(&h->lock);
    free(h->cache);
    free(h->repo);
    free(h->commit);
    free(h->path);
    free(h->ref);
    free(h);
}

/* The blob in the cache, `fd` (taken), as the source of every later read.
 * Under h->lock. */
static ckpt_status adopt_blob(ckpt__source *src, hf_remote *h, int fd, ckpt_error *err) {
    ckpt__source *local = NULL;
    ckpt_status st = ckpt__file_source_adopt(src->name, fd, src->size, &h->options, &local, err);
    if (st == CKPT_OK) __atomic_store_n(&h->local, local, __ATOMIC_RELEASE);
    return st;
}

/* The whole file into the cache now, then read from there (a file the
 * open brought whole, or no thread to stream it on).  Under h->lock. */
static ckpt_status bring(ckpt__source *src, hf_remote *h, ckpt_error *err) {
    ckpt__hf_entry e = {h->cache, h->repo, h->commit, h->path, h->ref, src->name};
    int fd = -1;
    ckpt_status st = ckpt__hf_cache_fill(&e, h->remote, h->sha256[0] ? h->sha256 : NULL, NULL, &fd, err);
    return st ? st : adopt_blob(src, h, fd, err);
}

/* The file's download, started by the first read of data (*stream), or
 * the blob (h->local, *stream NULL) when it is in the cache already or
 * was brought now, with no thread to stream it on. */
static ckpt_status download(ckpt__source *src, hf_remote *h, ckpt__hf_stream **stream, ckpt_error *err) {
    pthread_mutex_lock(&h->lock);
    ckpt_status st = CKPT_OK;
    if (!h->stream && !h->local) {
        ckpt__hf_entry e = {h->cache, h->repo, h->commit, h->path, h->ref, src->name};
        __atomic_store_n(&h->stream, ckpt__hf_stream_start(&e, h->remote, h->sha256[0] ? h->sha256 : NULL),
                         __ATOMIC_RELEASE);
        if (!h->stream) st = bring(src, h, err);
    }
    *stream = h->local ? NULL : h->stream;
    pthread_mutex_unlock(&h->lock);
    return st;
}

/* Whether a read goes to the Hub by range: a format's reads of what
 * listing the tensors needs (a header, a GGUF's key-values, a torch file's
 * pickle and ZIP directory) are small, up to 256 KiB each and 4 MiB (and a
 * quarter of the file) in all; a larger read is tensor data, read from the
 * file's download as it streams into the cache — as is every read once
 * the download is under way (no byte is asked of the Hub twice). */
static bool by_range(hf_remote *h, uint64_t size, uint64_t offset, uint64_t n) {
    if (ckpt__remote_in_head(h->remote, offset, n)) return true;
    if (n > RANGE_READ || __atomic_load_n(&h->stream, __ATOMIC_ACQUIRE)) return false;
    uint64_t budget = size / 4 < RANGE_BUDGET ? size / 4 : RANGE_BUDGET;
    uint64_t had = __atomic_fetch_add(&h->ranged, n, __ATOMIC_RELAXED);
    return had + n <= budget;
}

/* Data: from the download as it arrives, or from the blob in the cache. */
static ckpt_status read_data(ckpt__source *src, hf_remote *h, ckpt_source_request *reqs, size_t n, ckpt_error *err) {
    ckpt__hf_stream *stream = NULL;
    ckpt_status st = __atomic_load_n(&h->local, __ATOMIC_ACQUIRE) ? CKPT_OK : download(src, h, &stream, err);
    if (st || stream) return st ? st : ckpt__hf_stream_read(stream, reqs, n, err);
    ckpt__source *local = __atomic_load_n(&h->local, __ATOMIC_ACQUIRE);
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        uint64_t len = reqs[i].need < reqs[i].len ? reqs[i].need : reqs[i].len;
        st = ckpt__source_read(local, reqs[i].dst, len, reqs[i].offset, err);
        if (st) st = ckpt__error_in_tensor(err, st, reqs[i].tensor);
    }
    return st;
}

static ckpt_status hf_read(void *user, void *file, void *dst, uint64_t n, uint64_t offset, ckpt_error *err) {
    (void)user;
    ckpt__source *src = file;
    hf_remote *h = src->impl;
    if (!__atomic_load_n(&h->local, __ATOMIC_ACQUIRE) && by_range(h, src->size, offset, n))
        return ckpt__source_read(h->remote, dst, n, offset, err);
    ckpt_source_request q = {dst, offset, n, n, NULL};
    return read_data(src, h, &q, 1, err);
}

/* The engine's batches: tensor data. */
static ckpt_status hf_read_many(void *user, void *file, ckpt_source_request *reqs, size_t n, ckpt_error *err) {
    (void)user;
    ckpt__source *src = file;
    return read_data(src, src->impl, reqs, n, err);
}

/* A stream that ended without a blob (stopped, or failed) out of the
 * way of the next read, which then starts another; kept until the close
 * (a reader of the failed run may hold it).  Out of memory, it stays,
 * and later reads fail with its error as before. */
static void retire(hf_remote *h, ckpt__hf_stream *stream) {
    pthread_mutex_lock(&h->lock);
    if (h->stream == stream) { /* not retired already by a concurrent settle */
        ckpt__hf_stream **grown = ckpt__grow(h->retired, h->retired_count, &h->retired_cap, sizeof *grown, 4);
        if (grown) {
            h->retired = grown;
            h->retired[h->retired_count++] = stream;
            __atomic_store_n(&h->stream, NULL, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&h->lock);
}

/* The verdict on the bytes served: the download's end (its SHA-256
 * checked, the blob committed), which later reads then read; with `stop`
 * (the load failed), the download stopped instead.  Either way, a stream
 * that gave no blob is retired: a later read downloads again. */
static ckpt_status hf_settle(ckpt__source *src, bool stop, ckpt_error *err) {
    hf_remote *h = src->impl;
    pthread_mutex_lock(&h->lock);
    ckpt__hf_stream *stream = h->local ? NULL : h->stream;
    pthread_mutex_unlock(&h->lock);
    if (!stream) return CKPT_OK;
    if (stop) {
        ckpt__hf_stream_stop(stream);
        retire(h, stream);
        return CKPT_OK;
    }
    int fd;
    ckpt_status st = ckpt__hf_stream_wait(stream, &fd, err);
    if (st) {
        retire(h, stream);
        return st;
    }
    pthread_mutex_lock(&h->lock);
    if (h->local) close(fd);
    else st = adopt_blob(src, h, fd, err);
    pthread_mutex_unlock(&h->lock);
    return st;
}

static void hf_close(void *user, void *file) {
    (void)user;
    ckpt__source *src = file;
    hf_remote_free(src->impl);
    src->impl = NULL;
}

static const ckpt__source_ops hf_ops = {.version = CKPT_SOURCE_OPS_VERSION,
                                        .read = hf_read,
                                        .read_many = hf_read_many,
                                        .close = hf_close};

/* The SHA-256 the API states for the file, if it was asked. */
static void stated_sha256(const char *ep, const hf_name *n, char out[65], char **ref) {
    out[0] = '\0';
    pthread_mutex_lock(&memo_lock);
    hf_info *i = memo_find(ep, n->repo, n->rev);
    for (size_t k = 0; i && k < i->count; k++)
        if (!strcmp(i->files[k].path, n->path)) memcpy(out, i->files[k].sha256, 65);
    if (i && i->ref && ref) *ref = ckpt__strdup(i->ref);
    pthread_mutex_unlock(&memo_lock);
}

/* From the Hub: the first bytes now, the file into the cache at the first
 * read past them (or now, when they are the whole file). */
static ckpt_status open_remote(const char *name, const hf_name *n, const char *ep, const char *cache,
                               const ckpt__source_options *o, ckpt__source **out, ckpt_error *err) {
    ckpt__buf url = {0};
    ckpt__buf_puts(&url, ep);
    ckpt__buf_puts(&url, "/");
    ckpt__buf_puts(&url, n->repo);
    ckpt__buf_puts(&url, "/resolve/");
    ckpt__buf_puts(&url, n->rev);
    ckpt__buf_puts(&url, "/");
    ckpt__url_encode_into(&url, n->path, strlen(n->path), "?#%&+");
    hf_remote *h = ckpt__calloc(1, sizeof *h);
    ckpt__source *src = ckpt__calloc(1, sizeof *src);
    if (url.failed || !h || !src || !(src->name = ckpt__strdup(name))) {
        free(url.data), free(h), free(src);
        return ckpt__oom(err, name, NULL);
    }
    pthread_mutex_init(&h->lock, NULL);
    src->ops = &hf_ops;
    src->file = src;
    src->impl = h;
    src->fd = -1;
    src->caps = CKPT__SRC_REMOTE;
    src->settle = hf_settle;
    h->options = *o;
    h->options.cache_dir = NULL; /* the Hub's cache, not ckpt's */
    h->options.direct = false;
    h->options.head_bytes = HEAD;
    stated_sha256(ep, n, h->sha256, &h->ref);
    h->cache = cache ? ckpt__strdup(cache) : NULL;
    h->repo = ckpt__strdup(n->repo);
    h->commit = ckpt__strdup(n->rev);
    h->path = ckpt__strdup(n->path);
    char *tok = token(o);
    ckpt__remote_auth auth = {.bearer = tok};
    ckpt_status st = !h->cache || !h->repo || !h->commit || !h->path ? ckpt__oom(err, name, NULL)
                     : ckpt__remote_open(name, url.data, &auth, &h->options, &h->remote, err);
    drop_token(tok);
    free(url.data);
    if (st == CKPT_OK) src->size = h->remote->size;
    const char *stated = NULL;
    if (st == CKPT_OK) (void)ckpt__remote_version(h->remote, &stated);
    if (st == CKPT_OK) snprintf(src->sha256, sizeof src->sha256, "%s", h->sha256[0] ? h->sha256 : stated ? stated : "");
    /* Small enough to have come whole: into the cache at once (no request).
     * A cache that cannot be written leaves the reads to those first bytes;
     * but bytes that fail the Hub's SHA-256 are never served: reads of
     * them would come from the first bytes, with no download whose end
     * ckpt__source_settle could ask for the verdict. */
    if (st == CKPT_OK && ckpt__remote_in_head(h->remote, 0, src->size)) {
        ckpt_error brought;
        ckpt_error_clear(&brought);
        pthread_mutex_lock(&h->lock);
        ckpt_status got = bring(src, h, &brought);
        if (got && brought.detail == CKPT_D_CHECKSUM) {
            st = got;
            if (err) *err = brought;
        }
        pthread_mutex_unlock(&h->lock);
    }
    if (st) {
        ckpt__source_close(src);
        return st;
    }
    *out = src;
    return CKPT_OK;
}

/* The SHA-256 a cached file of the snapshot must have (what ckpt verify
 * checks): the API's, when it was asked; else the name of the blob its
 * link leads to, when that is one (an LFS file's blob is named by its
 * SHA-256, the Hub's X-Linked-Etag); else "" (a small file's blob is named
 * by its git blob id: nothing to check it with). */
static void cached_sha256(const char *ep, const hf_name *n, const char *full, char out[65]) {
    stated_sha256(ep, n, out, NULL);
    if (out[0]) return;
    char target[4096];
    ssize_t len = ckpt__io_readlinkat(AT_FDCWD, full, target, sizeof target - 1);
    if (len < 64) return;
    target[len] = '\0';
    const char *blob = strrchr(target, '/');
    blob = blob ? blob + 1 : target;
    if (strlen(blob) == 64 && strspn(blob, "0123456789abcdef") == 64) memcpy(out, blob, 65);
}

/* A file of the repo at a commit: from the snapshot in the cache (no
 * request), else from the Hub. */
static ckpt_status open_file(const char *name, const hf_name *n, const ckpt__source_options *o, ckpt__source **out,
                             ckpt_error *err) {
    char *ep = endpoint(), *cache = hub_cache(o);
    char *snap = cache ? snapshot_dir(cache, n->repo, n->rev) : NULL;
    char *full = snap ? ckpt__path_join(snap, n->path) : NULL;
    ckpt__beneath *b = full ? open_snapshot(snap) : NULL;
    int fd = -1;
    uint64_t size = 0;
    ckpt_status st = !ep ? ckpt__oom(err, name, NULL) : CKPT_OK;
    if (st == CKPT_OK && b && ckpt__beneath_open(b, full, false, &fd, &size, NULL) == CKPT_OK) {
        st = ckpt__file_source_adopt(name, fd, size, o, out, err);
        if (st == CKPT_OK) cached_sha256(ep, n, full, (*out)->sha256);
    } else if (st == CKPT_OK && offline()) {
        st = ckpt__fail(err, CKPT_E_NOT_FOUND, name, NULL, -1,
                        "HF_HUB_OFFLINE is set, and the Hub's cache %s has no %s of %s at %s",
                        cache ? cache : "(no home directory)", n->path, n->repo, n->rev);
    } else if (st == CKPT_OK && !cache) {
        st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1,
                        "no Hub cache: set HF_HUB_CACHE or HF_HOME (no home directory to keep it in)");
    } else if (st == CKPT_OK) {
        st = open_remote(name, n, ep, cache, o, out, err);
    }
    ckpt__beneath_close(b);
    free(full);
    free(snap);
    free(cache);
    free(ep);
    return st;
}

/* ---- the kind ---------------------------------------------------------------------------------- */

static bool hf_claims(const char *name) { return !strncmp(name, "hf://", 5); }

/* A name and its commit: pinned first when it names a branch (one request). */
static ckpt_status parse_pinned(const char *name, const ckpt__source_options *o, hf_name *n, ckpt_error *err) {
    ckpt_status st = parse_name(name, n, err);
    if (st || is_commit(n->rev)) return st;
    char commit[41];
    st = resolve(name, n, o, commit, err);
    char *c = st == CKPT_OK ? ckpt__strdup(commit) : NULL;
    if (st == CKPT_OK && !c) st = ckpt__oom(err, name, NULL);
    if (st) {
        name_free(n);
        return st;
    }
    free(n->rev);
    n->rev = c;
    return CKPT_OK;
}

static ckpt_status hf_open(const char *name, const ckpt__source_options *o, ckpt__source **out, ckpt_error *err) {
    *out = NULL;
    hf_name n;
    ckpt_status st = parse_pinned(name, o, &n, err);
    if (st) return st;
    if (!*n.path) st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1, "names a repo, not a file of it");
    else st = open_file(name, &n, o, out, err);
    name_free(&n);
    return st;
}

static ckpt__name_kind hf_stat(const char *name, const ckpt__source_options *o) {
    hf_name n;
    if (parse_pinned(name, o, &n, NULL) != CKPT_OK) return CKPT__NAME_FILE; /* opening it says why */
    ckpt_source_kind k = CKPT_SOURCE_MISSING;
    (void)folder_walk(name, &n, o, "", n.path, &k, NULL, NULL, NULL);
    name_free(&n);
    return k == CKPT_SOURCE_FILE ? CKPT__NAME_FILE : k == CKPT_SOURCE_DIRECTORY ? CKPT__NAME_DIR : CKPT__NAME_MISSING;
}

/* The names directly in a folder of the repo (the kind's list: the
 * catalog lists a repo as it lists a local directory). */
static ckpt_status hf_list(const char *dir, const ckpt__source_options *o, int (*add)(void *ctx, const char *name),
                           void *ctx, ckpt_error *err) {
    hf_name n;
    ckpt_status st = parse_pinned(dir, o, &n, err);
    if (st) return st;
    st = folder_walk(dir, &n, o, n.path, NULL, NULL, add, ctx, err);
    name_free(&n);
    return st;
}

const ckpt__source_kind ckpt__hf_kind = {"hf", hf_claims, hf_open, hf_stat, hf_pin, hf_list};
