/* Per-volume state on the node (<state-dir>/<vol-id>/state.json), the
 * per-volume operation locks, and adoption of attach processes at start. */
#include "node.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int node_vol_dir(const struct node *n, const char *vol_id, char *out, size_t len)
{
	if ((size_t)snprintf(out, len, "%s/%s", n->cfg.state_dir, vol_id) >= len)
		return -ENAMETOOLONG;
	return 0;
}

int node_vol_file(const struct node *n, const char *vol_id, const char *name, char *out, size_t len)
{
	if ((size_t)snprintf(out, len, "%s/%s/%s", n->cfg.state_dir, vol_id, name) >= len)
		return -ENAMETOOLONG;
	return 0;
}

char *node_state_to_json(const struct node_vol_state *st)
{
	json_t *o = json_object(), *t = json_array();
	char *s = NULL;

	if (!o || !t)
		goto out;
	for (size_t i = 0; i < st->n_targets; i++)
		json_array_append_new(t, json_pack("{s:s,s:b}", "path", st->targets[i].path,
						   "readonly", st->targets[i].readonly));
	json_object_set_new(o, "volume_id", json_string(st->volume_id));
	json_object_set_new(o, "staging_path", json_string(st->staging));
	json_object_set_new(o, "mode", json_string(st->block ? "block" : "mount"));
	json_object_set_new(o, "fs_type", json_string(st->fs_type));
	json_object_set_new(o, "mount_flags", json_string(st->mount_flags));
	json_object_set_new(o, "stage_readonly", json_boolean(st->stage_ro));
	json_object_set_new(o, "pid", json_integer(st->pid));
	json_object_set_new(o, "frontend", json_string(node_frontend_name(st->frontend)));
	if (st->frontend == NODE_FRONTEND_UBLK)
		json_object_set_new(o, "ublk_id", json_integer(st->ublk_id));
	json_object_set_new(o, "loop_device", json_string(st->loop));
	json_object_set_new(o, "epoch", json_integer((json_int_t)st->epoch));
	json_object_set_new(o, "size", json_integer((json_int_t)st->size));
	json_object_set_new(o, "etcd_prefix", json_string(st->prefix));
	json_object_set_new(o, "staged", json_boolean(st->staged));
	json_object_set_new(o, "targets", t);
	t = NULL;
	s = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
out:
	json_decref(t);
	json_decref(o);
	return s;
}

static int node_json_str(json_t *o, const char *key, char *out, size_t len, bool required)
{
	json_t *v = json_object_get(o, key);

	if (!v || !json_is_string(v)) {
		out[0] = '\0';
		return required ? -ZL_ERR_INVAL : 0;
	}
	if ((size_t)snprintf(out, len, "%s", json_string_value(v)) >= len)
		return -ZL_ERR_INVAL;
	return 0;
}

int node_state_from_json(const char *json, struct node_vol_state *st)
{
	json_error_t jerr;
	json_t *o, *t, *e;
	const char *mode;
	size_t i;
	int rc = -ZL_ERR_INVAL;

	memset(st, 0, sizeof(*st));
	o = json_loads(json, 0, &jerr);
	if (!o || !json_is_object(o))
		goto out;
	if (node_json_str(o, "volume_id", st->volume_id, sizeof(st->volume_id), true) ||
	    node_json_str(o, "staging_path", st->staging, sizeof(st->staging), true) ||
	    node_json_str(o, "fs_type", st->fs_type, sizeof(st->fs_type), false) ||
	    node_json_str(o, "mount_flags", st->mount_flags, sizeof(st->mount_flags), false) ||
	    node_json_str(o, "loop_device", st->loop, sizeof(st->loop), false) ||
	    node_json_str(o, "etcd_prefix", st->prefix, sizeof(st->prefix), false))
		goto out;
	mode = json_string_value(json_object_get(o, "mode"));
	if (!mode || (strcmp(mode, "block") && strcmp(mode, "mount")))
		goto out;
	st->block = strcmp(mode, "block") == 0;
	mode = json_string_value(json_object_get(o, "frontend"));
	st->frontend = NODE_FRONTEND_FUSE;
	if (mode && node_frontend_parse(mode, &st->frontend) != 0)
		goto out;
	e = json_object_get(o, "ublk_id");
	st->ublk_id = e && json_is_integer(e) ? (int)json_integer_value(e) : -1;
	st->stage_ro = json_is_true(json_object_get(o, "stage_readonly"));
	st->staged = json_is_true(json_object_get(o, "staged"));
	st->pid = (pid_t)json_integer_value(json_object_get(o, "pid"));
	st->epoch = (uint64_t)json_integer_value(json_object_get(o, "epoch"));
	st->size = (uint64_t)json_integer_value(json_object_get(o, "size"));
	t = json_object_get(o, "targets");
	if (t && !json_is_array(t))
		goto out;
	json_array_foreach(t, i, e)
	{
		struct node_target *tg;

		if (st->n_targets >= NODE_MAX_TARGETS)
			goto out;
		tg = &st->targets[st->n_targets];
		if (node_json_str(e, "path", tg->path, sizeof(tg->path), true))
			goto out;
		tg->readonly = json_is_true(json_object_get(e, "readonly"));
		st->n_targets++;
	}
	rc = 0;
out:
	json_decref(o);
	return rc;
}

int node_state_load(const struct node *n, const char *vol_id, struct node_vol_state *st)
{
	char path[NODE_PATH_MAX], buf[16384];
	ssize_t len;
	int fd, rc;

	rc = node_vol_file(n, vol_id, "state.json", path, sizeof(path));
	if (rc)
		return rc;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len < 0)
		return -EIO;
	buf[len] = '\0';
	rc = node_state_from_json(buf, st);
	if (rc)
		ZL_LOG_ERR(NODE_LOG,
			   "state file is malformed: path=%s (remove it after unmounting "
			   "by hand)",
			   path);
	return rc;
}

int node_state_save(const struct node *n, const struct node_vol_state *st)
{
	char path[NODE_PATH_MAX], tmp[NODE_PATH_MAX + 8];
	char *json;
	size_t len;
	int fd, rc = 0;

	rc = node_vol_file(n, st->volume_id, "state.json", path, sizeof(path));
	if (rc)
		return rc;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	json = node_state_to_json(st);
	if (!json)
		return -ENOMEM;
	len = strlen(json);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto out_free;
	}
	if (write(fd, json, len) != (ssize_t)len || fsync(fd) < 0)
		rc = -EIO;
	close(fd);
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc)
		ZL_LOG_ERR(NODE_LOG, "cannot write state: path=%s err=%s", path, strerror(-rc));
out_free:
	free(json);
	return rc;
}

int node_state_remove(const struct node *n, const char *vol_id)
{
	static const char *const files[] = {"state.json", "state.json.tmp", "ctl.sock",
					    "attach.log", "attach.log.1", "token"};
	char path[NODE_PATH_MAX];

	for (size_t i = 0; i < ZL_ARRAY_SIZE(files); i++) {
		if (node_vol_file(n, vol_id, files[i], path, sizeof(path)) == 0)
			unlink(path);
	}
	if (node_vol_file(n, vol_id, "fuse", path, sizeof(path)) == 0 && rmdir(path) < 0 &&
	    errno != ENOENT)
		return -errno;
	if (node_vol_dir(n, vol_id, path, sizeof(path)) == 0 && rmdir(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int node_op_begin(struct node *n, const char *vol_id)
{
	int free_i = -1, rc = 0;

	pthread_mutex_lock(&n->ops.lock);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(n->ops.busy); i++) {
		if (!n->ops.busy[i][0]) {
			if (free_i < 0)
				free_i = (int)i;
		} else if (strcmp(n->ops.busy[i], vol_id) == 0) {
			rc = -ZL_ERR_BUSY;
			goto out;
		}
	}
	if (free_i < 0)
		rc = -ZL_ERR_BUSY;
	else
		snprintf(n->ops.busy[free_i], sizeof(n->ops.busy[free_i]), "%s", vol_id);
out:
	pthread_mutex_unlock(&n->ops.lock);
	return rc;
}

void node_op_end(struct node *n, const char *vol_id)
{
	pthread_mutex_lock(&n->ops.lock);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(n->ops.busy); i++) {
		if (strcmp(n->ops.busy[i], vol_id) == 0) {
			n->ops.busy[i][0] = '\0';
			break;
		}
	}
	pthread_mutex_unlock(&n->ops.lock);
}

/* A staged volume whose attach process died while its nbd or ublk device
 * still waits for a server: a new attach process takes the device over (the
 * kernel holds the I/O meanwhile, the mount stays). True when it did. */
static bool node_dev_recover(struct node *n, struct node_vol_state *st)
{
	char msg[768] = "";

	if (!st->staged || !node_frontend_dev_present(st))
		return false;
	if (node_attach_takeover(n, st, msg, sizeof(msg))) {
		ZL_LOG_ERR(NODE_LOG,
			   "cannot take over the %s device: vol=%s dev=%s err=\"%s\"",
			   node_frontend_name(st->frontend), st->volume_id, st->loop, msg);
		return false;
	}
	return true;
}

static void node_adopt_one(struct node *n, const char *vol_id, void *arg)
{
	struct node_vol_state st;
	char msg[512] = "";
	int rc;

	rc = node_state_load(n, vol_id, &st);
	if (rc) {
		if (rc == -ENOENT) /* a directory without state: an interrupted stage */
			node_state_remove(n, vol_id);
		return;
	}
	if (node_attach_alive(st.pid, vol_id)) {
		ZL_LOG_INFO(
		    NODE_LOG, "adopted attachment: vol=%s pid=%d loop=%s staging=%s targets=%zu",
		    vol_id, (int)st.pid, st.loop[0] ? st.loop : "-", st.staging, st.n_targets);
		return;
	}
	if (node_dev_recover(n, &st))
		return;
	/* Dead. Mounts made on top of it are broken but still the CO's to undo
	 * (NodeUnpublish/NodeUnstage clean up and report the condition); an
	 * attachment nothing was mounted on yet is cleaned up now. */
	if (st.staged && !st.block && node_mountinfo_find(st.staging, NULL, 0) > 0) {
		ZL_LOG_WARN(NODE_LOG,
			    "attach process is gone, volume condition abnormal until unstaged: "
			    "vol=%s pid=%d staging=%s",
			    vol_id, (int)st.pid, st.staging);
		return;
	}
	if (st.n_targets) {
		ZL_LOG_WARN(NODE_LOG,
			    "attach process is gone with published targets, waiting for "
			    "NodeUnpublish: vol=%s pid=%d",
			    vol_id, (int)st.pid);
		return;
	}
	rc = node_detach(n, &st, msg, sizeof(msg));
	ZL_LOG_WARN(NODE_LOG, "cleaned up dead attachment: vol=%s pid=%d result=%s", vol_id,
		    (int)st.pid, rc ? msg : "ok");
}

void node_state_foreach(struct node *n, void (*fn)(struct node *n, const char *vol_id, void *arg),
			void *arg)
{
	struct dirent *de;
	DIR *d;

	d = opendir(n->cfg.state_dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (node_check_vol_id(de->d_name) == 0)
			fn(n, de->d_name, arg);
	}
	closedir(d);
}

void node_state_adopt_all(struct node *n)
{
	node_state_foreach(n, node_adopt_one, NULL);
}

/* node_attach_alive reaps an attach process of ours that ended (a zombie
 * until then). */
static void node_reap_one(struct node *n, const char *vol_id, void *arg)
{
	struct node_vol_state st;

	if (node_state_load(n, vol_id, &st) || st.pid <= 0 ||
	    node_attach_alive(st.pid, st.volume_id))
		return;
	/* Dead: an nbd or ublk device waiting for a server gets one, under
	 * the volume's operation lock (an RPC running on it goes first). */
	if (st.frontend == NODE_FRONTEND_FUSE || !st.staged || node_op_begin(n, vol_id))
		return;
	if (node_state_load(n, vol_id, &st) == 0 && !node_attach_alive(st.pid, st.volume_id))
		node_dev_recover(n, &st);
	node_op_end(n, vol_id);
}

void node_state_reap_all(struct node *n)
{
	node_state_foreach(n, node_reap_one, NULL);
}
