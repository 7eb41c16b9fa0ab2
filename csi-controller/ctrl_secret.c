/* Per-volume secret (<prefix>secrets/<vol-id>, 64 hex chars). The attach
 * token of ControllerPublish is derived from it by zl_auth_attach_token
 * (lib/meta/zl_auth.c), which the storage daemons recompute to check a
 * client's HELLO. The secret is never logged. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "ctrl.h"
#include "lib/meta/zl_auth.h"

static int secret_key(const struct ctrl *c, const char *vol_id, char *out, size_t len)
{
	return zl_meta_key(out, len, c->prefix, "secrets", vol_id);
}

int ctrl_secret_ensure(struct ctrl *c, const char *vol_id)
{
	uint8_t raw[CTRL_SECRET_HEX / 2];
	char hex[CTRL_SECRET_HEX + 1], key[256];
	ssize_t n;
	int rc;

	rc = secret_key(c, vol_id, key, sizeof(key));
	if (rc)
		return rc;
	n = getrandom(raw, sizeof(raw), 0);
	if (n != (ssize_t)sizeof(raw))
		return n < 0 ? -errno : -EIO;
	zl_auth_hex_encode(raw, sizeof(raw), hex);
	explicit_bzero(raw, sizeof(raw));
	/* A retried CreateVolume keeps the secret it made the first time. */
	const struct zl_etcd_cmp cmp = {
	    .key = key, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
	const struct zl_etcd_op put = {
	    .kind = ZL_ETCD_OP_PUT, .key = key, .value = hex, .value_len = CTRL_SECRET_HEX};
	rc = zl_etcd_txn(c->etcd, &cmp, 1, &put, 1, NULL, 0, NULL, NULL);
	explicit_bzero(hex, sizeof(hex));
	return rc;
}

int ctrl_secret_get(struct ctrl *c, const char *vol_id, char out[CTRL_SECRET_HEX + 1])
{
	struct zl_etcd_kv kv;
	int rc;

	rc = ctrl_record_get(c, "secrets", vol_id, &kv);
	if (rc)
		return rc;
	if (kv.value_len != CTRL_SECRET_HEX) {
		ZL_LOG_ERR(CTRL_LOG, "malformed volume secret key=%s len=%zu: delete it and "
			   "re-create the volume", kv.key, kv.value_len);
		rc = -ZL_ERR_INVAL;
	} else {
		memcpy(out, kv.value, CTRL_SECRET_HEX);
		out[CTRL_SECRET_HEX] = '\0';
	}
	explicit_bzero(kv.value, kv.value_len);
	zl_etcd_kv_fini(&kv);
	return rc;
}

int ctrl_secret_delete(struct ctrl *c, const char *vol_id)
{
	char key[256];
	int rc;

	rc = secret_key(c, vol_id, key, sizeof(key));
	if (rc)
		return rc;
	return zl_etcd_delete(c->etcd, key, NULL, NULL);
}
