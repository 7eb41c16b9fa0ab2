/* The volume's QoS limits shared by several handles (zl_vol_qos_share,
 * lib/client/client_qos.c): buckets of N threads joined to one share admit
 * together what one bucket admits, within one lease per thread, and a
 * changed limit reaches the share once. Real threads on the real clock. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cmocka needs the headers above first */
#include <cmocka.h>

#include "lib/client/client_internal.h"
#include "lib/common/common.h"

enum {
	NTHREADS = 4,
	RATE = 100000,	     /* units per second */
	BURST = 1000,	     /* 10 ms of the rate */
	LEASE = RATE / 1000, /* 1 ms of the rate, under a quarter of the burst */
	WINDOW_MS = 500,
};

struct hammer {
	pthread_t tid;
	struct zl_vol_qos_share *share;
	_Atomic int *go;
	_Atomic uint64_t *end_ns;
	uint64_t admitted, leases;
};

/* One handle's bucket: units one at a time, as fast as it can, until the
 * window's end; counts what it admitted and the leases (CAS) it took. */
static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	struct client_tb b = {0};
	uint64_t now = zl_now_ns(), end;

	/* As a handle: its limit from its record, then zl_vol_qos_join. */
	client_tb_set(&b, RATE, BURST, now);
	client_tb_join(&b, &h->share->tb[1][0], now);
	assert_int_equal(b.lease, LEASE);
	while (!atomic_load(h->go))
		sched_yield();
	end = atomic_load(h->end_ns);
	for (;;) {
		uint64_t left = b.left;

		now = zl_now_ns();
		if (now >= end)
			break;
		if (client_tb_lease(&b, 1, now)) {
			sched_yield();
			continue;
		}
		if (b.left > left)
			h->leases++;
		client_tb_spend(&b, 1);
		h->admitted++;
	}
	return NULL;
}

/* NTHREADS threads hammer one share for WINDOW_MS: together they admit at
 * most RATE x window + BURST + one lease (the last one); per-handle buckets
 * would admit about NTHREADS times that. And nearly all of it: the threads
 * never wait longer than the burst covers, unless the machine stops them
 * all. Each CAS leased LEASE units. */
static void test_share_threads(void **state)
{
	struct hammer h[NTHREADS];
	struct zl_vol_qos_share *s;
	_Atomic int go = 0;
	_Atomic uint64_t end_ns = 0;
	uint64_t t0, total = 0, leases = 0, limit, bound;

	(void)state;
	assert_int_equal(zl_vol_qos_share_create(&s), 0);
	for (int i = 0; i < NTHREADS; i++) {
		h[i] = (struct hammer){.share = s, .go = &go, .end_ns = &end_ns};
		assert_int_equal(pthread_create(&h[i].tid, NULL, hammer_main, &h[i]), 0);
	}
	/* No lease before t0: the window starts with the bucket full. */
	t0 = zl_now_ns();
	atomic_store(&end_ns, t0 + (uint64_t)WINDOW_MS * 1000000);
	atomic_store(&go, 1);
	for (int i = 0; i < NTHREADS; i++) {
		assert_int_equal(pthread_join(h[i].tid, NULL), 0);
		total += h[i].admitted;
		leases += h[i].leases;
	}
	limit = (uint64_t)RATE * WINDOW_MS / 1000;
	bound = limit + BURST + LEASE;
	print_message("qos share: %d threads admitted %llu in %d ms at %d/s (limit %llu, bound "
		      "%llu), %llu leases\n",
		      NTHREADS, (unsigned long long)total, WINDOW_MS, RATE,
		      (unsigned long long)limit, (unsigned long long)bound,
		      (unsigned long long)leases);
	for (int i = 0; i < NTHREADS; i++)
		print_message("qos share: thread %d admitted %llu\n", i,
			      (unsigned long long)h[i].admitted);
	assert_true(total <= bound);
	assert_true(total >= limit * 3 / 4);
	/* Batches: LEASE units per CAS. */
	assert_true(leases * LEASE >= total);
	assert_true(leases <= total / LEASE + NTHREADS);
	zl_vol_qos_share_put(s);
}

/* A changed limit (each handle applies it from its own watch): the first
 * handle to apply it starts the shared bucket full, the others do not
 * refill it; units leased under the old limit are dropped. Fake clock. */
static void test_share_limit_change(void **state)
{
	struct zl_vol_qos_share *s;
	struct client_tb a = {0}, b = {0};
	uint64_t now = 1000000000ull, n = 0;

	(void)state;
	assert_int_equal(zl_vol_qos_share_create(&s), 0);
	client_tb_set(&a, RATE, BURST, now);
	client_tb_set(&b, RATE, BURST, now);
	client_tb_join(&a, &s->tb[0][0], now);
	client_tb_join(&b, &s->tb[0][0], now);
	/* Both drain the burst at one instant: BURST + one lease in all. */
	for (;;) {
		struct client_tb *x = n % 2 ? &b : &a;

		if (client_tb_lease(x, 1, now)) {
			x = x == &a ? &b : &a;
			if (client_tb_lease(x, 1, now))
				break;
		}
		client_tb_spend(x, 1);
		n++;
	}
	assert_true(n >= BURST && n <= BURST + 2 * LEASE);
	/* a applies a lower limit: the share starts full again; b applying the
	 * same limit later does not refill what a took meanwhile. */
	now += 1000;
	assert_true(client_tb_set(&a, RATE / 10, BURST / 10, now));
	assert_int_equal(a.left, 0);
	assert_int_equal(client_tb_lease(&a, 1, now), 0);
	n = 1;
	client_tb_spend(&a, 1);
	while (!client_tb_lease(&a, 1, now)) {
		client_tb_spend(&a, 1);
		n++;
	}
	assert_true(n >= BURST / 10 && n <= BURST / 10 + a.lease);
	assert_true(client_tb_set(&b, RATE / 10, BURST / 10, now));
	assert_int_equal(b.left, 0);
	assert_true(client_tb_lease(&b, 1, now) > 0);
	/* Unchanged limits change nothing. */
	assert_false(client_tb_set(&b, RATE / 10, BURST / 10, now));
	zl_vol_qos_share_put(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_share_threads),
	    cmocka_unit_test(test_share_limit_change),
	};

	zl_log_init("client_qos_test");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
