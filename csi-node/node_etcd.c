/* etcd TLS and auth settings of zipline-node. The flags are turned into
 * ZIPLINE_ETCD_* environment variables so that every attach process (which
 * inherits the environment, never argv: the password file path is harmless
 * but the pattern keeps secrets out of ps) connects to etcd the same way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node.h"

int node_etcd_flag(const char *flag, const char *value)
{
	static const char *const map[][2] = {
	    {"etcd-cacert", "ZIPLINE_ETCD_CACERT"},
	    {"etcd-cert", "ZIPLINE_ETCD_CERT"},
	    {"etcd-key", "ZIPLINE_ETCD_KEY"},
	    {"etcd-user", "ZIPLINE_ETCD_USER"},
	    {"etcd-password-file", "ZIPLINE_ETCD_PASSWORD_FILE"},
	};

	for (size_t i = 0; i < ZL_ARRAY_SIZE(map); i++) {
		if (strcmp(flag, map[i][0]))
			continue;
		if (strcmp(flag, "etcd-user") && access(value, R_OK)) {
			fprintf(stderr, "zipline-node: cannot read --%s %s (check the path)\n", flag,
				value);
			return 2;
		}
		setenv(map[i][1], value, 1);
		return 0;
	}
	return 2;
}

int node_etcd_opts(struct zl_etcd_opts *eo, char *pw, size_t pw_len)
{
	const char *pwfile = getenv("ZIPLINE_ETCD_PASSWORD_FILE");

	eo->cacert = getenv("ZIPLINE_ETCD_CACERT");
	eo->cert = getenv("ZIPLINE_ETCD_CERT");
	eo->key = getenv("ZIPLINE_ETCD_KEY");
	eo->user = getenv("ZIPLINE_ETCD_USER");
	eo->password = NULL;
	if (!eo->user != !pwfile) {
		fprintf(stderr, "zipline-node: --etcd-user and --etcd-password-file go together\n");
		return -ZL_ERR_INVAL;
	}
	if (!eo->cert != !eo->key) {
		fprintf(stderr, "zipline-node: --etcd-cert and --etcd-key go together\n");
		return -ZL_ERR_INVAL;
	}
	if (pwfile) {
		FILE *f = fopen(pwfile, "r");

		if (!f || !fgets(pw, (int)pw_len, f)) {
			if (f)
				fclose(f);
			fprintf(stderr, "zipline-node: cannot read --etcd-password-file %s\n", pwfile);
			return -ZL_ERR_INVAL;
		}
		fclose(f);
		pw[strcspn(pw, "\r\n")] = 0;
		eo->password = pw;
	}
	return 0;
}
