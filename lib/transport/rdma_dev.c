/* RDMA transport, devices and memory. The message format, the handshake and
 * the credit rule are described in rdma_internal.h.
 *
 * Memory: one protection domain per device for the whole process (refcounted
 * device cache, rdma_dev_get/put) and, per transport and device, one memory
 * registration per buffer-pool region (struct rdma_xdev), made when the
 * region appears or the device is first used, never per I/O. Every buffer the
 * transport posts (message slots, receive buffers, bounce buffers) comes from
 * the pool, so one lkey lookup serves everything. The registrations are local
 * only (RDMA_MR_ACCESS: LOCAL_WRITE | MW_BIND): no peer can read or write
 * anything through them, whatever rkey it guesses; a server connection never
 * exposes memory at all.
 *
 * Exposure of a client buffer (docs/SECURITY.md): each client connection
 * allocates one type 2 memory window per request slot when it is built. A
 * request with a descriptor posts BIND_MW (window = exactly the buffer's
 * bytes, REMOTE_READ for a WRITE's data, REMOTE_WRITE for a READ's
 * destination, rkey key byte incremented so an old rkey never matches) and
 * its SEND in one chain; a type 2 window is usable only through the QP that
 * bound it. The server answers with SEND_WITH_INV of that rkey, so the window
 * is dead when the reply lands (checked: IBV_WC_WITH_INV and the rkey). A
 * reply that did not invalidate (an older server) is held until our own
 * LOCAL_INV completed; on close the windows are deallocated before the QP is
 * destroyed, before any request fails back to its caller. A window is bound
 * to the pool region's registration, or, on a device that checks window
 * accesses against the registration's bounds instead of the window's
 * (rdma_rxe), to a registration of the pool buffer itself, made at the
 * buffer's first use (xport_rdma_bind_mr).
 */
#include "rdma_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static pthread_mutex_t rdma_dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdma_dev *rdma_devs;

/* ---- device cache ---- */

static struct rdma_dev *rdma_dev_get(struct ibv_context *verbs, int *err)
{
	struct rdma_dev *d;

	pthread_mutex_lock(&rdma_dev_lock);
	for (d = rdma_devs; d; d = d->next) {
		if (d->verbs == verbs) {
			d->refs++;
			goto out_unlock;
		}
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		*err = -ENOMEM;
		goto out_unlock;
	}
	if (ibv_query_device(verbs, &d->attr)) {
		*err = errno ? -errno : -EIO;
		goto out_free;
	}
	if (!(d->attr.device_cap_flags &
	      (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) ||
	    d->attr.max_mw <= 0) {
		*err = -EOPNOTSUPP;
		ZL_LOG_ERR("xport",
			   "RDMA device dev=%s has no memory windows of type 2 "
			   "(device_cap_flags=0x%x max_mw=%d); Zipline exposes a client buffer "
			   "to a server only through a window bound for one request "
			   "(docs/SECURITY.md), so it does not use this device: use "
			   "--transport tcp for this node, or a device with memory windows "
			   "(ibv_devinfo -v lists MEM_WINDOW_TYPE_2A or _2B)",
			   ibv_get_device_name(verbs->device), d->attr.device_cap_flags,
			   d->attr.max_mw);
		free(d);
		d = NULL;
		goto out_unlock;
	}
	d->wc_inv = IBV_WC_WITH_INV;
	if (d->attr.vendor_id == RDMA_RXE_VENDOR_ID) {
		d->wc_inv |= IBV_WC_IP_CSUM_OK;
		d->mw_bounds_by_mr = true;
	}
	d->pd = ibv_alloc_pd(verbs);
	if (!d->pd) {
		*err = errno ? -errno : -ENOMEM;
		goto out_free;
	}
	d->verbs = verbs;
	d->refs = 1;
	d->next = rdma_devs;
	rdma_devs = d;
	ZL_LOG_DEBUG("xport", "rdma device opened dev=%s", ibv_get_device_name(verbs->device));
	goto out_unlock;

out_free:
	ZL_LOG_ERR("xport", "cannot open RDMA device dev=%s err=%s",
		   ibv_get_device_name(verbs->device), zl_strerror(*err));
	free(d);
	d = NULL;
out_unlock:
	pthread_mutex_unlock(&rdma_dev_lock);
	return d;
}

static void rdma_dev_put(struct rdma_dev *d)
{
	struct rdma_dev **pp;

	if (!d)
		return;
	pthread_mutex_lock(&rdma_dev_lock);
	if (--d->refs == 0) {
		for (pp = &rdma_devs; *pp; pp = &(*pp)->next) {
			if (*pp == d) {
				*pp = d->next;
				break;
			}
		}
		ibv_dealloc_pd(d->pd);
		free(d);
	}
	pthread_mutex_unlock(&rdma_dev_lock);
}

/* ---- memory registration ---- */

static int rdma_reg_region(struct rdma_xdev *xd, void *base, size_t len)
{
	struct ibv_mr *mr;

	if (xd->n_mrs == xd->cap_mrs) {
		uint32_t cap = xd->cap_mrs ? xd->cap_mrs * 2 : 8;
		struct ibv_mr **n = realloc(xd->mrs, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		xd->mrs = n;
		xd->cap_mrs = cap;
	}
	/* Local access only: remote peers reach a client buffer through a
	 * window bound per request, never through this registration. */
	mr = ibv_reg_mr(xd->dev->pd, base, len, RDMA_MR_ACCESS);
	if (!mr) {
		int rc = errno ? -errno : -ENOMEM;
		struct rlimit rl = {0};

		getrlimit(RLIMIT_MEMLOCK, &rl);
		ZL_LOG_ERR("xport",
			   "cannot register the buffer pool with the RDMA device dev=%s "
			   "bytes=%zu memlock_limit=%llu err=%s; raise the memlock limit "
			   "(ulimit -l, LimitMEMLOCK=, IPC_LOCK capability in a pod) or lower "
			   "pool_bytes",
			   ibv_get_device_name(xd->dev->verbs->device), len,
			   (unsigned long long)rl.rlim_cur, zl_strerror(rc));
		return rc;
	}
	xd->mrs[xd->n_mrs++] = mr;
	return 0;
}

/* Pool callback: a new region is registered with every device in use. */
int xport_rdma_mem_register(void *arg, void *base, size_t len)
{
	struct zl_xport *x = arg;
	struct rdma_xport *tx = x->impl;
	int rc;

	if (!tx)
		return 0;
	for (struct rdma_xdev *xd = tx->xdevs; xd; xd = xd->next) {
		rc = rdma_reg_region(xd, base, len);
		if (rc)
			return rc; /* MRs of other devices stay until fini: harmless */
	}
	return 0;
}

struct ibv_mr *xport_rdma_mr_of(const struct rdma_xdev *xd, const void *p, size_t len)
{
	const uint8_t *a = p;

	for (uint32_t i = 0; i < xd->n_mrs; i++) {
		const uint8_t *b = xd->mrs[i]->addr;

		if (a >= b && a + len <= b + xd->mrs[i]->length)
			return xd->mrs[i];
	}
	return NULL;
}

int xport_rdma_mr_info(struct zl_xport *x, const void *buf, size_t len, uint32_t *rkey,
		       unsigned int *access)
{
	struct rdma_xport *tx = x && x->ops == &xport_rdma_ops ? x->impl : NULL;
	struct ibv_mr *mr = tx && tx->xdevs ? xport_rdma_mr_of(tx->xdevs, buf, len) : NULL;

	if (!mr)
		return -ENOENT;
	*rkey = mr->rkey;
	*access = RDMA_MR_ACCESS;
	return 0;
}

uint64_t xport_rdma_local_invalidates(struct zl_xport *x)
{
	struct rdma_xport *tx = x && x->ops == &xport_rdma_ops ? x->impl : NULL;

	return tx ? tx->n_linv : 0;
}

/* ---- memory windows (client connections) ---- */

static uint32_t rdma_bufmr_slot(const struct rdma_xdev *xd, const uint8_t *base)
{
	uint64_t h = ((uintptr_t)base >> 12) * 0x9e3779b97f4a7c15ull;
	uint32_t i = (uint32_t)(h >> 32) & (xd->cap_bufmrs - 1);

	while (xd->bufmrs[i].base && xd->bufmrs[i].base != base)
		i = (i + 1) & (xd->cap_bufmrs - 1);
	return i;
}

static int rdma_bufmr_grow(struct rdma_xdev *xd)
{
	struct rdma_bufmr *old = xd->bufmrs;
	uint32_t n = xd->cap_bufmrs, cap = n ? n * 2 : 256;

	xd->bufmrs = calloc(cap, sizeof(*xd->bufmrs));
	if (!xd->bufmrs) {
		xd->bufmrs = old;
		return -ENOMEM;
	}
	xd->cap_bufmrs = cap;
	for (uint32_t i = 0; i < n; i++)
		if (old[i].base)
			xd->bufmrs[rdma_bufmr_slot(xd, old[i].base)] = old[i];
	free(old);
	return 0;
}

/* The registration a window over addr..addr+len is bound to: the pool
 * region's, or on a device that bounds windows by their registration
 * (mw_bounds_by_mr) the buffer's own, made once at its first use. */
struct ibv_mr *xport_rdma_bind_mr(struct rdma_xdev *xd, const void *addr, size_t len)
{
	struct zl_xport *x = xd->tx->x;
	struct rdma_bufmr *e;
	uint8_t *start;
	size_t size;

	if (!xd->dev->mw_bounds_by_mr)
		return xport_rdma_mr_of(xd, addr, len);
	if (!xport_pool_buf_span(&x->pool, addr, len, &start, &size))
		return NULL;
	if (2 * (xd->n_bufmrs + 1) > xd->cap_bufmrs && rdma_bufmr_grow(xd))
		return NULL;
	e = &xd->bufmrs[rdma_bufmr_slot(xd, start)];
	if (e->base)
		return e->mr;
	e->mr = ibv_reg_mr(xd->dev->pd, start, size, RDMA_MR_ACCESS);
	if (!e->mr) {
		if (xport_warn_ok(x))
			ZL_LOG_WARN("xport",
				    "cannot register a pool buffer for memory windows dev=%s "
				    "bytes=%zu err=%s; failing the request",
				    ibv_get_device_name(xd->dev->verbs->device), size,
				    zl_strerror(errno ? -errno : -ENOMEM));
		return NULL;
	}
	e->base = start;
	xd->n_bufmrs++;
	return e->mr;
}

void xport_rdma_mw_put(struct rdma_conn *c, struct rdma_mw *m)
{
	m->next = c->mw_free;
	c->mw_free = m;
}

/* n type 2 windows for the connection, allocated once, never per I/O. */
int xport_rdma_mws_init(struct rdma_conn *c, uint32_t n)
{
	c->mws = calloc(n, sizeof(*c->mws));
	if (!c->mws)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct ibv_mw *mw = ibv_alloc_mw(c->xd->dev->pd, IBV_MW_TYPE_2);

		if (!mw) {
			int rc = errno ? -errno : -ENOMEM;

			ZL_LOG_ERR("xport",
				   "cannot allocate RDMA memory windows dev=%s have=%u want=%u "
				   "max_mw=%d err=%s; lower the requests in flight per connection "
				   "or the number of connections",
				   ibv_get_device_name(c->xd->dev->verbs->device), i, n,
				   c->xd->dev->attr.max_mw, zl_strerror(rc));
			return rc;
		}
		c->mws[i].mw = mw;
		c->n_mws = i + 1;
		xport_rdma_mw_put(c, &c->mws[i]);
	}
	return 0;
}

/* Deallocating a window invalidates it (bound or not) and drops its hold on
 * the QP, so this runs before the QP is destroyed. */
void xport_rdma_mws_fini(struct rdma_conn *c)
{
	for (uint32_t i = 0; i < c->n_mws; i++)
		if (ibv_dealloc_mw(c->mws[i].mw))
			ZL_LOG_ERR("xport",
				   "cannot deallocate an RDMA memory window peer=%s err=%s",
				   c->base.peer, zl_strerror(-errno));
	free(c->mws);
	c->mws = NULL;
	c->n_mws = 0;
	c->mw_free = NULL;
}

/* ---- message slabs ---- */

/* Makes at least n buffers available. */
int xport_rdma_slab_grow(struct zl_xport *x, struct rdma_slab *s, uint32_t n)
{
	uint32_t need = (n + RDMA_SLAB_PER_CHUNK - 1) / RDMA_SLAB_PER_CHUNK;
	uint8_t **nc;

	if (need <= s->n_chunks)
		return 0;
	nc = realloc(s->chunks, need * sizeof(*nc));
	if (!nc)
		return -ENOMEM;
	s->chunks = nc;
	while (s->n_chunks < need) {
		nc[s->n_chunks] = zl_xport_buf_alloc(x, RDMA_SLAB_CHUNK);
		if (!nc[s->n_chunks])
			return -ENOMEM;
		s->n_chunks++;
		s->n = s->n_chunks * RDMA_SLAB_PER_CHUNK;
	}
	return 0;
}

void xport_rdma_slab_fini(struct zl_xport *x, struct rdma_slab *s)
{
	for (uint32_t i = 0; i < s->n_chunks; i++)
		zl_xport_buf_free(x, s->chunks[i]);
	free(s->chunks);
	memset(s, 0, sizeof(*s));
}

/* ---- per-transport device state ---- */

static void rdma_xdev_free(struct zl_xport *x, struct rdma_xdev *xd)
{
	if (xd->srq)
		ibv_destroy_srq(xd->srq);
	xport_rdma_slab_fini(x, &xd->srq_slab);
	for (uint32_t i = 0; i < xd->cap_bufmrs; i++)
		if (xd->bufmrs[i].base)
			ibv_dereg_mr(xd->bufmrs[i].mr);
	free(xd->bufmrs);
	for (uint32_t i = 0; i < xd->n_mrs; i++)
		ibv_dereg_mr(xd->mrs[i]);
	free(xd->mrs);
	if (xd->cc_in_loop)
		zl_loop_del(x->loop, &xd->cc_h);
	if (xd->cc)
		ibv_destroy_comp_channel(xd->cc);
	rdma_dev_put(xd->dev);
	free(xd);
}

/* The transport's state for the device of verbs, created on first use (all
 * pool regions get registered then). */
int xport_rdma_xdev_get(struct rdma_xport *tx, struct ibv_context *verbs, struct rdma_xdev **out)
{
	struct zl_xport *x = tx->x;
	struct rdma_xdev *xd;
	int rc = -ENOMEM;

	for (xd = tx->xdevs; xd; xd = xd->next) {
		if (xd->dev->verbs == verbs) {
			*out = xd;
			return 0;
		}
	}
	xd = calloc(1, sizeof(*xd));
	if (!xd)
		return -ENOMEM;
	xd->tx = tx;
	xd->dev = rdma_dev_get(verbs, &rc);
	if (!xd->dev)
		goto out_free;
	for (uint32_t i = 0; i < x->pool.n_regions; i++) {
		rc = rdma_reg_region(xd, x->pool.regions[i].base, x->pool.regions[i].len);
		if (rc)
			goto out_free;
	}
	xd->cc = ibv_create_comp_channel(verbs);
	if (!xd->cc) {
		rc = errno ? -errno : -ENOMEM;
		goto out_free;
	}
	rc = xport_rdma_set_nonblock(xd->cc->fd);
	if (rc)
		goto out_free;
	rc = zl_loop_add(x->loop, &xd->cc_h, xd->cc->fd, EPOLLIN, xport_rdma_cc_cb, xd);
	if (rc)
		goto out_free;
	xd->cc_in_loop = true;
	xd->next = tx->xdevs;
	tx->xdevs = xd;
	*out = xd;
	return 0;

out_free:
	rdma_xdev_free(x, xd);
	return rc;
}

int xport_rdma_srq_post(struct rdma_xdev *xd, uint32_t idx)
{
	struct ibv_mr *mr;
	uint8_t *buf = rdma_slab_at(&xd->srq_slab, idx);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = RDMA_MSG_SIZE};
	struct ibv_recv_wr wr = {.wr_id = RDMA_RECV_BIT | idx, .sg_list = &sge, .num_sge = 1}, *bad;

	mr = xport_rdma_mr_of(xd, buf, RDMA_MSG_SIZE);
	if (!mr)
		return -EFAULT;
	sge.lkey = mr->lkey;
	return ibv_post_srq_recv(xd->srq, &wr, &bad) ? -EIO : 0;
}

/* Makes the SRQ hold receives for `want` credits. */
int xport_rdma_srq_fill(struct zl_xport *x, struct rdma_xdev *xd, uint32_t want)
{
	int rc;

	if (!xd->srq) {
		struct ibv_srq_init_attr a = {0};

		xd->srq_depth = ZL_MIN(RDMA_SRQ_MAX, (uint32_t)xd->dev->attr.max_srq_wr);
		a.attr.max_wr = xd->srq_depth;
		a.attr.max_sge = 1;
		xd->srq = ibv_create_srq(xd->dev->pd, &a);
		if (!xd->srq) {
			rc = errno ? -errno : -ENOMEM;
			ZL_LOG_ERR("xport", "cannot create a shared receive queue dev=%s err=%s",
				   ibv_get_device_name(xd->dev->verbs->device), zl_strerror(rc));
			return rc;
		}
	}
	want = ZL_MIN(want, xd->srq_depth);
	if (xd->srq_posted >= want)
		return 0;
	rc = xport_rdma_slab_grow(x, &xd->srq_slab, want);
	if (rc)
		return rc;
	while (xd->srq_posted < want) {
		/* Buffers are posted in index order and re-posted with their own
		 * index, so indexes below srq_posted are all in use. */
		rc = xport_rdma_srq_post(xd, xd->srq_posted);
		if (rc)
			return rc;
		xd->srq_posted++;
	}
	return 0;
}

/* ---- transport ---- */

/* CAP_IPC_LOCK lifts the memlock limit for verbs registrations. */
static bool rdma_has_ipc_lock(void)
{
	char line[256];
	bool has = false;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long caps;

		if (sscanf(line, "CapEff: %llx", &caps) == 1) {
			has = caps & (1ull << 14);
			break;
		}
	}
	fclose(f);
	return has;
}

int xport_rdma_init(struct zl_xport *x)
{
	struct rdma_xport *tx;
	struct ibv_device **list;
	struct ibv_context **ctxs;
	struct rlimit rl;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (list)
		ibv_free_device_list(list);
	if (!list || n == 0) {
		ZL_LOG_WARN("xport", "no RDMA device found; load the driver (e.g. rdma_rxe for "
				     "Soft-RoCE) or use transport tcp");
		return -ENODEV;
	}
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < x->opts.pool_bytes && !rdma_has_ipc_lock()) {
		ZL_LOG_ERR("xport",
			   "memlock limit too low for the RDMA buffer pool memlock=%llu "
			   "pool_bytes=%llu; raise it (ulimit -l unlimited, LimitMEMLOCK=infinity, "
			   "or the IPC_LOCK capability in a pod) or lower pool_bytes",
			   (unsigned long long)rl.rlim_cur, (unsigned long long)x->opts.pool_bytes);
		return -ENOMEM;
	}
	tx = calloc(1, sizeof(*tx));
	if (!tx)
		return -ENOMEM;
	tx->x = x;
	x->impl = tx;
	zl_loop_add_poller(x->loop, &tx->poller, xport_rdma_poller, tx);
	/* Open every device rdma_cm knows now, so that the pool (registered
	 * right after this, region by region) is pinned at start and the first
	 * connection does not pay for it. */
	ctxs = rdma_get_devices(&n);
	for (int i = 0; ctxs && i < n; i++) {
		struct rdma_xdev *xd;
		int rc = xport_rdma_xdev_get(tx, ctxs[i], &xd);

		if (rc)
			ZL_LOG_WARN("xport", "cannot use RDMA device dev=%s err=%s; skipping it",
				    ibv_get_device_name(ctxs[i]->device), zl_strerror(rc));
	}
	if (ctxs)
		rdma_free_devices(ctxs);
	return 0;
}

void xport_rdma_fini(struct zl_xport *x)
{
	struct rdma_xport *tx = x->impl;

	if (!tx)
		return;
	zl_loop_del_poller(x->loop, &tx->poller);
	while (tx->xdevs) {
		struct rdma_xdev *xd = tx->xdevs;

		tx->xdevs = xd->next;
		rdma_xdev_free(x, xd);
	}
	free(tx);
	x->impl = NULL;
}