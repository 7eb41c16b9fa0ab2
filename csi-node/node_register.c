/* Registration of this node for zipline-controller: the record
 * <prefix>csinodes/<node-id> = {"node", "version", "time"}, written at start
 * with no lease. ControllerPublishVolume answers NOT_FOUND for a node id
 * without one (the CSI spec's "node does not exist"). No lease, because a
 * node whose zipline-node restarts or loses etcd for a while still exists,
 * as its Kubernetes CSINode object does. The first attempt runs before the
 * CSI socket opens; when etcd is unreachable then, a thread retries every
 * few seconds until it succeeds or the service stops. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "lib/meta/meta.h"
#include "node.h"

#define REGISTER_RETRY_S 3

/* Retry thread state: reg_lock guards reg_stop. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cond = PTHREAD_COND_INITIALIZER;
static bool reg_stop;
static bool reg_thread_started;
static bool reg_done; /* under reg_lock */
static pthread_t reg_thread;

/* One attempt: 0 or an etcd error (logged by the caller). */
static int register_put(struct node *n)
{
	char key[512];
	json_t *j;
	char *val;
	int rc;

	rc = zl_meta_key(key, sizeof(key), n->cfg.etcd_prefix, "csinodes", n->cfg.node_id);
	if (rc)
		return rc;
	j = json_pack("{s:s, s:s, s:I}", "node", n->cfg.node_id, "version", ZL_VERSION_STRING,
		      "time", (json_int_t)time(NULL));
	val = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!val)
		return -ENOMEM;
	rc = zl_etcd_put(n->etcd, key, val, strlen(val), 0, NULL);
	free(val);
	if (!rc) {
		ZL_LOG_INFO(NODE_LOG, "registered node=%s key=%s", n->cfg.node_id, key);
		pthread_mutex_lock(&reg_lock);
		reg_done = true;
		pthread_mutex_unlock(&reg_lock);
	}
	return rc;
}

bool node_registered(void)
{
	bool done;

	pthread_mutex_lock(&reg_lock);
	done = reg_done;
	pthread_mutex_unlock(&reg_lock);
	return done;
}

static void *register_retry_main(void *arg)
{
	struct node *n = arg;
	struct timespec ts;
	bool stop = false;

	while (!stop) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += REGISTER_RETRY_S;
		pthread_mutex_lock(&reg_lock);
		while (!reg_stop && pthread_cond_timedwait(&reg_cond, &reg_lock, &ts) != ETIMEDOUT)
			;
		stop = reg_stop;
		pthread_mutex_unlock(&reg_lock);
		if (!stop && register_put(n) == 0)
			break;
	}
	return NULL;
}

int node_register_start(struct node *n)
{
	int rc;

	rc = register_put(n);
	if (rc == 0)
		return 0;
	if (rc == -ZL_ERR_INVAL) {
		fprintf(stderr, "zipline-node: --etcd-prefix plus --node-id %s make too long a key\n",
			n->cfg.node_id);
		return rc;
	}
	ZL_LOG_WARN(NODE_LOG,
		    "cannot register node=%s in etcd yet err=%s detail=\"%s\": retrying every %d s; "
		    "ControllerPublishVolume to this node answers NOT_FOUND until then",
		    n->cfg.node_id, zl_errname(rc), zl_etcd_last_error(), REGISTER_RETRY_S);
	rc = pthread_create(&reg_thread, NULL, register_retry_main, n);
	if (rc) {
		ZL_LOG_ERR(NODE_LOG, "cannot start the registration thread: %s", strerror(rc));
		return -rc;
	}
	reg_thread_started = true;
	return 0;
}

void node_register_stop(void)
{
	if (!reg_thread_started)
		return;
	pthread_mutex_lock(&reg_lock);
	reg_stop = true;
	pthread_cond_broadcast(&reg_cond);
	pthread_mutex_unlock(&reg_lock);
	pthread_join(reg_thread, NULL);
	reg_thread_started = false;
}
