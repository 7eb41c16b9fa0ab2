/* Per-volume client I/O limits (issue 26; docs/ARCHITECTURE.md "Per-volume
 * QoS"): the read and write IOPS and bytes/s of the volume record's
 * qos, enforced on the loop thread before a user I/O is split.
 *
 * Each limit is a token bucket kept as a GCRA (the "virtual scheduling"
 * form of a token bucket): one theoretical arrival time per bucket, tat.
 * An I/O of cost n conforms when tat <= now + tau (tau: the burst, in ns of
 * the rate) and then moves tat to max(tat, now) + n / rate. A bucket is two
 * integers: no lock (one thread), no malloc, and the clock read is the one
 * vol_submit already makes for the I/O's start time — no extra syscall (the
 * monotonic clock is a vDSO call). An I/O bigger than the burst still goes
 * once the bucket is full (tat <= now + tau) and leaves a debt later I/Os
 * wait out, so the average rate holds for any I/O size.
 *
 * An I/O that does not conform waits, in order, in its direction's queue
 * (reads and writes are limited apart) and is started by the volume's qos
 * timer when it does; it is never failed for waiting. FLUSH is not limited;
 * DISCARD and WRITE_ZEROES count as write I/Os without bytes (they carry
 * no payload). A changed limit (client_qos_apply, after every install of
 * the record: the volume watch brings a new one) takes effect at once: the
 * queues are looked at again and the timer re-armed.
 *
 * Shared buckets (zl_vol_qos_join: several handles of one volume, each on
 * its own thread, like the ublk frontend's queue threads): the tat of each
 * bucket is in the zl_vol_qos_share, and a handle leases units from it
 * with one compare-and-swap, by the same GCRA rule (a lease of k units
 * conforms when tat <= now + tau and moves tat by k / rate), then spends
 * them with plain arithmetic on its own thread. A lease is what the I/O
 * lacks, at least 1 ms of the rate and at most a quarter of the burst (at
 * least one unit): at most a thousand CASes a second per handle and
 * bucket, whatever the rate. Over any window the handles together admit
 * at most rate x window + burst + one lease per handle and bucket (units
 * leased before the window and spent in it). A handle alone (no share)
 * keeps the code above: the one test of q->share is all it pays. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

#define NS_PER_S 1000000000ull

/* tau for burst units (0: a tenth of a second of the rate, at least one
 * unit), in ns. */
static uint64_t tb_tau_ns(uint64_t rate, uint64_t burst)
{
	unsigned __int128 ns;

	if (!burst) {
		burst = rate / 10;
		if (!burst)
			burst = 1;
	}
	ns = (unsigned __int128)burst * NS_PER_S / rate;
	return ns > UINT64_MAX / 4 ? UINT64_MAX / 4 : (uint64_t)ns;
}

/* ns of the rate that n units take. */
static uint64_t tb_cost_ns(const struct client_tb *b, uint64_t n)
{
	unsigned __int128 ns = (unsigned __int128)n * NS_PER_S / b->rate;

	return ns > UINT64_MAX / 4 ? UINT64_MAX / 4 : (uint64_t)ns;
}

/* 0 when b lets n units go at now, else the ns to wait. */
static uint64_t tb_wait_ns(const struct client_tb *b, uint64_t now)
{
	if (!b->rate || b->tat_ns <= now + b->tau_ns)
		return 0;
	return b->tat_ns - now - b->tau_ns;
}

static void tb_charge(struct client_tb *b, uint64_t n, uint64_t now)
{
	if (!b->rate)
		return;
	b->tat_ns = (b->tat_ns > now ? b->tat_ns : now) + tb_cost_ns(b, n);
}

/* Units one lease takes: 1 ms of the rate, at most a quarter of the burst,
 * at least one. */
static uint64_t tb_lease_units(const struct client_tb *b)
{
	uint64_t ns = b->tau_ns / 4 < 1000000 ? b->tau_ns / 4 : 1000000;
	unsigned __int128 n = (unsigned __int128)b->rate * ns / NS_PER_S;

	return n > 1 ? (n > UINT32_MAX ? UINT32_MAX : (uint64_t)n) : 1;
}

uint64_t client_tb_lease(struct client_tb *b, uint64_t n, uint64_t now)
{
	struct client_tb_share *s = b->share;
	uint64_t k, cost, t, nt;

	if (!b->rate || b->left >= n)
		return 0;
	k = n - b->left;
	if (k < b->lease)
		k = b->lease;
	cost = tb_cost_ns(b, k);
	t = atomic_load_explicit(&s->tat_ns, memory_order_relaxed);
	do {
		if (t > now + b->tau_ns)
			return t - now - b->tau_ns;
		nt = (t > now ? t : now) + cost;
	} while (!atomic_compare_exchange_weak_explicit(&s->tat_ns, &t, nt, memory_order_relaxed,
							memory_order_relaxed));
	b->left += k;
	return 0;
}

void client_tb_spend(struct client_tb *b, uint64_t n)
{
	if (b->rate)
		b->left -= n;
}

/* b's limit changed (or b joined s): what b leased under the old one
 * goes, and the first handle to bring the share this limit starts the
 * shared bucket full (tat no later than now); the others find it set. */
static void tb_share_apply(struct client_tb *b, uint64_t now)
{
	struct client_tb_share *s = b->share;
	uint64_t t;
	bool same;

	b->left = 0;
	b->lease = b->rate ? tb_lease_units(b) : 0;
	same = atomic_exchange(&s->rate, b->rate) == b->rate;
	same &= atomic_exchange(&s->tau_ns, b->tau_ns) == b->tau_ns;
	if (same)
		return;
	t = atomic_load(&s->tat_ns);
	while (t > now && !atomic_compare_exchange_weak(&s->tat_ns, &t, now))
		;
}

void client_tb_join(struct client_tb *b, struct client_tb_share *s, uint64_t now)
{
	b->share = s;
	tb_share_apply(b, now);
}

/* The queue of an op: 0 reads, 1 writes, -1 not limited (FLUSH). */
static int qos_dir_of(uint8_t op)
{
	if (op == ZL_OP_READ)
		return 0;
	if (op == ZL_OP_FLUSH)
		return -1;
	return 1;
}

/* The bytes io counts for (DISCARD and WRITE_ZEROES carry none). */
static uint64_t qos_bytes(const struct client_io *io)
{
	return io->op == ZL_OP_READ || io->op == ZL_OP_WRITE ? io->len : 0;
}

/* 0 when io may start at now (both buckets of its direction conform; with
 * a share: hold what io needs, leased if short), else the ns to wait. */
static uint64_t qos_wait_ns(const struct client_qos *q, struct client_qos_dir *d,
			    const struct client_io *io, uint64_t now)
{
	uint64_t a, b;

	if (q->share) {
		a = client_tb_lease(&d->iops, 1, now);
		return a ? a : client_tb_lease(&d->bps, qos_bytes(io), now);
	}
	a = tb_wait_ns(&d->iops, now);
	b = tb_wait_ns(&d->bps, now);
	return a > b ? a : b;
}

static void qos_charge(const struct client_qos *q, struct client_qos_dir *d,
		       const struct client_io *io, uint64_t now)
{
	if (q->share) {
		client_tb_spend(&d->iops, 1);
		client_tb_spend(&d->bps, qos_bytes(io));
		return;
	}
	tb_charge(&d->iops, 1, now);
	if (io->op == ZL_OP_READ || io->op == ZL_OP_WRITE)
		tb_charge(&d->bps, io->len, now);
}

static void qos_timer_cb(void *arg);

/* Starts what conforms at now from both queues, in order; re-arms the
 * timer for the first that does not. */
static void qos_release(struct zl_vol *v, uint64_t now)
{
	struct client_qos *q = &v->qos;
	uint64_t next = 0;

	for (int d = 0; d < 2; d++) {
		struct client_qos_dir *qd = &q->dir[d];

		while (!client_list_empty(&qd->wait) && !v->closing) {
			struct client_io *io =
			    ZL_CONTAINER_OF(qd->wait.next, struct client_io, link);
			uint64_t w = qos_wait_ns(q, qd, io, now);

			if (w) {
				if (!next || w < next)
					next = w;
				break;
			}
			client_list_del(&io->link);
			qos_charge(q, qd, io, now);
			q->waiting--;
			/* io_timeout counts from when it could go. */
			io->start_ns = now;
			client_io_start(io);
		}
	}
	if (q->timer_on) {
		zl_timer_stop(v->c->loop, &q->timer);
		q->timer_on = false;
	}
	if (next && !v->closing) {
		/* The loop's timers count in ms: round up, so a release never
		 * comes early and finds nothing to do. */
		q->timer_on = true;
		zl_timer_start(v->c->loop, &q->timer, (next + 999999) / 1000000, 0, qos_timer_cb,
			       v);
	}
}

static void qos_timer_cb(void *arg)
{
	struct zl_vol *v = arg;

	v->qos.timer_on = false;
	qos_release(v, zl_now_ns());
}

bool client_qos_admit(struct zl_vol *v, struct client_io *io, uint64_t now)
{
	struct client_qos *q = &v->qos;
	struct client_qos_dir *qd;
	bool head;
	int d;

	if (!q->on)
		return true;
	d = qos_dir_of(io->op);
	if (d < 0)
		return true;
	qd = &q->dir[d];
	/* Behind the ones already waiting: no overtaking. */
	if (client_list_empty(&qd->wait) && !qos_wait_ns(q, qd, io, now)) {
		qos_charge(q, qd, io, now);
		return true;
	}
	head = client_list_empty(&qd->wait);
	client_list_add_tail(&qd->wait, &io->link);
	q->waiting++;
	v->stats.throttled++;
	if (head) /* the timer may be set for the other direction only */
		qos_release(v, now);
	return false;
}

/* One bucket from the record's rate and burst: a changed one starts full
 * (tat no later than now), so a raised limit is not held back by the debt
 * of the old one and a lowered one applies from now. */
bool client_tb_set(struct client_tb *b, uint64_t rate, uint64_t burst, uint64_t now)
{
	uint64_t tau = rate ? tb_tau_ns(rate, burst) : 0;

	if (b->rate == rate && b->tau_ns == tau)
		return false;
	b->rate = rate;
	b->tau_ns = tau;
	if (b->share)
		tb_share_apply(b, now);
	else if (b->tat_ns > now)
		b->tat_ns = now;
	return true;
}

void client_qos_apply(struct zl_vol *v)
{
	struct client_qos *q = &v->qos;
	const uint64_t *lim = v->meta.qos;
	uint64_t now = zl_now_ns();
	bool changed = false;

	for (int d = 0; d < 2; d++) {
		int iops = d ? ZL_QOS_WRITE_IOPS : ZL_QOS_READ_IOPS;
		int bps = d ? ZL_QOS_WRITE_BPS : ZL_QOS_READ_BPS;

		changed |= client_tb_set(&q->dir[d].iops, lim[iops], lim[ZL_QOS_BURST(iops)], now);
		changed |= client_tb_set(&q->dir[d].bps, lim[bps], lim[ZL_QOS_BURST(bps)], now);
	}
	if (!changed)
		return;
	q->on = false;
	for (int k = 0; k < ZL_QOS_RATES; k++)
		q->on |= lim[k] != 0;
	ZL_LOG_INFO(CLIENT_LOG,
		    "volume limits: vol=%s read_iops=%llu write_iops=%llu read_bps=%llu "
		    "write_bps=%llu (0 = unlimited) waiting=%u",
		    v->meta.id, (unsigned long long)lim[ZL_QOS_READ_IOPS],
		    (unsigned long long)lim[ZL_QOS_WRITE_IOPS],
		    (unsigned long long)lim[ZL_QOS_READ_BPS],
		    (unsigned long long)lim[ZL_QOS_WRITE_BPS], q->waiting);
	/* Waiting I/O goes by the new limits (all of it when none is left). */
	qos_release(v, now);
}

void client_qos_init(struct zl_vol *v)
{
	for (int d = 0; d < 2; d++)
		client_list_init(&v->qos.dir[d].wait);
}

void client_qos_stop(struct zl_vol *v)
{
	struct client_qos *q = &v->qos;

	if (q->timer_on)
		zl_timer_stop(v->c->loop, &q->timer);
	q->timer_on = false;
	if (!q->share)
		return;
	for (int d = 0; d < 2; d++)
		q->dir[d].iops.share = q->dir[d].bps.share = NULL;
	zl_vol_qos_share_put(q->share);
	q->share = NULL;
}

int zl_vol_qos_share_create(struct zl_vol_qos_share **out)
{
	struct zl_vol_qos_share *s = aligned_alloc(_Alignof(struct zl_vol_qos_share), sizeof(*s));

	if (!s)
		return -ENOMEM;
	memset(s, 0, sizeof(*s));
	atomic_init(&s->refs, 1);
	*out = s;
	return 0;
}

void zl_vol_qos_share_put(struct zl_vol_qos_share *s)
{
	if (s && atomic_fetch_sub(&s->refs, 1) == 1)
		free(s);
}

int zl_vol_qos_join(struct zl_vol *v, struct zl_vol_qos_share *s)
{
	struct client_qos *q;
	uint64_t now = zl_now_ns();

	if (!v || !s || v->qos.share)
		return -ZL_ERR_INVAL;
	q = &v->qos;
	atomic_fetch_add(&s->refs, 1);
	q->share = s;
	/* I/O waiting now goes by the share at the timer's next run. */
	for (int d = 0; d < 2; d++) {
		client_tb_join(&q->dir[d].iops, &s->tb[d][0], now);
		client_tb_join(&q->dir[d].bps, &s->tb[d][1], now);
	}
	return 0;
}
