/* libFuzzer target: the etcd record decoders of lib/meta (node, volume,
 * cluster identity, failure report). Anything accepted
 * must encode again and decode to the same text (a record the decoder takes
 * but the encoder refuses would be stuck in etcd). */
#include <stdint.h>
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_node((const char *)data, size);
	fuzz_volume((const char *)data, size);
	fuzz_cluster((const char *)data, size);
	fuzz_report((const char *)data, size);
	return 0;
}
