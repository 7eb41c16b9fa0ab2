/* Credentials of the data path (docs/SECURITY.md): the attach token a
 * ControllerPublish mints for one volume, node and epoch, the cluster token
 * of the storage daemons, the manager and `zl` as an operator, and the
 * cluster key they are derived from. Tokens are lowercase hex
 * HMAC-SHA256; keys and tokens are never logged. */
#ifndef ZL_AUTH_H
#define ZL_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct zl_etcd;

#define ZL_AUTH_KEY_HEX	  64 /* a volume secret or the cluster key: 32 raw bytes */
#define ZL_AUTH_TOKEN_HEX 64 /* HMAC-SHA256 */

/* Lowercase hex of n bytes into out (2n + 1 bytes). */
void zl_auth_hex_encode(const uint8_t *in, size_t n, char *out);
/* Exactly 2n hex digits of hex (either case) into n bytes. 0 or
 * -ZL_ERR_INVAL. */
int zl_auth_hex_decode(const char *hex, size_t n, uint8_t *out);

/* The attach token: HMAC-SHA256 keyed with the secret's 32 raw bytes over
 * "<vol-id>|<node-id>|<epoch>". 0 or -ZL_ERR_INVAL. */
int zl_auth_attach_token(const char *secret_hex, const char *vol_id, const char *node_id,
			 uint64_t epoch, char out[ZL_AUTH_TOKEN_HEX + 1]);
/* The cluster token of node_id: HMAC-SHA256 keyed with the cluster key's 32
 * raw bytes over "peer|<node-id>". 0 or -ZL_ERR_INVAL. */
int zl_auth_cluster_token(const char *key_hex, const char *node_id,
			  char out[ZL_AUTH_TOKEN_HEX + 1]);
/* Constant-time equality of two tokens (NUL-terminated, at most 128
 * bytes); false when the lengths differ or either is empty. */
bool zl_auth_token_eq(const char *a, const char *b);

/* Parses a stored key: 64 hex digits (either case, surrounding whitespace
 * ignored) or the JSON {"key": "<64 hex>", ...}; out gets the lowercase
 * form. 0 or -ZL_ERR_INVAL. It decodes bytes from etcd and from files. */
int zl_auth_key_parse(const char *val, size_t len, char out[ZL_AUTH_KEY_HEX + 1]);
/* Reads the cluster key <prefix>keys/cluster ({"key": "<64 hex>",
 * "created": <unix s>}) into out. With create, a missing key is made (a
 * create-if-absent transaction: whoever comes first wins, the others read
 * the winner's). 0, -ZL_ERR_NOT_FOUND (absent, !create), -ZL_ERR_INVAL
 * (malformed, logged), or an etcd error. */
int zl_auth_cluster_key_etcd(struct zl_etcd *e, const char *prefix, bool create,
			     char out[ZL_AUTH_KEY_HEX + 1]);
/* Reads the cluster key from a file (a Kubernetes Secret: 64 hex digits,
 * surrounding whitespace ignored, or the JSON of the etcd key). 0, -errno,
 * or -ZL_ERR_INVAL (logged). */
int zl_auth_cluster_key_file(const char *path, char out[ZL_AUTH_KEY_HEX + 1]);
/* The key from path when it is set, else from etcd (create as above). Logs
 * one line naming the key or file and what to do when it fails. */
int zl_auth_cluster_key_load(struct zl_etcd *e, const char *prefix, const char *path,
			     bool create, char out[ZL_AUTH_KEY_HEX + 1]);

#endif
