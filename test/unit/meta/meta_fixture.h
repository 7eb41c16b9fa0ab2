/* The etcd fixture of the lib/meta tests (run under test/lib/with-etcd.sh,
 * which sets ZL_TEST_ETCD): every test works under its own key prefix,
 * deleted by teardown. */
#ifndef ZL_META_FIXTURE_H
#define ZL_META_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/meta/meta.h"

#define GIB (1ull << 30)
#define MIB (1ull << 20)

struct fixture {
	struct zl_etcd *e;
	char prefix[64];
};

/* A client of the test etcd, or NULL (with the reason on stderr). */
struct zl_etcd *new_client(void);
/* cmocka setup/teardown: *state is a struct fixture. */
int setup(void **state);
int teardown(void **state);
/* A valid node record "node-<i>". */
void make_node(struct zl_node_info *n, int i, const char *domain, uint64_t free_bytes);
/* Registers node-0 .. node-<count-1> without a lease. */
void register_nodes(struct fixture *f, int count);
/* "<prefix><kind>/<id>" into out (512 bytes). */
void key_of(struct fixture *f, char *out, const char *kind, const char *id);
bool key_exists(struct fixture *f, const char *kind, const char *id);
/* Writes value under <prefix><kind>/<id> as is (what a buggy or hostile
 * writer could leave in etcd). */
void put_raw(struct fixture *f, const char *kind, const char *id, const char *value);

#endif
