/*
 * gcs.h — Google Cloud Storage's OAuth 2.0 tokens (gcs_auth.c), for the
 * gs:// kind (gcs_source.c).  Depends on base, http.h and objstore.h.
 */
#ifndef CKPT_IO_GCS_H
#define CKPT_IO_GCS_H

#include "objstore.h"

/* Where the access tokens of Application Default Credentials come from
 * (gcs_auth.c says how it is found: a key file or the metadata server),
 * malloc'ed, for ckpt__gcs_token_refresh; NULL when none are set up
 * (requests go anonymous) or memory ran out. */
CKPT__HIDDEN char *ckpt__gcs_token_origin(void);

/* A token of `origin` (of ckpt__gcs_token_origin), malloc'ed into *token:
 * the one kept, or a fresh one once it is about to expire, or in place of
 * `stale` (a token a request was refused with).  Tokens are fetched one at
 * a time, so that requests refused together ask once.  Failing to get one
 * is an error naming `shown`, the credentials' origin and the token
 * endpoint's answer.  It is the gs:// kind's ckpt__remote_auth.refresh. */
CKPT__HIDDEN ckpt_status ckpt__gcs_token_refresh(const char *origin, const char *shown, const ckpt__source_options *o,
                                                 const char *stale, char **token, ckpt_error *err);

#endif
