/* In-process operation locks: one CSI operation at a time per volume id (and
 * per name for CreateVolume). CSI wants a second concurrent call on the same
 * volume refused with ABORTED rather than queued: the CO retries it. The
 * list is short (operations in flight), so a linked list is enough. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl.h"

static void op_key(char *out, size_t len, const char *kind, const char *id)
{
	snprintf(out, len, "%s:%s", kind, id);
}

int ctrl_op_begin(struct ctrl *c, const char *kind, const char *id)
{
	struct ctrl_op *op;
	char key[sizeof(op->key)];
	int rc = 0;

	op_key(key, sizeof(key), kind, id);
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	snprintf(op->key, sizeof(op->key), "%s", key);
	pthread_mutex_lock(&c->ops_lock);
	for (struct ctrl_op *o = c->ops; o; o = o->next) {
		if (!strcmp(o->key, key)) {
			rc = -ZL_ERR_BUSY;
			break;
		}
	}
	if (!rc) {
		op->next = c->ops;
		c->ops = op;
	}
	pthread_mutex_unlock(&c->ops_lock);
	if (rc)
		free(op);
	return rc;
}

void ctrl_op_end(struct ctrl *c, const char *kind, const char *id)
{
	struct ctrl_op **pp, *op = NULL;
	char key[sizeof(op->key)];

	op_key(key, sizeof(key), kind, id);
	pthread_mutex_lock(&c->ops_lock);
	for (pp = &c->ops; *pp; pp = &(*pp)->next) {
		if (!strcmp((*pp)->key, key)) {
			op = *pp;
			*pp = op->next;
			break;
		}
	}
	pthread_mutex_unlock(&c->ops_lock);
	free(op);
}
