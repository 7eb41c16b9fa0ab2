/* Identity of a data directory (docs/REPLICATION.md §6): DATA/identity =
 * {"cluster_id", "node_id", "incarnation", "created"}, written once,
 * atomically (tmp file, fsync, rename, fsync of the directory), when the
 * directory is initialised. At start-up (before the chunk store opens, so a
 * refusal changes nothing on disk):
 *   - identity present: its cluster must be etcd's (<prefix>cluster) and its
 *     node id the daemon's, else the daemon refuses to start;
 *   - identity absent, no chunk files: a new incarnation;
 *   - identity absent, chunk files present (a 0.1 data dir): adopted, with
 *     the incarnation the slice rows name for this node when they name one,
 *     else a new one.
 * A slice row that names another incarnation for this node than its own
 * was placed on a data dir that is gone: this node serves nothing of it
 * (zl_storage_ident_member_ok) until the manager moved the member to its
 * new incarnation (RECOVERING, full copy). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage_ctl.h"
#include "storage_io.h"

#define IDENT_FILE "identity"
#define IDENT_MAX  4096

char *zl_storage_ident_to_json(const struct zl_storage_ident *id)
{
	json_t *o;
	char *s;

	if (zl_meta_id_check(id->cluster_id) || zl_meta_id_check(id->incarnation) ||
	    zl_node_id_check(id->node_id))
		return NULL;
	o = json_pack("{s:s, s:s, s:s, s:I}", "cluster_id", id->cluster_id, "node_id", id->node_id,
		      "incarnation", id->incarnation, "created", (json_int_t)id->created);
	if (!o)
		return NULL;
	s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	return s;
}

/* Copies string field key of o into out (len bytes). 0 or -ZL_ERR_INVAL. */
static int ident_str(json_t *o, const char *key, char *out, size_t len)
{
	const char *s = json_string_value(json_object_get(o, key));

	if (!s || strlen(s) >= len)
		return -ZL_ERR_INVAL;
	memcpy(out, s, strlen(s) + 1);
	return 0;
}

int zl_storage_ident_from_json(const char *json, size_t len, struct zl_storage_ident *id)
{
	json_t *o = json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *cr;
	int rc = -ZL_ERR_INVAL;

	memset(id, 0, sizeof(*id));
	if (!o || !json_is_object(o))
		goto out;
	if (ident_str(o, "cluster_id", id->cluster_id, sizeof(id->cluster_id)) ||
	    ident_str(o, "node_id", id->node_id, sizeof(id->node_id)) ||
	    ident_str(o, "incarnation", id->incarnation, sizeof(id->incarnation)))
		goto out;
	if (zl_meta_id_check(id->cluster_id) || zl_meta_id_check(id->incarnation) ||
	    zl_node_id_check(id->node_id))
		goto out;
	cr = json_object_get(o, "created");
	if (cr && (!json_is_integer(cr) || json_integer_value(cr) < 0))
		goto out;
	id->created = cr ? (int64_t)json_integer_value(cr) : 0;
	rc = 0;
out:
	json_decref(o);
	if (rc)
		memset(id, 0, sizeof(*id));
	return rc;
}

int zl_storage_ident_read(const char *dir, struct zl_storage_ident *id)
{
	char path[PATH_MAX], buf[IDENT_MAX];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/" IDENT_FILE, dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 0)
		return -EIO;
	if (n == (ssize_t)sizeof(buf))
		return -ZL_ERR_INVAL;
	return zl_storage_ident_from_json(buf, (size_t)n, id);
}

int zl_storage_ident_write(const char *dir, const struct zl_storage_ident *id)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	char *json = zl_storage_ident_to_json(id);
	size_t len, off = 0;
	int fd, rc = 0;

	if (!json)
		return -ZL_ERR_INVAL;
	snprintf(path, sizeof(path), "%s/" IDENT_FILE, dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		free(json);
		return -errno;
	}
	len = strlen(json);
	json[len++] = '\n'; /* json_dumps' NUL goes: the file has no NUL */
	while (off < len && !rc) {
		ssize_t n = write(fd, json + off, len - off);

		if (n < 0 && errno != EINTR)
			rc = -errno;
		else if (n > 0)
			off += (size_t)n;
	}
	free(json);
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	close(fd);
	if (!rc && rename(tmp, path) < 0)
		rc = -errno;
	if (!rc)
		rc = zl_fsync_dir(dir);
	if (rc)
		unlink(tmp);
	return rc;
}

/* True when name ends with ".zlc" (a chunk replica file). */
static bool ident_is_chunk_file(const char *name)
{
	size_t n = strlen(name);

	return n > 4 && !strcmp(name + n - 4, ".zlc");
}

int zl_storage_ident_has_chunks(const char *dir)
{
	char path[PATH_MAX];
	struct dirent *de;
	int found = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/chunks", dir);
	d = opendir(path);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while (!found && (de = readdir(d))) {
		char sub[PATH_MAX + 256];
		struct dirent *fe;
		DIR *vd;

		if (de->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		vd = opendir(sub);
		if (!vd)
			continue; /* a file (FORMAT) */
		while (!found && (fe = readdir(vd)))
			found = ident_is_chunk_file(fe->d_name);
		closedir(vd);
	}
	closedir(d);
	return found;
}

int zl_storage_ident_adopt_pick(const struct zl_volume *vols, size_t n_vols, const char *node,
				char out[ZL_META_ID_SIZE], size_t *n_rows, size_t *n_other)
{
	/* Distinct incarnations the rows name for node (one, normally), with
	 * how many rows name each; rows beyond the table count as "other". */
	struct {
		char inc[ZL_META_ID_SIZE];
		size_t n;
	} seen[8];
	size_t n_seen = 0, total = 0, best = 0;

	out[0] = 0;
	for (size_t a = 0; a < n_vols; a++) {
		for (uint32_t s = 0; s < vols[a].n_slices; s++) {
			const struct zl_slice *row = &vols[a].slices[s];
			int i = zl_slice_index_of(row, node);
			size_t k;

			if (i < 0 || !row->incarnation[i][0])
				continue;
			total++;
			for (k = 0; k < n_seen && strcmp(seen[k].inc, row->incarnation[i]); k++)
				;
			if (k == n_seen) {
				if (n_seen == ZL_ARRAY_SIZE(seen))
					continue;
				memcpy(seen[k].inc, row->incarnation[i], ZL_META_ID_SIZE);
				seen[k].n = 0;
				n_seen++;
			}
			seen[k].n++;
		}
	}
	for (size_t k = 0; k < n_seen; k++)
		if (seen[k].n > best) {
			best = seen[k].n;
			memcpy(out, seen[k].inc, ZL_META_ID_SIZE);
		}
	if (n_rows)
		*n_rows = best;
	if (n_other)
		*n_other = total - best;
	return best ? 1 : 0;
}

bool zl_storage_ident_inc_ok(const struct zl_slice *s, int idx, const char *incarnation)
{
	if (idx < 0 || idx >= s->n || idx >= ZL_MAX_REPLICAS)
		return true; /* not a member: the membership checks decide */
	/* "" in the row: placed by 0.1 or before the node had an identity. */
	return !s->incarnation[idx][0] || !incarnation[0] ||
	       !strcmp(s->incarnation[idx], incarnation);
}

bool zl_storage_ident_member_ok(const struct zl_storage *st, const struct zl_slice *s, int idx)
{
	return zl_storage_ident_inc_ok(s, idx, st->cfg.incarnation);
}

/* ---- start-up ---- */

static int ident_refuse(const char *what)
{
	fprintf(stderr, "zipline-storage: %s (refusing to start; nothing was changed) [%s]\n", what,
		zl_errname(-ZL_ERR_IDENTITY));
	return -ZL_ERR_IDENTITY;
}

/* Checks an existing identity against etcd's cluster and our node id. */
static int ident_check(const struct zl_storage_cfg *cfg, const struct zl_storage_ident *id,
		       const char *cluster)
{
	char msg[768];

	if (strcmp(id->cluster_id, cluster)) {
		snprintf(msg, sizeof(msg),
			 "data dir %s belongs to cluster %s but etcd %s prefix %s is cluster %s: "
			 "wrong --etcd or --etcd-prefix?",
			 cfg->data_dir, id->cluster_id, cfg->eo.endpoints, cfg->prefix, cluster);
		return ident_refuse(msg);
	}
	if (strcmp(id->node_id, cfg->node_id)) {
		snprintf(msg, sizeof(msg),
			 "data dir %s belongs to node %s of cluster %s, not to node %s: wrong "
			 "--node-id or --data-dir?",
			 cfg->data_dir, id->node_id, id->cluster_id, cfg->node_id);
		return ident_refuse(msg);
	}
	return 0;
}

/* A data dir without identity but with chunk files: the incarnation the
 * rows name for this node, when they name one. 1 (found), 0 or an error. */
static int ident_adopt(struct zl_storage *st, char inc[ZL_META_ID_SIZE])
{
	struct zl_volume *vols = NULL;
	size_t n = 0, rows = 0, other = 0;
	int rc = zl_meta_volume_list(st->etcd, st->cfg.prefix, &vols, &n);

	if (rc) {
		fprintf(stderr,
			"zipline-storage: cannot list volumes to adopt data dir %s: %s (check "
			"etcd and retry)\n",
			st->cfg.data_dir, zl_errname(rc));
		return rc;
	}
	rc = zl_storage_ident_adopt_pick(vols, n, st->cfg.node_id, inc, &rows, &other);
	zl_meta_volume_list_free(vols, n);
	if (rc)
		ZL_LOG_INFO("storage",
			    "adopting data dir %s: keeping incarnation=%s named by %zu slice "
			    "rows%s",
			    st->cfg.data_dir, inc, rows,
			    other ? " (other rows name other incarnations: those members are "
				    "copied again)"
				  : "");
	return rc;
}

int zl_storage_ident_resolve(struct zl_storage *st)
{
	struct zl_storage_cfg *cfg = &st->cfg;
	struct zl_storage_ident id = {0};
	struct zl_cluster_info ci;
	char msg[512];
	int rc, chunks;

	rc = zl_meta_cluster_ensure(st->etcd, cfg->prefix, &ci, NULL);
	if (rc) {
		fprintf(stderr,
			"zipline-storage: cannot read or create the cluster identity in etcd %s "
			"prefix %s: %s (see the log line above)\n",
			cfg->eo.endpoints, cfg->prefix, zl_errname(rc));
		return rc;
	}
	rc = zl_storage_ident_read(cfg->data_dir, &id);
	if (rc == 0) {
		rc = ident_check(cfg, &id, ci.id);
		if (rc)
			return rc;
		goto done;
	}
	if (rc != -ENOENT) {
		snprintf(msg, sizeof(msg),
			 "data dir %s: file %s/" IDENT_FILE " is unreadable or malformed (%s): "
			 "restore it (removing it adopts the dir as a data dir of 0.1)",
			 cfg->data_dir, cfg->data_dir, zl_errname(rc));
		return ident_refuse(msg);
	}
	chunks = zl_storage_ident_has_chunks(cfg->data_dir);
	if (chunks < 0) {
		fprintf(stderr, "zipline-storage: cannot read %s/chunks: %s\n", cfg->data_dir,
			zl_strerror(chunks));
		return chunks;
	}
	snprintf(id.cluster_id, sizeof(id.cluster_id), "%s", ci.id);
	snprintf(id.node_id, sizeof(id.node_id), "%s", cfg->node_id);
	id.created = zl_wall_sec();
	rc = chunks ? ident_adopt(st, id.incarnation) : 0;
	if (rc < 0)
		return rc;
	if (!rc)
		zl_meta_id_generate(id.incarnation);
	rc = zl_storage_ident_write(cfg->data_dir, &id);
	if (rc) {
		fprintf(stderr,
			"zipline-storage: cannot write %s/" IDENT_FILE ": %s (fix the data dir's "
			"permissions or free space)\n",
			cfg->data_dir, zl_strerror(rc));
		return rc;
	}
	ZL_LOG_INFO("storage", "data dir %s initialised: cluster=%s node=%s incarnation=%s%s",
		    cfg->data_dir, id.cluster_id, id.node_id, id.incarnation,
		    chunks ? " (adopted: chunk files of 0.1 were there)" : " (new)");
done:
	memcpy(cfg->cluster_id, id.cluster_id, sizeof(cfg->cluster_id));
	memcpy(cfg->incarnation, id.incarnation, sizeof(cfg->incarnation));
	ZL_LOG_INFO("storage", "identity cluster=%s node=%s incarnation=%s", cfg->cluster_id,
		    cfg->node_id, cfg->incarnation);
	return 0;
}

int zl_storage_ident_cluster_ok(const struct zl_storage *st, struct zl_etcd *e)
{
	struct zl_cluster_info ci;
	int rc = zl_meta_cluster_get(e, st->cfg.prefix, &ci);

	if (rc)
		return rc;
	return st->cfg.cluster_id[0] && !strcmp(ci.id, st->cfg.cluster_id) ? 0 : -ZL_ERR_IDENTITY;
}
