/* The etcd fixture of the lib/meta tests: see meta_fixture.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "meta_fixture.h"

static int g_counter;

struct zl_etcd *new_client(void)
{
	const char *url = getenv("ZL_TEST_ETCD");
	struct zl_etcd_opts opts = {.endpoints = url, .timeout_ms = 5000};
	struct zl_etcd *e = NULL;

	if (!url) {
		fprintf(stderr,
			"ZL_TEST_ETCD is not set: run this test via test/lib/with-etcd.sh\n");
		return NULL;
	}
	if (zl_etcd_create(&opts, &e))
		return NULL;
	return e;
}

int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	f->e = new_client();
	if (!f->e) {
		free(f);
		return -1;
	}
	snprintf(f->prefix, sizeof(f->prefix), "/zltest-%d-%d/", (int)getpid(), ++g_counter);
	*state = f;
	return 0;
}

int teardown(void **state)
{
	struct fixture *f = *state;

	zl_etcd_delete_prefix(f->e, f->prefix, NULL);
	zl_etcd_destroy(f->e);
	free(f);
	return 0;
}

void make_node(struct zl_node_info *n, int i, const char *domain, uint64_t free_bytes)
{
	memset(n, 0, sizeof(*n));
	snprintf(n->id, sizeof(n->id), "node-%d", i);
	snprintf(n->addr, sizeof(n->addr), "10.0.0.%d", i + 1);
	n->port = 7420;
	strcpy(n->transports, "tcp");
	snprintf(n->domain, sizeof(n->domain), "%s", domain ? domain : "");
	n->capacity = 2 * free_bytes;
	n->free = free_bytes;
	n->start_time = 1700000000 + i;
	strcpy(n->version, ZL_VERSION_STRING);
}

void register_nodes(struct fixture *f, int count)
{
	for (int i = 0; i < count; i++) {
		struct zl_node_info n;

		make_node(&n, i, NULL, 100 * GIB);
		assert_int_equal(zl_meta_node_put(f->e, f->prefix, &n, 0), 0);
	}
}

void key_of(struct fixture *f, char *out, const char *kind, const char *id)
{
	assert_int_equal(zl_meta_key(out, 512, f->prefix, kind, id), 0);
}

bool key_exists(struct fixture *f, const char *kind, const char *id)
{
	char key[512];
	struct zl_etcd_kv kv;
	int ret;

	key_of(f, key, kind, id);
	ret = zl_etcd_get(f->e, key, &kv);
	if (ret == 0) {
		zl_etcd_kv_fini(&kv);
		return true;
	}
	assert_int_equal(ret, -ZL_ERR_NOT_FOUND);
	return false;
}

void put_raw(struct fixture *f, const char *kind, const char *id, const char *value)
{
	char key[512];

	key_of(f, key, kind, id);
	assert_int_equal(zl_etcd_put(f->e, key, value, strlen(value), 0, NULL), 0);
}
