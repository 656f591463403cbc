/*
 * gcs_auth.c — OAuth 2.0 access tokens for Google Cloud Storage, found as
 * Google's client libraries find Application Default Credentials:
 *
 *   1. $GOOGLE_APPLICATION_CREDENTIALS, else gcloud's
 *      application_default_credentials.json ($CLOUDSDK_CONFIG, else
 *      ~/.config/gcloud): a service account's key file — a JWT signed with
 *      its private key (RS256, OpenSSL's libcrypto, which libcurl already
 *      brings into the process) exchanged at its token_uri — or an
 *      authorized user's refresh token, exchanged there too;
 *   2. the metadata server of a Google Cloud machine: $GCE_METADATA_HOST,
 *      or metadata.google.internal where the machine's DMI product name
 *      says Google, asked with "Metadata-Flavor: Google".
 *
 * A token is kept for the process until a minute before it expires (half
 * its life, for one shorter than two minutes), so that a directory of
 * shards asks once; every request of a long load asks for it again
 * (ckpt__remote_auth.refresh), so that one past that point gets a fresh
 * one, and a request refused with 401 is tried once more with a fresh one.  Depends on base, http.h and
 * objstore.h.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef CKPT_HAVE_CRYPTO
#include <openssl/evp.h>
#include <openssl/pem.h>
#endif

#include "../base/base64.h"
#include "../base/fault.h"
#include "../base/json.h"
#include "gcs.h"

#define FILE_LIMIT (64u << 10)
#define READ_ONLY_SCOPE "https://www.googleapis.com/auth/devstorage.read_only"
#define DEFAULT_TOKEN_URI "https://oauth2.googleapis.com/token"

/* A small regular file's bytes (malloc'ed, NUL-terminated), or NULL. */
static char *read_small(const char *path, size_t *len) {
    int fd = ckpt__io_open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat sb;
    char *t = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size < FILE_LIMIT ? ckpt__malloc(FILE_LIMIT) : NULL;
    ssize_t n = t ? ckpt__io_pread(fd, t, FILE_LIMIT - 1, 0) : -1;
    close(fd);
    if (n < 0) {
        free(t);
        return NULL;
    }
    t[n] = '\0';
    *len = (size_t)n;
    return t;
}

/* ---- the process's token ---------------------------------------------------------- */

static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static char *kept_for, *kept_token; /* where it came from, and the token */
static time_t kept_until;

static pthread_mutex_t fetch_lock = PTHREAD_MUTEX_INITIALIZER; /* one token request at a time */

/* Forgets the kept token if it is `stale` (the server refused it). */
static void forget(const char *origin, const char *stale) {
    pthread_mutex_lock(&kept_lock);
    if (kept_for && !strcmp(kept_for, origin) && kept_token && !strcmp(kept_token, stale)) kept_until = 0;
    pthread_mutex_unlock(&kept_lock);
}

static char *kept(const char *origin) {
    pthread_mutex_lock(&kept_lock);
    char *t = kept_for && !strcmp(kept_for, origin) && time(NULL) < kept_until ? ckpt__strdup(kept_token) : NULL;
    pthread_mutex_unlock(&kept_lock);
    return t;
}

static void keep(const char *origin, const char *token, uint64_t seconds) {
    pthread_mutex_lock(&kept_lock);
    if (kept_token) memset(kept_token, 0, strlen(kept_token));
    free(kept_token);
    free(kept_for);
    kept_for = ckpt__strdup(origin);
    kept_token = ckpt__strdup(token);
    kept_until = time(NULL) + (time_t)(seconds > 120 ? seconds - 60 : seconds / 2);
    pthread_mutex_unlock(&kept_lock);
}

/* ---- a token endpoint's answer ------------------------------------------------------ */

/* The access_token and expires_in of a token endpoint's JSON answer; else
 * an error naming `shown` and `what` with the endpoint's error. */
static ckpt_status take_token(const char *shown, const char *what, const ckpt__remote_reply *reply, ckpt__buf *body,
                              const char *origin, char **token, ckpt_error *err) {
    ckpt__json_doc doc = {0};
    size_t at;
    const char *why;
    bool json = body->data && ckpt__json_parse(body->data, body->len, &doc, &at, &why) == CKPT_OK &&
                doc.nodes[0].kind == CKPT__JSON_OBJECT;
    uint32_t tok = json ? ckpt__json_member(&doc, 0, "access_token") : 0;
    uint32_t exp = json ? ckpt__json_member(&doc, 0, "expires_in") : 0;
    uint32_t e = json ? ckpt__json_member(&doc, 0, "error") : 0;
    uint32_t d = json ? ckpt__json_member(&doc, 0, "error_description") : 0;
    ckpt_status st;
    uint64_t seconds = 0;
    if (reply->status == 200 && tok && doc.nodes[tok].kind == CKPT__JSON_STRING && doc.nodes[tok].len) {
        if (!exp || !ckpt__json_u64(&doc.nodes[exp], &seconds)) seconds = 300;
        *token = ckpt__strdup(doc.nodes[tok].str);
        st = *token ? CKPT_OK : ckpt__oom(err, shown, NULL);
        if (*token) keep(origin, *token, seconds);
    } else {
        const char *code = e && doc.nodes[e].kind == CKPT__JSON_STRING ? doc.nodes[e].str : "";
        const char *desc = d && doc.nodes[d].kind == CKPT__JSON_STRING ? doc.nodes[d].str : "";
        long s = reply->status;
        st = ckpt__fail(err, s == 400 || s == 401 || s == 403 ? CKPT__D(HTTP_AUTH) : CKPT__D(HTTP_STATUS), shown, NULL,
                        -1, "no access token from %s: HTTP %ld%s%s%s%s", what, s, code[0] ? ": " : "", code,
                        desc[0] ? ": " : "", desc);
    }
    if (json || doc.nodes) ckpt__json_free(&doc);
    return st;
}

/* ---- a key file --------------------------------------------------------------------- */

/* A string member of the key file's object, or NULL. */
static const char *member(const ckpt__json_doc *doc, const char *key) {
    uint32_t i = ckpt__json_member(doc, 0, key);
    return i && doc->nodes[i].kind == CKPT__JSON_STRING && doc->nodes[i].len ? doc->nodes[i].str : NULL;
}

/* Appends `s` form-encoded (every byte but the unreserved as %XX). */
static void form_value(ckpt__buf *b, const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("-._~", c)) {
            ckpt__buf_append(b, s, 1);
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            ckpt__buf_append(b, e, 3);
        }
    }
}

#ifdef CKPT_HAVE_CRYPTO
/* RS256: the PKCS #1 v1.5 signature of SHA-256(`data`) with the PEM key,
 * appended Base64url; false when the key cannot be read or sign. */
static bool rs256(const char *pem, const char *data, size_t n, ckpt__buf *out) {
    BIO *bio = BIO_new_mem_buf(pem, -1);
    EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    EVP_MD_CTX *md = key ? EVP_MD_CTX_new() : NULL;
    unsigned char sig[1024];
    size_t sig_len = sizeof sig;
    bool ok = md && EVP_PKEY_base_id(key) == EVP_PKEY_RSA &&
              EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key) == 1 &&
              EVP_DigestSign(md, sig, &sig_len, (const unsigned char *)data, n) == 1;
    if (ok) ckpt__base64_encode(out, sig, sig_len, true);
    EVP_MD_CTX_free(md);
    EVP_PKEY_free(key);
    BIO_free(bio);
    return ok && !out->failed;
}
#endif

/* The JWT a service account asserts itself with (RFC 7523): its header
 * and claims, Base64url, signed with its private key. */
static ckpt_status service_account_form(const char *shown, const char *path, const ckpt__json_doc *doc,
                                        const char *token_uri, ckpt__buf *form, ckpt_error *err) {
    const char *email = member(doc, "client_email"), *pem = member(doc, "private_key");
    if (!email || !pem)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, shown, NULL, -1,
                          "the service account key file %s has no client_email or private_key", path);
#ifdef CKPT_HAVE_CRYPTO
    const char *kid = member(doc, "private_key_id");
    ckpt__buf head = {0}, claims = {0}, jwt = {0};
    ckpt__buf_puts(&head, "{\"alg\":\"RS256\",\"typ\":\"JWT\"");
    if (kid) ckpt__buf_puts(&head, ",\"kid\":"), ckpt__buf_json_string(&head, kid);
    ckpt__buf_puts(&head, "}");
    long long now = (long long)time(NULL);
    char times[96];
    snprintf(times, sizeof times, ",\"iat\":%lld,\"exp\":%lld}", now, now + 3600);
    ckpt__buf_puts(&claims, "{\"iss\":");
    ckpt__buf_json_string(&claims, email);
    ckpt__buf_puts(&claims, ",\"scope\":\"" READ_ONLY_SCOPE "\",\"aud\":");
    ckpt__buf_json_string(&claims, token_uri);
    ckpt__buf_puts(&claims, times);
    ckpt__base64_encode(&jwt, head.data, head.len, true);
    ckpt__buf_puts(&jwt, ".");
    ckpt__base64_encode(&jwt, claims.data, claims.len, true);
    bool ok = !head.failed && !claims.failed && !jwt.failed;
    size_t signed_len = jwt.len;
    ckpt__buf_puts(&jwt, ".");
    bool signed_ok = ok && rs256(pem, jwt.data, signed_len, &jwt);
    free(head.data);
    free(claims.data);
    ckpt_status st = CKPT_OK;
    if (!ok || jwt.failed) st = ckpt__oom(err, shown, NULL);
    else if (!signed_ok)
        st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, shown, NULL, -1,
                        "the private_key of the service account key file %s is not an RSA key in PEM", path);
    else {
        ckpt__buf_puts(form, "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=");
        ckpt__buf_puts(form, jwt.data);
    }
    free(jwt.data);
    return st;
#else
    (void)token_uri, (void)form;
    return ckpt__fail(err, CKPT__D(UNSUPPORTED_SOURCE), shown, NULL, -1,
                      "this libckpt was built without OpenSSL's libcrypto, which signs the service account's "
                      "token request (%s); use HMAC keys (GS_ACCESS_KEY_ID, GS_SECRET_ACCESS_KEY) or the "
                      "metadata server instead, or rebuild with libssl-dev installed", path);
#endif
}

/* An authorized user's refresh token (gcloud auth application-default login). */
static ckpt_status authorized_user_form(const char *shown, const char *path, const ckpt__json_doc *doc,
                                        ckpt__buf *form, ckpt_error *err) {
    const char *id = member(doc, "client_id"), *secret = member(doc, "client_secret");
    const char *refresh = member(doc, "refresh_token");
    if (!id || !secret || !refresh)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, shown, NULL, -1,
                          "the credentials file %s has no client_id, client_secret or refresh_token", path);
    ckpt__buf_puts(form, "grant_type=refresh_token&client_id=");
    form_value(form, id);
    ckpt__buf_puts(form, "&client_secret=");
    form_value(form, secret);
    ckpt__buf_puts(form, "&refresh_token=");
    form_value(form, refresh);
    return form->failed ? ckpt__oom(err, shown, NULL) : CKPT_OK;
}

/* A token from the credentials file at `path`. */
static ckpt_status file_token(const char *shown, const char *path, const ckpt__source_options *o, char **token,
                              ckpt_error *err) {
    size_t len = 0;
    char *text = read_small(path, &len);
    if (!text)
        return ckpt__fail(err, CKPT_E_NOT_FOUND, shown, NULL, -1,
                          "cannot read the Google credentials file %s (GOOGLE_APPLICATION_CREDENTIALS)", path);
    ckpt__json_doc doc = {0};
    size_t at;
    const char *why;
    ckpt_status st = CKPT_OK;
    if (ckpt__json_parse(text, len, &doc, &at, &why) != CKPT_OK || doc.nodes[0].kind != CKPT__JSON_OBJECT) {
        if (doc.nodes) ckpt__json_free(&doc);
        memset(text, 0, len);
        free(text);
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, shown, NULL, -1,
                          "the Google credentials file %s is not a JSON object", path);
    }
    const char *type = member(&doc, "type");
    const char *uri = member(&doc, "token_uri");
    if (!uri) uri = DEFAULT_TOKEN_URI;
    ckpt__buf form = {0};
    if (type && !strcmp(type, "service_account")) st = service_account_form(shown, path, &doc, uri, &form, err);
    else if (type && !strcmp(type, "authorized_user")) st = authorized_user_form(shown, path, &doc, &form, err);
    else
        st = ckpt__fail(err, CKPT_E_UNSUPPORTED, shown, NULL, -1,
                        "the Google credentials file %s is of type '%s': ckpt takes a service_account key or an "
                        "authorized_user's (gcloud auth application-default login)",
                        path, type ? type : "(none)");
    if (st == CKPT_OK) {
        ckpt__remote_auth none = {0};
        ckpt__remote_reply reply;
        ckpt__buf body = {0};
        char *uri_copy = ckpt__strdup(uri);
        st = uri_copy ? ckpt__remote_request(shown, uri_copy, &none, form.data, o, 1u << 20, &body, &reply, err)
                      : ckpt__oom(err, shown, NULL);
        char what[1200];
        snprintf(what, sizeof what, "%s (the token_uri of %s)", uri, path);
        if (st == CKPT_OK) st = take_token(shown, what, &reply, &body, path, token, err);
        free(uri_copy);
        free(body.data);
    }
    if (form.data) memset(form.data, 0, form.len), free(form.data);
    ckpt__json_free(&doc);
    memset(text, 0, len);
    free(text);
    return st;
}

/* ---- the metadata server ------------------------------------------------------------ */

/* Whether this machine is a Google Cloud one: its DMI product name. */
static bool on_google_cloud(void) {
    size_t len = 0;
    char *name = read_small("/sys/class/dmi/id/product_name", &len);
    bool google = name && !strncmp(name, "Google", 6);
    free(name);
    return google;
}

static ckpt_status metadata_token(const char *shown, const char *host, const ckpt__source_options *o, char **token,
                                  ckpt_error *err) {
    ckpt__buf url = {0}, body = {0};
    if (strncmp(host, "http://", 7) && strncmp(host, "https://", 8)) ckpt__buf_puts(&url, "http://");
    ckpt__buf_puts(&url, host);
    ckpt__buf_puts(&url, "/computeMetadata/v1/instance/service-accounts/default/token");
    static const char *const flavor[] = {"Metadata-Flavor: Google", NULL};
    ckpt__remote_auth auth = {.headers = flavor, .store = "the metadata server"};
    ckpt__remote_reply reply;
    ckpt__source_options quick = *o;
    if (!quick.connect_timeout_ms) quick.connect_timeout_ms = 3000; /* as google-auth waits for it */
    ckpt_status st = url.failed ? ckpt__oom(err, shown, NULL)
                                : ckpt__remote_request(shown, url.data, &auth, NULL, &quick, 1u << 20, &body, &reply, err);
    char what[600];
    snprintf(what, sizeof what, "the metadata server %s", host);
    if (st == CKPT_OK) st = take_token(shown, what, &reply, &body, host, token, err);
    free(url.data);
    free(body.data);
    return st;
}

/* ---- which ---------------------------------------------------------------------------- */

/* The credentials file Application Default Credentials name, if any
 * (malloc'ed): $GOOGLE_APPLICATION_CREDENTIALS, else gcloud's, if it exists. */
static char *credentials_file(void) {
    const char *set = ckpt__env("GOOGLE_APPLICATION_CREDENTIALS");
    if (set) return ckpt__strdup(set);
    ckpt__buf p = {0};
    const char *config = ckpt__env("CLOUDSDK_CONFIG"), *home = ckpt__env("HOME");
    if (config) ckpt__buf_puts(&p, config);
    else if (home) ckpt__buf_puts(&p, home), ckpt__buf_puts(&p, "/.config/gcloud");
    else return NULL;
    ckpt__buf_puts(&p, "/application_default_credentials.json");
    int fd = p.failed ? -1 : ckpt__io_open(p.data, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        free(p.data);
        return NULL;
    }
    close(fd);
    return p.data;
}

/* An origin names its kind first: "file PATH" or "metadata HOST". */
#define FILE_ORIGIN "file "
#define METADATA_ORIGIN "metadata "

char *ckpt__gcs_token_origin(void) {
    char *file = credentials_file();
    const char *host = ckpt__env("GCE_METADATA_HOST");
    if (!file && !host && on_google_cloud()) host = "metadata.google.internal";
    if (!file && !host) return NULL; /* no OAuth: anonymous */
    ckpt__buf b = {0};
    ckpt__buf_puts(&b, file ? FILE_ORIGIN : METADATA_ORIGIN);
    ckpt__buf_puts(&b, file ? file : host);
    free(file);
    return ckpt__buf_text(&b);
}

ckpt_status ckpt__gcs_token_refresh(const char *origin, const char *shown, const ckpt__source_options *o,
                                    const char *stale, char **token, ckpt_error *err) {
    bool file = !strncmp(origin, FILE_ORIGIN, strlen(FILE_ORIGIN));
    const char *where = origin + (file ? strlen(FILE_ORIGIN) : strlen(METADATA_ORIGIN));
    if (stale) forget(where, stale);
    if ((*token = kept(where))) return CKPT_OK;
    pthread_mutex_lock(&fetch_lock);
    ckpt_status st = CKPT_OK;
    if (!(*token = kept(where))) /* unless another request fetched one meanwhile */
        st = file ? file_token(shown, where, o, token, err) : metadata_token(shown, where, o, token, err);
    pthread_mutex_unlock(&fetch_lock);
    return st;
}
