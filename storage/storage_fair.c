/* Fair share of the disk per volume; see storage_fair.h.
 *
 * Volumes map to a fixed table of flows (hash of the volume number): two
 * volumes that share a flow share one share, nothing is allocated per
 * volume or per operation. Contention is noticed without a scan: it starts
 * when an operation comes from another flow than the previous one and lasts
 * window_ms after the last such change, so a volume alone on the daemon is
 * never bounded and two volumes that alternate are.
 *
 * Item states:
 *   FAIR_IDLE      not counted (before admission, or its operation ended)
 *   FAIR_QUEUED    in its flow's FIFO, waiting for the flow's share
 *   FAIR_ADMITTED  its bytes count in the flow's share until done
 * A flow's FIFO keeps the order of its operations: an operation is admitted
 * at once only when nothing of its flow waits (REPL_WRITEs of a chunk, and
 * the data versions a primary numbers at submission, keep their order). */
#include "storage_fair.h"

#include <errno.h>
#include <stdlib.h>

#include "lib/common/common.h"

#define FAIR_FLOWS 256u

enum fair_state {
	FAIR_IDLE = 0,
	FAIR_QUEUED,
	FAIR_ADMITTED,
};

struct fair_flow {
	struct zl_storage_fair_item *head, *tail;
	uint64_t bytes; /* admitted, not yet done */
	uint32_t ops;
	bool draining; /* fair_flow_drain runs (a run() may end an operation) */
};

struct zl_storage_fair {
	struct zl_storage_fair_opts o;
	zl_storage_fair_run_fn run;
	void *arg;
	uint32_t last_flow;   /* flow of the previous admission request */
	uint64_t mixed_until; /* contended until then (ns) */
	struct zl_storage_fair_stats st;
	struct fair_flow flows[FAIR_FLOWS];
};

void zl_storage_fair_opts_default(struct zl_storage_fair_opts *o)
{
	o->on = true;
	o->share_bytes = 256u << 10;
	o->window_ms = 100;
}

int zl_storage_fair_create(const struct zl_storage_fair_opts *o, zl_storage_fair_run_fn run,
			   void *arg, struct zl_storage_fair **out)
{
	struct zl_storage_fair *f = calloc(1, sizeof(*f));

	if (!f)
		return -ENOMEM;
	f->o = *o;
	f->run = run;
	f->arg = arg;
	f->last_flow = UINT32_MAX;
	*out = f;
	return 0;
}

void zl_storage_fair_destroy(struct zl_storage_fair *f)
{
	free(f);
}

/* Whether an operation of `bytes` on fl fits its share now. */
static bool fair_flow_fits(const struct zl_storage_fair *f, const struct fair_flow *fl,
			   uint32_t bytes, uint64_t now_ns)
{
	return now_ns >= f->mixed_until || !fl->ops || fl->bytes + bytes <= f->o.share_bytes;
}

static void fair_admit(struct zl_storage_fair *f, struct fair_flow *fl,
		       struct zl_storage_fair_item *it)
{
	it->state = FAIR_ADMITTED;
	fl->ops++;
	fl->bytes += it->bytes;
	f->st.inflight++;
}

bool zl_storage_fair_admit(struct zl_storage_fair *f, struct zl_storage_fair_item *it,
			   uint64_t vol_hash, uint32_t bytes, uint64_t now_ns)
{
	uint32_t idx = (uint32_t)(vol_hash & (FAIR_FLOWS - 1));
	struct fair_flow *fl = &f->flows[idx];

	if (!f->o.on)
		return true;
	if (idx != f->last_flow) {
		if (f->last_flow != UINT32_MAX)
			f->mixed_until = now_ns + (uint64_t)f->o.window_ms * 1000000u;
		f->last_flow = idx;
	}
	it->flow = (uint16_t)idx;
	it->bytes = bytes;
	it->next = NULL;
	if (!fl->head && fair_flow_fits(f, fl, bytes, now_ns)) {
		fair_admit(f, fl, it);
		return true;
	}
	it->state = FAIR_QUEUED;
	if (fl->tail)
		fl->tail->next = it;
	else
		fl->head = it;
	fl->tail = it;
	f->st.queued++;
	f->st.waiting++;
	return false;
}

/* Admits fl's queued operations that fit, in order. */
static void fair_flow_drain(struct zl_storage_fair *f, struct fair_flow *fl)
{
	uint64_t now = 0;

	fl->draining = true;
	while (fl->head) {
		struct zl_storage_fair_item *it = fl->head;

		if (!now)
			now = zl_now_ns();
		if (!fair_flow_fits(f, fl, it->bytes, now))
			break;
		fl->head = it->next;
		if (!fl->head)
			fl->tail = NULL;
		it->next = NULL;
		f->st.waiting--;
		fair_admit(f, fl, it);
		f->run(f->arg, it);
	}
	fl->draining = false;
}

void zl_storage_fair_done(struct zl_storage_fair *f, struct zl_storage_fair_item *it)
{
	struct fair_flow *fl;

	if (it->state != FAIR_ADMITTED)
		return;
	fl = &f->flows[it->flow];
	it->state = FAIR_IDLE;
	fl->ops--;
	fl->bytes -= it->bytes;
	f->st.inflight--;
	if (fl->head && !fl->draining)
		fair_flow_drain(f, fl);
}

void zl_storage_fair_stats(const struct zl_storage_fair *f, struct zl_storage_fair_stats *out)
{
	*out = f->st;
}
