/* Power-cut probe for the test VM (test/vm/selftest.sh): writes 4 KiB blocks
 * to a block device with O_DIRECT|O_DSYNC and records every acknowledged
 * write in a log on a host-shared directory; after the host has SIGKILLed
 * qemu and booted again, checks that every acknowledged write reads back.
 *
 *   vm_blkio write  DEV LOG SEED NBLOCKS READY_FILE READY_AFTER MAX_WRITES
 *   vm_blkio verify DEV LOG SEED NBLOCKS
 *
 * Write number w goes to block w % NBLOCKS, so the region is overwritten
 * pass after pass and a stale block (an older acknowledged write) is caught,
 * not only a lost one. Its content is a function of (SEED, w): a header
 * (magic, seed, w, block) and a pseudo-random fill. The log gets the line
 * "w\n" (fdatasync'ed) after pwrite() of w returned; READY_FILE is created
 * after READY_AFTER acknowledged writes, for the host to cut power at any
 * later moment. Writes are sequential, so at the cut at most write
 * last_logged + 1 is on the disk without a log line: its block may hold
 * either version (or a torn one) and is not checked; every other block must
 * hold exactly its last logged write.
 *
 * Exit status: 0 ok (write: MAX_WRITES done, which the selftest treats as a
 * failure: the cut came too late); 1 a check failed; 2 bad usage or I/O set-up.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLKIO_BS    4096
#define BLKIO_MAGIC 0x314b4c424d564c5aULL /* "ZLVMBLK1" */

struct blkio_hdr {
	uint64_t magic;
	uint64_t seed;
	uint64_t wno;
	uint64_t block;
};

/* Fill buf with the content of write number wno. */
static void blkio_block_fill(uint8_t *buf, uint64_t seed, uint64_t wno, uint64_t nblocks)
{
	struct blkio_hdr h = {BLKIO_MAGIC, seed, wno, wno % nblocks};
	uint64_t x = seed ^ (wno * 0x9e3779b97f4a7c15ULL) ^ 0xd1b54a32d192ed03ULL;
	size_t i;

	memcpy(buf, &h, sizeof(h));
	for (i = sizeof(h); i < BLKIO_BS; i += sizeof(x)) {
		x ^= x << 13; /* xorshift64 */
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, sizeof(x));
	}
}

static int blkio_u64_parse(const char *s, uint64_t *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 10);
	return (errno || end == s || *end) ? -EINVAL : 0;
}

static int blkio_write(const char *dev, const char *log, uint64_t seed, uint64_t nblocks,
		       const char *ready, uint64_t ready_after, uint64_t max_writes)
{
	uint8_t *buf = NULL;
	int fd, lfd, rfd, rc = 2;
	uint64_t w;
	char line[32];

	if (posix_memalign((void **)&buf, BLKIO_BS, BLKIO_BS)) {
		fprintf(stderr, "vm_blkio: out of memory\n");
		return 2;
	}
	fd = open(dev, O_WRONLY | O_DIRECT | O_DSYNC);
	if (fd < 0) {
		fprintf(stderr, "vm_blkio: open %s: %s\n", dev, strerror(errno));
		goto out_buf;
	}
	lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (lfd < 0) {
		fprintf(stderr, "vm_blkio: open %s: %s\n", log, strerror(errno));
		goto out_fd;
	}
	for (w = 0; w < max_writes; w++) {
		ssize_t n;
		int len;

		blkio_block_fill(buf, seed, w, nblocks);
		n = pwrite(fd, buf, BLKIO_BS, (off_t)((w % nblocks) * BLKIO_BS));
		if (n != BLKIO_BS) {
			fprintf(stderr, "vm_blkio: write %" PRIu64 " to %s: %s\n", w, dev,
				n < 0 ? strerror(errno) : "short write");
			rc = 1;
			goto out_lfd;
		}
		len = snprintf(line, sizeof(line), "%" PRIu64 "\n", w);
		if (write(lfd, line, (size_t)len) != len || fdatasync(lfd)) {
			fprintf(stderr, "vm_blkio: log %s: %s\n", log, strerror(errno));
			goto out_lfd;
		}
		if (w + 1 == ready_after) {
			rfd = open(ready, O_WRONLY | O_CREAT, 0644);
			if (rfd < 0 || fsync(rfd) || close(rfd)) {
				fprintf(stderr, "vm_blkio: ready file %s: %s\n", ready,
					strerror(errno));
				goto out_lfd;
			}
		}
	}
	printf("vm_blkio: all %" PRIu64 " writes done, no power cut came\n", max_writes);
	rc = 0;
out_lfd:
	close(lfd);
out_fd:
	close(fd);
out_buf:
	free(buf);
	return rc;
}

/* Reads the log: sets *count to the number of complete lines, which must be
 * 0, 1, 2, ... in order. Returns 0, or 1 if the log is malformed. */
static int blkio_log_read(const char *log, uint64_t *count)
{
	FILE *f = fopen(log, "r");
	char line[64];
	uint64_t v;

	*count = 0;
	if (!f) {
		fprintf(stderr, "vm_blkio: open %s: %s\n", log, strerror(errno));
		return 1;
	}
	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);

		if (len == 0 || line[len - 1] != '\n')
			break; /* the last line may be cut by the power cut */
		line[len - 1] = '\0';
		if (blkio_u64_parse(line, &v) || v != *count) {
			fprintf(stderr, "vm_blkio: %s line %" PRIu64 " is '%s', want %" PRIu64 "\n",
				log, *count + 1, line, *count);
			fclose(f);
			return 1;
		}
		(*count)++;
	}
	fclose(f);
	return 0;
}

static int blkio_verify(const char *dev, const char *log, uint64_t seed, uint64_t nblocks)
{
	uint8_t *buf = NULL, *want = NULL;
	uint64_t acked, b, checked = 0, bad = 0, inflight;
	int fd, rc = 2;

	if (blkio_log_read(log, &acked))
		return 1;
	if (acked == 0) {
		fprintf(stderr, "vm_blkio: %s records no acknowledged write\n", log);
		return 1;
	}
	if (posix_memalign((void **)&buf, BLKIO_BS, BLKIO_BS) ||
	    posix_memalign((void **)&want, BLKIO_BS, BLKIO_BS)) {
		fprintf(stderr, "vm_blkio: out of memory\n");
		goto out_buf;
	}
	fd = open(dev, O_RDONLY | O_DIRECT);
	if (fd < 0) {
		fprintf(stderr, "vm_blkio: open %s: %s\n", dev, strerror(errno));
		goto out_buf;
	}
	inflight = acked % nblocks; /* block of write number `acked` */
	for (b = 0; b < nblocks && b < acked; b++) {
		/* last acknowledged write to block b */
		uint64_t w = b + ((acked - 1 - b) / nblocks) * nblocks;
		struct blkio_hdr h;

		if (b == inflight && acked >= nblocks)
			continue; /* may hold write `acked`, not acknowledged */
		if (pread(fd, buf, BLKIO_BS, (off_t)(b * BLKIO_BS)) != BLKIO_BS) {
			fprintf(stderr, "vm_blkio: read block %" PRIu64 ": %s\n", b,
				strerror(errno));
			goto out_fd;
		}
		checked++;
		blkio_block_fill(want, seed, w, nblocks);
		if (memcmp(buf, want, BLKIO_BS) == 0)
			continue;
		memcpy(&h, buf, sizeof(h));
		if (bad++ < 10)
			fprintf(stderr,
				"vm_blkio: block %" PRIu64 ": want acknowledged write %" PRIu64
				", found %s (magic %s, seed %" PRIu64 ", write %" PRIu64 ")\n",
				b, w,
				h.magic == BLKIO_MAGIC && h.seed == seed ? "an older/other write"
									 : "foreign data",
				h.magic == BLKIO_MAGIC ? "ok" : "bad", h.seed, h.wno);
	}
	printf("vm_blkio: %" PRIu64 " acknowledged writes (%" PRIu64 " passes over %" PRIu64
	       " blocks), %" PRIu64 " blocks checked, %" PRIu64 " wrong\n",
	       acked, (acked + nblocks - 1) / nblocks, nblocks, checked, bad);
	rc = bad ? 1 : 0;
out_fd:
	close(fd);
out_buf:
	free(want);
	free(buf);
	return rc;
}

static int blkio_usage(void)
{
	fprintf(stderr,
		"usage: vm_blkio write DEV LOG SEED NBLOCKS READY_FILE READY_AFTER MAX_WRITES\n"
		"       vm_blkio verify DEV LOG SEED NBLOCKS\n");
	return 2;
}

int main(int argc, char **argv)
{
	uint64_t seed, nblocks, ready_after, max_writes;

	if (argc == 9 && strcmp(argv[1], "write") == 0) {
		if (blkio_u64_parse(argv[4], &seed) || blkio_u64_parse(argv[5], &nblocks) ||
		    blkio_u64_parse(argv[7], &ready_after) ||
		    blkio_u64_parse(argv[8], &max_writes) || nblocks == 0 || ready_after == 0 ||
		    ready_after > max_writes)
			return blkio_usage();
		return blkio_write(argv[2], argv[3], seed, nblocks, argv[6], ready_after,
				   max_writes);
	}
	if (argc == 6 && strcmp(argv[1], "verify") == 0) {
		if (blkio_u64_parse(argv[4], &seed) || blkio_u64_parse(argv[5], &nblocks) ||
		    nblocks == 0)
			return blkio_usage();
		return blkio_verify(argv[2], argv[3], seed, nblocks);
	}
	return blkio_usage();
}
