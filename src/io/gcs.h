/*
 * gcs.h — Google Cloud Storage's OAuth 2.0 tokens (gcs_auth.c), for the
 * gs:// kind (gcs_source.c).  Depends on base, http.h and objstore.h.
 */
#ifndef CKPT_IO_GCS_H
#define CKPT_IO_GCS_H

#include "objstore.h"

/* An access token of Application Default Credentials (gcs_auth.c says
 * where from), malloc'ed into *token; *token NULL when none are set up
 * (requests go anonymous).  Failing to get one that is set up is an error
 * naming `shown`, the credentials' origin and the token endpoint's answer. */
CKPT__HIDDEN ckpt_status ckpt__gcs_token(const char *shown, const ckpt__source_options *o, char **token,
                                         ckpt_error *err);

#endif
