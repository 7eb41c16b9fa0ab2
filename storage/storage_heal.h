/* zipline-storage, healing (docs/REPLICATION.md §3-4, --heal=on): data
 * versions and recovery (storage_heal.c), peering of a new primary
 * (storage_peering.c), scrub and repair (storage_scrub.c). Loop thread. */
#ifndef ZL_STORAGE_HEAL_H
#define ZL_STORAGE_HEAL_H

#include "storage.h"

/* ---- healing (storage_heal.c), loop thread, --heal=on only ----
 *
 * The primary of a slice numbers its writes (zl_wire_dver_make(term, seq)),
 * and tells each member whether its copy of a chunk is known complete: only
 * then does the member's chunk version grow with a forwarded write (else it
 * is sent version 0, which keeps the member's version, so recovery still
 * sees the chunk as behind). A member's chunk version v therefore always
 * means "holds every write up to v", and recovery copies exactly the chunks
 * whose version differs from the primary's (below it, or above it: a write
 * the old primary applied but never acknowledged, rolled back). */

/* A pushed copy of version `pushed` replaces a member's chunk of version
 * `own` only when it is newer: a copy never overwrites a newer write. */
static inline bool zl_storage_push_applies(uint64_t own, uint64_t pushed)
{
	return own < pushed;
}

/* The version a member's chunk gets from a piece of a chunk copy: the
 * pushed version on the piece that ends the chunk, 0 (keep the old one)
 * before, so a copy cut short by a crash is copied again. */
static inline uint64_t zl_storage_push_piece_version(uint32_t off, uint32_t len,
						     uint32_t chunk_size, uint64_t pushed)
{
	return (uint64_t)off + len == chunk_size ? pushed : 0;
}

/* Whether a CHUNK_PUSH of version `pushed` applies over a copy of version
 * `own`: with `replace` (subop ZL_PUSH_REPLACE to a member that is not
 * IN_SYNC) whenever the versions differ, so a newer, never-acknowledged
 * write is rolled back to the primary's copy; else only over an older copy. */
static inline bool zl_storage_push_accepts(uint64_t own, uint64_t pushed, bool replace)
{
	return replace ? own != pushed : zl_storage_push_applies(own, pushed);
}

/* Creates st->heal and starts the recovery tick. 0 or -ENOMEM. */
int zl_storage_heal_start(struct zl_storage *st);
/* Stops recovery: the tick stops and no new step starts (steps in flight
 * end in their callbacks). Call before the peers and the chunk store go.
 * Accepts st->heal == NULL. */
void zl_storage_heal_stop(struct zl_storage *st);
/* Frees st->heal once no callback can come (after the peers and the chunk
 * store, before the transports). Accepts st->heal == NULL. */
void zl_storage_heal_destroy(struct zl_storage *st);
/* The next data version of a write to `slice` of v on this primary, from
 * the sequence peering set for the slice's term (zl_storage_heal_seq_set;
 * memory only). 0, -ZL_ERR_PEERING when peering has not set the term's
 * (a write admitted in an earlier term), -ENOMEM, or -ERANGE when the
 * sequence of the term is exhausted. */
int zl_storage_heal_version_next(struct zl_storage *st, const struct zl_volume *v,
				 uint32_t slice, uint64_t *ver);
/* Whether a write of `chunk` is forwarded to member `node` (state `ms` in
 * the row) with its data version: true when the member's copy of the chunk
 * is known complete, else false (forwarded with version 0). */
bool zl_storage_heal_fwd_versioned(struct zl_storage *st, const struct zl_volume *v,
				   uint32_t slice, const char *node, enum zl_member_state ms,
				   uint64_t chunk);
/* Counts the client writes of `chunk` (a slice of v this node is primary
 * of) from srv_plan (`start`) until their local write and every forward
 * ended (!start): recovery copies a chunk only while none is counted.
 * start: 0 or -ENOMEM (not counted; the caller must not end it). */
int zl_storage_heal_plan(struct zl_storage *st, const struct zl_volume *v, uint32_t slice,
			 uint64_t chunk, bool start);
/* A write of `chunk` not forwarded to node (OUT in the row): its copy, if
 * recovery knew it complete, is no longer (the OUT may be gone before
 * recovery's next look: OUT, then RECOVERING within one tick). */
void zl_storage_heal_fwd_skipped(struct zl_storage *st, const struct zl_volume *v, uint32_t slice,
				 const char *node, uint64_t chunk);
/* A forwarded write of `chunk` to node failed: its copy is no longer
 * trusted until recovery looked at it again. */
void zl_storage_heal_fwd_failed(struct zl_storage *st, const struct zl_volume *v,
				uint32_t slice, const char *node, uint64_t chunk);
/* Queues a failure report about peer (error zl_errname(err)) for this
 * daemon's worker, which puts it on the daemon's report lease (the outcome
 * is logged). Never waits for etcd. 0 (queued, or equal to one on its way),
 * -ZL_ERR_BUSY when too many wait already (logged), -ZL_ERR_CONN while the
 * daemon stops. */
int zl_storage_heal_report(struct zl_storage *st, const char *vol_id, uint32_t slice,
			   const char *peer, const char *error, uint64_t slice_ver);
/* Remembers that this node serves volume num (recovery looks at it). */
void zl_storage_heal_note_vol(struct zl_storage *st, uint64_t num);
/* Fills up to max pairs of chunk versions above `above` of slice `slice`
 * of v, starting at chunk `from`; *next gets the chunk to continue from (0:
 * done). Reads the metadata of chunks not open (blocking), bounded per
 * call: zl_storage_heal_versions_warm first. Returns the number of pairs or
 * a negative error. */
int zl_storage_heal_versions(struct zl_storage *st, const struct zl_volume *v, uint32_t slice,
			     uint64_t from, uint64_t above, struct zl_wire_chunk_ver *out,
			     uint32_t max, uint64_t *next);
/* Opens on the store's open workers the chunks that zl_storage_heal_versions
 * of the same (slice, from) looks at, with their clone chunks
 * (zl_chunk_snap_warm): the number of opens
 * queued, each ending in cb(arg, status) on the loop (0: all open now). */
int zl_storage_heal_versions_warm(struct zl_storage *st, const struct zl_volume *v, uint32_t slice,
				  uint64_t from, zl_chunk_cb cb, void *arg);

/* ---- clone chunks in healing (docs/SNAPSHOTS.md §2), loop thread ----
 *
 * Recovery, peering and scrub make a replica's clone chunks of a chunk
 * equal to an authority's (the primary's, or the winning copy's holder):
 * clones never change once taken, so equal ids and versions mean equal
 * data. */

/* A clone chunk a replica holds (id zl_chunk_clone_id(chunk, hi), its
 * version and lo), or, in a clone plan, an action on the target replica:
 * del = remove its copy of id, else copy the authority's. */
struct zl_storage_clone {
	uint64_t id, version;
	uint32_t lo;
	bool del;
};

/* The clone plan of one chunk (pure): the actions that make `have` (the
 * clones a replica holds of it) equal to `want` (the authority's), into out
 * (room for n_have + n_want): deletions first (a clone of have that want
 * lacks; with del_differing also one want holds at another version: an
 * IN_SYNC member refuses a copy over a clone it holds), then copies (a clone
 * of want that have lacks or holds at another version, with want's version
 * and lo). Returns the number of actions. */
uint32_t zl_storage_clone_plan(const struct zl_storage_clone *want, uint32_t n_want,
			       const struct zl_storage_clone *have, uint32_t n_have,
			       bool del_differing, struct zl_storage_clone *out);

/* The clones this node holds of chunk of vol, ascending id, with their
 * versions and lo: at most max into out, *n gets how many. 0 or the error
 * of zl_chunk_version. */
int zl_storage_clones_own(struct zl_storage *st, uint64_t vol, uint64_t chunk,
			  uint32_t chunk_size, struct zl_storage_clone *out, uint32_t max,
			  uint32_t *n);

/* Appends the (id, version) pair of a clone listed by CHUNK_VERSIONS to
 * (*v, *n, *cap). Its lo is not on the wire: the hi of the clone listed
 * before it of the same chunk stands in (0 for the first): no snapshot lies
 * between the two (a snapshot there would have made a clone between them),
 * so reads at every existing snapshot and collection decide the same. 0 or
 * -ENOMEM. */
int zl_storage_clone_listed(struct zl_storage_clone **v, uint32_t *n, uint32_t *cap,
			    uint64_t id, uint64_t version);

/* Sets the data sequence of `slice` of volume vol for `term` (peering
 * decided it): the next write gets seq + 1. 0 or -ENOMEM. */
int zl_storage_heal_seq_set(struct zl_storage *st, uint64_t vol, uint32_t slice, uint32_t term,
			    uint32_t seq);

/* ---- peering (storage_peering.c), loop thread, --heal=on only ----
 *
 * A primary serves client I/O of a slice only once it has peered in the
 * row's term (docs/REPLICATION.md §3): it asks every other IN_SYNC member for
 * its chunk versions, takes for every chunk the newest version among its own
 * and theirs, pulls the chunks it is behind on (READ + ZL_WF_ANY), pushes
 * the winning copy to the members behind, and only then serves. */

/* Creates st->peering. 0 or -ENOMEM. */
int zl_storage_peering_create(struct zl_storage *st);
/* Stops starting steps (callbacks in flight end quietly). Accepts NULL. */
void zl_storage_peering_stop(struct zl_storage *st);
/* Frees st->peering (no callback may come any more). Accepts NULL. */
void zl_storage_peering_destroy(struct zl_storage *st);
/* 0 when this node may serve client I/O of `slice` of v: --heal=off, not
 * its primary (the caller checks the role), or peered in the row's term.
 * Else -ZL_ERR_PEERING, and peering is started (or restarted after a row
 * change or a failed attempt). */
int zl_storage_peering_ready(struct zl_storage *st, const struct zl_volume *v, uint32_t slice);
/* zl_storage_peering_ready for a caller that found this node the primary of
 * `slice` already (its request path): the same answer, without the look-up. */
int zl_storage_peering_ready_primary(struct zl_storage *st, const struct zl_volume *v,
				     uint32_t slice);
/* zl_storage_peering_ready over every slice of v this node is primary of (a
 * FLUSH): 0 or -ZL_ERR_PEERING. */
int zl_storage_peering_vol_ready(struct zl_storage *st, const struct zl_volume *v);
/* Forgets what peering knows of volume vol (its replicas were deleted).
 * Accepts st->peering == NULL. */
void zl_storage_peering_forget(struct zl_storage *st, uint64_t vol);
/* The slices whose cached row names this node primary in a term it has not
 * peered in (of the volumes peering looked at): up to max of them into out,
 * sorted by (vol, slice); returns how many there are (may exceed max). 0
 * with --heal=off. Loop thread. */
uint32_t zl_storage_peering_list(struct zl_storage *st, struct zl_status_peering *out, uint32_t max);

/* Peering's rule for one chunk (pure): own is this node's version, ver[i]
 * what in-sync member i answered (answered[i] false: no answer, not
 * counted). The newest version wins; a tie keeps the own copy. Returns -1
 * when the own copy wins, else the member to pull from; *win gets the
 * winning version and *behind the mask of answered members whose version
 * differs from it (they get the winning copy). */
int zl_storage_peering_winner(uint64_t own, const uint64_t *ver, const bool *answered, unsigned n,
			   uint64_t *win, uint32_t *behind);

/* Applies one piece [off, off+len) of a whole-chunk copy of version
 * `pushed` (CHUNK_PUSH on a member, a pull on a peering primary): buf (4 KiB
 * aligned) holds the data; an all-zero piece before the last is zeroed
 * (stays sparse); the last piece stores the version. Returns as
 * zl_chunk_write. */
int zl_storage_chunk_apply(struct zl_storage *st, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
			   uint32_t off, uint32_t len, const uint8_t *buf, uint64_t pushed,
			   zl_chunk_cb cb, void *arg);

/* Recovery totals of this primary (zl status, metrics): bytes its recovery
 * jobs copied since it last had none running (0 when none runs: a new run
 * starts from 0), and for the running ones an estimate of what is left
 * (chunks not yet known complete, times the chunk size). Loop thread; the
 * first call that finds no job running ends the run. */
struct zl_storage_heal_progress {
	uint64_t bytes_done;
	uint64_t bytes_left;
	uint32_t members; /* running (volume, slice, member) jobs */
	uint64_t bytes_total, chunks_total; /* pushed by every job since the start */
};
/* Fills *out (zeros with --heal=off). Loop thread. */
void zl_storage_heal_progress(struct zl_storage *st, struct zl_storage_heal_progress *out);

/* ---- scrub and repair (storage_scrub.c), loop thread ---- */

/* Creates st->scrub and starts the background scrub timer
 * (cfg.scrub_interval_s, 0 = off). 0 or -ENOMEM. */
int zl_storage_scrub_start(struct zl_storage *st);
/* No new work starts; jobs waiting on the rate limit end now, the others in
 * the callback of what they wait for. Call with zl_storage_heal_stop.
 * Accepts st->scrub == NULL. */
void zl_storage_scrub_stop(struct zl_storage *st);
/* Frees st->scrub once no callback can come (with zl_storage_heal_destroy).
 * Accepts st->scrub == NULL. */
void zl_storage_scrub_destroy(struct zl_storage *st);
/* CHUNK_DIGEST: digests of the chunks of slice h->offset this node holds,
 * one window from chunk h->chunk; answers on c (asynchronously). */
void zl_storage_scrub_digest_serve(struct zl_storage *st, struct zl_xport_conn *c,
				   const struct zl_wire_hdr *h);
/* SCRUB (this node must be the slice's primary): scrub and repair slice
 * h->offset of h->vol_id; answers on c with struct zl_wire_scrub_result. */
void zl_storage_scrub_serve(struct zl_storage *st, struct zl_xport_conn *c,
			    const struct zl_wire_hdr *h);
/* A client's READ (without ZL_WF_ANY) or write of chunk `chunk` (in slice
 * `slice`) of vol found a bad block in our copy: when this node is the
 * chunk's primary, a scrub of that chunk repairs our copy from the members
 * (none while a scrub of its slice runs; a chunk whose last such scrub
 * repaired nothing waits 5 s). Without it, a write covering part of that
 * block would wait (its edge block cannot be read) for the next background
 * or manual scrub. Never calls etcd. */
void zl_storage_scrub_on_corrupt(struct zl_storage *st, uint64_t vol, uint32_t slice,
				 uint64_t chunk);
/* One member's copy of a chunk as a scrub sees it: held = a digest record
 * came (bad may then be ZL_WIRE_DIGEST_MISSING or _BUSY). */
struct zl_scrub_copy {
	bool held;
	uint64_t version;
	uint32_t digest;
	uint32_t bad;
};
/* Scrub's rule for one chunk over n copies, copy 0 the primary's (pure).
 * The winner is the highest version among held copies without bad blocks; a
 * tie keeps the lower index (the primary's copy first). Every other copy is
 * rewritten from it (bit i of *repair, why[i] = "missing" | "crc" |
 * "divergent") unless it is held, good, and of the winner's version and
 * digest; a copy not held is fine only when the winner is an all-zero
 * (zero_digest) chunk of version 0. Returns the winner; -1 when no copy is
 * good (*repair = the held copies); -2 when no copy is held or one is BUSY
 * (no verdict). */
int zl_storage_scrub_judge(const struct zl_scrub_copy *c, unsigned n, uint32_t zero_digest,
			   uint32_t *repair, const char **why);

#endif
