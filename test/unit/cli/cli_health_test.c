/* The health line and slice states of zl status / zl volume inspect
 * (cli/cli_health.c), from rows and node records built by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cli/cli_health.h"

static struct zl_node_info nodes[3] = {{.id = "a"}, {.id = "b"}, {.id = "c"}};

static void row3(struct zl_slice *s, enum zl_member_state x, enum zl_member_state y,
		 enum zl_member_state z)
{
	memset(s, 0, sizeof(*s));
	s->n = 3;
	s->version = 1;
	strcpy(s->nodes[0], "a");
	strcpy(s->nodes[1], "b");
	strcpy(s->nodes[2], "c");
	zl_slice_member_set(s, 0, x);
	zl_slice_member_set(s, 1, y);
	zl_slice_member_set(s, 2, z);
}

static enum zl_cli_slice_state state_of(const struct zl_slice *s, size_t n_nodes)
{
	struct zl_cli_slice_eval e;

	zl_cli_slice_eval(s, 2, nodes, n_nodes, false, &e);
	return e.state;
}

static void slice_states(void **st)
{
	struct zl_slice s;
	struct zl_cli_slice_eval e;

	(void)st;
	row3(&s, ZL_MEMBER_IN_SYNC, ZL_MEMBER_IN_SYNC, ZL_MEMBER_IN_SYNC);
	assert_int_equal(state_of(&s, 3), ZL_CLI_SLICE_ACTIVE);
	assert_int_equal(state_of(&s, 2), ZL_CLI_SLICE_DEGRADED); /* c down, still listed in sync */
	row3(&s, ZL_MEMBER_IN_SYNC, ZL_MEMBER_IN_SYNC, ZL_MEMBER_RECOVERING);
	assert_int_equal(state_of(&s, 3), ZL_CLI_SLICE_RECOVERING);
	row3(&s, ZL_MEMBER_IN_SYNC, ZL_MEMBER_OUT, ZL_MEMBER_OUT);
	zl_cli_slice_eval(&s, 2, nodes, 3, false, &e);
	assert_int_equal(e.state, ZL_CLI_SLICE_DEGRADED);
	assert_true(e.below_min);
	row3(&s, ZL_MEMBER_OUT, ZL_MEMBER_OUT, ZL_MEMBER_IN_SYNC);
	zl_cli_slice_eval(&s, 1, nodes, 2, false, &e); /* c, the primary, is down */
	assert_int_equal(e.state, ZL_CLI_SLICE_DOWN);
	assert_true(e.primary_down);
	row3(&s, ZL_MEMBER_OUT, ZL_MEMBER_RECOVERING, ZL_MEMBER_OUT);
	zl_cli_slice_eval(&s, 1, nodes, 3, false, &e);
	assert_true(e.no_in_sync);
	assert_string_equal(zl_cli_slice_state_name(e.state), "down");
}

/* The health line of v over the three nodes with status records ns[0..2):
 * a warning reading want. */
static void assert_warn(const struct zl_volume *v, const struct zl_node_status *ns,
			const char *want)
{
	struct zl_cli_health h = {0};
	char line[512];

	zl_cli_health_add_volume(&h, v, nodes, 3, NULL, 0);
	zl_cli_health_add_status(&h, ns, 2, nodes, 3);
	assert_int_equal(zl_cli_health_line(&h, line, sizeof(line)), 1);
	assert_string_equal(line, want);
}

static void health_lines(void **st)
{
	struct zl_slice rows[4];
	struct zl_volume v = {.replicas = 3, .n_slices = 4, .slices = rows};
	struct zl_node_status ns[2] = {
	    {.node = "a", .rate = 10 * 1048576, .bytes_left = 400 * 1048576, .recovering = 1},
	    {.node = "zz", .rate = 99 * 1048576, .bytes_left = 1, .recovering = 1}, /* no record */
	};
	struct zl_cli_health h = {0};
	char line[512];

	(void)st;
	for (int i = 0; i < 4; i++)
		row3(&rows[i], ZL_MEMBER_IN_SYNC, ZL_MEMBER_IN_SYNC, ZL_MEMBER_IN_SYNC);
	zl_cli_health_add_volume(&h, &v, nodes, 3, NULL, 0);
	assert_int_equal(zl_cli_health_line(&h, line, sizeof(line)), 0);
	assert_string_equal(line, "HEALTH_OK");

	memset(&h, 0, sizeof(h));
	zl_slice_member_set(&rows[1], 2, ZL_MEMBER_RECOVERING);
	zl_slice_member_set(&rows[2], 2, ZL_MEMBER_OUT);
	zl_cli_health_add_volume(&h, &v, nodes, 3, NULL, 0);
	zl_cli_health_add_status(&h, ns, 2, nodes, 3);
	assert_int_equal(zl_cli_health_line(&h, line, sizeof(line)), 1);
	assert_string_equal(line,
			    "HEALTH_WARN 2 slices degraded (1 recovering), recovering 10.0 MiB/s, "
			    "ETA 40 s");

	memset(&h, 0, sizeof(h));
	zl_slice_member_set(&rows[3], 1, ZL_MEMBER_OUT);
	zl_slice_member_set(&rows[3], 2, ZL_MEMBER_OUT);
	zl_cli_health_add_volume(&h, &v, nodes, 3, NULL, 0);
	assert_int_equal(zl_cli_health_line(&h, line, sizeof(line)), 2);
	assert_string_equal(line,
			    "HEALTH_ERR 1 slice below min_size; 3 slices degraded (1 recovering)");

	memset(&h, 0, sizeof(h));
	zl_cli_health_add_volume(&h, &v, nodes, 0, NULL, 0); /* every node down */
	assert_int_equal(zl_cli_health_line(&h, line, sizeof(line)), 2);
	assert_string_equal(line, "HEALTH_ERR 4 slices with the primary down; 4 slices degraded "
				  "(0 recovering)");

	/* A live node's full data disk warns, with every slice in sync; a
	 * node without a record does not count. */
	for (int i = 0; i < 4; i++)
		row3(&rows[i], ZL_MEMBER_IN_SYNC, ZL_MEMBER_IN_SYNC, ZL_MEMBER_IN_SYNC);
	ns[0].disk_full = ns[1].disk_full = true;
	assert_warn(&v, ns, "HEALTH_WARN 1 node's data disk full");
	zl_slice_member_set(&rows[1], 2, ZL_MEMBER_RECOVERING);
	ns[0].rate = 0;
	assert_warn(&v, ns,
		    "HEALTH_WARN 1 slice degraded (1 recovering), recovering 400.0 MiB left, 1 "
		    "node's data disk full");
	/* Near full, not full: its own count; a full one counts as full
	 * only. */
	zl_slice_member_set(&rows[1], 2, ZL_MEMBER_IN_SYNC);
	ns[0].disk_full = false;
	ns[0].disk_near_full = ns[1].disk_near_full = true;
	assert_warn(&v, ns, "HEALTH_WARN 1 node's data disk near full");
	ns[0].disk_full = true;
	assert_warn(&v, ns, "HEALTH_WARN 1 node's data disk full");
}

/* Slices the primary's status record lists as peering in the row's term. */
static void peering(void **st)
{
	struct zl_slice rows[4];
	struct zl_volume v = {.num = 7, .replicas = 3, .n_slices = 4, .slices = rows};
	static struct zl_node_status ns[2] = {
	    {.node = "a",
	     .peering_slices = 3,
	     .n_peering = 3,
	     .peering = {{.vol = 5, .slice = 0, .term = 1},
			 {.vol = 7, .slice = 0, .term = 1},
			 {.vol = 7, .slice = 2, .term = 1}}},
	    {.node = "b", .peering_slices = 1, .n_peering = 1, .peering = {{7, 3, 2}}},
	};
	struct zl_cli_health h = {0};
	struct zl_cli_slice_eval e;
	char line[512];

	(void)st;
	for (int i = 0; i < 4; i++)
		row3(&rows[i], ZL_MEMBER_IN_SYNC, ZL_MEMBER_IN_SYNC, ZL_MEMBER_IN_SYNC);
	rows[3].term = 2;
	zl_slice_member_set(&rows[3], 0, ZL_MEMBER_OUT); /* b leads in term 2 */
	zl_slice_member_set(&rows[2], 2, ZL_MEMBER_RECOVERING);
	assert_true(zl_cli_slice_peering(&rows[0], 7, 0, ns, 2));
	assert_false(zl_cli_slice_peering(&rows[1], 7, 1, ns, 2));
	assert_true(zl_cli_slice_peering(&rows[2], 7, 2, ns, 2));
	assert_true(zl_cli_slice_peering(&rows[3], 7, 3, ns, 2));
	assert_false(zl_cli_slice_peering(&rows[0], 7, 0, ns, 0));
	assert_false(zl_cli_slice_peering(&rows[0], 7, 0, &ns[1], 1)); /* a's record gone */
	rows[3].term = 3; /* b's record is of an older term */
	assert_false(zl_cli_slice_peering(&rows[3], 7, 3, ns, 2));
	rows[3].term = 2;
	/* Peering wins over recovering; down wins over peering. */
	zl_cli_slice_eval(&rows[2], 2, nodes, 3, true, &e);
	assert_string_equal(zl_cli_slice_state_name(e.state), "peering");
	zl_cli_slice_eval(&rows[0], 2, nodes, 2, true, &e);
	assert_int_equal(e.state, ZL_CLI_SLICE_PEERING); /* c down: degraded too */
	zl_cli_slice_eval(&rows[0], 2, &nodes[1], 2, true, &e);
	assert_int_equal(e.state, ZL_CLI_SLICE_DOWN);

	zl_cli_health_add_volume(&h, &v, nodes, 3, ns, 2);
	assert_int_equal(h.peering, 3);
	assert_int_equal(zl_cli_health_line(&h, line, sizeof(line)), 1);
	assert_string_equal(line, "HEALTH_WARN 3 slices degraded (0 recovering), 3 slices peering");
	memset(&h, 0, sizeof(h));
	zl_cli_health_add_volume(&h, &v, nodes, 3, NULL, 0);
	assert_int_equal(zl_cli_health_line(&h, line, sizeof(line)), 1);
	assert_string_equal(line, "HEALTH_WARN 2 slices degraded (1 recovering)");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(slice_states),
	    cmocka_unit_test(health_lines),
	    cmocka_unit_test(peering),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
