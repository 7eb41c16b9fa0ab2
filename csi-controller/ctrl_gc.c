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

/* Is there a key vprefix<id> in the sorted range vols? *pos moves forward:
 * secrets are visited in key order too. */
static bool gc_volume_exists(const struct zl_etcd_range *vols, size_t vplen, const char *id,
			     size_t *pos)
{
	while (*pos < vols->n) {
		int cmp = strcmp(vols->kvs[*pos].key + vplen, id);

		if (cmp == 0)
			return true;
		if (cmp > 0)
			return false;
		(*pos)++;
	}
	return false;
}

int ctrl_gc_run(struct ctrl *c)
{
	struct zl_etcd_range secrets = {0}, vols = {0};
	char sprefix[256], vprefix[256], vkey[256];
	size_t plen, vplen, pos = 0, removed = 0;
	int rc;

	rc = zl_meta_key(sprefix, sizeof(sprefix), c->prefix, "secrets", NULL);
	if (!rc)
		rc = zl_meta_key(vprefix, sizeof(vprefix), c->prefix, "volumes", NULL);
	if (rc)
		return rc;
	plen = strlen(sprefix);
	vplen = strlen(vprefix);
	/* Secrets first: a volume created after this read has its record in
	 * the second read, or its secret is not in the first. */
	rc = zl_etcd_range_prefix(c->etcd_bg, sprefix, NULL, 0, &secrets);
	if (!rc)
		rc = zl_etcd_range_prefix(c->etcd_bg, vprefix, NULL, 0, &vols);
	for (size_t i = 0; !rc && i < secrets.n; i++) {
		const struct zl_etcd_kv *kv = &secrets.kvs[i];
		const char *vol_id = kv->key + plen;
		bool ok = false;

		if (gc_volume_exists(&vols, vplen, vol_id, &pos) ||
		    zl_meta_key(vkey, sizeof(vkey), c->prefix, "volumes", vol_id))
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
		if (!rc && ok) {
			removed++;
			ZL_LOG_INFO(CTRL_LOG, "gc: removed the secret of deleted volume=%s",
				    vol_id);
		}
	}
	if (!rc)
		ZL_LOG_DEBUG(CTRL_LOG, "gc: pass done secrets=%zu volumes=%zu removed=%zu",
			     secrets.n, vols.n, removed);
	for (size_t i = 0; i < secrets.n; i++)
		explicit_bzero(secrets.kvs[i].value, secrets.kvs[i].value_len);
	zl_etcd_range_fini(&secrets);
	zl_etcd_range_fini(&vols);
	return rc;
}
