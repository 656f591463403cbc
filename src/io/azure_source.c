/*
 * azure_source.c — Azure Blob Storage: az://ACCOUNT/CONTAINER/BLOB and
 * https://ACCOUNT.blob.core.windows.net/CONTAINER/BLOB names, read by the
 * HTTP machinery of http_source.c.
 *
 * Credentials, as the Azure CLI and SDKs name them:
 *   - a SAS token in the name's query (?sv=…&sig=…) — a directory's passes
 *     on to the blobs inside it (the catalog takes it out of the name and
 *     hands it back for them: ckpt__source_options.dir_query) — else
 *     $AZURE_STORAGE_SAS_TOKEN or a connection string's
 *     SharedAccessSignature: sent as the query of every request;
 *   - else SharedKey, the account's key ($AZURE_STORAGE_KEY with
 *     $AZURE_STORAGE_ACCOUNT, or a connection string's AccountName and
 *     AccountKey): every request signed (sign.c);
 *   - else none: anonymous requests, for public containers.
 * The connection string is $AZURE_STORAGE_CONNECTION_STRING (AccountName,
 * AccountKey, SharedAccessSignature, BlobEndpoint, EndpointSuffix,
 * DefaultEndpointsProtocol; UseDevelopmentStorage=true is Azurite's
 * account on 127.0.0.1:10000); without one, $AZURE_STORAGE_ACCOUNT,
 * $AZURE_STORAGE_KEY and $AZURE_STORAGE_SERVICE_ENDPOINT (the Azure CLI's
 * --blob-endpoint).  Credentials from the environment go only
 * to the account they belong to: the connection string's AccountName, or
 * $AZURE_STORAGE_ACCOUNT (a SAS token without either goes to the named
 * account); that account's BlobEndpoint (or service endpoint) replaces
 * https://ACCOUNT.blob.core.windows.net (Azurite's path-style endpoints,
 * http://127.0.0.1:10000/ACCOUNT).  A "directory" (a prefix) is listed
 * with restype=container&comp=list&delimiter=/.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "objstore.h"

#define AZURE_HOST ".blob.core.windows.net"
#define AZURE_VERSION "x-ms-version: 2023-11-03"
#define AZURITE_ACCOUNT "devstoreaccount1"
#define AZURITE_KEY "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#define AZURE_HINT                                                                                                    \
    "a private container needs a SAS token (in the URL, or AZURE_STORAGE_SAS_TOKEN) or the account's key "           \
    "(AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY, or AZURE_STORAGE_CONNECTION_STRING)"

/* The account of an https name on Azure's host, or 0 when it is not one. */
static size_t https_account(const char *name) {
    if (strncmp(name, "https://", 8) != 0) return 0;
    const char *host = name + 8;
    size_t n = strcspn(host, "/?#");
    size_t h = strlen(AZURE_HOST);
    if (n <= h || strncasecmp(host + n - h, AZURE_HOST, h) != 0 || memchr(host, '@', n)) return 0;
    return n - h;
}

static bool azure_claims(const char *name) { return !strncmp(name, "az://", 5) || https_account(name) > 0; }

/* The parts of a name: account, container, blob (pointers into it), query. */
typedef struct az_name {
    const char *account, *container, *blob, *query;
    size_t account_len, container_len, blob_len, query_len;
} az_name;

static bool split_name(const char *name, az_name *n) {
    memset(n, 0, sizeof *n);
    const char *p;
    if (!strncmp(name, "az://", 5)) {
        n->account = name + 5;
        n->account_len = strcspn(n->account, "/?#");
        p = n->account + n->account_len;
    } else {
        n->account = name + 8;
        n->account_len = https_account(name);
        p = n->account + strcspn(n->account, "/?#");
    }
    if (*p == '/') p++;
    n->container = p;
    n->container_len = strcspn(p, "/?#");
    p += n->container_len;
    if (*p == '/') p++;
    n->blob = p;
    n->blob_len = strcspn(p, "?#");
    p += n->blob_len;
    if (*p == '?') {
        n->query = p + 1;
        n->query_len = strcspn(n->query, "#");
    }
    return ckpt__store_plain_name(n->account, n->account_len) &&
           ckpt__store_plain_name(n->container, n->container_len);
}

/* A field of a connection string ("Name=value;…"), malloc'ed, or NULL. */
static char *field(const char *cs, const char *key) {
    size_t k = strlen(key);
    for (const char *p = cs; p && *p;) {
        while (*p == ';' || *p == ' ') p++;
        size_t n = strcspn(p, ";");
        if (n > k && p[k] == '=' && !strncasecmp(p, key, k)) {
            char *v = ckpt__malloc(n - k);
            if (v) memcpy(v, p + k + 1, n - k - 1), v[n - k - 1] = '\0';
            return v;
        }
        p += n;
    }
    return NULL;
}

/* The credentials and endpoint the environment gives (each malloc'ed or NULL). */
typedef struct az_env {
    char *account, *key, *sas, *endpoint, *suffix, *protocol;
} az_env;

static void env_free(az_env *e) {
    char *all[] = {e->account, e->key, e->sas, e->endpoint, e->suffix, e->protocol};
    for (size_t i = 0; i < 6; i++) {
        if (all[i]) memset(all[i], 0, strlen(all[i]));
        free(all[i]);
    }
}

static char *dup_env(const char *name) {
    const char *v = ckpt__env(name);
    return v ? ckpt__strdup(v) : NULL;
}

static void read_env(az_env *e) {
    memset(e, 0, sizeof *e);
    const char *cs = ckpt__env("AZURE_STORAGE_CONNECTION_STRING");
    char *dev = cs ? field(cs, "UseDevelopmentStorage") : NULL;
    if (dev && !strcasecmp(dev, "true")) {
        e->account = ckpt__strdup(AZURITE_ACCOUNT);
        e->key = ckpt__strdup(AZURITE_KEY);
        e->endpoint = ckpt__strdup("http://127.0.0.1:10000/" AZURITE_ACCOUNT);
    } else if (cs) {
        e->account = field(cs, "AccountName");
        e->key = field(cs, "AccountKey");
        e->sas = field(cs, "SharedAccessSignature");
        e->endpoint = field(cs, "BlobEndpoint");
        e->suffix = field(cs, "EndpointSuffix");
        e->protocol = field(cs, "DefaultEndpointsProtocol");
    } else {
        e->account = dup_env("AZURE_STORAGE_ACCOUNT");
        e->key = dup_env("AZURE_STORAGE_KEY");
        e->endpoint = dup_env("AZURE_STORAGE_SERVICE_ENDPOINT"); /* the Azure CLI's --blob-endpoint */
    }
    free(dev);
    if (!e->sas) e->sas = dup_env("AZURE_STORAGE_SAS_TOKEN");
}

/* The URL of the container (ending in '/') of name `n`. */
static void container_url(ckpt__buf *b, const char *name, const az_name *n, const az_env *e, bool ours) {
    const char *endpoint = "";
    if (ours && e->endpoint) {
        endpoint = e->endpoint;
    } else if (!strncmp(name, "https://", 8)) {
        ckpt__buf_append(b, name, 8 + strcspn(name + 8, "/?#"));
    } else {
        ckpt__buf_puts(b, ours && e->protocol && !strcasecmp(e->protocol, "http") ? "http://" : "https://");
        ckpt__buf_append(b, n->account, n->account_len);
        if (ours && e->suffix) ckpt__buf_puts(b, ".blob."), ckpt__buf_puts(b, e->suffix);
        else ckpt__buf_puts(b, AZURE_HOST);
    }
    ckpt__store_base(b, endpoint, n->container, n->container_len);
}

/* The SAS token without its '?', malloc'ed. */
static char *sas_query(const char *s, size_t n) {
    while (n && (*s == '?' || *s == '&')) s++, n--;
    char *q = ckpt__malloc(n + 1);
    if (q) memcpy(q, s, n), q[n] = '\0';
    return q;
}

/* Whether `name` lies in the directory whose name carried a SAS token
 * (the catalog took it out: ckpt__source_take_query). */
static bool in_sas_dir(const char *name, const ckpt__source_options *o) {
    return o->dir_query && o->dir_query_for && !strncmp(name, o->dir_query_for, strlen(o->dir_query_for));
}

/* The target of `name` (errors name `shown`: a SAS token redacted). */
static ckpt_status azure_prepare(const char *name, const char *shown, const ckpt__source_options *o, bool need_blob,
                                 ckpt__store_target *t, const char **key, size_t *key_len, ckpt_error *err) {
    memset(t, 0, sizeof *t);
    az_name parts, *n = &parts;
    if (!split_name(name, n) || (need_blob && !n->blob_len))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, shown, NULL, -1,
                          "an Azure name needs an account, a container and a blob: az://ACCOUNT/CONTAINER/BLOB or "
                          "https://ACCOUNT.blob.core.windows.net/CONTAINER/BLOB");
    az_env e;
    read_env(&e);
    /* The environment's credentials are for its account only. */
    bool ours = e.account ? strlen(e.account) == n->account_len && !strncmp(e.account, n->account, n->account_len)
                          : !e.key;
    ckpt__buf b = {0};
    container_url(&b, name, n, &e, ours);
    t->base = b.data;
    t->auth.store = "Azure";
    t->auth.hint = AZURE_HINT;
    bool ok = !b.failed && ckpt__store_header(t, ckpt__strdup(AZURE_VERSION));
    if (n->query_len) t->query = sas_query(n->query, n->query_len), ok = ok && t->query;
    else if (in_sas_dir(name, o)) t->query = sas_query(o->dir_query, strlen(o->dir_query)), ok = ok && t->query;
    else if (ours && e.sas) t->query = sas_query(e.sas, strlen(e.sas)), ok = ok && t->query;
    else if (ours && e.key && e.account) {
        t->auth.shared_key_account = ckpt__store_own(t, ckpt__strdup(e.account));
        t->auth.shared_key = ckpt__store_own(t, ckpt__strdup(e.key));
        ok = ok && t->auth.shared_key_account && t->auth.shared_key;
    }
    t->auth.signed_url = t->query != NULL;
    char *blob = ok ? ckpt__malloc(n->blob_len + 1) : NULL;
    if (blob) memcpy(blob, n->blob, n->blob_len), blob[n->blob_len] = '\0';
    ok = ok && blob && (t->url = ckpt__store_url(t, blob, NULL));
    free(blob);
    env_free(&e);
    *key = n->blob;
    *key_len = n->blob_len;
    if (!ok) {
        ckpt__store_target_free(t);
        return ckpt__oom(err, shown, NULL);
    }
    return CKPT_OK;
}

CKPT__STORE_KIND(ckpt__azure_kind, "azure", azure_claims, azure_prepare, true,
                 {{"comp=list", "restype=container"}, "marker", "NextMarker", "Name"});
