/* lib/meta/zl_auth.c: tokens against fixed vectors (computed with python's
 * hmac module), hex, constant-time compare, and the cluster key in a real
 * etcd (run under test/lib/with-etcd.sh) and in a file. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "lib/common/common.h"
#include "lib/meta/zl_auth.h"
#include "meta_fixture.h"

/* bytes 00 01 .. 1f */
static const char KEY[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

static void test_vectors(void **state)
{
	char tok[ZL_AUTH_TOKEN_HEX + 1];

	(void)state;
	/* hmac.new(bytes(range(32)), b"0000000000000001|node-a|42", sha256) */
	assert_int_equal(zl_auth_attach_token(KEY, "0000000000000001", "node-a", 42, tok), 0);
	assert_string_equal(tok,
			    "e10ec7af2d8782794c4d3de4fb25b01891a062bc7d8d5fb253ea43c210273962");
	/* hmac.new(bytes(range(32)), b"peer|node-1", sha256) */
	assert_int_equal(zl_auth_cluster_token(KEY, "node-1", tok), 0);
	assert_string_equal(tok,
			    "9eeb30d8d4066982a466c32a047832c6542e6f49878d6d8bc7611f34bd4140b7");
	/* Upper-case key digits are the same key. */
	char up[ZL_AUTH_KEY_HEX + 1];

	for (size_t i = 0; i <= ZL_AUTH_KEY_HEX; i++)
		up[i] = (char)(KEY[i] >= 'a' && KEY[i] <= 'f' ? KEY[i] - 32 : KEY[i]);
	assert_int_equal(zl_auth_cluster_token(up, "node-1", tok), 0);
	assert_string_equal(tok,
			    "9eeb30d8d4066982a466c32a047832c6542e6f49878d6d8bc7611f34bd4140b7");
}

/* The same as OpenSSL's HMAC on the message the contract names. */
static void test_against_openssl(void **state)
{
	uint8_t raw[32], mac[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	char tok[ZL_AUTH_TOKEN_HEX + 1], want[ZL_AUTH_TOKEN_HEX + 1];
	const char *msg = "00000000deadbeef|worker-7|18446744073709551615";

	(void)state;
	for (int i = 0; i < 32; i++)
		raw[i] = (uint8_t)(0xa0 + i);
	char key[65];

	zl_auth_hex_encode(raw, 32, key);
	assert_non_null(HMAC(EVP_sha256(), raw, 32, (const unsigned char *)msg, strlen(msg), mac,
			     &len));
	assert_int_equal(len, 32);
	zl_auth_hex_encode(mac, len, want);
	assert_int_equal(
	    zl_auth_attach_token(key, "00000000deadbeef", "worker-7", UINT64_MAX, tok), 0);
	assert_string_equal(tok, want);
}

static void test_bad_input(void **state)
{
	char tok[ZL_AUTH_TOKEN_HEX + 1];
	uint8_t b[2];
	char bad[ZL_AUTH_KEY_HEX + 1];

	(void)state;
	memcpy(bad, KEY, sizeof(bad));
	bad[10] = 'g';
	assert_int_equal(zl_auth_cluster_token(bad, "n", tok), -ZL_ERR_INVAL);
	assert_int_equal(zl_auth_cluster_token("abcd", "n", tok), -ZL_ERR_INVAL);
	assert_int_equal(zl_auth_cluster_token(NULL, "n", tok), -ZL_ERR_INVAL);
	assert_int_equal(zl_auth_hex_decode("0aFf", 2, b), 0);
	assert_int_equal(b[0], 0x0a);
	assert_int_equal(b[1], 0xff);
	assert_int_equal(zl_auth_hex_decode("0x", 1, b), -ZL_ERR_INVAL);
	assert_true(zl_auth_token_eq("abc", "abc"));
	assert_false(zl_auth_token_eq("abc", "abd"));
	assert_false(zl_auth_token_eq("abc", "abcd"));
	assert_false(zl_auth_token_eq("", ""));
	assert_false(zl_auth_token_eq(NULL, "a"));
}

static void test_key_file(void **state)
{
	char path[] = "/tmp/zl-auth-test-XXXXXX", out[ZL_AUTH_KEY_HEX + 1];
	int fd = mkstemp(path);
	FILE *f;

	(void)state;
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	fprintf(f, "  %s\n", KEY);
	fclose(f);
	assert_int_equal(zl_auth_cluster_key_file(path, out), 0);
	assert_string_equal(out, KEY);
	f = fopen(path, "w");
	fprintf(f, "{\"key\": \"%s\", \"created\": 1}", KEY);
	fclose(f);
	assert_int_equal(zl_auth_cluster_key_file(path, out), 0);
	assert_string_equal(out, KEY);
	f = fopen(path, "w");
	fprintf(f, "short");
	fclose(f);
	assert_int_equal(zl_auth_cluster_key_file(path, out), -ZL_ERR_INVAL);
	unlink(path);
	assert_int_equal(zl_auth_cluster_key_file(path, out), -ENOENT);
}

static void test_key_etcd(void **state)
{
	struct fixture *f = *state;
	char a[ZL_AUTH_KEY_HEX + 1], b[ZL_AUTH_KEY_HEX + 1];
	struct zl_etcd_kv kv;
	char key[512];

	assert_int_equal(zl_auth_cluster_key_etcd(f->e, f->prefix, false, a), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_auth_cluster_key_etcd(f->e, f->prefix, true, a), 0);
	assert_int_equal(strlen(a), ZL_AUTH_KEY_HEX);
	/* Created once: later readers and creators get the same key. */
	assert_int_equal(zl_auth_cluster_key_etcd(f->e, f->prefix, true, b), 0);
	assert_string_equal(a, b);
	assert_int_equal(zl_auth_cluster_key_etcd(f->e, f->prefix, false, b), 0);
	assert_string_equal(a, b);
	key_of(f, key, "keys", "cluster");
	assert_int_equal(zl_etcd_get(f->e, key, &kv), 0);
	assert_non_null(strstr(kv.value, "\"created\""));
	zl_etcd_kv_fini(&kv);
	put_raw(f, "keys", "cluster", "{\"key\": \"xyz\"}");
	assert_int_equal(zl_auth_cluster_key_etcd(f->e, f->prefix, true, b), -ZL_ERR_INVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_vectors),
	    cmocka_unit_test(test_against_openssl),
	    cmocka_unit_test(test_bad_input),
	    cmocka_unit_test(test_key_file),
	    cmocka_unit_test_setup_teardown(test_key_etcd, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
