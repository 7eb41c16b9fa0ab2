/* libFuzzer target: the etcd record decoders of lib/meta (node, volume,
 * cluster identity, failure report, node status, rebalance request, snapshot,
 * snapshot request). Anything accepted
 * must encode again and decode to the same text (a record the decoder takes
 * but the encoder refuses would be stuck in etcd). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/meta/meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_node(const char *json, size_t size)
{
	struct zl_node_info n, m;
	char *again;

	if (zl_meta_node_from_json(json, size, &n))
		return;
	again = zl_meta_node_to_json(&n);
	if (!again)
		abort();
	if (zl_meta_node_from_json(again, strlen(again), &m) || memcmp(&n, &m, sizeof(n)))
		abort();
	free(again);
}

static void fuzz_volume(const char *json, size_t size)
{
	struct zl_volume v, w;
	char *again, *third;

	if (zl_meta_volume_from_json(json, size, &v))
		return;
	again = zl_meta_volume_to_json(&v);
	if (!again)
		abort();
	if (zl_meta_volume_from_json(again, strlen(again), &w))
		abort();
	third = zl_meta_volume_to_json(&w);
	if (!third || strcmp(again, third))
		abort();
	free(third);
	free(again);
	zl_volume_fini(&w);
	zl_volume_fini(&v);
}

static void fuzz_cluster(const char *json, size_t size)
{
	struct zl_cluster_info c, d;
	char *again;

	if (zl_meta_cluster_from_json(json, size, &c))
		return;
	again = zl_meta_cluster_to_json(&c);
	if (!again || zl_meta_cluster_from_json(again, strlen(again), &d) ||
	    memcmp(&c, &d, sizeof(c)))
		abort();
	free(again);
}

static void fuzz_report(const char *json, size_t size)
{
	struct zl_report r, q;
	char *again;

	if (zl_meta_report_from_json(json, size, &r))
		return;
	/* The value does not hold the key's part; any valid one will do. */
	strcpy(r.vol_id, "vol-0123456789abcdef");
	strcpy(r.reporter, "client-0");
	again = zl_meta_report_to_json(&r);
	if (!again || zl_meta_report_from_json(again, strlen(again), &q) ||
	    strcmp(r.peer, q.peer) || strcmp(r.error, q.error) || r.slice_ver != q.slice_ver ||
	    r.time != q.time)
		abort();
	free(again);
}

static void fuzz_status(const char *json, size_t size)
{
	struct zl_node_status s, t;
	char *again;

	if (zl_meta_status_from_json(json, size, &s))
		return;
	again = zl_meta_status_to_json(&s);
	if (!again || zl_meta_status_from_json(again, strlen(again), &t) ||
	    memcmp(&s, &t, sizeof(s)))
		abort();
	free(again);
}

static void fuzz_rebalance(const char *json, size_t size)
{
	struct zl_rebalance_req r, q;
	char *again;

	if (zl_meta_rebalance_from_json(json, size, &r))
		return;
	strcpy(r.vol_id, "vol-0123456789abcdef"); /* from the key */
	if (zl_meta_rebalance_check(&r, NULL, 0))
		abort();
	again = zl_meta_rebalance_to_json(&r);
	if (!again || zl_meta_rebalance_from_json(again, strlen(again), &q) ||
	    q.requested != r.requested || strcmp(q.by, r.by))
		abort();
	free(again);
}

static void fuzz_snap(const char *json, size_t size)
{
	struct zl_snapshot s, q;
	char *again;

	if (zl_meta_snap_from_json(json, size, &s))
		return;
	if (zl_meta_snap_check(&s, NULL, 0))
		abort();
	again = zl_meta_snap_to_json(&s);
	if (!again || zl_meta_snap_from_json(again, strlen(again), &q) || memcmp(&s, &q, sizeof(s)))
		abort();
	free(again);
}

/* The input as a snapshot request's value under a valid key. */
static void fuzz_snapreq(const char *data, size_t size)
{
	char key[] = "/z/snapreqs/vol-0123456789abcdef/snap-0123456789abcdef";
	struct zl_etcd_kv kv = {.key = key, .value = (char *)data, .value_len = size};
	struct zl_snapreq r, q;
	char *again;

	if (zl_meta_snapreq_from_kv(&kv, &r))
		return;
	if (zl_meta_snapreq_check(&r, NULL, 0) || strcmp(r.vol, "vol-0123456789abcdef") ||
	    strcmp(r.id, "snap-0123456789abcdef"))
		abort();
	again = zl_meta_snapreq_to_json(&r);
	if (!again || zl_meta_snapreq_from_json(again, strlen(again), &q) ||
	    strcmp(q.name, r.name) || strcmp(q.state, r.state) || q.seq != r.seq ||
	    q.requested != r.requested || strcmp(q.error, r.error))
		abort();
	free(again);
}

/* The input as a report key, and as the value under a valid key. */
static void fuzz_report_kv(const char *data, size_t size)
{
	struct zl_etcd_kv kv = {0};
	struct zl_report r;
	char *text = malloc(size + 1);
	char key[] = "/z/reports/vol-0123456789abcdef/7/client-0/storage-1";

	if (!text)
		return;
	memcpy(text, data, size);
	text[size] = '\0';
	if (!zl_meta_report_parse_key(text, &r)) {
		char again[256];
		size_t n;

		/* A parsed key is valid, and is what the key says. */
		strcpy(r.error, "E");
		r.slice_ver = 1;
		if (zl_meta_report_check(&r, NULL, 0))
			abort();
		n = (size_t)snprintf(again, sizeof(again), "reports/%s/%u/%s/%s", r.vol_id,
				     r.slice, r.reporter, r.peer);
		if (n > strlen(text) || strcmp(text + strlen(text) - n, again))
			abort();
	}
	kv.key = key;
	kv.value = text;
	kv.value_len = size;
	if (!zl_meta_report_from_kv(&kv, &r) &&
	    (zl_meta_report_check(&r, NULL, 0) || strcmp(r.peer, "storage-1") || r.slice != 7))
		abort();
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_node((const char *)data, size);
	fuzz_volume((const char *)data, size);
	fuzz_cluster((const char *)data, size);
	fuzz_report((const char *)data, size);
	fuzz_report_kv((const char *)data, size);
	fuzz_status((const char *)data, size);
	fuzz_rebalance((const char *)data, size);
	fuzz_snap((const char *)data, size);
	fuzz_snapreq((const char *)data, size);
	return 0;
}
