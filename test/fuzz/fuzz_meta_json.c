/* libFuzzer target: the etcd record decoders of lib/meta. Anything accepted
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
	if (zl_meta_node_from_json(again, strlen(again), &m) || strcmp(n.id, m.id) ||
	    n.port != m.port || n.free != m.free)
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_node((const char *)data, size);
	fuzz_volume((const char *)data, size);
	return 0;
}
