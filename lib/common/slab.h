/* Fixed-size object pool: objects are carved from large zeroed slabs and
 * recycled through a free list, so the I/O path never mallocs once the pool
 * has grown to its working set. Memory goes back only at zl_slab_fini.
 * Not thread-safe: one owner (a loop thread). */
#ifndef ZL_SLAB_H
#define ZL_SLAB_H

#include <stddef.h>
#include <stdint.h>

struct zl_slab {
	size_t obj_size;   /* bytes per object (>= sizeof(void *)) */
	uint32_t per_slab; /* objects carved per slab */
	void *free;	   /* free list, linked through each object's first bytes */
	void **slabs;
	uint32_t n_slabs;
	uint32_t in_use; /* objects handed out and not yet freed */
};

/* Prepares an empty pool of objects of obj_size bytes (rounded up to hold a
 * pointer), grown per_slab objects at a time (0 means 128). Allocates
 * nothing. */
void zl_slab_init(struct zl_slab *s, size_t obj_size, uint32_t per_slab);
/* Frees every slab; objects still in use become invalid. Safe on a pool that
 * was only initialised, and twice. */
void zl_slab_fini(struct zl_slab *s);
/* An object: its contents are NOT cleared (callers reset what they use).
 * NULL when a new slab is needed and memory is out. */
void *zl_slab_alloc(struct zl_slab *s);
/* Returns obj (from this pool) to the free list. Accepts NULL. */
void zl_slab_free(struct zl_slab *s, void *obj);

#endif
