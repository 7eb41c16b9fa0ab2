/* zl internals shared by the command files. */
#ifndef ZL_CLI_H
#define ZL_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lib/common/common.h"
#include "lib/common/loop.h"

#define ZL_CLI_EXIT_RUNTIME 1
#define ZL_CLI_EXIT_USAGE   2

#define ZL_CLI_DEFAULT_ETCD "http://127.0.0.1:2379"
#define ZL_CLI_IO_TIMEOUT_MAX 86400u /* --io-timeout upper bound, seconds */
#define ZL_CLI_BUSY_POLL_MAX  10000u /* --busy-poll upper bound, microseconds (as storage) */
/* The local cluster of scripts/local-cluster.sh (`make run`): persistent
 * state (etcd and chunk data survive `make stop`), root-owned, never in a
 * world-writable place. */
#define ZL_CLI_DEFAULT_LOCAL_DIR "/var/lib/zipline-local"

/* Where the etcd endpoints came from (for error messages). */
enum zl_cli_etcd_src { ZL_CLI_ETCD_FLAG, ZL_CLI_ETCD_ENV, ZL_CLI_ETCD_LOCAL, ZL_CLI_ETCD_DEFAULT };

struct zl_cli_globals {
	const char *etcd;      /* --etcd, NULL when absent */
	const char *prefix;    /* --etcd-prefix */
	const char *transport; /* --transport */
	const char *log_level; /* --log-level */
	const char *io_timeout; /* --io-timeout SEC: how long volume I/O waits */
	const char *tls_ca;	/* --tls-ca FILE (else $ZIPLINE_TLS_CA): TLS nodes */
	const char *tls_server_name; /* --tls-server-name (else $ZIPLINE_TLS_SERVER_NAME) */
	const char *busy_poll;	/* --busy-poll US: the volume client's loop polls after work */
	bool legacy_drop;	/* --legacy-drop: 0.1 client (promotes by slice_drop) */
	bool help, version;
};

/* Removes the global flags (anywhere in argv, up to a "--") and stores them
 * in *g; argv keeps the program name, the command and its own arguments,
 * *argc is updated. "--help"/"-h" is kept in argv when it follows a command
 * (command help) and sets g->help otherwise. Returns 0, or -ZL_ERR_INVAL with
 * a message in err (a flag without its value). */
int zl_cli_globals_parse(int *argc, char **argv, struct zl_cli_globals *g, char *err,
			 size_t err_len);

/* Reads the first line of <dir>/etcd.endpoints into out if nobody but root
 * or uid can have written it: the file (a regular file, not a symbolic link),
 * dir and every directory above dir are owned by root or uid and are not
 * writable by group or others (directories above dir may be, with the sticky
 * bit, like /tmp). Returns 0 (out filled, "" for an empty file), -ENOENT (no
 * such directory or file), -EACCES (not trusted) or another negative errno
 * (cannot be read); on -EACCES and other errors a one-line reason naming the
 * path and the fix is written to err. */
int zl_cli_local_read(const char *dir, uid_t uid, char *out, size_t out_len, char *err,
		      size_t err_len);

/* Chooses the etcd endpoints: flag, else env (ZIPLINE_ETCD), else the first
 * line of <local_dir>/etcd.endpoints (local_dir NULL = $ZIPLINE_LOCAL_DIR or
 * ZL_CLI_DEFAULT_LOCAL_DIR) read with zl_cli_local_read for the real uid,
 * else ZL_CLI_DEFAULT_ETCD when there is no such file. Writes the endpoints
 * to out and where they came from to *src. Returns 0, or the error of
 * zl_cli_local_read (the file exists but is not trusted or cannot be read)
 * with a one-line message in err that says what is wrong and to pass --etcd;
 * it never falls back to another etcd then. */
int zl_cli_etcd_discover(const char *flag, const char *env, const char *local_dir, char *out,
			 size_t out_len, enum zl_cli_etcd_src *src, char *err, size_t err_len);

/* Parses a size flag value: 0 or -ZL_ERR_INVAL (also for zero when
 * !allow_zero). */
int zl_cli_parse_size(const char *s, bool allow_zero, uint64_t *out);
/* Parses an unsigned decimal in [min, max]: 0 or -ZL_ERR_INVAL. */
int zl_cli_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out);
/* Checks an NBD listen spec: "unix:PATH" or "HOST:PORT" with a numeric port. */
int zl_cli_nbd_spec_check(const char *s);

/* Log-linear latency histogram: values (ns) below 2^ZL_HIST_SUB go to exact
 * buckets; above, each power of two is split into 2^ZL_HIST_SUB_BITS linear
 * buckets (relative error < 1/16). Fixed size, no allocation. */
#define ZL_HIST_SUB_BITS 4
#define ZL_HIST_SUB	 (1u << ZL_HIST_SUB_BITS)
#define ZL_HIST_BUCKETS	 (64 * ZL_HIST_SUB)
struct zl_hist {
	uint64_t count, sum, min, max;
	uint64_t b[ZL_HIST_BUCKETS];
};
void zl_hist_init(struct zl_hist *h);
void zl_hist_add(struct zl_hist *h, uint64_t v);
/* Value at quantile q in [0,1] (the bucket's upper bound, clamped to max). */
uint64_t zl_hist_quantile(const struct zl_hist *h, double q);
void zl_hist_merge(struct zl_hist *dst, const struct zl_hist *src);

/* ---- runtime context (cli_ctx.c) ---- */

struct zl_etcd;
struct zl_client;
struct zl_vol;

struct zl_cli {
	struct zl_cli_globals g;
	const char *prefix;
	char etcd_urls[1024];
	enum zl_cli_etcd_src etcd_src;
	struct zl_etcd *etcd;
	struct zl_loop *loop;
	struct zl_client *client;
	uint32_t client_max_io; /* 0 = default */
};

/* Prints "zl: <msg>\n" on stderr. */
void zl_cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Connects to etcd (and checks it answers). 0 or ZL_CLI_EXIT_RUNTIME after
 * printing the error. */
int zl_cli_etcd(struct zl_cli *cli);
/* etcd + loop + volume client. 0 or an exit code after printing. */
int zl_cli_client(struct zl_cli *cli);
/* The cluster key (docs/SECURITY.md) into out (65 bytes): the file
 * $ZIPLINE_CLUSTER_KEY_FILE when set, else <prefix>keys/cluster in etcd
 * (created when absent). 0 or ZL_CLI_EXIT_RUNTIME after printing which key
 * could not be read and that operator access to etcd is needed. */
int zl_cli_cluster_key(struct zl_cli *cli, char *out);
/* Opens a volume by name or id with a message on failure. 0 or exit code. */
int zl_cli_vol_open(struct zl_cli *cli, const char *name, struct zl_vol **out);
void zl_cli_fini(struct zl_cli *cli);
/* Prints a runtime error of an etcd-backed call with the right hint. */
void zl_cli_etcd_err(struct zl_cli *cli, const char *what, int rc);

/* Prints the error for a getopt_long failure (c is '?' or ':', opt is
 * optopt) and returns ZL_CLI_EXIT_USAGE. */
int zl_cli_opt_error(const char *cmd, int c, int opt, char **argv, int optind_now);
/* Unix seconds as "2026-01-02T03:04:05Z" ("-" for 0). */
void zl_cli_fmt_time(int64_t t, char *buf, size_t len);
/* "42s", "3m05s", "5h02m", "3d04h". */
void zl_cli_fmt_duration(int64_t sec, char *buf, size_t len);

/* Commands: return the process exit code. argv[0] is the command word. */
int zl_cli_status(struct zl_cli *cli, int argc, char **argv);
int zl_cli_node(struct zl_cli *cli, int argc, char **argv);
int zl_cli_volume(struct zl_cli *cli, int argc, char **argv);
int zl_cli_bench(struct zl_cli *cli, int argc, char **argv);
int zl_cli_top(struct zl_cli *cli, int argc, char **argv);
int zl_cli_volume_import(struct zl_cli *cli, int argc, char **argv);
int zl_cli_volume_export(struct zl_cli *cli, int argc, char **argv);
int zl_cli_volume_serve(struct zl_cli *cli, int argc, char **argv);
/* zl snapshot create|ls|rm|export (cli_snap.c). */
int zl_cli_snapshot(struct zl_cli *cli, int argc, char **argv);
/* zl snapshot export NAME FILE: zl volume export of the snapshot's volume
 * at its sequence (cli_io.c). */
int zl_cli_snapshot_export(struct zl_cli *cli, int argc, char **argv);
/* The snapshots of volume vol_id for zl volume inspect (cli_snap.c). */
void zl_cli_snapshot_print_vol(struct zl_cli *cli, const char *vol_id);
struct zl_volume;
/* cli_clone.c: zl volume clone SRC NEW, zl volume flatten NAME, and the
 * parent and dependants lines of zl volume inspect. */
int zl_cli_volume_clone(struct zl_cli *cli, int argc, char **argv);
int zl_cli_volume_flatten(struct zl_cli *cli, int argc, char **argv);
void zl_cli_clone_print_vol(struct zl_cli *cli, const struct zl_volume *v);
/* zl volume scrub / verify (cli_scrub.c). */
/* zl volume rebalance (cli_rebalance.c). */
int zl_cli_volume_rebalance(struct zl_cli *cli, int argc, char **argv);
int zl_cli_volume_scrub_cmd(struct zl_cli *cli, int argc, char **argv, bool verify);

#endif
