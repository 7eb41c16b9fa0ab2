/* Transport buffer pool: 4 KiB aligned buffers in power-of-two size classes,
 * carved from a few large anonymous mappings ("regions"). Freed buffers go to
 * a per-class free list and are reused; memory is never returned to the
 * system, so after warm-up an I/O never reaches mmap or malloc, and the RDMA
 * implementation registers each region exactly once.
 */
#include "transport_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define POOL_MAP_FREE 0x80u

static size_t pool_class_bytes(unsigned cls)
{
	return cls < XPORT_POOL_N_POW2 ? (size_t)XPORT_POOL_PAGE << cls : XPORT_POOL_MAX_BUF;
}

static int pool_class_of(size_t len)
{
	for (unsigned cls = 0; cls < XPORT_POOL_N_CLASSES; cls++)
		if (len <= pool_class_bytes(cls))
			return (int)cls;
	return -1;
}

size_t xport_pool_class_size(size_t len)
{
	int cls = pool_class_of(len);

	return cls < 0 ? 0 : pool_class_bytes((unsigned)cls);
}

/* Region containing addr, or NULL (binary search: regions are sorted). */
static struct xport_pool_region *pool_find(const struct xport_pool *p, const void *addr)
{
	const uint8_t *a = addr;
	uint32_t lo = 0, hi = p->n_regions;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		struct xport_pool_region *r = &p->regions[mid];

		if (a < r->base)
			hi = mid;
		else if (a >= r->base + r->len)
			lo = mid + 1;
		else
			return r;
	}
	return NULL;
}

static void pool_push_free(struct xport_pool *p, struct xport_pool_region *r, uint8_t *buf,
			   unsigned cls)
{
	r->map[(size_t)(buf - r->base) / XPORT_POOL_PAGE] = (uint8_t)((cls + 1) | POOL_MAP_FREE);
	/* A free buffer holds the next one and its region's index (regions
	 * only move to higher indexes as new ones are inserted: the index is
	 * checked, and looked up again when it moved). */
	((void **)buf)[0] = p->free_list[cls];
	((uint32_t *)buf)[2] = (uint32_t)(r - p->regions);
	p->free_list[cls] = buf;
}

/* Hands the unused tail of the current region to the free lists (largest
 * classes first) so that nothing is wasted when a new region starts. */
static void pool_retire_cur(struct xport_pool *p)
{
	struct xport_pool_region *r = p->cur;

	if (!r)
		return;
	for (int cls = XPORT_POOL_N_CLASSES - 1; cls >= 0; cls--) {
		size_t sz = pool_class_bytes((unsigned)cls);

		while (r->len - p->cur_used >= sz) {
			pool_push_free(p, r, r->base + p->cur_used, (unsigned)cls);
			p->cur_used += sz;
		}
	}
	p->cur = NULL;
	p->cur_used = 0;
}

/* Maps a new region of at least len bytes and makes it the current one. */
static int pool_grow(struct xport_pool *p, size_t len)
{
	struct xport_pool_region *r;
	size_t pages;
	uint8_t *base, *map;
	uint32_t pos;
	int rc;

	len = ZL_ALIGN_UP(len, XPORT_POOL_PAGE);
	pages = len / XPORT_POOL_PAGE;
	if (p->n_regions == p->cap_regions) {
		uint32_t cap = p->cap_regions ? p->cap_regions * 2 : 8;
		struct xport_pool_region *nr = realloc(p->regions, cap * sizeof(*nr));

		if (!nr)
			return -ENOMEM;
		/* p->cur points into the old array. */
		if (p->cur)
			p->cur = nr + (p->cur - p->regions);
		p->regions = nr;
		p->cap_regions = cap;
	}
	base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		    -1, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		ZL_LOG_WARN("xport", "pool region mmap failed bytes=%zu err=%s", len,
			    zl_strerror(rc));
		return rc;
	}
	map = calloc(pages, 1);
	if (!map) {
		rc = -ENOMEM;
		goto out_unmap;
	}
	if (p->on_region) {
		rc = p->on_region(p->on_region_arg, base, len);
		if (rc)
			goto out_map;
	}
	pool_retire_cur(p);
	pos = 0;
	while (pos < p->n_regions && p->regions[pos].base < base)
		pos++;
	memmove(&p->regions[pos + 1], &p->regions[pos], (p->n_regions - pos) * sizeof(*r));
	r = &p->regions[pos];
	r->base = base;
	r->len = len;
	r->map = map;
	p->n_regions++;
	p->cur = r;
	p->cur_used = 0;
	p->total_bytes += len;
	return 0;

out_map:
	free(map);
out_unmap:
	munmap(base, len);
	return rc;
}

int xport_pool_init(struct xport_pool *p, uint64_t initial, xport_pool_region_fn on_region,
		    void *arg)
{
	memset(p, 0, sizeof(*p));
	p->on_region = on_region;
	p->on_region_arg = arg;
	if (initial < XPORT_POOL_MAX_BUF)
		initial = XPORT_POOL_MAX_BUF;
	p->grow_bytes = ZL_MAX(initial, XPORT_POOL_MIN_GROW);
	return pool_grow(p, (size_t)initial);
}

void xport_pool_fini(struct xport_pool *p)
{
	for (uint32_t i = 0; i < p->n_regions; i++) {
		munmap(p->regions[i].base, p->regions[i].len);
		free(p->regions[i].map);
	}
	free(p->regions);
	memset(p, 0, sizeof(*p));
}

void *xport_pool_alloc(struct xport_pool *p, size_t len)
{
	int cls = pool_class_of(len);
	size_t sz;
	uint8_t *buf;

	if (cls < 0)
		return NULL;
	sz = pool_class_bytes((unsigned)cls);
	buf = p->free_list[cls];
	if (buf) {
		uint32_t ri = ((uint32_t *)buf)[2];
		struct xport_pool_region *r = ri < p->n_regions ? &p->regions[ri] : NULL;

		if (!r || buf < r->base || buf >= r->base + r->len)
			r = pool_find(p, buf);
		p->free_list[cls] = *(void **)buf;
		r->map[(size_t)(buf - r->base) / XPORT_POOL_PAGE] = (uint8_t)(cls + 1);
		return buf;
	}
	if (!p->cur || p->cur->len - p->cur_used < sz) {
		if (pool_grow(p, ZL_MAX((size_t)p->grow_bytes, sz)))
			return NULL;
	}
	buf = p->cur->base + p->cur_used;
	p->cur_used += sz;
	p->cur->map[(size_t)(buf - p->cur->base) / XPORT_POOL_PAGE] = (uint8_t)(cls + 1);
	return buf;
}

void xport_pool_free(struct xport_pool *p, void *buf)
{
	struct xport_pool_region *r;
	size_t off;
	uint8_t m;

	if (!buf)
		return;
	r = pool_find(p, buf);
	off = r ? (size_t)((uint8_t *)buf - r->base) : 1;
	if (!r || off % XPORT_POOL_PAGE) {
		ZL_LOG_ERR("xport",
			   "buf_free of memory that is not a pool buffer addr=%p; "
			   "buffer ignored (caller bug)",
			   buf);
		return;
	}
	m = r->map[off / XPORT_POOL_PAGE];
	if (m == 0 || (m & POOL_MAP_FREE)) {
		ZL_LOG_ERR("xport", "buf_free of a buffer that is %s addr=%p; ignored (caller bug)",
			   m ? "already free" : "not allocated", buf);
		return;
	}
	pool_push_free(p, r, buf, (unsigned)(m - 1));
}

bool xport_pool_owned(const struct xport_pool *p, const void *buf, size_t len)
{
	const struct xport_pool_region *r = pool_find(p, buf);

	if (!r)
		return false;
	return len <= r->len - (size_t)((const uint8_t *)buf - r->base);
}

bool xport_pool_buf_span(const struct xport_pool *p, const void *addr, size_t len, uint8_t **start,
			 size_t *size)
{
	const struct xport_pool_region *r = pool_find(p, addr);
	size_t page;
	uint8_t m;

	if (!r)
		return false;
	page = (size_t)((const uint8_t *)addr - r->base) / XPORT_POOL_PAGE;
	while (page > 0 && !r->map[page])
		page--;
	m = r->map[page];
	if (!m)
		return false;
	*start = r->base + page * XPORT_POOL_PAGE;
	*size = pool_class_bytes((unsigned)((m & ~POOL_MAP_FREE) - 1));
	return (const uint8_t *)addr + len <= *start + *size;
}
