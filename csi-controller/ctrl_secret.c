/* Per-volume secret (<prefix>secrets/<vol-id>, 64 hex chars) and the attach
 * token of ControllerPublish: hex HMAC-SHA256, keyed with the secret's 32 raw
 * bytes, over "<vol-id>|<node-id>|<epoch>". Storage daemons are to recompute
 * it to check a client's HELLO; they do not yet (issue 11). The secret is
 * never logged. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ctrl.h"

static void hex_encode(const uint8_t *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static int hex_nibble(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

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
	hex_encode(raw, sizeof(raw), hex);
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

int ctrl_token(const char *secret_hex, const char *vol_id, const char *node_id, uint64_t epoch,
	       char out[CTRL_TOKEN_HEX + 1])
{
	uint8_t raw[CTRL_SECRET_HEX / 2], mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;
	char msg[256];
	int n;

	for (size_t i = 0; i < sizeof(raw); i++) {
		int hi = hex_nibble(secret_hex[2 * i]), lo = hex_nibble(secret_hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -ZL_ERR_INVAL;
		raw[i] = (uint8_t)(hi << 4 | lo);
	}
	n = snprintf(msg, sizeof(msg), "%s|%s|%" PRIu64, vol_id, node_id, epoch);
	if (n < 0 || (size_t)n >= sizeof(msg))
		return -ZL_ERR_INVAL;
	if (!HMAC(EVP_sha256(), raw, sizeof(raw), (const unsigned char *)msg, (size_t)n, mac,
		  &mac_len) ||
	    mac_len != CTRL_TOKEN_HEX / 2) {
		explicit_bzero(raw, sizeof(raw));
		return -ZL_ERR_INVAL;
	}
	explicit_bzero(raw, sizeof(raw));
	hex_encode(mac, mac_len, out);
	return 0;
}
