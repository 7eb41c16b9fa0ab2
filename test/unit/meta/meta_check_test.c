/* zl_meta_volume_check: the one sanity check of a volume record. Each case
 * breaks one field of a valid record and expects -ZL_ERR_INVAL with a reason
 * that names what is wrong; the encoder and decoder must agree with it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/meta/meta.h"
#include "lib/wire/wire.h"

static void make_volume(struct zl_volume *v, uint32_t n_slices, uint32_t replicas)
{
	static const char *ids[4] = {"n0", "n1", "n2", "n3"};
	static const struct zl_volume base = {
	    .id = "vol-0123456789abcdef",
	    .num = 0x0123456789abcdefull,
	    .name = "pvc-check",
	    .size = 1ull << 30,
	    .chunk_size = 4u << 20,
	    .state = "ready",
	    .params = "{}",
	};

	*v = base;
	v->replicas = replicas;
	v->n_slices = n_slices;
	v->slices = calloc(n_slices, sizeof(*v->slices));
	assert_non_null(v->slices);
	for (uint32_t s = 0; s < n_slices; s++) {
		v->slices[s].version = 1;
		v->slices[s].n = (uint8_t)replicas;
		for (uint32_t r = 0; r < replicas; r++) {
			strcpy(v->slices[s].nodes[r], ids[(s + r) % 4]);
			v->slices[s].in_sync[r] = true;
		}
	}
}

/* Asserts that v fails the check with a reason containing want, and that
 * the encoder refuses it too. */
static void assert_refused(const struct zl_volume *v, const char *want)
{
	char why[256];

	memset(why, 'x', sizeof(why));
	assert_int_equal(zl_meta_volume_check(v, why, sizeof(why)), -ZL_ERR_INVAL);
	if (!strstr(why, want))
		fail_msg("reason \"%s\" does not mention \"%s\"", why, want);
	assert_int_equal(zl_meta_volume_check(v, NULL, 0), -ZL_ERR_INVAL);
	assert_null(zl_meta_volume_to_json(v));
}

static void test_valid(void **state)
{
	struct zl_volume v;
	char why[64] = "stale";
	char *json;
	struct zl_volume back;

	(void)state;
	for (uint32_t r = 1; r <= ZL_MAX_REPLICAS; r++) {
		make_volume(&v, 8, r);
		assert_int_equal(zl_meta_volume_check(&v, why, sizeof(why)), 0);
		assert_string_equal(why, "");
		/* What the check accepts, the codec round-trips. */
		json = zl_meta_volume_to_json(&v);
		assert_non_null(json);
		assert_int_equal(zl_meta_volume_from_json(json, strlen(json), &back), 0);
		assert_int_equal(zl_meta_volume_check(&back, NULL, 0), 0);
		free(json);
		zl_volume_fini(&back);
		zl_volume_fini(&v);
	}
	/* A slice that lost every in-sync replica is still a valid record. */
	make_volume(&v, 2, 3);
	memset(v.slices[1].in_sync, 0, sizeof(v.slices[1].in_sync));
	assert_int_equal(zl_meta_volume_check(&v, why, sizeof(why)), 0);
	/* Bounds: smallest and largest chunk, smallest size. */
	v.chunk_size = ZL_WIRE_MIN_CHUNK;
	v.size = ZL_BLOCK_SIZE;
	assert_int_equal(zl_meta_volume_check(&v, NULL, 0), 0);
	v.chunk_size = ZL_WIRE_MAX_CHUNK;
	assert_int_equal(zl_meta_volume_check(&v, NULL, 0), 0);
	zl_volume_fini(&v);
	/* A tiny reason buffer is cut, not overrun. */
	make_volume(&v, 2, 3);
	v.chunk_size = 3000;
	why[5] = 'z';
	assert_int_equal(zl_meta_volume_check(&v, why, 5), -ZL_ERR_INVAL);
	assert_int_equal(strlen(why), 4);
	assert_int_equal(why[5], 'z');
	zl_volume_fini(&v);
	assert_int_equal(zl_meta_volume_check(NULL, why, sizeof(why)), -ZL_ERR_INVAL);
}

static void test_scalars(void **state)
{
	struct zl_volume v;

	(void)state;
	make_volume(&v, 4, 3);

	v.num++;
	assert_refused(&v, "does not match number");
	v.num--;
	strcpy(v.id, "vol-12");
	assert_refused(&v, "id is not");
	zl_vol_id_format(v.num, v.id);

	strcpy(v.name, "a/b");
	assert_refused(&v, "name");
	v.name[0] = '\0';
	assert_refused(&v, "name");
	memset(v.name, 'n', sizeof(v.name)); /* no NUL inside the buffer */
	assert_refused(&v, "name");
	strcpy(v.name, "pvc-check");

	v.size = 0;
	assert_refused(&v, "size=0");
	v.size = 4097;
	assert_refused(&v, "size=4097");
	v.size = (uint64_t)INT64_MAX + 1;
	assert_refused(&v, "size=");
	v.size = 1ull << 30;

	v.chunk_size = 3u << 20;
	assert_refused(&v, "chunk_size=3145728 is not a power of two");
	v.chunk_size = ZL_WIRE_MIN_CHUNK / 2;
	assert_refused(&v, "chunk_size=");
	v.chunk_size = ZL_WIRE_MAX_CHUNK * 2;
	assert_refused(&v, "chunk_size=");
	v.chunk_size = 0;
	assert_refused(&v, "chunk_size=0");
	v.chunk_size = 4u << 20;

	v.replicas = 0;
	assert_refused(&v, "replicas=0");
	v.replicas = ZL_MAX_REPLICAS + 1;
	assert_refused(&v, "replicas=4");
	v.replicas = 3;

	v.n_slices = 0;
	assert_refused(&v, "slices=0");
	v.n_slices = 65537;
	assert_refused(&v, "slices=65537");
	v.n_slices = 4;

	v.state[0] = '\0';
	assert_refused(&v, "state");
	memset(v.state, 's', sizeof(v.state));
	assert_refused(&v, "state");
	strcpy(v.state, "ready");

	strcpy(v.params, "[1]");
	assert_refused(&v, "params");
	strcpy(v.params, "{\"a\":1,\"a\":2}");
	assert_refused(&v, "params");
	strcpy(v.params, "{}");

	assert_int_equal(zl_meta_volume_check(&v, NULL, 0), 0);
	zl_volume_fini(&v);
}

static void test_placement(void **state)
{
	struct zl_volume v;

	(void)state;
	make_volume(&v, 4, 3);

	free(v.slices);
	v.slices = NULL;
	assert_refused(&v, "no placement table");
	zl_volume_fini(&v);

	make_volume(&v, 4, 3);
	v.slices[2].version = 0;
	assert_refused(&v, "slice 2 has version 0");
	v.slices[2].version = (uint64_t)INT64_MAX + 1;
	assert_refused(&v, "slice 2 has version");
	v.slices[2].version = 7;

	v.slices[1].n = 2;
	assert_refused(&v, "slice 1 lists 2 nodes, replicas=3");
	v.slices[1].n = 3;

	strcpy(v.slices[3].nodes[1], v.slices[3].nodes[2]);
	assert_refused(&v, "slice 3 lists node");
	strcpy(v.slices[3].nodes[1], "bad id");
	assert_refused(&v, "slice 3 replica 1 has an invalid node id");
	v.slices[3].nodes[1][0] = '\0';
	assert_refused(&v, "slice 3 replica 1");
	memset(v.slices[3].nodes[1], 'x', sizeof(v.slices[3].nodes[1]));
	assert_refused(&v, "slice 3 replica 1");
	strcpy(v.slices[3].nodes[1], "n9");
	assert_int_equal(zl_meta_volume_check(&v, NULL, 0), 0);

	/* Rows must agree with replicas: the same table read as 2 replicas. */
	v.replicas = 2;
	assert_refused(&v, "slice 0 lists 3 nodes, replicas=2");
	zl_volume_fini(&v);
}

/* The fields of issue 10: member states, incarnations, term, min_size. */
static void test_replication_fields(void **state)
{
	static const char inc[] = "0123456789abcdef0123456789abcdef";
	struct zl_volume v, back;
	char *json;

	(void)state;
	make_volume(&v, 4, 3);
	/* 0 means the default (a hand-built record of 0.1 code), written as 2;
	 * an unset term is written as 1. */
	assert_int_equal(zl_volume_min_size(&v), 2);
	for (uint32_t m = 0; m <= 3; m++) {
		v.min_size = m;
		assert_int_equal(zl_meta_volume_check(&v, NULL, 0), 0);
	}
	v.min_size = 4;
	assert_refused(&v, "min_size=4 is not in [1, replicas=3]");
	v.min_size = 0;

	zl_slice_member_set(&v.slices[1], 2, ZL_MEMBER_RECOVERING);
	strcpy(v.slices[1].incarnation[0], inc);
	v.slices[1].term = 7;
	assert_int_equal(zl_meta_volume_check(&v, NULL, 0), 0);
	json = zl_meta_volume_to_json(&v);
	assert_non_null(json);
	assert_non_null(strstr(json, "\"min_size\":2"));
	assert_int_equal(zl_meta_volume_from_json(json, strlen(json), &back), 0);
	free(json);
	assert_int_equal(back.min_size, 2);
	assert_int_equal(back.slices[0].term, 1);
	assert_int_equal(back.slices[1].term, 7);
	assert_int_equal(zl_slice_member_state(&back.slices[1], 0), ZL_MEMBER_IN_SYNC);
	assert_int_equal(zl_slice_member_state(&back.slices[1], 2), ZL_MEMBER_RECOVERING);
	assert_false(back.slices[1].in_sync[2]);
	assert_string_equal(back.slices[1].incarnation[0], inc);
	assert_string_equal(back.slices[1].incarnation[1], "");
	zl_volume_fini(&back);

	v.slices[2].state[1] = 3;
	assert_refused(&v, "slice 2 member n3 has state 3");
	v.slices[2].state[1] = ZL_MEMBER_OUT;
	strcpy(v.slices[3].incarnation[2], "0123456789ABCDEF0123456789abcdef");
	assert_refused(&v, "slice 3 member n1 has an incarnation");
	strcpy(v.slices[3].incarnation[2], "0123456789abcdef");
	assert_refused(&v, "incarnation");
	memset(v.slices[3].incarnation[2], 'a', sizeof(v.slices[3].incarnation[2]));
	assert_refused(&v, "incarnation"); /* no NUL */
	v.slices[3].incarnation[2][0] = '\0';
	assert_int_equal(zl_meta_volume_check(&v, NULL, 0), 0);
	zl_volume_fini(&v);

	/* Defaults by replicas. */
	assert_int_equal(zl_meta_min_size_default(1), 1);
	assert_int_equal(zl_meta_min_size_default(2), 1);
	assert_int_equal(zl_meta_min_size_default(3), 2);
	make_volume(&v, 1, 1);
	v.min_size = 2;
	assert_refused(&v, "min_size=2 is not in [1, replicas=1]");
	zl_volume_fini(&v);
}

/* Each of bad[0 .. n), JSON members put in front of a valid record's,
 * makes the decoder refuse the record. */
static void assert_fields_refused(const char *const *bad, size_t n)
{
	struct zl_volume v, back;

	for (size_t i = 0; i < n; i++) {
		char *json, *p;

		make_volume(&v, 1, 3);
		json = zl_meta_volume_to_json(&v);
		zl_volume_fini(&v);
		assert_non_null(json);
		p = malloc(strlen(json) + strlen(bad[i]) + 2);
		assert_non_null(p);
		sprintf(p, "{%s,%s", bad[i], json + 1);
		assert_int_equal(zl_meta_volume_from_json(p, strlen(p), &back), -ZL_ERR_INVAL);
		free(p);
		free(json);
	}
}

/* Issue 26: client I/O limits and io_timeout in the record, and the knob
 * parser the CLI and the CSI controller share. */
static void test_qos_fields(void **state)
{
	struct zl_volume v, back;
	struct zl_volume_mod mod = {0};
	char names[512];
	char *json;

	(void)state;
	make_volume(&v, 4, 3);
	/* None set: the record has neither field (as before issue 26). */
	json = zl_meta_volume_to_json(&v);
	assert_non_null(json);
	assert_null(strstr(json, "qos"));
	assert_null(strstr(json, "io_timeout"));
	free(json);

	v.qos[ZL_QOS_WRITE_IOPS] = 2000;
	v.qos[ZL_QOS_READ_BPS] = 100ull << 20;
	v.qos[ZL_QOS_BURST(ZL_QOS_WRITE_IOPS)] = 50;
	v.io_timeout_s = 30;
	json = zl_meta_volume_to_json(&v);
	assert_non_null(json);
	assert_non_null(strstr(json, "\"qos\":{\"write_iops\":2000,\"read_bps\":104857600,"
				     "\"write_iops_burst\":50}"));
	assert_non_null(strstr(json, "\"io_timeout\":30"));
	assert_int_equal(zl_meta_volume_from_json(json, strlen(json), &back), 0);
	free(json);
	assert_memory_equal(back.qos, v.qos, sizeof(v.qos));
	assert_int_equal(back.io_timeout_s, 30);
	zl_volume_fini(&back);

	v.io_timeout_s = ZL_META_IO_TIMEOUT_MAX + 1;
	assert_refused(&v, "io_timeout=604801 is not in [0, 604800] seconds");
	v.io_timeout_s = 0;
	v.qos[ZL_QOS_READ_IOPS] = ZL_QOS_MAX + 1;
	assert_refused(&v, "qos read_iops=9223372036854775808 is beyond 2^63");
	v.qos[ZL_QOS_READ_IOPS] = 0;
	zl_volume_fini(&v);

	/* A "qos" that is not an object, or a negative limit, is refused. */
	{
		static const char *bad[] = {"\"qos\":7", "\"qos\":{\"read_iops\":-1}",
					    "\"qos\":{\"write_bps\":\"1M\"}",
					    "\"io_timeout\":0"};

		assert_fields_refused(bad, sizeof(bad) / sizeof(bad[0]));
	}

	/* Names and values. */
	assert_int_equal(zl_knob_by_param("writeIops"), ZL_QOS_WRITE_IOPS);
	assert_int_equal(zl_knob_by_flag("burst-read-bps"), ZL_QOS_BURST(ZL_QOS_READ_BPS));
	assert_int_equal(zl_knob_by_param("iops"), ZL_KNOB_IOPS);
	assert_int_equal(zl_knob_by_flag("io-timeout"), ZL_KNOB_IO_TIMEOUT);
	assert_int_equal(zl_knob_by_param("replicas"), -1);
	assert_int_equal(zl_knob_by_flag("writeIops"), -1);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_IOPS, "2000"), 0);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_BPS, "100M"), 0);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_QOS_BURST(ZL_QOS_WRITE_BPS), "0"), 0);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_MIN_SIZE, "1"), 0);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_IO_TIMEOUT, "30"), 0);
	assert_int_equal(mod.qos[ZL_QOS_READ_IOPS], 2000);
	assert_int_equal(mod.qos[ZL_QOS_WRITE_IOPS], 2000);
	assert_int_equal(mod.qos[ZL_QOS_WRITE_BPS], 100ull << 20);
	assert_int_equal(mod.min_size, 1);
	assert_int_equal(mod.io_timeout_s, 30);
	assert_int_equal(mod.mask,
			 ZL_VMOD_QOS(ZL_QOS_READ_IOPS) | ZL_VMOD_QOS(ZL_QOS_WRITE_IOPS) |
			     ZL_VMOD_QOS(ZL_QOS_READ_BPS) | ZL_VMOD_QOS(ZL_QOS_WRITE_BPS) |
			     ZL_VMOD_QOS(ZL_QOS_BURST(ZL_QOS_WRITE_BPS)) | ZL_VMOD_MIN_SIZE |
			     ZL_VMOD_IO_TIMEOUT);
	memset(&mod, 0, sizeof(mod));
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_IOPS, "2K"), -ZL_ERR_INVAL);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_IOPS, "-1"), -ZL_ERR_INVAL);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_IOPS, ""), -ZL_ERR_INVAL);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_BPS, "1X"), -ZL_ERR_INVAL);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_MIN_SIZE, "0"), -ZL_ERR_INVAL);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_MIN_SIZE, "4"), -ZL_ERR_INVAL);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_IO_TIMEOUT, "604801"),
			 -ZL_ERR_INVAL);
	assert_int_equal(zl_volume_mod_parse(&mod, ZL_KNOB_N, "1"), -ZL_ERR_INVAL);
	assert_int_equal(mod.mask, 0);
	zl_knob_names(false, names, sizeof(names));
	assert_non_null(strstr(names, "readIops, writeIops, readBps"));
	assert_non_null(strstr(names, "minSize, ioTimeout"));
	zl_knob_names(true, names, sizeof(names));
	assert_non_null(strstr(names, "--read-iops, --write-iops"));
}

/* Issue 25: the snapshot sequence and the snapshot list in the record. */
static void test_snap_fields(void **state)
{
	struct zl_volume v, back;
	char *json;

	(void)state;
	make_volume(&v, 4, 3);
	/* Never snapshotted: neither field (records stay as before). */
	json = zl_meta_volume_to_json(&v);
	assert_non_null(json);
	assert_null(strstr(json, "snap"));
	free(json);

	v.snap_seq = 7;
	v.n_snaps = 3;
	v.snaps[0] = 2;
	v.snaps[1] = 5;
	v.snaps[2] = 7;
	json = zl_meta_volume_to_json(&v);
	assert_non_null(json);
	assert_non_null(strstr(json, "\"snap_seq\":7"));
	assert_non_null(strstr(json, "\"snaps\":[2,5,7]"));
	assert_int_equal(zl_meta_volume_from_json(json, strlen(json), &back), 0);
	free(json);
	assert_int_equal(back.snap_seq, 7);
	assert_int_equal(back.n_snaps, 3);
	assert_memory_equal(back.snaps, v.snaps, 3 * sizeof(v.snaps[0]));
	zl_volume_fini(&back);

	v.snaps[1] = 2;
	assert_refused(&v, "snaps[1]=2: the snapshot sequences must ascend strictly within "
			   "[1, snap_seq=7]");
	v.snaps[1] = 8;
	assert_refused(&v, "snaps[1]=8: the snapshot sequences must ascend strictly within "
			   "[1, snap_seq=7]");
	v.snaps[1] = 5;
	v.snap_seq = ZL_WIRE_SEQ_MAX + 1;
	assert_refused(&v, "snap_seq=16777216 is not in [0, 16777215]");
	v.snap_seq = 7;
	zl_volume_fini(&v);

	/* Malformed fields are refused by the decoder. */
	{
		static const char *bad[] = {"\"snaps\":7", "\"snaps\":[0]",
					    "\"snaps\":[\"1\"]", "\"snap_seq\":0",
					    "\"snap_seq\":3,\"snaps\":[4]",
					    "\"snaps\":[1]"};

		assert_fields_refused(bad, sizeof(bad) / sizeof(bad[0]));
	}
}

/* Issue 25: a clone's parent (volume id and snapshot sequence). */
static void test_parent_field(void **state)
{
	struct zl_volume v, back;
	char *json;

	(void)state;
	make_volume(&v, 2, 3);
	json = zl_meta_volume_to_json(&v);
	assert_non_null(json);
	assert_null(strstr(json, "parent"));
	free(json);
	strcpy(v.parent_vol, "vol-00000000000000aa");
	v.parent_seq = 4;
	json = zl_meta_volume_to_json(&v);
	assert_non_null(json);
	assert_non_null(strstr(json, "\"parent\":{\"vol\":\"vol-00000000000000aa\",\"seq\":4}"));
	assert_int_equal(zl_meta_volume_from_json(json, strlen(json), &back), 0);
	free(json);
	assert_string_equal(back.parent_vol, "vol-00000000000000aa");
	assert_int_equal(back.parent_seq, 4);
	zl_volume_fini(&back);
	v.parent_seq = 0;
	assert_refused(&v, "parent must name a volume id (vol- and 16 hex digits) and a snapshot "
			   "sequence in [1, 16777215]");
	v.parent_seq = 1;
	strcpy(v.parent_vol, v.id);
	assert_refused(&v, "is the volume itself");
	zl_volume_fini(&v);
	{
		static const char *bad[] = {"\"parent\":7", "\"parent\":{\"vol\":\"x\"}",
					    "\"parent\":{\"vol\":\"vol-00000000000000aa\",\"seq\":0}",
					    "\"parent\":{\"vol\":\"nope\",\"seq\":1}"};

		assert_fields_refused(bad, sizeof(bad) / sizeof(bad[0]));
	}
}

static void test_member_helpers(void **state)
{
	struct zl_slice s = {.version = 1, .n = 3};

	(void)state;
	assert_int_equal(zl_slice_member_count(&s, ZL_MEMBER_OUT), 3);
	zl_slice_member_set(&s, 1, ZL_MEMBER_IN_SYNC);
	zl_slice_member_set(&s, 2, ZL_MEMBER_RECOVERING);
	assert_true(s.in_sync[1]);
	assert_false(s.in_sync[2]);
	assert_int_equal(zl_slice_primary(&s), 1);
	assert_int_equal(zl_slice_member_count(&s, ZL_MEMBER_IN_SYNC), 1);
	assert_int_equal(zl_slice_member_count(&s, ZL_MEMBER_RECOVERING), 1);
	/* in_sync[] decides, as 0.1 code expects: clearing it makes the member
	 * out, setting it makes it in sync, whatever state[] says. */
	s.in_sync[1] = false;
	assert_int_equal(zl_slice_member_state(&s, 1), ZL_MEMBER_OUT);
	s.in_sync[2] = true;
	assert_int_equal(zl_slice_member_state(&s, 2), ZL_MEMBER_IN_SYNC);
	s.in_sync[2] = false;
	assert_int_equal(zl_slice_member_state(&s, 2), ZL_MEMBER_RECOVERING);
	assert_string_equal(zl_member_state_name(ZL_MEMBER_RECOVERING), "recovering");
	assert_string_equal(zl_member_state_name((enum zl_member_state)9), "?");
}

static void test_ids(void **state)
{
	char id[ZL_META_ID_SIZE], other[ZL_META_ID_SIZE];

	(void)state;
	zl_meta_id_generate(id);
	zl_meta_id_generate(other);
	assert_int_equal(strlen(id), ZL_META_ID_LEN);
	assert_int_equal(zl_meta_id_check(id), 0);
	assert_string_not_equal(id, other);
	assert_int_equal(zl_meta_id_check("0123456789abcdef0123456789abcdef"), 0);
	assert_int_equal(zl_meta_id_check("0123456789abcdef0123456789abcde"), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_id_check("0123456789abcdef0123456789abcdef0"), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_id_check("0123456789abcdef0123456789abcdeg"), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_id_check("0123456789ABCDEF0123456789abcdef"), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_id_check(""), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_id_check(NULL), -ZL_ERR_INVAL);
}

static void test_chunk_size_ok(void **state)
{
	(void)state;
	assert_true(zl_meta_chunk_size_ok(ZL_WIRE_MIN_CHUNK));
	assert_true(zl_meta_chunk_size_ok(ZL_WIRE_MAX_CHUNK));
	assert_true(zl_meta_chunk_size_ok(1u << 20));
	assert_false(zl_meta_chunk_size_ok(0));
	assert_false(zl_meta_chunk_size_ok(ZL_WIRE_MIN_CHUNK / 2));
	assert_false(zl_meta_chunk_size_ok((uint64_t)ZL_WIRE_MAX_CHUNK * 2));
	assert_false(zl_meta_chunk_size_ok((1u << 20) + 4096));
	assert_false(zl_meta_chunk_size_ok(1ull << 40));
}

/* A clone chunk id (hi << 40 | chunk) lives in its chunk's slice. */
static void test_slice_of_id(void **state)
{
	struct zl_volume v = {.n_slices = 7};

	(void)state;
	assert_int_equal(zl_volume_slice_of(&v, 0), 0);
	assert_int_equal(zl_volume_slice_of(&v, 15), 1);
	assert_int_equal(zl_slice_of_id((3ull << ZL_WIRE_CHUNK_IDX_BITS) | 15, 7), 1);
	assert_int_equal(zl_slice_of_id((0xffffffull << ZL_WIRE_CHUNK_IDX_BITS) | 20, 7), 6);
	assert_int_equal(zl_slice_of_id((1ull << ZL_WIRE_CHUNK_IDX_BITS) - 1, 1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_valid),
	    cmocka_unit_test(test_scalars),
	    cmocka_unit_test(test_placement),
	    cmocka_unit_test(test_chunk_size_ok),
	    cmocka_unit_test(test_replication_fields),
	    cmocka_unit_test(test_qos_fields),
	    cmocka_unit_test(test_snap_fields),
	    cmocka_unit_test(test_parent_field),
	    cmocka_unit_test(test_member_helpers),
	    cmocka_unit_test(test_ids),
	    cmocka_unit_test(test_slice_of_id),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
