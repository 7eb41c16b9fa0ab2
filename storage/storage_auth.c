/* Authentication of the data path (docs/SECURITY.md), --auth on|off.
 *
 * Caches, filled by etcd watches of <prefix>attachments/ and
 * <prefix>secrets/ (never an etcd call per packet): per volume the
 * attachment (node, epoch = the record's create revision, read-only) and the
 * volume secret, and the highest attach epoch ever seen, persisted in
 * <data-dir>/auth-epochs (written atomically, on the watch thread) so a
 * restart with etcd unreachable does not reopen the door to an old token.
 *
 * Two copies: the watch threads' table (tab, under mu: what the file
 * persists) and the loop thread's (ltab, no lock: HELLO checks and the
 * fence of every write). Every change of tab queues a snapshot of that
 * volume's entry, in order, under mu; a notify makes the loop thread apply
 * the queue to ltab.
 *
 * Per connection (the xport connection's ctx): nothing, refused, cluster
 * (a valid cluster token: everything), or client (bound to one volume and
 * the epoch its HELLO proved, read-only when the attachment is); and, for
 * all but cluster connections, a budget of refused requests (CONN_REFUSE_*):
 * spent, the connection is closed. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "lib/common/notify.h"
#include "lib/meta/zl_auth.h"
#include "storage_io.h"

#define AUTH_BUCKETS 256u
#define AUTH_FILE    "auth-epochs"
#define AUTH_LIST_PAGE 500
/* Refused requests a connection that is not a cluster one may make: a
 * bucket of CONN_REFUSE_BURST, refilled by CONN_REFUSE_PER_SEC. */
#define CONN_REFUSE_BURST   32u
#define CONN_REFUSE_PER_SEC 1u
/* Refusal and close log lines: at most one per AUTH_LOG_MS (with the count
 * of those left out). */
#define AUTH_LOG_MS 1000u
/* A connection without a valid HELLO that long is closed (it holds a slot
 * of the connection limit); checked every CONN_SWEEP_MS. */
#define CONN_HELLO_MS 10000u
#define CONN_SWEEP_MS 1000u

struct auth_vol {
	struct auth_vol *next;
	uint64_t num;
	uint64_t att_epoch; /* 0: no attachment record */
	/* Highest attach epoch ever seen, or the revision that deleted the
	 * attachment (persisted): tokens of older epochs are fenced. */
	uint64_t max_epoch;
	bool readonly;
	bool has_secret;
	/* The last resync of each watch whose listing named this volume's
	 * attachment / secret (att_gen, sec_gen below). */
	uint32_t att_seen, sec_seen;
	char node[ZL_WIRE_NAME_LEN];
	char secret[ZL_AUTH_KEY_HEX + 1];
};

/* A snapshot of one tab entry, on its way to ltab. */
struct auth_ev {
	struct auth_ev *next;
	struct auth_vol v;
};

struct zl_storage_auth {
	struct zl_storage *st;
	/* mu: tab and the event queue (watch threads, start-up; the loop
	 * thread only to take the queue). The file has its own lock. */
	pthread_mutex_t mu;
	pthread_mutex_t file_mu;
	struct auth_vol *tab[AUTH_BUCKETS];
	struct auth_ev *ev_head, **ev_tail;
	struct zl_notify wake; /* watch threads -> loop thread */
	struct auth_vol *ltab[AUTH_BUCKETS]; /* loop thread only */
	char cluster_key[ZL_AUTH_KEY_HEX + 1];
	bool have_key;
	char att_prefix[512], sec_prefix[512];
	struct zl_etcd_watch *att_w, *sec_w;
	/* How far the view of each prefix is known current: the listing's
	 * revision, then the revision of every watch event applied (under mu;
	 * l_*: the loop's copy, advanced with the snapshots it applies). A
	 * HELLO of an epoch up to l_att_rev that names no attachment we hold
	 * is refused for good; above it, the watch may lag (BUSY). */
	uint64_t att_rev, sec_rev;
	uint64_t l_att_rev, l_sec_rev;
	/* Resyncs begun by each watch after an etcd compaction (under mu). */
	uint32_t att_gen, sec_gen;
	uint64_t last_log_ms; /* loop thread: rate limit of refusal logs */
	uint32_t suppressed;
	/* Loop thread: connections younger than CONN_HELLO_MS (and the ones
	 * the next sweep looks at), oldest first. */
	struct storage_conn_auth *young_head, **young_tail;
	struct zl_timer sweep_t;
	bool sweeping;
};

enum conn_state { CONN_NONE, CONN_REFUSED, CONN_CLUSTER, CONN_CLIENT };

struct storage_conn_auth {
	struct zl_storage_auth *a;
	struct zl_xport_conn *conn;
	struct storage_conn_auth *young_next, **young_pprev; /* NULL pprev: not listed */
	uint64_t born_ms;
	enum conn_state state;
	uint32_t refuse_tokens; /* budget of refused requests left */
	uint64_t refuse_ms;	/* last refill */
	uint64_t vol;
	uint64_t epoch;
	bool readonly;
	bool hello_pending; /* a HELLO's payload is on its way (RDMA: async) */
};

static void conn_young_unlink(struct storage_conn_auth *ca);
static void conn_sweep(void *arg);

/* ---- tables (tab: mu held; ltab: loop thread) ---- */

static struct auth_vol *vol_find(struct auth_vol **tab, uint64_t num, bool create)
{
	struct auth_vol **pp = &tab[zl_hash64(num) % AUTH_BUCKETS], *v;

	for (v = *pp; v; v = v->next)
		if (v->num == num)
			return v;
	if (!create)
		return NULL;
	v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	v->num = num;
	v->next = *pp;
	*pp = v;
	return v;
}

/* ---- persisted epochs ---- */

/* Writes every volume's max_epoch to <data-dir>/auth-epochs (tmp, fsync,
 * rename). Any thread. */
static void epochs_save(struct zl_storage_auth *a)
{
	char path[4096], tmp[4200];
	FILE *f;
	int rc = 0;

	snprintf(path, sizeof(path), "%s/%s", a->st->cfg.data_dir, AUTH_FILE);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	pthread_mutex_lock(&a->file_mu);
	f = fopen(tmp, "we");
	if (!f) {
		rc = -errno;
		goto out;
	}
	pthread_mutex_lock(&a->mu);
	for (uint32_t b = 0; b < AUTH_BUCKETS; b++)
		for (struct auth_vol *v = a->tab[b]; v; v = v->next)
			if (v->max_epoch)
				fprintf(f, "%016" PRIx64 " %" PRIu64 "\n", v->num, v->max_epoch);
	pthread_mutex_unlock(&a->mu);
	if (fflush(f) || fsync(fileno(f)))
		rc = -errno;
	if (fclose(f) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path))
		rc = -errno;
out:
	pthread_mutex_unlock(&a->file_mu);
	if (rc)
		ZL_LOG_ERR("storage",
			   "cannot persist the attach epochs in %s: %s (a restart with etcd "
			   "unreachable may accept an older token; check the data dir)",
			   path, zl_strerror(rc));
}

static int epochs_load(struct zl_storage_auth *a)
{
	char path[4096];
	uint64_t num, ep;
	FILE *f;
	size_t n = 0;

	snprintf(path, sizeof(path), "%s/%s", a->st->cfg.data_dir, AUTH_FILE);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	while (fscanf(f, "%" SCNx64 " %" SCNu64, &num, &ep) == 2) {
		struct auth_vol *v = vol_find(a->tab, num, true);

		if (!v) {
			fclose(f);
			return -ENOMEM;
		}
		v->max_epoch = ZL_MAX(v->max_epoch, ep);
		n++;
	}
	fclose(f);
	ZL_LOG_INFO("storage", "attach epochs loaded: file=%s volumes=%zu", path, n);
	return 0;
}

/* Copies a tab entry into ltab (loop thread). */
static void auth_apply_local(struct zl_storage_auth *a, const struct auth_vol *v)
{
	struct auth_vol *lv = vol_find(a->ltab, v->num, true), *keep;

	if (!lv) {
		ZL_LOG_ERR("storage", "out of memory: attachment change of vol=%016" PRIx64
				      " not applied (restart the daemon)",
			   v->num);
		return;
	}
	keep = lv->next;
	*lv = *v;
	lv->next = keep;
}

/* Start-up, loop thread: ltab = tab; the queued snapshots are not newer
 * than tab, so they go. */
static void auth_copy_all(struct zl_storage_auth *a)
{
	pthread_mutex_lock(&a->mu);
	for (uint32_t b = 0; b < AUTH_BUCKETS; b++)
		for (struct auth_vol *v = a->tab[b]; v; v = v->next)
			auth_apply_local(a, v);
	a->l_att_rev = a->att_rev;
	a->l_sec_rev = a->sec_rev;
	while (a->ev_head) {
		struct auth_ev *ev = a->ev_head;

		a->ev_head = ev->next;
		explicit_bzero(ev, sizeof(*ev));
		free(ev);
	}
	a->ev_tail = &a->ev_head;
	pthread_mutex_unlock(&a->mu);
}

/* ---- watch threads -> loop thread ---- */

/* Queues a snapshot of v (mu held; v may be NULL: nothing changed). */
static void auth_post(struct zl_storage_auth *a, const struct auth_vol *v)
{
	struct auth_ev *ev;

	if (!v)
		return;
	ev = malloc(sizeof(*ev));
	if (!ev) {
		ZL_LOG_ERR("storage", "out of memory: attachment change of vol=%016" PRIx64
				      " not applied (restart the daemon)",
			   v->num);
		return;
	}
	ev->v = *v;
	ev->next = NULL;
	*a->ev_tail = ev;
	a->ev_tail = &ev->next;
}

/* Loop thread: applies the queued snapshots to ltab. */
static void auth_wake_cb(void *arg)
{
	struct zl_storage_auth *a = arg;
	struct auth_ev *ev;
	uint64_t att_rev, sec_rev;

	/* The revisions with the queue: every event up to them is in it. */
	pthread_mutex_lock(&a->mu);
	ev = a->ev_head;
	a->ev_head = NULL;
	a->ev_tail = &a->ev_head;
	att_rev = a->att_rev;
	sec_rev = a->sec_rev;
	pthread_mutex_unlock(&a->mu);
	while (ev) {
		struct auth_ev *next = ev->next;

		auth_apply_local(a, &ev->v);
		explicit_bzero(ev, sizeof(*ev));
		free(ev);
		ev = next;
	}
	a->l_att_rev = att_rev;
	a->l_sec_rev = sec_rev;
}

/* ---- watches (watch threads) ---- */

static int key_vol(const char *key, const char *prefix, uint64_t *num)
{
	size_t n = strlen(prefix);

	if (strncmp(key, prefix, n))
		return -ZL_ERR_INVAL;
	return zl_vol_id_parse(key + n, num);
}

/* An attachment record put (kv) or deleted; true when max_epoch rose. */
static bool att_apply(struct zl_storage_auth *a, bool put, const struct zl_etcd_kv *kv)
{
	json_t *j = put ? json_loadb(kv->value, kv->value_len, 0, NULL) : NULL;
	const char *node = j ? json_string_value(json_object_get(j, "node")) : NULL;
	struct auth_vol *v;
	bool rose = false;
	uint64_t num;

	if (key_vol(kv->key, a->att_prefix, &num)) {
		json_decref(j);
		return false;
	}
	pthread_mutex_lock(&a->mu);
	v = vol_find(a->tab, num, put);
	if (v && put)
		v->att_seen = a->att_gen;
	if (v && put && node) {
		snprintf(v->node, sizeof(v->node), "%s", node);
		v->att_epoch = (uint64_t)kv->create_rev;
		v->readonly = json_is_true(json_object_get(j, "readonly"));
		if (v->att_epoch > v->max_epoch) {
			v->max_epoch = v->att_epoch;
			rose = true;
		}
	} else if (v) {
		/* Deleted or malformed: no client HELLO passes; max_epoch stays. */
		v->att_epoch = 0;
		v->node[0] = '\0';
		if (put)
			ZL_LOG_WARN("storage", "malformed attachment record %s ignored", kv->key);
		/* ControllerUnpublish (a force detach of a node that cannot be
		 * reached too): every epoch up to the deletion is fenced now,
		 * not only once another node attaches. */
		if (!put && (uint64_t)kv->mod_rev > v->max_epoch) {
			v->max_epoch = (uint64_t)kv->mod_rev;
			rose = true;
		}
	}
	auth_post(a, v);
	if ((uint64_t)kv->mod_rev > a->att_rev)
		a->att_rev = (uint64_t)kv->mod_rev;
	pthread_mutex_unlock(&a->mu);
	zl_notify_post(&a->wake);
	json_decref(j);
	return rose;
}

static void sec_apply(struct zl_storage_auth *a, bool put, const struct zl_etcd_kv *kv)
{
	struct auth_vol *v;
	uint64_t num;
	uint8_t raw[ZL_AUTH_KEY_HEX / 2];
	bool ok = put && kv->value_len == ZL_AUTH_KEY_HEX &&
		  !zl_auth_hex_decode(kv->value, sizeof(raw), raw);

	explicit_bzero(raw, sizeof(raw));
	if (key_vol(kv->key, a->sec_prefix, &num))
		return;
	pthread_mutex_lock(&a->mu);
	v = vol_find(a->tab, num, ok);
	if (v) {
		v->sec_seen = a->sec_gen;
		v->has_secret = ok;
		if (ok)
			memcpy(v->secret, kv->value, ZL_AUTH_KEY_HEX);
		else
			explicit_bzero(v->secret, sizeof(v->secret));
		v->secret[ZL_AUTH_KEY_HEX] = '\0';
	}
	auth_post(a, v);
	if ((uint64_t)kv->mod_rev > a->sec_rev)
		a->sec_rev = (uint64_t)kv->mod_rev;
	pthread_mutex_unlock(&a->mu);
	zl_notify_post(&a->wake);
	if (put && !ok)
		ZL_LOG_WARN("storage", "malformed volume secret %s ignored", kv->key);
}

/* Under mu: every volume without an attachment fenced up to rev (its
 * max_epoch raised to rev); with post, each change queued for the loop.
 * True when some max_epoch rose. */
static bool fence_unattached_locked(struct zl_storage_auth *a, uint64_t rev, bool post)
{
	bool rose = false;

	for (uint32_t b = 0; b < AUTH_BUCKETS; b++)
		for (struct auth_vol *v = a->tab[b]; v; v = v->next)
			if (!v->att_epoch && v->max_epoch < rev) {
				v->max_epoch = rev;
				rose = true;
				if (post)
					auth_post(a, v);
			}
	return rose;
}

/* The end of a watch's resync (etcd compacted the revision it needed, so
 * it listed the prefix again at rev): what the listing did not name was
 * deleted while the watch was away. An attachment so deleted fences every
 * epoch up to rev, as the watched deletion would have (att_apply), and so
 * does every volume without an attachment at rev (auth_fence_unattached at
 * start-up); a secret so deleted is dropped. True when some max_epoch
 * rose. */
static bool auth_resync_end(struct zl_storage_auth *a, bool att, uint64_t rev)
{
	bool rose = false;
	uint32_t gone = 0;

	pthread_mutex_lock(&a->mu);
	for (uint32_t b = 0; b < AUTH_BUCKETS; b++) {
		for (struct auth_vol *v = a->tab[b]; v; v = v->next) {
			if (att && v->att_seen != a->att_gen && v->att_epoch) {
				v->att_epoch = 0;
				v->node[0] = '\0';
				auth_post(a, v); /* again below if fenced too */
				gone++;
			}
			if (!att && v->sec_seen != a->sec_gen && v->has_secret) {
				v->has_secret = false;
				explicit_bzero(v->secret, sizeof(v->secret));
				auth_post(a, v);
				gone++;
			}
		}
	}
	if (att)
		rose = fence_unattached_locked(a, rev, true);
	if (att && rev > a->att_rev)
		a->att_rev = rev;
	if (!att && rev > a->sec_rev)
		a->sec_rev = rev;
	pthread_mutex_unlock(&a->mu);
	zl_notify_post(&a->wake);
	ZL_LOG_INFO("storage",
		    "%s listed again after an etcd compaction at revision %" PRIu64
		    ": %u deleted meanwhile",
		    att ? a->att_prefix : a->sec_prefix, rev, gone);
	return rose;
}

/* A resync's BEGIN: a new generation that its PUTs mark. */
static void auth_resync_begin(struct zl_storage_auth *a, bool att)
{
	pthread_mutex_lock(&a->mu);
	if (att)
		a->att_gen++;
	else
		a->sec_gen++;
	pthread_mutex_unlock(&a->mu);
}

static void att_watch_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	struct zl_storage_auth *a = arg;

	if (type == ZL_ETCD_EV_RESYNC_BEGIN)
		auth_resync_begin(a, true);
	else if (type == ZL_ETCD_EV_RESYNC_END ? auth_resync_end(a, true, (uint64_t)kv->mod_rev)
					       : att_apply(a, type == ZL_ETCD_EV_PUT, kv))
		epochs_save(a);
}

static void sec_watch_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	struct zl_storage_auth *a = arg;

	if (type == ZL_ETCD_EV_RESYNC_BEGIN)
		auth_resync_begin(a, false);
	else if (type == ZL_ETCD_EV_RESYNC_END)
		auth_resync_end(a, false, (uint64_t)kv->mod_rev);
	else
		sec_apply(a, type == ZL_ETCD_EV_PUT, kv);
}

/* Lists prefix and applies every record; *rev gets the listing's revision. */
static int auth_list(struct zl_storage_auth *a, const char *prefix, bool att, int64_t *rev)
{
	char after[512] = "";
	bool rose = false;
	int rc;

	*rev = 0;
	for (int page = 0; page < 100000; page++) {
		struct zl_etcd_range r = {0};

		rc = zl_etcd_range_prefix(a->st->etcd, prefix, after[0] ? after : NULL,
					  AUTH_LIST_PAGE, &r);
		if (rc)
			return rc;
		if (!*rev)
			*rev = r.revision;
		for (size_t i = 0; i < r.n; i++) {
			if (att)
				rose |= att_apply(a, true, &r.kvs[i]);
			else
				sec_apply(a, true, &r.kvs[i]);
			explicit_bzero(r.kvs[i].value, r.kvs[i].value_len);
		}
		if (r.n)
			snprintf(after, sizeof(after), "%s", r.kvs[r.n - 1].key);
		bool more = r.more && r.n;

		zl_etcd_range_fini(&r);
		if (!more)
			break;
	}
	if (rose)
		epochs_save(a);
	/* The listing saw the whole prefix at *rev. */
	pthread_mutex_lock(&a->mu);
	if (att && (uint64_t)*rev > a->att_rev)
		a->att_rev = (uint64_t)*rev;
	if (!att && (uint64_t)*rev > a->sec_rev)
		a->sec_rev = (uint64_t)*rev;
	pthread_mutex_unlock(&a->mu);
	return 0;
}

/* Volumes without an attachment record at revision rev (the listing's):
 * a token of an epoch up to rev names an attachment deleted before it,
 * perhaps while this daemon was down, so it is fenced as if the watch had
 * seen the deletion. True when some max_epoch rose. */
static bool auth_fence_unattached(struct zl_storage_auth *a, uint64_t rev)
{
	bool rose;

	pthread_mutex_lock(&a->mu);
	rose = fence_unattached_locked(a, rev, false);
	pthread_mutex_unlock(&a->mu);
	return rose;
}

/* ---- start / stop ---- */

int zl_storage_auth_start(struct zl_storage *st)
{
	struct zl_storage_auth *a = calloc(1, sizeof(*a));
	int64_t rev;
	int rc;

	if (!a)
		return -ENOMEM;
	a->st = st;
	pthread_mutex_init(&a->mu, NULL);
	pthread_mutex_init(&a->file_mu, NULL);
	a->ev_tail = &a->ev_head;
	st->auth = a;
	/* The cluster key: this daemon's token to its peers, and what a
	 * cluster HELLO is checked against. */
	rc = zl_auth_cluster_key_load(st->etcd, st->cfg.prefix, st->cfg.cluster_key_file, true,
				      a->cluster_key);
	a->have_key = !rc;
	if (rc && st->cfg.auth)
		return rc;
	if (rc)
		ZL_LOG_WARN("storage", "no cluster key: peers are contacted without a token "
				       "(they refuse it with --auth on)");
	if (!st->cfg.auth)
		return 0;
	a->young_tail = &a->young_head;
	zl_timer_start(st->loop, &a->sweep_t, CONN_SWEEP_MS, CONN_SWEEP_MS, conn_sweep, a);
	a->sweeping = true;
	rc = zl_notify_init(&a->wake, st->loop, auth_wake_cb, a);
	if (rc) {
		ZL_LOG_ERR("storage", "cannot create the attachment notify: %s", zl_strerror(rc));
		return rc;
	}
	rc = epochs_load(a);
	if (rc) {
		ZL_LOG_ERR("storage", "cannot read %s/%s: %s (fix or remove it)", st->cfg.data_dir,
			   AUTH_FILE, zl_strerror(rc));
		return rc;
	}
	zl_meta_key(a->att_prefix, sizeof(a->att_prefix), st->cfg.prefix, "attachments", NULL);
	zl_meta_key(a->sec_prefix, sizeof(a->sec_prefix), st->cfg.prefix, "secrets", NULL);
	rc = auth_list(a, a->sec_prefix, false, &rev);
	if (!rc)
		rc = zl_etcd_watch_prefix(st->etcd, a->sec_prefix, rev + 1, sec_watch_cb, a,
					  &a->sec_w);
	if (!rc)
		rc = auth_list(a, a->att_prefix, true, &rev);
	if (!rc && rev > 0 && auth_fence_unattached(a, (uint64_t)rev))
		epochs_save(a);
	if (!rc)
		rc = zl_etcd_watch_prefix(st->etcd, a->att_prefix, rev + 1, att_watch_cb, a,
					  &a->att_w);
	if (rc)
		ZL_LOG_ERR("storage", "cannot list and watch %s and %s: %s (%s)", a->att_prefix,
			   a->sec_prefix, zl_errname(rc), zl_etcd_last_error());
	/* The file's epochs and the lists' records into ltab now: the loop
	 * does not run yet, this is its thread. */
	auth_copy_all(a);
	return rc;
}

void zl_storage_auth_stop(struct zl_storage *st)
{
	struct zl_storage_auth *a = st->auth;

	if (!a)
		return;
	zl_etcd_watch_cancel(a->att_w);
	zl_etcd_watch_cancel(a->sec_w);
	zl_notify_fini(&a->wake);
	if (a->sweeping)
		zl_timer_stop(st->loop, &a->sweep_t);
	/* Connections still open (closed after this) keep no pointer here. */
	while (a->young_head)
		conn_young_unlink(a->young_head);
	while (a->ev_head) {
		struct auth_ev *ev = a->ev_head;

		a->ev_head = ev->next;
		explicit_bzero(ev, sizeof(*ev));
		free(ev);
	}
	for (uint32_t b = 0; b < AUTH_BUCKETS; b++) {
		while (a->tab[b]) {
			struct auth_vol *v = a->tab[b];

			a->tab[b] = v->next;
			explicit_bzero(v, sizeof(*v));
			free(v);
		}
		while (a->ltab[b]) {
			struct auth_vol *v = a->ltab[b];

			a->ltab[b] = v->next;
			explicit_bzero(v, sizeof(*v));
			free(v);
		}
	}
	explicit_bzero(a->cluster_key, sizeof(a->cluster_key));
	pthread_mutex_destroy(&a->mu);
	pthread_mutex_destroy(&a->file_mu);
	free(a);
	st->auth = NULL;
}

static const char *auth_key(const struct zl_storage *st)
{
	return st->auth && st->auth->have_key ? st->auth->cluster_key : NULL;
}

int zl_storage_auth_token(const struct zl_storage *st, char out[ZL_AUTH_TOKEN_HEX + 1])
{
	const char *key = auth_key(st);

	out[0] = '\0';
	return key ? zl_auth_cluster_token(key, st->cfg.node_id, out) : -ZL_ERR_NOT_FOUND;
}

uint64_t zl_storage_auth_fence(struct zl_storage *st, uint64_t vol)
{
	struct zl_storage_auth *a = st->auth;
	struct auth_vol *v;
	uint64_t e = 0;

	if (!a || !st->cfg.auth)
		return 0;
	v = vol_find(a->ltab, vol, false); /* the loop's copy: no lock per write */
	if (v)
		e = ZL_MAX(v->att_epoch, v->max_epoch);
	return e;
}

/* ---- connections (loop thread) ---- */

static struct storage_conn_auth *conn_auth(struct zl_storage *st, struct zl_xport_conn *c,
					   bool create)
{
	struct storage_conn_auth *ca = zl_xport_conn_ctx(c);

	if (!ca && create) {
		ca = calloc(1, sizeof(*ca));
		if (ca) {
			struct zl_storage_auth *a = st->auth;

			ca->a = a;
			ca->conn = c;
			ca->born_ms = zl_now_ms();
			ca->refuse_tokens = CONN_REFUSE_BURST;
			ca->refuse_ms = ca->born_ms;
			zl_xport_conn_set_ctx(c, ca);
			if (a && a->young_tail) {
				ca->young_pprev = a->young_tail;
				*a->young_tail = ca;
				a->young_tail = &ca->young_next;
			}
		}
	}
	return ca;
}

static void conn_young_unlink(struct storage_conn_auth *ca)
{
	struct zl_storage_auth *a = ca->a;

	if (!ca->young_pprev)
		return;
	*ca->young_pprev = ca->young_next;
	if (ca->young_next)
		ca->young_next->young_pprev = ca->young_pprev;
	else
		a->young_tail = ca->young_pprev;
	ca->young_next = NULL;
	ca->young_pprev = NULL;
}

void zl_storage_auth_conn_free(struct zl_xport_conn *c)
{
	struct storage_conn_auth *ca = zl_xport_conn_ctx(c);

	if (ca)
		conn_young_unlink(ca);
	free(ca);
	zl_xport_conn_set_ctx(c, NULL);
}

bool zl_storage_auth_conn_trusted(const struct zl_storage *st, struct zl_xport_conn *c)
{
	const struct storage_conn_auth *ca = zl_xport_conn_ctx(c);

	return !st->cfg.auth || (ca && ca->state == CONN_CLUSTER);
}

void zl_storage_auth_conn_open(struct zl_storage *st, struct zl_xport_conn *c)
{
	if (st->cfg.auth && st->auth)
		conn_auth(st, c, true);
}

/* Closes the connections older than CONN_HELLO_MS that proved nothing; the
 * others leave the list. One log line per sweep at most. */
static void conn_sweep(void *arg)
{
	struct zl_storage_auth *a = arg;
	uint64_t now = zl_now_ms();
	uint32_t closed = 0;
	const char *peer = NULL;

	while (a->young_head && now - a->young_head->born_ms >= CONN_HELLO_MS) {
		struct storage_conn_auth *ca = a->young_head;

		conn_young_unlink(ca);
		if (ca->state == CONN_CLUSTER || ca->state == CONN_CLIENT)
			continue;
		if (!closed++)
			peer = zl_xport_conn_peer(ca->conn);
		ca->state = CONN_REFUSED;
		zl_xport_conn_close(ca->conn);
	}
	if (closed && now - a->last_log_ms >= AUTH_LOG_MS) {
		ZL_LOG_WARN("storage",
			    "closed %u connections without a valid HELLO after %u ms (first "
			    "peer=%s; %u refusals not logged)",
			    closed, CONN_HELLO_MS, peer ? peer : "?", a->suppressed);
		a->last_log_ms = now;
		a->suppressed = 0;
	} else if (closed) {
		a->suppressed += closed;
	}
}

/* One log line per AUTH_LOG_MS at most, with the count of those left out. */
static void auth_log(struct zl_storage_auth *a, struct zl_xport_conn *c, const char *what,
		     const struct zl_wire_hdr *h, const char *id)
{
	uint64_t now = zl_now_ms();

	if (a && now - a->last_log_ms < AUTH_LOG_MS) {
		a->suppressed++;
		return;
	}
	ZL_LOG_WARN("storage",
		    "request refused: %s peer=%s op=%s vol=%016" PRIx64 " id=%s (%u more refusals "
		    "not logged)",
		    what, zl_xport_conn_peer(c), zl_wire_op_name(h->opcode), h->vol_id,
		    id ? id : "-", a ? a->suppressed : 0);
	if (a) {
		a->last_log_ms = now;
		a->suppressed = 0;
	}
}

int zl_storage_auth_hello(struct zl_storage *st, struct zl_xport_conn *c,
			  const struct zl_wire_hdr *h, const struct zl_wire_hello *hl)
{
	struct zl_storage_auth *a = st->auth;
	struct storage_conn_auth *ca;
	char tok[ZL_AUTH_TOKEN_HEX + 1], vid[ZL_VOL_ID_LEN + 1], secret[ZL_AUTH_KEY_HEX + 1];
	char node[ZL_WIRE_NAME_LEN];
	uint64_t att_epoch = 0, max_epoch = 0;
	bool ro = false, has_secret = false;
	struct auth_vol *v;
	int rc;

	if (!st->cfg.auth)
		return hl ? 0 : -ZL_ERR_PROTO;
	ca = conn_auth(st, c, true);
	if (!ca)
		return -ZL_ERR_BUSY;
	if (!hl) { /* a malformed HELLO */
		ca->hello_pending = false;
		ca->state = ca->state == CONN_REFUSED ? CONN_REFUSED : CONN_NONE;
		return -ZL_ERR_PROTO;
	}
	ca->hello_pending = false;
	if (ca->state == CONN_REFUSED)
		return -ZL_ERR_AUTH;
	ca->state = CONN_NONE; /* a failed HELLO drops what an earlier one proved */
	if (hl->caps & ZL_WIRE_CAP_CLUSTER) {
		rc = a->have_key ? zl_auth_cluster_token(a->cluster_key, hl->node_id, tok)
				 : -ZL_ERR_AUTH;
		if (rc || !zl_auth_token_eq(tok, hl->token)) {
			auth_log(a, c, "bad cluster token in HELLO", h, hl->node_id);
			return -ZL_ERR_AUTH;
		}
		ca->state = CONN_CLUSTER;
		return 0;
	}
	node[0] = '\0';
	v = vol_find(a->ltab, h->vol_id, false); /* the loop's copy */
	if (v) {
		att_epoch = v->att_epoch;
		max_epoch = v->max_epoch;
		ro = v->readonly;
		has_secret = v->has_secret;
		memcpy(secret, v->secret, sizeof(secret));
		memcpy(node, v->node, sizeof(node));
	}
	if (!has_secret) {
		explicit_bzero(secret, sizeof(secret));
		/* No token (NodeStage without ControllerPublish), or a view that
		 * has passed the HELLO's epoch: final. Else the watches may not
		 * have shown the volume yet: the client retries. */
		if (!hl->token[0] || !h->epoch) {
			auth_log(a, c, "HELLO without an attach token", h, hl->node_id);
			return -ZL_ERR_AUTH;
		}
		if (h->epoch <= a->l_att_rev && h->epoch != att_epoch)
			return -ZL_ERR_NOT_ATTACHED;
		if (h->epoch <= a->l_sec_rev)
			return -ZL_ERR_AUTH; /* no secret: no such volume */
		return -ZL_ERR_BUSY;
	}
	zl_vol_id_format(h->vol_id, vid);
	rc = zl_auth_attach_token(secret, vid, hl->node_id, h->epoch, tok);
	explicit_bzero(secret, sizeof(secret));
	if (rc || !zl_auth_token_eq(tok, hl->token)) {
		auth_log(a, c, "bad attach token in HELLO", h, hl->node_id);
		return -ZL_ERR_AUTH;
	}
	if (h->epoch < ZL_MAX(att_epoch, max_epoch))
		return -ZL_ERR_STALE; /* an older attachment's token */
	if (h->epoch > att_epoch) /* an attachment we never saw: not yet, or not at all */
		return h->epoch <= a->l_att_rev ? -ZL_ERR_NOT_ATTACHED : -ZL_ERR_BUSY;
	if (strcmp(node, hl->node_id)) {
		auth_log(a, c, "HELLO from a node the attachment does not name", h, hl->node_id);
		return -ZL_ERR_AUTH;
	}
	ca->state = CONN_CLIENT;
	ca->vol = h->vol_id;
	ca->epoch = h->epoch;
	ca->readonly = ro;
	return 0;
}

static void auth_refused_sent(void *arg, int status)
{
	struct zl_xport_conn *c = arg;

	(void)status;
	zl_xport_conn_close(c);
	zl_xport_conn_put(c);
}

/* A connection bound to a clone reads the chunks the clone never held from
 * its parent's snapshot, and the parent's from its own (docs/SNAPSHOTS.md
 * §4): a READ of volume h->vol_id at snapshot h->snap_seq is allowed when
 * some ancestor of vol (at most ZL_CLONE_AUTH_DEPTH levels, as the client)
 * names it as its parent at that sequence, by the cached records. 0,
 * -ZL_ERR_BUSY (a record is being loaded: the client retries) or
 * -ZL_ERR_AUTH. */
#define ZL_CLONE_AUTH_DEPTH 16
static int auth_ancestor(struct zl_storage *st, uint64_t vol, const struct zl_wire_hdr *h)
{
	if (h->opcode != ZL_OP_READ || !(h->flags & ZL_WF_SEQ))
		return -ZL_ERR_AUTH;
	for (int depth = 0; depth < ZL_CLONE_AUTH_DEPTH; depth++) {
		struct zl_storage_vol *sv;
		uint64_t parent;
		int rc = zl_storage_vol_lookup(st->vols, vol, &sv);

		if (rc == -EINPROGRESS || rc == -ZL_ERR_BUSY)
			return -ZL_ERR_BUSY;
		if (rc || !sv->v.parent_vol[0] || zl_vol_id_parse(sv->v.parent_vol, &parent))
			return -ZL_ERR_AUTH;
		if (parent == h->vol_id && sv->v.parent_seq == h->snap_seq)
			return 0;
		vol = parent;
	}
	return -ZL_ERR_AUTH;
}

int zl_storage_auth_check(struct zl_storage *st, struct zl_xport_conn *c, struct zl_wire_hdr *h,
			  bool *close)
{
	struct storage_conn_auth *ca;

	*close = false;
	if (!st->cfg.auth || h->opcode == ZL_OP_PING)
		return 0;
	if (h->opcode == ZL_OP_HELLO) {
		ca = conn_auth(st, c, true);
		if (ca && ca->state != CONN_REFUSED)
			ca->hello_pending = true;
		return 0;
	}
	ca = conn_auth(st, c, false);
	/* A request right behind a HELLO still being fetched (RDMA reads the
	 * payload asynchronously): not served, but no reason to close. */
	if (ca && ca->state == CONN_NONE && ca->hello_pending)
		return -ZL_ERR_BUSY;
	if (!ca || ca->state == CONN_NONE || ca->state == CONN_REFUSED) {
		if (!ca || ca->state == CONN_NONE)
			auth_log(st->auth, c, "no valid HELLO on this connection, closing it", h,
				 NULL);
		ca = conn_auth(st, c, true);
		if (ca)
			ca->state = CONN_REFUSED;
		*close = true;
		return -ZL_ERR_AUTH;
	}
	if (ca->state == CONN_CLUSTER)
		return 0;
	switch (h->opcode) {
	case ZL_OP_READ:
		/* Around a bad primary copy a client reads its own volume from
		 * another in-sync member (ZL_WF_ANY, fenced by the connection's
		 * epoch in srv_check like its other I/O); never another
		 * volume's, not even an ancestor's. */
		if ((h->flags & ZL_WF_ANY) && h->vol_id != ca->vol)
			return -ZL_ERR_AUTH;
		break;
	case ZL_OP_WRITE:
	case ZL_OP_DISCARD:
	case ZL_OP_WRITE_ZEROES:
		if (ca->readonly)
			return -ZL_ERR_AUTH;
		break;
	case ZL_OP_FLUSH:
	case ZL_OP_CHUNK_INFO:
		break;
	default: /* storage-to-storage and admin opcodes */
		return -ZL_ERR_AUTH;
	}
	if (h->vol_id != ca->vol) {
		int rc = auth_ancestor(st, ca->vol, h);

		if (rc)
			return rc;
		/* A snapshot of another volume never changes: that volume's
		 * attachments fence nothing here (a read at epoch 0). */
		h->epoch = 0;
		return 0;
	}
	/* The epoch the HELLO proved, whatever the header says. */
	h->epoch = ca->epoch;
	return 0;
}

/* The refusals a connection's budget counts: what a client that follows
 * the protocol does not get over and over (a STALE makes it reload; a BUSY
 * HELLO, the watch lagging, makes it back off). Transient states of the
 * cluster (BUSY, PEERING, NOT_PRIMARY, ...) are not counted. */
static bool conn_refusal_counts(const struct zl_wire_hdr *h, int err)
{
	switch (-err) {
	case ZL_ERR_AUTH:
	case ZL_ERR_STALE:
	case ZL_ERR_NOT_ATTACHED:
	case ZL_ERR_NOT_FOUND:
	case ZL_ERR_RANGE:
	case ZL_ERR_INVAL:
	case ZL_ERR_PROTO:
		return true;
	case ZL_ERR_BUSY:
		return h->opcode == ZL_OP_HELLO;
	default:
		return false;
	}
}

bool zl_storage_auth_charge(struct zl_xport_conn *c, const struct zl_wire_hdr *h, int err)
{
	struct storage_conn_auth *ca = zl_xport_conn_ctx(c);
	uint64_t now, secs;

	if (!ca || ca->state == CONN_CLUSTER || !conn_refusal_counts(h, err))
		return false;
	now = zl_now_ms();
	secs = (now - ca->refuse_ms) / 1000;
	if (secs) {
		ca->refuse_tokens = (uint32_t)ZL_MIN((uint64_t)CONN_REFUSE_BURST,
						     ca->refuse_tokens + secs * CONN_REFUSE_PER_SEC);
		ca->refuse_ms += secs * 1000;
	}
	if (ca->refuse_tokens) {
		ca->refuse_tokens--;
		return false;
	}
	if (ca->state != CONN_REFUSED)
		auth_log(ca->a, c, "too many refused requests on this connection, closing it", h,
			 zl_errname(err));
	ca->state = CONN_REFUSED;
	return true;
}

void zl_storage_auth_refuse(struct zl_storage *st, struct zl_xport_conn *c,
			    const struct zl_wire_hdr *h, int err, bool close)
{
	struct zl_wire_hdr rep;

	(void)st;
	if (!close)
		close = zl_storage_auth_charge(c, h, err);
	zl_wire_reply_init(h, &rep, err);
	if (!close) {
		zl_xport_reply(c, &rep, NULL, 0, NULL, NULL);
		return;
	}
	zl_xport_conn_get(c);
	if (zl_xport_reply(c, &rep, NULL, 0, auth_refused_sent, c)) {
		zl_xport_conn_close(c);
		zl_xport_conn_put(c);
	}
}
