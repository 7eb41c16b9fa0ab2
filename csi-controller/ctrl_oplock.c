/* Operation locks shared by every replica: one CSI operation at a time per
 * volume id (and per name for CreateVolume), whichever replica it reaches.
 * CSI wants a second concurrent call on the same volume refused with ABORTED
 * rather than queued: the CO retries it.
 *
 * A lock is the key <prefix>locks/<kind>/<id>, created by a transaction
 * "create_revision == 0" on this replica's lease, its value the replica id
 * (named in the ABORTED message). It is released by deleting exactly that
 * key version (compare mod_revision), so a late release never removes
 * another replica's lock. A replica that dies holding locks frees them when
 * its lease expires (CTRL_LEADER_TTL_S).
 *
 * The locks give CSI's "one operation per volume"; they are not what keeps
 * the records consistent: every write of a handler is itself a transaction
 * comparing revisions, so a lock lost with an expired lease costs at worst
 * an ABORTED or a retry, never a second volume or attachment. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ctrl.h"

int ctrl_op_begin(struct ctrl *c, struct zl_grpc_call *call, const char *kind, const char *id,
		  struct ctrl_oplock *lk)
{
	struct zl_etcd_txn_result res = {0};
	char holder[CTRL_ID_MAX] = "another replica";
	int64_t lease = ctrl_lease(c);
	bool ok = false;
	int rc, n;

	memset(lk, 0, sizeof(*lk));
	n = snprintf(lk->key, sizeof(lk->key), "%slocks/%s/%s", c->prefix, kind, id);
	if (n < 0 || (size_t)n >= sizeof(lk->key))
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT, "%s \"%.64s...\" is too long",
				    kind, id);
	if (!lease)
		return zl_grpc_fail(call, ZL_GRPC_UNAVAILABLE,
				    "%s %s: replica %s holds no etcd lease for its operation locks "
				    "yet (etcd unreachable?); retry",
				    kind, id, c->leader_id);
	const struct zl_etcd_cmp cmp = {
	    .key = lk->key, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
	const struct zl_etcd_op put = {.kind = ZL_ETCD_OP_PUT,
				       .key = lk->key,
				       .value = c->leader_id,
				       .value_len = strlen(c->leader_id),
				       .lease = lease};
	const struct zl_etcd_op get = {.kind = ZL_ETCD_OP_GET, .key = lk->key};
	rc = zl_etcd_txn(c->etcd, &cmp, 1, &put, 1, &get, 1, &ok, &res);
	if (rc == -ZL_ERR_NOT_FOUND)
		return zl_grpc_fail(call, ZL_GRPC_UNAVAILABLE,
				    "%s %s: the etcd lease of replica %s expired and is being "
				    "renewed; retry",
				    kind, id, c->leader_id);
	if (rc)
		return zl_grpc_fail_err(call, rc, "%s %s: cannot take its operation lock (%s)",
					kind, id, zl_etcd_last_error());
	if (ok) {
		lk->rev = res.revision;
		zl_etcd_txn_result_fini(&res);
		return ZL_GRPC_OK;
	}
	if (res.n_gets && res.gets[0].n) {
		const struct zl_etcd_kv *kv = &res.gets[0].kvs[0];

		snprintf(holder, sizeof(holder), "replica %.*s",
			 (int)ZL_MIN(kv->value_len, (size_t)CTRL_ID_MAX - 16), kv->value);
	}
	zl_etcd_txn_result_fini(&res);
	lk->key[0] = '\0';
	if (!strcmp(kind, "name"))
		return zl_grpc_fail(call, ZL_GRPC_ABORTED,
				    "name %s: another CreateVolume of this name is in progress "
				    "(on %s); retry",
				    id, holder);
	return zl_grpc_fail(call, ZL_GRPC_ABORTED,
			    "volume %s: another operation on it is in progress (on %s); retry", id,
			    holder);
}

void ctrl_op_end(struct ctrl *c, struct ctrl_oplock *lk)
{
	bool ok = false;
	int rc;

	if (!lk->key[0])
		return;
	const struct zl_etcd_cmp cmp = {
	    .key = lk->key, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = lk->rev};
	const struct zl_etcd_op del = {.kind = ZL_ETCD_OP_DELETE, .key = lk->key};
	rc = zl_etcd_txn(c->etcd, &cmp, 1, &del, 1, NULL, 0, &ok, NULL);
	if (rc || !ok)
		ZL_LOG_WARN(CTRL_LOG,
			    "operation lock key=%s not released (%s): it goes with this "
			    "replica's lease within %d s",
			    lk->key, rc ? zl_etcd_last_error() : "no longer ours", CTRL_LEADER_TTL_S);
	lk->key[0] = '\0';
}
