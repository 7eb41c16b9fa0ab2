/* zl's etcd discovery and the trust rule of the local cluster's endpoints
 * file, on real files and directories: a file anyone else could have written
 * is refused with a message that names it and says to pass --etcd; a safe
 * one is used. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* cmocka needs the headers above first. */
#include <cmocka.h>

#include "cli/cli.h"

/* A scratch uid that owns nothing on this machine (for the test as root). */
#define FOREIGN_UID 4242

struct fixture {
	char top[256];	/* private, 0700 */
	char dir[300];	/* top/local: the local cluster dir, 0755 */
	char file[340]; /* dir/etcd.endpoints, 0644 */
};

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* Under /tmp on purpose: a sticky world-writable directory above the local
 * dir is allowed. */
static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->top, sizeof(f->top), "/tmp/zl-cli-local-XXXXXX");
	if (!mkdtemp(f->top))
		return -1;
	snprintf(f->dir, sizeof(f->dir), "%s/local", f->top);
	snprintf(f->file, sizeof(f->file), "%s/etcd.endpoints", f->dir);
	if (mkdir(f->dir, 0755) || chmod(f->dir, 0755))
		return -1;
	write_file(f->file, "  http://127.0.0.1:23790 \nignored\n");
	if (chmod(f->file, 0644))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char link[400];

	snprintf(link, sizeof(link), "%s/elsewhere", f->dir);
	unlink(link);
	unlink(f->file);
	rmdir(f->dir);
	chmod(f->top, 0700);
	rmdir(f->top);
	free(f);
	return 0;
}

/* Expects zl_cli_local_read to refuse with -EACCES and a reason containing
 * each of the words. */
static void assert_refused(const char *dir, uid_t uid, const char *w1, const char *w2)
{
	char out[256] = "x", err[1024] = "";

	assert_int_equal(zl_cli_local_read(dir, uid, out, sizeof(out), err, sizeof(err)), -EACCES);
	assert_string_equal(out, "");
	if (!strstr(err, w1) || !strstr(err, w2))
		fail_msg("reason \"%s\" lacks \"%s\" or \"%s\"", err, w1, w2);
}

static void test_good_file_is_used(void **state)
{
	struct fixture *f = *state;
	char out[256], err[1024] = "", none[300];
	enum zl_cli_etcd_src src;

	assert_int_equal(zl_cli_local_read(f->dir, getuid(), out, sizeof(out), err, sizeof(err)),
			 0);
	assert_string_equal(out, "http://127.0.0.1:23790");
	assert_int_equal(
	    zl_cli_etcd_discover(NULL, NULL, f->dir, out, sizeof(out), &src, err, sizeof(err)), 0);
	assert_int_equal(src, ZL_CLI_ETCD_LOCAL);
	assert_string_equal(out, "http://127.0.0.1:23790");
	/* $ZIPLINE_LOCAL_DIR is honoured when no dir is passed. */
	setenv("ZIPLINE_LOCAL_DIR", f->dir, 1);
	assert_int_equal(
	    zl_cli_etcd_discover(NULL, "", NULL, out, sizeof(out), &src, err, sizeof(err)), 0);
	assert_int_equal(src, ZL_CLI_ETCD_LOCAL);
	assert_string_equal(out, "http://127.0.0.1:23790");
	unsetenv("ZIPLINE_LOCAL_DIR");
	/* Group and others may read it; the owner may write it. */
	assert_int_equal(chmod(f->file, 0600), 0);
	assert_int_equal(zl_cli_local_read(f->dir, getuid(), out, sizeof(out), err, sizeof(err)),
			 0);
	/* An empty file, or none, means the default. */
	write_file(f->file, "");
	assert_int_equal(
	    zl_cli_etcd_discover(NULL, NULL, f->dir, out, sizeof(out), &src, err, sizeof(err)), 0);
	assert_int_equal(src, ZL_CLI_ETCD_DEFAULT);
	assert_string_equal(out, ZL_CLI_DEFAULT_ETCD);
	assert_int_equal(unlink(f->file), 0);
	assert_int_equal(zl_cli_local_read(f->dir, getuid(), out, sizeof(out), err, sizeof(err)),
			 -ENOENT);
	assert_int_equal(
	    zl_cli_etcd_discover(NULL, NULL, f->dir, out, sizeof(out), &src, err, sizeof(err)), 0);
	assert_int_equal(src, ZL_CLI_ETCD_DEFAULT);
	/* No directory at all: the default too. */
	snprintf(none, sizeof(none), "%s-none", f->top);
	assert_int_equal(
	    zl_cli_etcd_discover(NULL, NULL, none, out, sizeof(out), &src, err, sizeof(err)), 0);
	assert_int_equal(src, ZL_CLI_ETCD_DEFAULT);
}

static void test_flag_and_env_first(void **state)
{
	struct fixture *f = *state;
	char out[256], err[256];
	enum zl_cli_etcd_src src;

	/* Even with an untrusted file present, --etcd and $ZIPLINE_ETCD win
	 * without reading it. */
	assert_int_equal(chmod(f->file, 0666), 0);
	assert_int_equal(zl_cli_etcd_discover("http://f:1", "http://e:2", f->dir, out, sizeof(out),
					      &src, err, sizeof(err)),
			 0);
	assert_int_equal(src, ZL_CLI_ETCD_FLAG);
	assert_string_equal(out, "http://f:1");
	assert_int_equal(zl_cli_etcd_discover(NULL, "http://e:2", f->dir, out, sizeof(out), &src,
					      err, sizeof(err)),
			 0);
	assert_int_equal(src, ZL_CLI_ETCD_ENV);
	assert_string_equal(out, "http://e:2");
}

static void test_writable_file_refused(void **state)
{
	struct fixture *f = *state;
	char out[256], err[4400] = "";
	enum zl_cli_etcd_src src = ZL_CLI_ETCD_FLAG;

	assert_int_equal(chmod(f->file, 0666), 0);
	assert_refused(f->dir, getuid(), f->file, "writable by every user");
	/* discover: an error that says what is wrong and what to do, and no
	 * fallback to some other etcd. */
	assert_int_equal(
	    zl_cli_etcd_discover(NULL, NULL, f->dir, out, sizeof(out), &src, err, sizeof(err)),
	    -EACCES);
	assert_non_null(strstr(err, f->file));
	assert_non_null(strstr(err, "chmod go-w"));
	assert_non_null(strstr(err, "--etcd"));
	assert_int_equal(chmod(f->file, 0620), 0);
	assert_refused(f->dir, getuid(), f->file, "writable by its group");
}

static void test_writable_dir_refused(void **state)
{
	struct fixture *f = *state;
	char out[256], err[1024];

	assert_int_equal(chmod(f->dir, 0777), 0);
	assert_refused(f->dir, getuid(), f->dir, "writable by every user");
	/* The sticky bit does not make the directory of the file safe. */
	assert_int_equal(chmod(f->dir, 01777), 0);
	assert_refused(f->dir, getuid(), f->dir, "writable");
	assert_int_equal(chmod(f->dir, 0775), 0);
	assert_refused(f->dir, getuid(), f->dir, "writable by its group");
	assert_int_equal(chmod(f->dir, 0755), 0);
	/* A directory further up that anyone may write without the sticky bit
	 * lets them swap the whole local dir. */
	assert_int_equal(chmod(f->top, 0777), 0);
	assert_refused(f->dir, getuid(), f->top, "writable by every user");
	/* With the sticky bit (like /tmp) it is safe. */
	assert_int_equal(chmod(f->top, 01777), 0);
	assert_int_equal(zl_cli_local_read(f->dir, getuid(), out, sizeof(out), err, sizeof(err)),
			 0);
	assert_string_equal(out, "http://127.0.0.1:23790");
}

static void test_foreign_owner_refused(void **state)
{
	struct fixture *f = *state;
	uid_t me = getuid();

	/* As root a file can really be given to another uid; otherwise the
	 * same rule is exercised by trusting another uid than the owner. */
	if (me == 0) {
		assert_int_equal(chown(f->file, FOREIGN_UID, FOREIGN_UID), 0);
		assert_refused(f->dir, me, f->file, "owned by uid 4242");
		assert_int_equal(chown(f->file, 0, 0), 0);
		assert_int_equal(chown(f->dir, FOREIGN_UID, FOREIGN_UID), 0);
		assert_refused(f->dir, me, f->dir, "owned by uid 4242");
		assert_int_equal(chown(f->dir, 0, 0), 0);
	} else {
		assert_refused(f->dir, me + 1, f->file, "not by root or you");
	}
}

static void test_symlink_and_special_refused(void **state)
{
	struct fixture *f = *state;
	char target[400];

	/* A link could point anywhere, even at a file that is safe. */
	snprintf(target, sizeof(target), "%s/elsewhere", f->dir);
	assert_int_equal(rename(f->file, target), 0);
	assert_int_equal(symlink(target, f->file), 0);
	assert_refused(f->dir, getuid(), f->file, "symbolic link");
	assert_int_equal(unlink(f->file), 0);
	assert_int_equal(mkfifo(f->file, 0644), 0);
	assert_refused(f->dir, getuid(), f->file, "not a regular file");
	assert_int_equal(unlink(f->file), 0);
	assert_int_equal(rename(target, f->file), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_good_file_is_used, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_flag_and_env_first, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_writable_file_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_writable_dir_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_foreign_owner_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_symlink_and_special_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
