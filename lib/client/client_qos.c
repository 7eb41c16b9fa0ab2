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
 * queues are looked at again and the timer re-armed. */
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

/* The queue of an op: 0 reads, 1 writes, -1 not limited (FLUSH). */
static int qos_dir_of(uint8_t op)
{
	if (op == ZL_OP_READ)
		return 0;
	if (op == ZL_OP_FLUSH)
		return -1;
	return 1;
}

/* 0 when io may start at now (both buckets of its direction conform), else
 * the ns to wait. */
static uint64_t qos_wait_ns(const struct client_qos_dir *d, uint64_t now)
{
	uint64_t a = tb_wait_ns(&d->iops, now), b = tb_wait_ns(&d->bps, now);

	return a > b ? a : b;
}

static void qos_charge(struct client_qos_dir *d, const struct client_io *io, uint64_t now)
{
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
			uint64_t w = qos_wait_ns(qd, now);

			if (w) {
				if (!next || w < next)
					next = w;
				break;
			}
			client_list_del(&io->link);
			qos_charge(qd, io, now);
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
	if (client_list_empty(&qd->wait) && !qos_wait_ns(qd, now)) {
		qos_charge(qd, io, now);
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
static bool qos_tb_set(struct client_tb *b, uint64_t rate, uint64_t burst, uint64_t now)
{
	uint64_t tau = rate ? tb_tau_ns(rate, burst) : 0;

	if (b->rate == rate && b->tau_ns == tau)
		return false;
	b->rate = rate;
	b->tau_ns = tau;
	if (b->tat_ns > now)
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

		changed |= qos_tb_set(&q->dir[d].iops, lim[iops], lim[ZL_QOS_BURST(iops)], now);
		changed |= qos_tb_set(&q->dir[d].bps, lim[bps], lim[ZL_QOS_BURST(bps)], now);
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
	if (v->qos.timer_on)
		zl_timer_stop(v->c->loop, &v->qos.timer);
	v->qos.timer_on = false;
}
