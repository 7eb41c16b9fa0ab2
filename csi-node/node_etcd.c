/* etcd TLS and auth settings of zipline-node. The parsed flags (lib/cfg) are
 * put in ZIPLINE_ETCD_* environment variables so that every attach process
 * (which inherits the environment, never argv: the password file path is
 * harmless but the pattern keeps secrets out of ps) connects to etcd the
 * same way, and checks them with the same code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cfg/cfg.h"
#include "node.h"

/* The variable of each setting, and where it lives in struct zl_cfg_etcd. */
static const struct {
	const char *env;
	size_t off;
} node_etcd_env[] = {
    {"ZIPLINE_ETCD_CACERT", offsetof(struct zl_cfg_etcd, cacert)},
    {"ZIPLINE_ETCD_CERT", offsetof(struct zl_cfg_etcd, cert)},
    {"ZIPLINE_ETCD_KEY", offsetof(struct zl_cfg_etcd, key)},
    {"ZIPLINE_ETCD_USER", offsetof(struct zl_cfg_etcd, user)},
    {"ZIPLINE_ETCD_PASSWORD_FILE", offsetof(struct zl_cfg_etcd, password_file)},
};

static const char **node_etcd_field(struct zl_cfg_etcd *e, size_t i)
{
	return (const char **)((char *)e + node_etcd_env[i].off);
}

void node_etcd_import(struct zl_cfg_etcd *e)
{
	for (size_t i = 0; i < ZL_ARRAY_SIZE(node_etcd_env); i++)
		*node_etcd_field(e, i) = getenv(node_etcd_env[i].env);
}

void node_etcd_export(const struct zl_cfg_etcd *e)
{
	for (size_t i = 0; i < ZL_ARRAY_SIZE(node_etcd_env); i++) {
		const char *v = *node_etcd_field((struct zl_cfg_etcd *)e, i);

		if (v)
			setenv(node_etcd_env[i].env, v, 1);
		else
			unsetenv(node_etcd_env[i].env);
	}
}

int node_etcd_opts(struct zl_etcd_opts *eo, char *pw, size_t pw_len)
{
	static const struct zl_cfg cli = {.prog = "zipline-node attach"};
	struct zl_cfg_etcd e;
	int rc;

	zl_cfg_etcd_init(&e, true);
	e.endpoints = eo->endpoints;
	node_etcd_import(&e);
	rc = zl_cfg_etcd_check(&cli, &e);
	if (!rc && snprintf(pw, pw_len, "%s", e.password) >= (int)pw_len)
		rc = zl_cfg_err(&cli, "--etcd-password-file", e.password_file,
				"the password is longer than %zu bytes; use a shorter one",
				pw_len - 1);
	if (!rc) {
		zl_cfg_etcd_opts(&e, eo);
		eo->password = pw[0] ? pw : NULL;
	}
	explicit_bzero(e.password, sizeof(e.password));
	return rc;
}
