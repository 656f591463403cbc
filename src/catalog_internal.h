/* catalog_internal.h — what the glue modules (writer, convert) may see of a
 * catalog beyond the public API. */
#ifndef CKPT_CATALOG_INTERNAL_H
#define CKPT_CATALOG_INTERNAL_H

#include "base/base.h"

/* The open descriptor of a catalog's i-th data file. */
CKPT__HIDDEN int ckpt__catalog_fd(const ckpt_catalog *catalog, size_t file);

#endif
