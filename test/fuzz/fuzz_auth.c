/* libFuzzer target: the credential decoders of lib/meta/zl_auth.c (a stored
 * key from etcd or a mounted Secret, hex, token comparison). A key the
 * parser takes must come out as 64 lowercase hex digits that parse to
 * themselves; hex decoding must accept exactly hex digits and encode back
 * to their lowercase form; a token is
 * equal to itself and to nothing of another length. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/meta/zl_auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_key(const char *s, size_t n)
{
	char out[ZL_AUTH_KEY_HEX + 1], again[ZL_AUTH_KEY_HEX + 1];

	if (zl_auth_key_parse(s, n, out))
		return;
	if (strlen(out) != ZL_AUTH_KEY_HEX)
		abort();
	for (size_t i = 0; i < ZL_AUTH_KEY_HEX; i++)
		if (!isxdigit((unsigned char)out[i]) || isupper((unsigned char)out[i]))
			abort();
	if (zl_auth_key_parse(out, strlen(out), again) || strcmp(out, again))
		abort();
}

/* zl_auth_hex_decode(hex, n) reads exactly the first 2n characters (callers
 * check the length): it must take them iff all are hex digits. */
static void fuzz_hex(const char *s, size_t n)
{
	uint8_t raw[64];
	char z[129], back[129];
	size_t want = n / 2 > sizeof(raw) ? sizeof(raw) : n / 2;
	bool all_hex = true;
	int rc;

	if (n >= sizeof(z))
		return;
	memcpy(z, s, n);
	z[n] = 0;
	for (size_t i = 0; i < 2 * want; i++)
		all_hex = all_hex && isxdigit((unsigned char)z[i]);
	rc = zl_auth_hex_decode(z, want, raw);
	if ((rc == 0) != all_hex)
		abort();
	if (!rc) {
		zl_auth_hex_encode(raw, want, back);
		for (size_t i = 0; i < 2 * want; i++)
			if (back[i] != tolower((unsigned char)z[i]))
				abort();
	}
}

static void fuzz_token(const char *s, size_t n)
{
	char a[129], b[129];
	size_t h = n / 2;

	if (n >= sizeof(a) || memchr(s, 0, n))
		return;
	memcpy(a, s, n);
	a[n] = 0;
	if (n && !zl_auth_token_eq(a, a))
		abort();
	memcpy(b, s, h);
	b[h] = 0;
	if (h != n && zl_auth_token_eq(a, b))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;

	fuzz_key(s, size);
	fuzz_hex(s, size);
	fuzz_token(s, size);
	return 0;
}
