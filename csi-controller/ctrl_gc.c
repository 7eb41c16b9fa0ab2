/* The leader's garbage collection: volume secrets whose volume is gone.
 *
 * `zl volume rm` deletes a volume without knowing about its secret, and a
 * DeleteVolume the CO abandons between removing the record and the secret
 * leaves one too. A secret is only ever created after its volume record
 * (CreateVolume, ControllerPublishVolume), and volume ids are never reused,
 * so a secret without a record is garbage. Each delete is a transaction
 * "the volume record is still absent and the secret unchanged": a volume
 * created meanwhile keeps its secret. Runs on the elected leader only
 * (ctrl_leader.c), every --gc-interval seconds. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ctrl.h"

int ctrl_gc_run(struct ctrl *c)
{
	struct zl_etcd_range secrets = {0};
	char sprefix[256], vkey[256];
	size_t plen, removed = 0;
	int rc;

	rc = zl_meta_key(sprefix, sizeof(sprefix), c->prefix, "secrets", NULL);
	if (rc)
		return rc;
	plen = strlen(sprefix);
	rc = zl_etcd_range_prefix(c->etcd_bg, sprefix, NULL, 0, &secrets);
	if (rc)
		return rc;
	for (size_t i = 0; i < secrets.n; i++) {
		const struct zl_etcd_kv *kv = &secrets.kvs[i];
		const char *vol_id = kv->key + plen;
		bool ok = false;

		if (zl_meta_key(vkey, sizeof(vkey), c->prefix, "volumes", vol_id))
			continue;
		const struct zl_etcd_cmp cmps[2] = {
		    {.key = vkey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0},
		    {.key = kv->key,
		     .target = ZL_ETCD_CMP_MOD,
		     .result = ZL_ETCD_EQUAL,
		     .rev = kv->mod_rev},
		};
		const struct zl_etcd_op del = {.kind = ZL_ETCD_OP_DELETE, .key = kv->key};
		rc = zl_etcd_txn(c->etcd_bg, cmps, 2, &del, 1, NULL, 0, &ok, NULL);
		if (rc)
			break;
		if (ok) {
			removed++;
			ZL_LOG_INFO(CTRL_LOG, "gc: removed the secret of deleted volume=%s",
				    vol_id);
		}
	}
	if (!rc)
		ZL_LOG_DEBUG(CTRL_LOG, "gc: pass done secrets=%zu removed=%zu", secrets.n,
			     removed);
	for (size_t i = 0; i < secrets.n; i++)
		explicit_bzero(secrets.kvs[i].value, secrets.kvs[i].value_len);
	zl_etcd_range_fini(&secrets);
	return rc;
}
