/* Fixed-size object pool (see slab.h). */
#include "slab.h"

#include <stdlib.h>

#define SLAB_DEFAULT_PER 128u

void zl_slab_init(struct zl_slab *s, size_t obj_size, uint32_t per_slab)
{
	size_t a = sizeof(void *);

	s->obj_size = obj_size < a ? a : (obj_size + a - 1) / a * a;
	s->per_slab = per_slab ? per_slab : SLAB_DEFAULT_PER;
	s->free = NULL;
	s->slabs = NULL;
	s->n_slabs = 0;
	s->in_use = 0;
}

void zl_slab_fini(struct zl_slab *s)
{
	for (uint32_t i = 0; i < s->n_slabs; i++)
		free(s->slabs[i]);
	free(s->slabs);
	s->slabs = NULL;
	s->n_slabs = 0;
	s->free = NULL;
	s->in_use = 0;
}

/* Adds one slab and threads its objects onto the free list. 0 or -1. */
static int slab_grow(struct zl_slab *s)
{
	char *slab = calloc(s->per_slab, s->obj_size);
	void **slabs;

	if (!slab)
		return -1;
	slabs = realloc(s->slabs, (s->n_slabs + 1) * sizeof(*slabs));
	if (!slabs) {
		free(slab);
		return -1;
	}
	s->slabs = slabs;
	s->slabs[s->n_slabs++] = slab;
	for (uint32_t i = s->per_slab; i-- > 0;) {
		void **obj = (void **)(slab + (size_t)i * s->obj_size);

		*obj = s->free;
		s->free = obj;
	}
	return 0;
}

void *zl_slab_alloc(struct zl_slab *s)
{
	void **obj;

	if (!s->free && slab_grow(s))
		return NULL;
	obj = s->free;
	s->free = *obj;
	s->in_use++;
	return obj;
}

void zl_slab_free(struct zl_slab *s, void *obj)
{
	if (!obj)
		return;
	*(void **)obj = s->free;
	s->free = obj;
	s->in_use--;
}
