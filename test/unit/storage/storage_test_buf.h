/* The chunk store's buffer allocator in the storage unit tests: 4 KiB
 * aligned heap buffers (the daemon uses its transport's pool). */
#ifndef ZL_STORAGE_TEST_BUF_H
#define ZL_STORAGE_TEST_BUF_H

#include <stdlib.h>

#include "lib/common/common.h"

static inline void *t_alloc(void *arg, size_t len)
{
	void *p = NULL;

	(void)arg;
	return posix_memalign(&p, 4096, ZL_ALIGN_UP(len, 4096)) ? NULL : p;
}

static inline void t_free(void *arg, void *p)
{
	(void)arg;
	free(p);
}

#endif
