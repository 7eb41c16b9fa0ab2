/* Fair share of the disk per volume (issue 26, storage_fair.c): while more
 * than one volume sends I/O, a volume may have at most a share of bytes in
 * flight to the disk (at least one operation); its other requests wait in
 * its own FIFO and go as its operations end. A volume with little in flight
 * (a QD1 reader) is never queued behind another volume's backlog: what it
 * waits behind at the disk is bounded by the other volumes' shares. Alone on
 * the daemon a volume is not bounded and pays two counter updates per
 * operation. Loop thread only: no lock, no allocation after create. */
#ifndef ZL_STORAGE_FAIR_H
#define ZL_STORAGE_FAIR_H

#include <stdbool.h>
#include <stdint.h>

/* Embedded in the request it admits (caller's storage, zeroed). */
struct zl_storage_fair_item {
	struct zl_storage_fair_item *next; /* its flow's FIFO while queued */
	uint32_t bytes;
	uint16_t flow;
	uint8_t state; /* enum in storage_fair.c: idle, queued, admitted */
};

struct zl_storage_fair_opts {
	bool on;	      /* off: every operation is admitted at once, nothing counted */
	uint64_t share_bytes; /* a volume's bytes in flight under contention */
	uint32_t window_ms;   /* contended: two volumes sent I/O within that long */
};

/* A queued item was admitted: the caller starts its disk operation now. */
typedef void (*zl_storage_fair_run_fn)(void *arg, struct zl_storage_fair_item *it);

/* What admission did (counters since create, the waiting ones now). */
struct zl_storage_fair_stats {
	uint64_t queued;   /* operations that waited for their volume's share */
	uint32_t waiting;  /* waiting now */
	uint32_t inflight; /* admitted and not yet done */
};

struct zl_storage_fair;

void zl_storage_fair_opts_default(struct zl_storage_fair_opts *o);
/* Returns 0 or -ENOMEM. run is called for each queued item once it is
 * admitted (from zl_storage_fair_done, never from zl_storage_fair_admit). */
int zl_storage_fair_create(const struct zl_storage_fair_opts *o, zl_storage_fair_run_fn run,
			   void *arg, struct zl_storage_fair **out);
/* Accepts NULL. Items still queued are not called back. */
void zl_storage_fair_destroy(struct zl_storage_fair *f);
/* Admission of an operation of `bytes` on the volume whose number hashes
 * to vol_hash (zl_hash64: the request path hashed it once) at now_ns: true
 * when it may go to the disk now (admitted), false when it was queued (run
 * admits it later). */
bool zl_storage_fair_admit(struct zl_storage_fair *f, struct zl_storage_fair_item *it,
			   uint64_t vol_hash, uint32_t bytes, uint64_t now_ns);
/* The disk operation of it ended: its bytes leave its volume's share and the
 * volume's queued operations that now fit are admitted (run). Nothing for an
 * item that is not admitted (idle: done already, or never admitted). */
void zl_storage_fair_done(struct zl_storage_fair *f, struct zl_storage_fair_item *it);
void zl_storage_fair_stats(const struct zl_storage_fair *f, struct zl_storage_fair_stats *out);

#endif
