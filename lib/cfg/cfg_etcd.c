/* The etcd options every daemon takes (cfg.h). */
#include "cfg.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/meta/meta.h"

/* --etcd: an empty value (an unset variable in a script) means "not given":
 * $ZIPLINE_ETCD or the default applies. */
static int cfg_etcd_endpoints(const char *value, void *target, const char **why)
{
	if (*value)
		*(const char **)target = value;
	return 0;
}

/* The flags, with where their values go in struct zl_cfg_etcd. */
static const struct {
	struct zl_cfg_flag f;
	size_t off;
} cfg_etcd_flags[] = {
    {{.name = "etcd", .arg = "URLS", .type = ZL_CFG_CALL, .parse = cfg_etcd_endpoints},
     offsetof(struct zl_cfg_etcd, endpoints)},
    {{.name = "etcd-prefix",
      .arg = "P",
      .type = ZL_CFG_CALL,
      .parse = zl_cfg_etcd_prefix,
      .help = "key prefix (default " ZL_META_DEFAULT_PREFIX ")"},
     offsetof(struct zl_cfg_etcd, prefix)},
    {{.name = "etcd-cacert",
      .arg = "FILE",
      .type = ZL_CFG_FILE,
      .help = "CA bundle for https etcd endpoints"},
     offsetof(struct zl_cfg_etcd, cacert)},
    {{.name = "etcd-cert",
      .arg = "FILE",
      .type = ZL_CFG_FILE,
      .help = "client certificate for etcd (with --etcd-key)"},
     offsetof(struct zl_cfg_etcd, cert)},
    {{.name = "etcd-key", .arg = "FILE", .type = ZL_CFG_FILE, .help = "client key for etcd"},
     offsetof(struct zl_cfg_etcd, key)},
    {{.name = "etcd-user",
      .arg = "USER",
      .type = ZL_CFG_STR,
      .help = "etcd user (with --etcd-password-file)"},
     offsetof(struct zl_cfg_etcd, user)},
    {{.name = "etcd-password-file",
      .arg = "FILE",
      .type = ZL_CFG_FILE,
      .help = "file holding the etcd password (first line)"},
     offsetof(struct zl_cfg_etcd, password_file)},
};

_Static_assert(ZL_ARRAY_SIZE(cfg_etcd_flags) < ZL_ARRAY_SIZE(((struct zl_cfg_etcd *)0)->flags),
	       "struct zl_cfg_etcd.flags holds the table and its end");

void zl_cfg_etcd_init(struct zl_cfg_etcd *e, bool required)
{
	const char *env = getenv("ZIPLINE_ETCD");

	memset(e, 0, sizeof(*e));
	e->endpoints = env && *env ? env : required ? NULL : ZL_CFG_ETCD_DEFAULT;
	e->prefix = ZL_META_DEFAULT_PREFIX;
	for (size_t i = 0; i < ZL_ARRAY_SIZE(cfg_etcd_flags); i++) {
		e->flags[i] = cfg_etcd_flags[i].f;
		e->flags[i].target = (char *)e + cfg_etcd_flags[i].off;
	}
	e->flags[0].help = required ? "etcd endpoints, comma-separated (env ZIPLINE_ETCD; required)"
				    : "etcd endpoints, comma-separated (default $ZIPLINE_ETCD,\n"
				      "else " ZL_CFG_ETCD_DEFAULT ")";
}

int zl_cfg_etcd_check(const struct zl_cfg *c, struct zl_cfg_etcd *e)
{
	FILE *f;

	if (!e->endpoints || !*e->endpoints)
		return zl_cfg_err(c, "--etcd", NULL,
				  "not given; pass --etcd http://HOST:2379 or "
				  "set ZIPLINE_ETCD");
	if (!e->cert != !e->key)
		return zl_cfg_err(c, e->cert ? "--etcd-cert" : "--etcd-key", NULL,
				  "needs %s too; pass both or neither",
				  e->cert ? "--etcd-key" : "--etcd-cert");
	if (!e->user != !e->password_file)
		return zl_cfg_err(c, e->user ? "--etcd-user" : "--etcd-password-file", NULL,
				  "needs %s too; pass both or neither",
				  e->user ? "--etcd-password-file" : "--etcd-user");
	e->password[0] = 0;
	if (!e->password_file)
		return 0;
	f = fopen(e->password_file, "r");
	if (!f)
		return zl_cfg_err(c, "--etcd-password-file", e->password_file,
				  "cannot read it (%s); check the path and its permissions",
				  strerror(errno));
	if (!fgets(e->password, sizeof(e->password), f))
		e->password[0] = 0;
	fclose(f);
	e->password[strcspn(e->password, "\r\n")] = 0;
	if (!e->password[0])
		return zl_cfg_err(c, "--etcd-password-file", e->password_file,
				  "its first line is empty; put the etcd password there");
	return 0;
}

void zl_cfg_etcd_opts(const struct zl_cfg_etcd *e, struct zl_etcd_opts *eo)
{
	eo->endpoints = e->endpoints;
	eo->cacert = e->cacert;
	eo->cert = e->cert;
	eo->key = e->key;
	eo->user = e->user;
	eo->password = e->password[0] ? e->password : NULL;
}
