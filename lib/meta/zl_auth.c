/* Credentials of the data path: attach and cluster tokens, the cluster key
 * (zl_auth.h, docs/SECURITY.md). Keys and tokens are never logged. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "lib/common/common.h"
#include "lib/common/log.h"
#include "lib/common/zl_err.h"
#include "lib/etcd/etcd.h"
#include "meta.h"
#include "zl_auth.h"

#define AUTH_LOG "auth"

void zl_auth_hex_encode(const uint8_t *in, size_t n, char *out)
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

int zl_auth_hex_decode(const char *hex, size_t n, uint8_t *out)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hex_nibble(hex[2 * i]), lo = hi < 0 ? -1 : hex_nibble(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -ZL_ERR_INVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

/* Hex HMAC-SHA256 keyed with the 32 raw bytes of key_hex over msg. */
static int auth_hmac(const char *key_hex, const char *msg, size_t len,
		     char out[ZL_AUTH_TOKEN_HEX + 1])
{
	uint8_t raw[ZL_AUTH_KEY_HEX / 2], mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;
	int rc = -ZL_ERR_INVAL;

	if (!key_hex || strlen(key_hex) != ZL_AUTH_KEY_HEX ||
	    zl_auth_hex_decode(key_hex, sizeof(raw), raw))
		goto out;
	if (!HMAC(EVP_sha256(), raw, sizeof(raw), (const unsigned char *)msg, len, mac,
		  &mac_len) ||
	    mac_len != ZL_AUTH_TOKEN_HEX / 2)
		goto out;
	zl_auth_hex_encode(mac, mac_len, out);
	rc = 0;
out:
	OPENSSL_cleanse(raw, sizeof(raw));
	OPENSSL_cleanse(mac, sizeof(mac));
	return rc;
}

int zl_auth_attach_token(const char *secret_hex, const char *vol_id, const char *node_id,
			 uint64_t epoch, char out[ZL_AUTH_TOKEN_HEX + 1])
{
	char msg[256];
	int n;

	if (!vol_id || !node_id)
		return -ZL_ERR_INVAL;
	n = snprintf(msg, sizeof(msg), "%s|%s|%" PRIu64, vol_id, node_id, epoch);
	if (n < 0 || (size_t)n >= sizeof(msg))
		return -ZL_ERR_INVAL;
	return auth_hmac(secret_hex, msg, (size_t)n, out);
}

int zl_auth_cluster_token(const char *key_hex, const char *node_id,
			  char out[ZL_AUTH_TOKEN_HEX + 1])
{
	char msg[256];
	int n;

	if (!node_id)
		return -ZL_ERR_INVAL;
	n = snprintf(msg, sizeof(msg), "peer|%s", node_id);
	if (n < 0 || (size_t)n >= sizeof(msg))
		return -ZL_ERR_INVAL;
	return auth_hmac(key_hex, msg, (size_t)n, out);
}

bool zl_auth_token_eq(const char *a, const char *b)
{
	size_t la = a ? strnlen(a, 129) : 0, lb = b ? strnlen(b, 129) : 0;

	if (!la || la != lb || la > 128)
		return false;
	return CRYPTO_memcmp(a, b, la) == 0;
}

/* The key of a cluster-key value (JSON or bare hex) into out. */
int zl_auth_key_parse(const char *val, size_t len, char out[ZL_AUTH_KEY_HEX + 1])
{
	uint8_t raw[ZL_AUTH_KEY_HEX / 2];
	const char *hex = NULL;
	json_t *j = NULL;
	int rc = -ZL_ERR_INVAL;

	while (len && (*val == ' ' || *val == '\n' || *val == '\t' || *val == '\r')) {
		val++;
		len--;
	}
	while (len && (val[len - 1] == ' ' || val[len - 1] == '\n' || val[len - 1] == '\t' ||
		       val[len - 1] == '\r'))
		len--;
	if (len && *val == '{') {
		j = json_loadb(val, len, 0, NULL);
		hex = j ? json_string_value(json_object_get(j, "key")) : NULL;
		len = hex ? strlen(hex) : 0;
	} else {
		hex = val;
	}
	if (hex && len == ZL_AUTH_KEY_HEX && !zl_auth_hex_decode(hex, sizeof(raw), raw)) {
		zl_auth_hex_encode(raw, sizeof(raw), out);
		rc = 0;
	}
	OPENSSL_cleanse(raw, sizeof(raw));
	json_decref(j);
	return rc;
}

int zl_auth_cluster_key_etcd(struct zl_etcd *e, const char *prefix, bool create,
			     char out[ZL_AUTH_KEY_HEX + 1])
{
	char key[512], hex[ZL_AUTH_KEY_HEX + 1];
	uint8_t raw[ZL_AUTH_KEY_HEX / 2];
	struct zl_etcd_txn_result res = {0};
	struct zl_etcd_kv kv;
	char *json = NULL;
	json_t *j;
	int rc;

	rc = zl_meta_key(key, sizeof(key), prefix, "keys", "cluster");
	if (rc)
		return rc;
	memset(&kv, 0, sizeof(kv));
	rc = zl_etcd_get(e, key, &kv);
	if (rc != -ZL_ERR_NOT_FOUND || !create)
		goto parse;
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return -EIO;
	zl_auth_hex_encode(raw, sizeof(raw), hex);
	OPENSSL_cleanse(raw, sizeof(raw));
	j = json_pack("{s:s, s:I}", "key", hex, "created", (json_int_t)zl_wall_sec());
	OPENSSL_cleanse(hex, sizeof(hex));
	json = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!json)
		return -ENOMEM;
	{
		const struct zl_etcd_cmp cmp = {
		    .key = key, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
		const struct zl_etcd_op put = {.kind = ZL_ETCD_OP_PUT,
					       .key = key,
					       .value = json,
					       .value_len = strlen(json)};
		const struct zl_etcd_op get = {.kind = ZL_ETCD_OP_GET, .key = key};

		rc = zl_etcd_txn(e, &cmp, 1, &put, 1, &get, 1, NULL, &res);
	}
	if (!rc && res.succeeded) {
		rc = zl_auth_key_parse(json, strlen(json), out);
		ZL_LOG_INFO(AUTH_LOG, "cluster key created: key=%s", key);
	} else if (!rc && res.n_gets && res.gets[0].n) {
		/* Someone else made it first: theirs is the key. */
		rc = zl_auth_key_parse(res.gets[0].kvs[0].value, res.gets[0].kvs[0].value_len, out);
	} else if (!rc) {
		rc = -ZL_ERR_CONFLICT;
	}
	OPENSSL_cleanse(json, strlen(json));
	free(json);
	zl_etcd_txn_result_fini(&res);
	goto check;
parse:
	if (!rc) {
		rc = zl_auth_key_parse(kv.value, kv.value_len, out);
		OPENSSL_cleanse(kv.value, kv.value_len);
		zl_etcd_kv_fini(&kv);
	}
check:
	if (rc == -ZL_ERR_INVAL)
		ZL_LOG_ERR(AUTH_LOG,
			   "malformed cluster key %s: it must be {\"key\": \"<64 hex>\", ...}; "
			   "inspect it with etcdctl",
			   key);
	return rc;
}

int zl_auth_cluster_key_file(const char *path, char out[ZL_AUTH_KEY_HEX + 1])
{
	char buf[1024];
	size_t n;
	FILE *f = fopen(path, "re");
	int rc;

	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf), f);
	rc = ferror(f) ? -EIO : 0;
	fclose(f);
	if (!rc)
		rc = n < sizeof(buf) ? zl_auth_key_parse(buf, n, out) : -ZL_ERR_INVAL;
	OPENSSL_cleanse(buf, sizeof(buf));
	if (rc == -ZL_ERR_INVAL)
		ZL_LOG_ERR(AUTH_LOG,
			   "malformed cluster key file %s: it must hold 64 hex digits (or the "
			   "JSON of <prefix>keys/cluster)",
			   path);
	return rc;
}

int zl_auth_cluster_key_load(struct zl_etcd *e, const char *prefix, const char *path,
			     bool create, char out[ZL_AUTH_KEY_HEX + 1])
{
	char key[512];
	int rc;

	if (path && *path) {
		rc = zl_auth_cluster_key_file(path, out);
		if (rc && rc != -ZL_ERR_INVAL)
			ZL_LOG_ERR(AUTH_LOG, "cannot read the cluster key file %s: %s", path,
				   zl_strerror(rc));
		return rc;
	}
	if (!e)
		return -ZL_ERR_INVAL;
	rc = zl_auth_cluster_key_etcd(e, prefix, create, out);
	if (rc && rc != -ZL_ERR_INVAL) {
		zl_meta_key(key, sizeof(key), prefix, "keys", "cluster");
		ZL_LOG_ERR(AUTH_LOG,
			   "cannot read the cluster key %s from etcd: %s (%s); storage-to-storage "
			   "and operator requests need it: this needs operator access to etcd "
			   "(--etcd, credentials) or --cluster-key-file",
			   key, zl_errname(rc), rc == -ZL_ERR_NOT_FOUND ? "absent" : zl_etcd_last_error());
	}
	return rc;
}
