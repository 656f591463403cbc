/* sources.c — the registry of source kinds: which one opens a name.  A new
 * kind (HTTP, S3, …) is one file in src/io/ and one line below; what every
 * source shares is in source.c, which the kinds call (never this file). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http.h"
#include "source.h"

#ifndef CKPT_HAVE_CURL
/* Built without libcurl: remote names are still recognised, and refused
 * with a clear error rather than looked for on the disk. */
static bool remote_claims(const char *name) {
    return !strncmp(name, "http://", 7) || !strncmp(name, "https://", 8) || !strncmp(name, "s3://", 5) ||
           !strncmp(name, "hf://", 5) || !strncmp(name, "gs://", 5) || !strncmp(name, "az://", 5);
}
static ckpt_status remote_open(const char *name, const ckpt__source_options *o, ckpt__source **out, ckpt_error *err) {
    (void)o;
    *out = NULL;
    char *shown = ckpt__url_redact(name);
    ckpt_status st = ckpt__fail(err, CKPT__D(UNSUPPORTED_SOURCE), shown ? shown : "(remote)", NULL, -1,
                                "this libckpt was built without libcurl: it reads local files only "
                                "(rebuild with libcurl4-openssl-dev installed for http://, https://, s3://, gs://, az:// and hf://)");
    free(shown);
    return st;
}
static ckpt__name_kind remote_stat(const char *name, const ckpt__source_options *o) {
    (void)o;
    size_t n = strlen(name);
    return n && name[n - 1] == '/' ? CKPT__NAME_DIR : CKPT__NAME_FILE; /* open says why not */
}
static const ckpt__source_kind no_remote_kind = {"remote (unavailable)", remote_claims, remote_open, remote_stat};
#endif

/* Kinds that claim names by scheme come first (Azure's before http's: it
 * takes https names on its host); the file kind takes the rest. */
static const ckpt__source_kind *const kinds[] = {
#ifdef CKPT_HAVE_CURL
    &ckpt__azure_kind,
    &ckpt__http_kind,
    &ckpt__s3_kind,
    &ckpt__gcs_kind,
    &ckpt__hf_kind,
#else
    &no_remote_kind,
#endif
    &ckpt__file_kind,
};

static const ckpt__source_kind *kind_of(const char *name) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i]->claims(name)) return kinds[i];
    return &ckpt__file_kind;
}

ckpt_status ckpt__source_open(const char *name, const ckpt__source_options *o, ckpt__source **out, ckpt_error *err) {
    *out = NULL;
    ckpt__source_options defaults = CKPT__SOURCE_OPTIONS_DEFAULT;
    return kind_of(name)->open(name, o ? o : &defaults, out, err);
}

ckpt__name_kind ckpt__source_stat(const char *name, const ckpt__source_options *o) {
    ckpt__source_options defaults = CKPT__SOURCE_OPTIONS_DEFAULT;
    return kind_of(name)->stat(name, o ? o : &defaults);
}

bool ckpt__source_is_remote_name(const char *name) { return kind_of(name) != &ckpt__file_kind; }

ckpt_status ckpt__source_pin(const char *name, const ckpt__source_options *o, char **pinned, ckpt_error *err) {
    *pinned = NULL;
    const ckpt__source_kind *k = kind_of(name);
    ckpt__source_options defaults = CKPT__SOURCE_OPTIONS_DEFAULT;
    return k->pin ? k->pin(name, o ? o : &defaults, pinned, err) : CKPT_OK;
}

bool ckpt__source_take_query(const char *name, char **clean, char **query) {
    *clean = *query = NULL;
    const char *q = strchr(name, '?');
    if (!kind_of(name)->query_is_credentials || !q) return true;
    *clean = ckpt__strndup(name, (size_t)(q - name));
    *query = ckpt__strndup(q + 1, strcspn(q + 1, "#"));
    if (*clean && *query) return true;
    free(*clean), free(*query);
    *clean = *query = NULL;
    return false;
}

bool ckpt__source_lists(const char *name) { return kind_of(name)->list != NULL; }

ckpt_status ckpt__source_list(const char *name, const ckpt__source_options *o, int (*add)(void *ctx, const char *name),
                              void *ctx, ckpt_error *err) {
    const ckpt__source_kind *k = kind_of(name);
    ckpt__source_options defaults = CKPT__SOURCE_OPTIONS_DEFAULT;
    if (!k->list) return ckpt__fail(err, CKPT_E_NOT_FOUND, name, NULL, -1, "the directory cannot be listed");
    return k->list(name, o ? o : &defaults, add, ctx, err);
}
