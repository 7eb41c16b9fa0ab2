/* The flag parser of the daemons (cfg.h): getopt_long over tables of
 * descriptors, --help laid out from them, one error style. */
#include "cfg.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/common/common.h"

#define CFG_VAL_BASE	256 /* getopt values of table entries: CFG_VAL_BASE + index */
#define CFG_VAL_HELP	1
#define CFG_VAL_VERSION 2

int zl_cfg_err(const struct zl_cfg *c, const char *flag, const char *value, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", c->prog);
	if (flag && value)
		fprintf(stderr, "%s '%s': ", flag, value);
	else if (flag)
		fprintf(stderr, "%s: ", flag);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -ZL_ERR_INVAL;
}

static void cfg_usage_line(FILE *f, int col, const char *name, const char *arg, const char *help)
{
	int n;

	n = fprintf(f, "  --%s%s%s", name, arg && arg[0] != '=' && arg[0] != '[' ? " " : "",
		    arg ? arg : "");
	fprintf(f, "%*s", n < col ? col - n : 2, "");
	for (const char *p = help; *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);

		fprintf(f, "%.*s\n", (int)len, p);
		if (!nl)
			break;
		p = nl + 1;
		fprintf(f, "%*s", col, "");
	}
}

void zl_cfg_usage(const struct zl_cfg *c, FILE *f)
{
	fputs(c->usage, f);
	for (const struct zl_cfg_flag *const *t = c->tables; *t; t++)
		for (const struct zl_cfg_flag *fl = *t; fl->name; fl++)
			cfg_usage_line(f, c->col, fl->name, fl->arg, fl->help);
	cfg_usage_line(f, c->col, "version", NULL, "print the version and exit");
	cfg_usage_line(f, c->col, "help", NULL, "print this help and exit");
}

static int cfg_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"on", "true", "yes", "1"};
	static const char *const no[] = {"off", "false", "no", "0"};

	for (size_t i = 0; i < ZL_ARRAY_SIZE(yes); i++) {
		if (!strcmp(s, yes[i]) || !strcmp(s, no[i])) {
			*out = !strcmp(s, yes[i]);
			return 0;
		}
	}
	return -1;
}

/* Applies value to fl. 0 or -ZL_ERR_INVAL (printed). */
static int cfg_apply(const struct zl_cfg *c, const struct zl_cfg_flag *fl, const char *value)
{
	char flag[64], *end;
	const char *why = NULL;
	unsigned long v;

	snprintf(flag, sizeof(flag), "--%s", fl->name);
	switch (fl->type) {
	case ZL_CFG_STR:
		*(const char **)fl->target = value;
		return 0;
	case ZL_CFG_FILE:
		if (access(value, R_OK))
			return zl_cfg_err(c, flag, value,
					  "cannot read it (%s); check the path and "
					  "its permissions",
					  strerror(errno));
		*(const char **)fl->target = value;
		return 0;
	case ZL_CFG_BOOL:
		if (!value && fl->optional)
			value = "on";
		if (cfg_bool(value, fl->target))
			return zl_cfg_err(c, flag, value, "not on or off; pass %s=on or %s=off",
					  flag, flag);
		return 0;
	case ZL_CFG_SET:
	case ZL_CFG_CLEAR:
		*(bool *)fl->target = fl->type == ZL_CFG_SET;
		return 0;
	case ZL_CFG_UINT:
		errno = 0;
		v = strtoul(value, &end, 10);
		if (!*value || *end || value[0] == '-' || errno || v < fl->min || v > fl->max)
			return zl_cfg_err(c, flag, value,
					  "not a number of %s in %u..%u; pass one in "
					  "that range",
					  fl->unit ? fl->unit : "units", fl->min, fl->max);
		*(unsigned int *)fl->target = (unsigned int)v * (fl->scale ? fl->scale : 1);
		return 0;
	case ZL_CFG_CALL:
		if (fl->parse(value, fl->target, &why))
			return zl_cfg_err(c, flag, value, "%s",
					  why ? why : "not valid; see --help");
		return 0;
	}
	return -ZL_ERR_INVAL;
}

int zl_cfg_parse(const struct zl_cfg *c, int argc, char **argv)
{
	const struct zl_cfg_flag **ix = NULL;
	struct option *opts = NULL;
	size_t n = 0, i = 0;
	int o, rc = 0;

	for (const struct zl_cfg_flag *const *t = c->tables; *t; t++)
		for (const struct zl_cfg_flag *fl = *t; fl->name; fl++)
			n++;
	opts = calloc(n + 3, sizeof(*opts));
	ix = calloc(n + 1, sizeof(*ix));
	if (!opts || !ix) {
		rc = zl_cfg_err(c, NULL, NULL, "out of memory parsing the flags");
		goto out;
	}
	for (const struct zl_cfg_flag *const *t = c->tables; *t; t++) {
		for (const struct zl_cfg_flag *fl = *t; fl->name; fl++, i++) {
			bool none = fl->type == ZL_CFG_SET || fl->type == ZL_CFG_CLEAR;

			ix[i] = fl;
			opts[i] = (struct option){fl->name,
						  none		 ? no_argument
						  : fl->optional ? optional_argument
								 : required_argument,
						  NULL, CFG_VAL_BASE + (int)i};
		}
	}
	opts[i++] = (struct option){"help", no_argument, NULL, CFG_VAL_HELP};
	opts[i++] = (struct option){"version", no_argument, NULL, CFG_VAL_VERSION};
	opterr = 0;
	optind = 1;
	while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		if (o >= CFG_VAL_BASE) {
			rc = cfg_apply(c, ix[o - CFG_VAL_BASE], optarg);
			if (rc)
				goto out;
		} else if (o == CFG_VAL_HELP) {
			zl_cfg_usage(c, stdout);
			rc = 1;
			goto out;
		} else if (o == CFG_VAL_VERSION) {
			printf("%s %s\n", c->prog, ZL_VERSION_STRING);
			rc = 1;
			goto out;
		} else if (o == ':') {
			rc = zl_cfg_err(c, argv[optind - 1], NULL, "needs a value; see %s --help",
					c->prog);
			goto out;
		} else {
			rc = zl_cfg_err(c, argv[optind - 1], NULL, "unknown flag; see %s --help",
					c->prog);
			goto out;
		}
	}
	if (optind < argc)
		rc = zl_cfg_err(c, NULL, NULL,
				"'%s': unexpected argument (flags start with --); "
				"see %s --help",
				argv[optind], c->prog);
out:
	free(opts);
	free(ix);
	return rc;
}

int zl_cfg_log_level(const char *value, void *target, const char **why)
{
	if (zl_log_set_level(value)) {
		*why = "not a log level; pass err, warn, info or debug";
		return -ZL_ERR_INVAL;
	}
	return 0;
}

int zl_cfg_etcd_prefix(const char *value, void *target, const char **why)
{
	size_t len = strlen(value);

	if (!len || value[len - 1] != '/' || len >= 100) {
		*why = "not a key prefix; pass one that ends with '/' and is shorter than 100 "
		       "bytes (default /zipline/)";
		return -ZL_ERR_INVAL;
	}
	*(const char **)target = value;
	return 0;
}

int zl_cfg_csi_endpoint_check(const struct zl_cfg *c, const char *endpoint)
{
	const char *path;

	if (!endpoint || !*endpoint)
		return zl_cfg_err(c, "--endpoint", NULL,
				  "not given; pass --endpoint unix:///path/csi.sock or set "
				  "CSI_ENDPOINT");
	if (strncmp(endpoint, "unix:", 5))
		return zl_cfg_err(c, "--endpoint", endpoint,
				  "not unix:///path; CSI allows UNIX sockets only");
	path = endpoint + (strncmp(endpoint, "unix://", 7) ? 5 : 7);
	if (path[0] != '/')
		return zl_cfg_err(c, "--endpoint", endpoint,
				  "no absolute socket path; pass unix:///path/csi.sock");
	return 0;
}
