/* ControllerPublishVolume / ControllerUnpublishVolume: the attachment record
 * <prefix>attachments/<vol-id> = {"node", "epoch", "readonly", "time"}.
 *
 * The epoch of an attachment is the etcd revision of the transaction that
 * created the record (its create_revision): strictly increasing, so a newer
 * attachment always fences an older one at the storage daemons. The record
 * is written with the expected revision and corrected in place (compare
 * mod_revision) in the rare case another write landed in between; readers
 * take the epoch from create_revision either way. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ctrl.h"
#include "lib/meta/zl_auth.h"

/* Compare-and-swap rounds against concurrent writers of the record. */
#define ATTACH_TRIES 8

int ctrl_node_id_check(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > CTRL_NODE_ID_MAX)
		return -ZL_ERR_INVAL;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
			return -ZL_ERR_INVAL;
	}
	return 0;
}

static int attach_key(const struct ctrl *c, const char *vol_id, char *out, size_t len)
{
	return zl_meta_key(out, len, c->prefix, "attachments", vol_id);
}

static int attach_parse(const struct zl_etcd_kv *kv, struct ctrl_attach *a)
{
	json_t *j = json_loadb(kv->value, kv->value_len, 0, NULL);
	const char *node = j ? json_string_value(json_object_get(j, "node")) : NULL;
	int rc = 0;

	memset(a, 0, sizeof(*a));
	if (!node || ctrl_node_id_check(node)) {
		ZL_LOG_ERR(CTRL_LOG, "malformed attachment record key=%s: inspect it with etcdctl",
			   kv->key);
		rc = -ZL_ERR_INVAL;
		goto out;
	}
	snprintf(a->node, sizeof(a->node), "%s", node);
	a->readonly = json_is_true(json_object_get(j, "readonly"));
	a->time = json_integer_value(json_object_get(j, "time"));
	a->epoch = (uint64_t)kv->create_rev;
	a->mod_rev = kv->mod_rev;
out:
	json_decref(j);
	return rc;
}

int ctrl_attach_get(struct ctrl *c, const char *vol_id, struct ctrl_attach *out)
{
	struct zl_etcd_kv kv;
	int rc;

	rc = ctrl_record_get(c, "attachments", vol_id, &kv);
	if (rc)
		return rc;
	rc = attach_parse(&kv, out);
	zl_etcd_kv_fini(&kv);
	return rc;
}

static char *attach_json(const char *node, uint64_t epoch, bool readonly, int64_t t)
{
	json_t *j = json_pack("{s:s, s:I, s:b, s:I}", "node", node, "epoch", (json_int_t)epoch,
			      "readonly", readonly, "time", (json_int_t)t);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	json_decref(j);
	return s;
}

/* Creates the record for node (the volume's record must still be at
 * vol_mod_rev). 0 with *a filled, -ZL_ERR_CONFLICT when someone else wrote
 * either key first, or an etcd error. */
static int attach_create(struct ctrl *c, const struct zl_volume *v, const char *node,
			 bool readonly, struct ctrl_attach *a)
{
	struct zl_etcd_txn_result res = {0};
	struct zl_etcd_range cur = {0};
	char akey[256], vkey[256];
	int64_t guess, rev, now = zl_wall_sec();
	bool ok = false;
	char *json;
	int rc;

	attach_key(c, v->id, akey, sizeof(akey));
	zl_meta_key(vkey, sizeof(vkey), c->prefix, "volumes", v->id);
	/* The revision this transaction will most likely get. */
	rc = zl_etcd_range(c->etcd, akey, NULL, 1, &cur);
	if (rc)
		return rc;
	guess = cur.revision + 1;
	zl_etcd_range_fini(&cur);
	json = attach_json(node, (uint64_t)guess, readonly, now);
	if (!json)
		return -ENOMEM;
	const struct zl_etcd_cmp cmps[2] = {
	    {.key = akey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0},
	    {.key = vkey, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = v->mod_rev},
	};
	const struct zl_etcd_op put = {
	    .kind = ZL_ETCD_OP_PUT, .key = akey, .value = json, .value_len = strlen(json)};
	rc = zl_etcd_txn(c->etcd, cmps, 2, &put, 1, NULL, 0, &ok, &res);
	free(json);
	if (rc)
		return rc;
	rev = res.revision;
	zl_etcd_txn_result_fini(&res);
	if (!ok)
		return -ZL_ERR_CONFLICT;
	memset(a, 0, sizeof(*a));
	snprintf(a->node, sizeof(a->node), "%s", node);
	a->readonly = readonly;
	a->time = now;
	a->epoch = (uint64_t)rev;
	a->mod_rev = rev;
	if (rev != guess) {
		/* Another write took the expected revision: record the real one. */
		json = attach_json(node, a->epoch, readonly, now);
		if (!json)
			return -ENOMEM;
		const struct zl_etcd_cmp same = {
		    .key = akey, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = a->mod_rev};
		const struct zl_etcd_op fix = {
		    .kind = ZL_ETCD_OP_PUT, .key = akey, .value = json, .value_len = strlen(json)};
		ok = false;
		rc = zl_etcd_txn(c->etcd, &same, 1, &fix, 1, NULL, 0, &ok, &res);
		free(json);
		if (rc)
			return rc;
		if (ok)
			a->mod_rev = res.revision;
		zl_etcd_txn_result_fini(&res);
		if (!ok)
			ZL_LOG_WARN(CTRL_LOG, "attachment of volume=%s changed before its epoch "
				    "field was corrected; readers use its create_revision", v->id);
	}
	return 0;
}

static Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry *
pc_entry(struct zl_grpc_call *call, const char *k, const char *v)
{
	Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry *e = zl_grpc_call_new_msg(
	    call, &csi__v1__controller_publish_volume_response__publish_context_entry__descriptor);

	if (!e)
		return NULL;
	e->key = (char *)k;
	e->value = zl_grpc_call_strdup(call, v);
	return e->value ? e : NULL;
}

static int publish_answer(struct ctrl *c, struct zl_grpc_call *call, const char *vol_id,
			  const struct ctrl_attach *a, Csi__V1__ControllerPublishVolumeResponse *out)
{
	char secret[CTRL_SECRET_HEX + 1], token[CTRL_TOKEN_HEX + 1], epoch[24];
	int rc;

	rc = ctrl_secret_get(c, vol_id, secret);
	if (rc == -ZL_ERR_NOT_FOUND) {
		/* Volumes made before secrets existed (or by `zl`): add one. */
		rc = ctrl_secret_ensure(c, vol_id);
		if (!rc)
			rc = ctrl_secret_get(c, vol_id, secret);
	}
	if (rc)
		return zl_grpc_fail_err(call, rc, "volume %s: cannot read its secret (%s)", vol_id,
					zl_etcd_last_error());
	rc = zl_auth_attach_token(secret, vol_id, a->node, a->epoch, token);
	explicit_bzero(secret, sizeof(secret));
	if (rc)
		return zl_grpc_fail_err(call, rc, "volume %s: cannot compute the attach token",
					vol_id);
	snprintf(epoch, sizeof(epoch), "%" PRIu64, a->epoch);
	out->publish_context = zl_grpc_call_alloc(call, 3 * sizeof(*out->publish_context));
	if (!out->publish_context)
		return -ENOMEM;
	out->publish_context[0] = pc_entry(call, "epoch", epoch);
	out->publish_context[1] = pc_entry(call, "token", token);
	out->publish_context[2] = pc_entry(call, "etcdPrefix", c->prefix);
	if (!out->publish_context[0] || !out->publish_context[1] || !out->publish_context[2])
		return -ENOMEM;
	out->n_publish_context = 3;
	return ZL_GRPC_OK;
}

/* NOT_FOUND unless a zipline-node registered node_id (csinodes/<id>, written
 * by zipline-node at start: csi-node/node_register.c). */
static int publish_node_check(struct ctrl *c, struct zl_grpc_call *call, const char *node_id)
{
	struct zl_etcd_kv kv;
	int rc;

	if (ctrl_node_id_check(node_id))
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
				    "node_id \"%.128s\" is not a Zipline node id (1..%d characters "
				    "of A-Za-z0-9._-, as NodeGetInfo of zipline-node reports)",
				    node_id, CTRL_NODE_ID_MAX);
	rc = ctrl_record_get(c, "csinodes", node_id, &kv);
	if (rc == -ZL_ERR_NOT_FOUND)
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
				    "node_id %s: no zipline-node has registered this node (no key "
				    "%scsinodes/%s); start zipline-node there with --node-id %s",
				    node_id, c->prefix, node_id, node_id);
	if (rc)
		return zl_grpc_fail_err(call, rc, "node_id %s: cannot read its registration (%s)",
					node_id, zl_etcd_last_error());
	zl_etcd_kv_fini(&kv);
	return ZL_GRPC_OK;
}

static int publish_locked(struct ctrl *c, struct zl_grpc_call *call,
			  const Csi__V1__ControllerPublishVolumeRequest *r,
			  Csi__V1__ControllerPublishVolumeResponse *out)
{
	struct ctrl_attach a;
	struct zl_volume v;
	bool readonly = r->readonly;
	int rc;

	for (int tries = 0;; tries++) {
		rc = ctrl_volume_load(c, call, r->volume_id, &v);
		if (rc)
			return rc;
		if (strcmp(v.state, "ready")) {
			rc = zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
					  "volume %s is being deleted (state %s)", v.id, v.state);
			goto out;
		}
		rc = ctrl_attach_get(c, v.id, &a);
		if (rc == 0) {
			if (strcmp(a.node, r->node_id)) {
				rc = zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
						  "volume %s is published to node %s: a volume is "
						  "attached to one node at a time; "
						  "ControllerUnpublishVolume it there first",
						  v.id, a.node);
				goto out;
			}
			if (a.readonly != readonly) {
				rc = zl_grpc_fail(call, ZL_GRPC_ALREADY_EXISTS,
						  "volume %s is already published to node %s with "
						  "readonly=%s; this call asks readonly=%s",
						  v.id, a.node, a.readonly ? "true" : "false",
						  readonly ? "true" : "false");
				goto out;
			}
			break; /* the same publish again: the same answer */
		}
		if (rc != -ZL_ERR_NOT_FOUND) {
			rc = zl_grpc_fail_err(call, rc, "volume %s: cannot read its attachment (%s)",
					      v.id, zl_etcd_last_error());
			goto out;
		}
		rc = attach_create(c, &v, r->node_id, readonly, &a);
		if (!rc) {
			ZL_LOG_INFO(CTRL_LOG,
				    "ControllerPublishVolume id=%s node=%s epoch=%" PRIu64
				    " readonly=%d",
				    v.id, a.node, a.epoch, a.readonly);
			break;
		}
		zl_volume_fini(&v);
		if (rc != -ZL_ERR_CONFLICT || tries + 1 >= ATTACH_TRIES)
			return zl_grpc_fail_err(call, rc,
						"volume %s: cannot write the attachment record (%s)",
						r->volume_id, zl_etcd_last_error());
	}
	rc = publish_answer(c, call, v.id, &a, out);
out:
	zl_volume_fini(&v);
	return rc;
}

int ctrl_publish(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		 ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__ControllerPublishVolumeRequest *r =
	    (const Csi__V1__ControllerPublishVolumeRequest *)req;
	struct ctrl_oplock lk;
	int rc;

	rc = ctrl_arg_required(call, "volume_id", r->volume_id);
	if (!rc)
		rc = ctrl_arg_required(call, "node_id", r->node_id);
	if (rc)
		return rc;
	if (!r->volume_capability)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT, "volume_capability is required");
	rc = ctrl_caps_validate(call, "volume_capability", &r->volume_capability, 1, true);
	if (!rc)
		rc = publish_node_check(c, call, r->node_id);
	if (!rc)
		rc = ctrl_op_begin(c, call, "vol", r->volume_id, &lk);
	if (rc)
		return rc;
	rc = publish_locked(c, call, r, (Csi__V1__ControllerPublishVolumeResponse *)resp);
	ctrl_op_end(c, &lk);
	return rc;
}

static int unpublish_locked(struct ctrl *c, struct zl_grpc_call *call,
			    const Csi__V1__ControllerUnpublishVolumeRequest *r)
{
	struct ctrl_attach a;
	char key[256];
	int rc;

	attach_key(c, r->volume_id, key, sizeof(key));
	for (int tries = 0; tries < ATTACH_TRIES; tries++) {
		bool ok = false;

		rc = ctrl_attach_get(c, r->volume_id, &a);
		if (rc == -ZL_ERR_NOT_FOUND)
			return ZL_GRPC_OK; /* not published (or no such volume) */
		if (rc == -ZL_ERR_INVAL) {
			a.node[0] = '\0'; /* malformed record: remove it */
		} else if (rc) {
			return zl_grpc_fail_err(call, rc,
						"volume %s: cannot read its attachment (%s)",
						r->volume_id, zl_etcd_last_error());
		} else if (r->node_id[0] && strcmp(a.node, r->node_id)) {
			return ZL_GRPC_OK; /* published elsewhere, not to this node */
		}
		struct zl_etcd_kv kv;

		/* Delete exactly the record we judged (compare mod_revision). */
		rc = zl_etcd_get(c->etcd, key, &kv);
		if (rc == -ZL_ERR_NOT_FOUND)
			return ZL_GRPC_OK;
		if (rc)
			return zl_grpc_fail_err(call, rc,
						"volume %s: cannot read its attachment (%s)",
						r->volume_id, zl_etcd_last_error());
		const struct zl_etcd_cmp cmp = {
		    .key = key, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = kv.mod_rev};
		const struct zl_etcd_op del = {.kind = ZL_ETCD_OP_DELETE, .key = key};
		bool same = rc == 0 && (!a.node[0] || a.mod_rev == kv.mod_rev);

		zl_etcd_kv_fini(&kv);
		if (!same)
			continue;
		rc = zl_etcd_txn(c->etcd, &cmp, 1, &del, 1, NULL, 0, &ok, NULL);
		if (rc)
			return zl_grpc_fail_err(call, rc,
						"volume %s: cannot delete its attachment (%s)",
						r->volume_id, zl_etcd_last_error());
		if (ok) {
			ZL_LOG_INFO(CTRL_LOG, "ControllerUnpublishVolume id=%s node=%s",
				    r->volume_id, a.node[0] ? a.node : "(malformed record)");
			return ZL_GRPC_OK;
		}
	}
	return zl_grpc_fail(call, ZL_GRPC_ABORTED,
			    "volume %s: its attachment kept changing; retry", r->volume_id);
}

int ctrl_unpublish(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		   ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__ControllerUnpublishVolumeRequest *r =
	    (const Csi__V1__ControllerUnpublishVolumeRequest *)req;
	struct ctrl_oplock lk;
	uint64_t num;
	int rc;

	rc = ctrl_arg_required(call, "volume_id", r->volume_id);
	if (rc || zl_vol_id_parse(r->volume_id, &num))
		return rc; /* not one of ours: not published */
	rc = ctrl_op_begin(c, call, "vol", r->volume_id, &lk);
	if (rc)
		return rc;
	rc = unpublish_locked(c, call, r);
	ctrl_op_end(c, &lk);
	return rc;
}
