/* The storage daemon's metrics endpoint and probes (storage_metrics.c). */
#ifndef ZL_STORAGE_METRICS_H
#define ZL_STORAGE_METRICS_H

#include "storage.h"

/* With --metrics: serves /metrics, /healthz and /readyz and starts the
 * loop's once-a-second sample. Loop thread, before zl_loop_run. 0 or a
 * negative error (logged). */
int zl_storage_metrics_start(struct zl_storage *st);
/* Takes a sample now (the daemon just registered: /readyz says so at
 * once, not up to a second later). Loop thread; st->metrics may be NULL. */
void zl_storage_metrics_refresh(struct zl_storage *st);
/* Stops serving and the sample. Loop thread; st->metrics may be NULL. */
void zl_storage_metrics_stop(struct zl_storage *st);

#endif
