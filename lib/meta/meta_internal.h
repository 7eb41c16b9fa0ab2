/* lib/meta internals shared by its files; not for other modules. */
#ifndef ZL_META_INTERNAL_H
#define ZL_META_INTERNAL_H

#include "meta.h"

/* Upper bound of slices per volume: keeps a record (and a hostile one) small. */
#define ZL_META_MAX_SLICES 65536u
/* Room for "<prefix><kind>/<name>" with the longest name. */
#define ZL_META_KEY_MAX 512

/* Checks every field of a node record; 0 or -ZL_ERR_INVAL. */
int meta_node_check(const struct zl_node_info *n);
/* Checks every field of a volume record (ranges, slice rows, params text);
 * 0 or -ZL_ERR_INVAL. */
int meta_volume_check(const struct zl_volume *v);
/* prefix NULL means ZL_META_DEFAULT_PREFIX. */
const char *meta_prefix(const char *prefix);

#endif
