/* Command lines of the Zipline daemons: one parser over tables of flag
 * descriptors, one --help layout, one error style, and the etcd options all
 * of them share (--etcd, --etcd-prefix, etcd TLS and auth).
 *
 * Every error a user sees reads
 *     zipline-X: --flag 'value': what is wrong; what to do
 * (zl_cfg_err), on stderr, and the daemon exits 2. */
#ifndef ZL_CFG_H
#define ZL_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/etcd/etcd.h"

enum zl_cfg_type {
	ZL_CFG_STR,   /* const char **target = the value */
	ZL_CFG_FILE,  /* const char **target = the value, a file this process can read */
	ZL_CFG_BOOL,  /* bool *target: on|off (also true|false, yes|no, 1|0) */
	ZL_CFG_SET,   /* bool *target = true; takes no value */
	ZL_CFG_CLEAR, /* bool *target = false; takes no value */
	ZL_CFG_UINT,  /* unsigned int *target = value * scale, value in min..max */
	ZL_CFG_CALL,  /* parse(value, target) does it */
};

/* A parse callback: 0, or -ZL_ERR_INVAL with *why set to "what is wrong;
 * what to do" (a static string). */
typedef int (*zl_cfg_parse_cb)(const char *value, void *target, const char **why);

/* One flag. A table of them ends with an entry whose name is NULL. */
struct zl_cfg_flag {
	const char *name; /* without the leading "--" */
	const char *arg;  /* the value in --help ("DIR"; "=on|off" and
			   * "[=on|off]" print without a space); NULL for
			   * ZL_CFG_SET / ZL_CFG_CLEAR */
	enum zl_cfg_type type;
	void *target;
	const char *help;      /* --help text; '\n' starts a continuation line */
	unsigned int min, max; /* ZL_CFG_UINT: accepted values */
	unsigned int scale;    /* ZL_CFG_UINT: stored value = value * scale (0 = 1) */
	const char *unit;      /* ZL_CFG_UINT: "seconds", in the error message */
	bool optional;	       /* ZL_CFG_BOOL: "--flag" alone means on */
	zl_cfg_parse_cb parse; /* ZL_CFG_CALL */
};

/* One daemon's command line. */
struct zl_cfg {
	const char *prog;  /* "zipline-storage": messages and --version */
	const char *usage; /* first lines of --help, each ending in '\n' */
	int col;	   /* column the help texts start at */
	/* Tables, in --help order, NULL-terminated. */
	const struct zl_cfg_flag *const *tables;
};

/* Parses argv (from argv[1]) over c's tables, plus --help and --version.
 * Returns 0 (go on), 1 (--help or --version printed: exit 0), or
 * -ZL_ERR_INVAL after printing one error line (exit 2). */
int zl_cfg_parse(const struct zl_cfg *c, int argc, char **argv);

/* Prints c's --help on f. */
void zl_cfg_usage(const struct zl_cfg *c, FILE *f);

/* Prints "prog: flag 'value': " (flag without value when value is NULL;
 * no flag either when flag is NULL) and the formatted rest ("what is wrong;
 * what to do"), one line on stderr. Returns -ZL_ERR_INVAL. */
__attribute__((format(printf, 4, 5))) int zl_cfg_err(const struct zl_cfg *c, const char *flag,
						     const char *value, const char *fmt, ...);

/* Parse callbacks shared by the daemons. */
/* --log-level: err|warn|info|debug, applied at once (target unused). */
int zl_cfg_log_level(const char *value, void *target, const char **why);

/* The --metrics flag of every daemon (lib/metrics): a const char * target,
 * NULL (or "off") when not given. */
#define ZL_CFG_FLAG_METRICS(tgt)                                                                  \
	{.name = "metrics",                                                                       \
	 .arg = "HOST:PORT",                                                                      \
	 .type = ZL_CFG_STR,                                                                      \
	 .target = (tgt),                                                                         \
	 .help = "serve /metrics (Prometheus), /healthz and /readyz over\nHTTP here (:PORT: "     \
		 "every address; default off)"}
/* --etcd-prefix: ends with '/', shorter than 100 bytes; target const char **. */
int zl_cfg_etcd_prefix(const char *value, void *target, const char **why);

/* The CSI daemons' --endpoint (default $CSI_ENDPOINT): given, and a UNIX
 * socket (unix:///path, unix:/path). 0 or -ZL_ERR_INVAL after one error
 * line. */
int zl_cfg_csi_endpoint_check(const struct zl_cfg *c, const char *endpoint);

/* ---- the etcd options every daemon takes ---- */

#define ZL_CFG_ETCD_PASSWORD_MAX 256

struct zl_cfg_etcd {
	const char *endpoints;			 /* --etcd, else $ZIPLINE_ETCD, else the default */
	const char *prefix;			 /* --etcd-prefix, default ZL_META_DEFAULT_PREFIX */
	const char *cacert;			 /* --etcd-cacert */
	const char *cert;			 /* --etcd-cert, with --etcd-key */
	const char *key;			 /* --etcd-key */
	const char *user;			 /* --etcd-user, with --etcd-password-file */
	const char *password_file;		 /* --etcd-password-file */
	char password[ZL_CFG_ETCD_PASSWORD_MAX]; /* its first line, by zl_cfg_etcd_check */
	struct zl_cfg_flag flags[8];		 /* the table to list in struct zl_cfg */
};

/* --etcd's default when it is not required. */
#define ZL_CFG_ETCD_DEFAULT "http://127.0.0.1:2379"

/* Sets the defaults (endpoints: $ZIPLINE_ETCD, else ZL_CFG_ETCD_DEFAULT
 * unless required) and e->flags, which point into e (e must not move
 * afterwards). */
void zl_cfg_etcd_init(struct zl_cfg_etcd *e, bool required);
/* After zl_cfg_parse: endpoints given, --etcd-cert with --etcd-key,
 * --etcd-user with --etcd-password-file, and reads the password. 0 or
 * -ZL_ERR_INVAL after one error line. */
int zl_cfg_etcd_check(const struct zl_cfg *c, struct zl_cfg_etcd *e);
/* Fills eo from e (eo->password points into e; timeout_ms untouched). */
void zl_cfg_etcd_opts(const struct zl_cfg_etcd *e, struct zl_etcd_opts *eo);

#endif
