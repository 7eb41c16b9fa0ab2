/* lib/grpc: a CSI Identity (+ two Controller methods) test server on a UNIX
 * socket, exercised by an independent client (Debian's python3-grpcio, see
 * grpc_server_client.py), plus the endpoint rules, the error mapping and
 * shutdown. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "csi.pb-c.h"
#include "lib/common/common.h"
#include "lib/grpc/grpc_server.h"

extern char **environ;

struct test_ctx {
	atomic_int probes;
	atomic_int creates;
	atomic_int inflight;
};

static char tmpdir[64];
static char sock_path[128];
static char endpoint[160];

/* ----------------------------------------------------------------- handlers */

static int t_get_plugin_info(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
			     ProtobufCMessage *resp)
{
	Csi__V1__GetPluginInfoResponse *r = (Csi__V1__GetPluginInfoResponse *)resp;
	Csi__V1__GetPluginInfoResponse__ManifestEntry *e;

	e = zl_grpc_call_new_msg(call,
				 &csi__v1__get_plugin_info_response__manifest_entry__descriptor);
	r->manifest = zl_grpc_call_alloc(call, sizeof(*r->manifest));
	if (!e || !r->manifest)
		return -ENOMEM;
	e->key = "component";
	e->value = "grpc-test";
	r->manifest[0] = e;
	r->n_manifest = 1;
	r->name = "test.zipline.csi.io";
	r->vendor_version = "0.1.0-test";
	return ZL_GRPC_OK;
}

static int t_get_plugin_caps(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
			     ProtobufCMessage *resp)
{
	Csi__V1__GetPluginCapabilitiesResponse *r = (Csi__V1__GetPluginCapabilitiesResponse *)resp;
	Csi__V1__PluginCapability *svc, *exp;

	svc = zl_grpc_call_new_msg(call, &csi__v1__plugin_capability__descriptor);
	exp = zl_grpc_call_new_msg(call, &csi__v1__plugin_capability__descriptor);
	r->capabilities = zl_grpc_call_alloc(call, 2 * sizeof(*r->capabilities));
	if (!svc || !exp || !r->capabilities)
		return -ENOMEM;
	svc->type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE;
	svc->service = zl_grpc_call_new_msg(call, &csi__v1__plugin_capability__service__descriptor);
	exp->type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_VOLUME_EXPANSION;
	exp->volume_expansion =
	    zl_grpc_call_new_msg(call, &csi__v1__plugin_capability__volume_expansion__descriptor);
	if (!svc->service || !exp->volume_expansion)
		return -ENOMEM;
	svc->service->type = CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE;
	exp->volume_expansion->type = CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__ONLINE;
	r->capabilities[0] = svc;
	r->capabilities[1] = exp;
	r->n_capabilities = 2;
	return ZL_GRPC_OK;
}

static int t_probe(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		   ProtobufCMessage *resp)
{
	struct test_ctx *t = ctx;
	Csi__V1__ProbeResponse *r = (Csi__V1__ProbeResponse *)resp;

	atomic_fetch_add(&t->probes, 1);
	r->ready = zl_grpc_call_new_msg(call, &google__protobuf__bool_value__descriptor);
	if (!r->ready)
		return -ENOMEM;
	r->ready->value = 1;
	return ZL_GRPC_OK;
}

static int t_ctrl_caps(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		       ProtobufCMessage *resp)
{
	Csi__V1__ControllerGetCapabilitiesResponse *r =
	    (Csi__V1__ControllerGetCapabilitiesResponse *)resp;
	Csi__V1__ControllerServiceCapability *c;

	c = zl_grpc_call_new_msg(call, &csi__v1__controller_service_capability__descriptor);
	r->capabilities = zl_grpc_call_alloc(call, sizeof(*r->capabilities));
	if (!c || !r->capabilities)
		return -ENOMEM;
	c->type_case = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
	c->rpc =
	    zl_grpc_call_new_msg(call, &csi__v1__controller_service_capability__rpc__descriptor);
	if (!c->rpc)
		return -ENOMEM;
	c->rpc->type = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME;
	r->capabilities[0] = c;
	r->n_capabilities = 1;
	return ZL_GRPC_OK;
}

/* name "" / "exists" / "bare-error" fail in three ways; "slow" sleeps 2 s;
 * anything else creates "vol-<name>". Every answer reports the deadline
 * the handler saw in volume_context["deadline_left_ms"]. */
static int t_create_volume(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
			   ProtobufCMessage *resp)
{
	struct test_ctx *t = ctx;
	const Csi__V1__CreateVolumeRequest *q = (const Csi__V1__CreateVolumeRequest *)req;
	Csi__V1__CreateVolumeResponse *r = (Csi__V1__CreateVolumeResponse *)resp;
	Csi__V1__Volume *v;
	Csi__V1__Volume__VolumeContextEntry *dl;
	Csi__V1__Topology *topo;
	Csi__V1__Topology__SegmentsEntry *seg;
	int64_t left = zl_grpc_call_deadline_left_ms(call);
	char buf[64];

	atomic_fetch_add(&t->creates, 1);
	assert_string_equal(zl_grpc_call_method(call), "/csi.v1.Controller/CreateVolume");
	if (!q->name[0])
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "CreateVolume: name is required");
	if (!strcmp(q->name, "exists"))
		return zl_grpc_fail_err(call, -ZL_ERR_EXISTS, "volume %s with another size",
					q->name);
	if (!strcmp(q->name, "bare-error"))
		return -ZL_ERR_UNAVAIL;
	if (!strcmp(q->name, "slow")) {
		struct timespec ts = {.tv_sec = 2};

		atomic_fetch_add(&t->inflight, 1);
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
		atomic_fetch_sub(&t->inflight, 1);
	}

	v = zl_grpc_call_new_msg(call, &csi__v1__volume__descriptor);
	dl = zl_grpc_call_new_msg(call, &csi__v1__volume__volume_context_entry__descriptor);
	topo = zl_grpc_call_new_msg(call, &csi__v1__topology__descriptor);
	seg = zl_grpc_call_new_msg(call, &csi__v1__topology__segments_entry__descriptor);
	if (!v || !dl || !topo || !seg)
		return -ENOMEM;
	snprintf(buf, sizeof(buf), "vol-%s", q->name);
	v->volume_id = zl_grpc_call_strdup(call, buf);
	v->capacity_bytes = q->capacity_range ? q->capacity_range->required_bytes : 0;
	if (left == INT64_MAX)
		snprintf(buf, sizeof(buf), "none");
	else
		snprintf(buf, sizeof(buf), "%" PRId64, left);
	dl->key = "deadline_left_ms";
	dl->value = zl_grpc_call_strdup(call, buf);
	v->volume_context = zl_grpc_call_alloc(call, sizeof(*v->volume_context));
	seg->key = "topology.zipline.io/node";
	seg->value = "n1";
	topo->segments = zl_grpc_call_alloc(call, sizeof(*topo->segments));
	v->accessible_topology = zl_grpc_call_alloc(call, sizeof(*v->accessible_topology));
	if (!v->volume_id || !dl->value || !v->volume_context || !topo->segments ||
	    !v->accessible_topology)
		return -ENOMEM;
	v->volume_context[0] = dl;
	v->n_volume_context = 1;
	topo->segments[0] = seg;
	topo->n_segments = 1;
	v->accessible_topology[0] = topo;
	v->n_accessible_topology = 1;
	r->volume = v;
	return ZL_GRPC_OK;
}

static const struct zl_grpc_method test_methods[] = {
    {"/csi.v1.Identity/GetPluginInfo", &csi__v1__get_plugin_info_request__descriptor,
     &csi__v1__get_plugin_info_response__descriptor, t_get_plugin_info, ZL_GRPC_METHOD_INLINE},
    {"/csi.v1.Identity/GetPluginCapabilities",
     &csi__v1__get_plugin_capabilities_request__descriptor,
     &csi__v1__get_plugin_capabilities_response__descriptor, t_get_plugin_caps,
     ZL_GRPC_METHOD_INLINE},
    {"/csi.v1.Identity/Probe", &csi__v1__probe_request__descriptor,
     &csi__v1__probe_response__descriptor, t_probe, ZL_GRPC_METHOD_INLINE},
    {"/csi.v1.Controller/CreateVolume", &csi__v1__create_volume_request__descriptor,
     &csi__v1__create_volume_response__descriptor, t_create_volume, 0},
    {"/csi.v1.Controller/ControllerGetCapabilities",
     &csi__v1__controller_get_capabilities_request__descriptor,
     &csi__v1__controller_get_capabilities_response__descriptor, t_ctrl_caps, 0},
};

/* ------------------------------------------------------------------ helpers */

static struct zl_grpc_server_cfg test_cfg(struct test_ctx *t, const char *ep)
{
	struct zl_grpc_server_cfg cfg = {
	    .endpoint = ep,
	    .methods = test_methods,
	    .n_methods = ZL_ARRAY_SIZE(test_methods),
	    .workers = 3,
	    .ctx = t,
	    .name = "grpc-test",
	};
	return cfg;
}

static bool path_exists(const char *p)
{
	struct stat st;

	return lstat(p, &st) == 0;
}

static int setup(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/zl-grpc-XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(sock_path, sizeof(sock_path), "%s/csi.sock", tmpdir);
	snprintf(endpoint, sizeof(endpoint), "unix://%s", sock_path);
	return 0;
}

static int teardown(void **state)
{
	unlink(sock_path);
	rmdir(tmpdir);
	return 0;
}

/* -------------------------------------------------------------------- tests */

static void test_endpoint_path(void **state)
{
	char p[108];
	char longep[300];

	assert_int_equal(zl_grpc_endpoint_path("unix:///tmp/a/csi.sock", p, sizeof(p)), 0);
	assert_string_equal(p, "/tmp/a/csi.sock");
	assert_int_equal(zl_grpc_endpoint_path("unix:/tmp/b.sock", p, sizeof(p)), 0);
	assert_string_equal(p, "/tmp/b.sock");
	assert_int_equal(zl_grpc_endpoint_path("tcp://127.0.0.1:10000", p, sizeof(p)),
			 -ZL_ERR_INVAL);
	assert_int_equal(zl_grpc_endpoint_path("127.0.0.1:10000", p, sizeof(p)), -ZL_ERR_INVAL);
	assert_int_equal(zl_grpc_endpoint_path("unix://relative.sock", p, sizeof(p)),
			 -ZL_ERR_INVAL);
	assert_int_equal(zl_grpc_endpoint_path("", p, sizeof(p)), -ZL_ERR_INVAL);
	assert_int_equal(zl_grpc_endpoint_path(NULL, p, sizeof(p)), -ZL_ERR_INVAL);
	snprintf(longep, sizeof(longep), "unix:///%0200d.sock", 0);
	assert_int_equal(zl_grpc_endpoint_path(longep, p, sizeof(p)), -ENAMETOOLONG);
}

static void test_code_from_err(void **state)
{
	static const int all[] = {
#define ERR_VAL(name, val, msg) val,
	    ZL_ERR_TABLE(ERR_VAL)
#undef ERR_VAL
	};

	assert_int_equal(zl_grpc_code_from_err(0), ZL_GRPC_OK);
	assert_int_equal(zl_grpc_code_from_err(-ZL_ERR_INVAL), ZL_GRPC_INVALID_ARGUMENT);
	assert_int_equal(zl_grpc_code_from_err(ZL_ERR_INVAL), ZL_GRPC_INVALID_ARGUMENT);
	assert_int_equal(zl_grpc_code_from_err(-ZL_ERR_NOT_FOUND), ZL_GRPC_NOT_FOUND);
	assert_int_equal(zl_grpc_code_from_err(-ZL_ERR_EXISTS), ZL_GRPC_ALREADY_EXISTS);
	assert_int_equal(zl_grpc_code_from_err(-ZL_ERR_CONFLICT), ZL_GRPC_ABORTED);
	assert_int_equal(zl_grpc_code_from_err(-ZL_ERR_NOSPC), ZL_GRPC_RESOURCE_EXHAUSTED);
	assert_int_equal(zl_grpc_code_from_err(-ZL_ERR_NODES), ZL_GRPC_RESOURCE_EXHAUSTED);
	assert_int_equal(zl_grpc_code_from_err(-ZL_ERR_RANGE), ZL_GRPC_OUT_OF_RANGE);
	assert_int_equal(zl_grpc_code_from_err(-ZL_ERR_BUSY), ZL_GRPC_FAILED_PRECONDITION);
	assert_int_equal(zl_grpc_code_from_err(-ZL_ERR_TIMEOUT), ZL_GRPC_DEADLINE_EXCEEDED);
	assert_int_equal(zl_grpc_code_from_err(-ZL_ERR_ETCD), ZL_GRPC_UNAVAILABLE);
	assert_int_equal(zl_grpc_code_from_err(-ZL_ERR_AUTH), ZL_GRPC_UNAUTHENTICATED);
	assert_int_equal(zl_grpc_code_from_err(-ENOENT), ZL_GRPC_NOT_FOUND);
	assert_int_equal(zl_grpc_code_from_err(-EEXIST), ZL_GRPC_ALREADY_EXISTS);
	assert_int_equal(zl_grpc_code_from_err(-EBUSY), ZL_GRPC_FAILED_PRECONDITION);
	assert_int_equal(zl_grpc_code_from_err(-EACCES), ZL_GRPC_PERMISSION_DENIED);
	assert_int_equal(zl_grpc_code_from_err(-EOPNOTSUPP), ZL_GRPC_UNIMPLEMENTED);
	assert_int_equal(zl_grpc_code_from_err(-EIO), ZL_GRPC_INTERNAL);
	/* Every project error is an error with a real gRPC code. */
	for (size_t i = 0; i < ZL_ARRAY_SIZE(all); i++) {
		int code = zl_grpc_code_from_err(-all[i]);

		assert_true(code > ZL_GRPC_OK && code <= ZL_GRPC_UNAUTHENTICATED);
		assert_string_not_equal(zl_grpc_code_name(code), "UNKNOWN_CODE");
	}
	assert_string_equal(zl_grpc_code_name(ZL_GRPC_ABORTED), "ABORTED");
	assert_string_equal(zl_grpc_code_name(17), "UNKNOWN_CODE");
}

static void test_create_refuses(void **state)
{
	struct test_ctx t = {0};
	struct zl_grpc_server_cfg cfg = test_cfg(&t, "tcp://127.0.0.1:10000");
	struct zl_grpc_server *srv = (void *)1;
	struct zl_grpc_method dup[2] = {test_methods[2], test_methods[2]};
	char ep[200];
	int fd;

	/* Not a UNIX endpoint. */
	assert_int_equal(zl_grpc_server_create(&cfg, &srv), -ZL_ERR_INVAL);
	assert_null(srv);

	/* A regular file where the socket should go is never removed. */
	fd = open(sock_path, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	cfg.endpoint = endpoint;
	assert_int_equal(zl_grpc_server_create(&cfg, &srv), -EEXIST);
	assert_true(path_exists(sock_path));
	unlink(sock_path);

	/* Missing directory: gRPC cannot listen. */
	snprintf(ep, sizeof(ep), "unix://%s/no-such-dir/csi.sock", tmpdir);
	cfg.endpoint = ep;
	assert_int_equal(zl_grpc_server_create(&cfg, &srv), -EIO);

	/* A method table with a duplicate. */
	cfg.endpoint = endpoint;
	cfg.methods = dup;
	cfg.n_methods = 2;
	assert_int_equal(zl_grpc_server_create(&cfg, &srv), -ZL_ERR_INVAL);
	assert_false(path_exists(sock_path));
}

static void test_stale_socket_and_busy(void **state)
{
	struct test_ctx t = {0};
	struct zl_grpc_server_cfg cfg = test_cfg(&t, endpoint);
	struct zl_grpc_server *srv, *srv2;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	/* A socket file nobody listens on, as a crashed server leaves it. */
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_true(strlen(sock_path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	assert_true(path_exists(sock_path));

	assert_int_equal(zl_grpc_server_create(&cfg, &srv), 0);
	assert_string_equal(zl_grpc_server_socket_path(srv), sock_path);

	/* A live server's socket is not stolen. */
	assert_int_equal(zl_grpc_server_create(&cfg, &srv2), -EADDRINUSE);
	assert_null(srv2);
	assert_true(path_exists(sock_path));

	/* Shutdown while idle: quick, socket gone, idempotent. */
	uint64_t t0 = zl_now_ms();

	assert_int_equal(zl_grpc_server_shutdown(srv, 5000), 0);
	assert_true(zl_now_ms() - t0 < 1000);
	assert_false(path_exists(sock_path));
	assert_int_equal(zl_grpc_server_shutdown(srv, 5000), 0);
	zl_grpc_server_destroy(srv);
	zl_grpc_server_destroy(NULL);
}

/* Runs the Python client against a running server; returns its exit code. */
static int run_python_client(void)
{
	const char *src = getenv("ZL_SOURCE_DIR");
	char script[PATH_MAX];
	char *argv[3];
	pid_t pid;
	int st, rc;

	if (!src) {
		fprintf(stderr, "ZL_SOURCE_DIR is not set: run this test through ctest\n");
		return -1;
	}
	snprintf(script, sizeof(script), "%s/test/unit/grpc/grpc_server_client.py", src);
	argv[0] = "/usr/bin/python3";
	argv[1] = script;
	argv[2] = NULL;
	setenv("ZL_TEST_CSI_ENDPOINT", endpoint, 1);
	rc = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
	if (rc) {
		fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(rc));
		return -1;
	}
	/* Bounded wait: the client's own calls time out after at most 15 s. */
	for (int i = 0; i < 1200; i++) {
		rc = waitpid(pid, &st, WNOHANG);
		if (rc == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(100 * 1000);
	}
	fprintf(stderr, "python client still running after 120 s; killing pid %d\n", (int)pid);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

static void test_python_client(void **state)
{
	struct test_ctx t = {0};
	struct zl_grpc_server_cfg cfg = test_cfg(&t, endpoint);
	struct zl_grpc_server *srv;
	uint64_t t0;

	assert_int_equal(zl_grpc_server_create(&cfg, &srv), 0);
	assert_true(path_exists(sock_path));
	assert_int_equal(run_python_client(), 0);
	assert_true(atomic_load(&t.probes) >= 6);
	assert_true(atomic_load(&t.creates) >= 6);

	/* The client's timed-out slow call may still sleep in its handler. */
	for (int i = 0; i < 50 && atomic_load(&t.inflight); i++)
		usleep(100 * 1000);
	assert_int_equal(atomic_load(&t.inflight), 0);

	t0 = zl_now_ms();
	assert_int_equal(zl_grpc_server_shutdown(srv, 5000), 0);
	assert_true(zl_now_ms() - t0 < 1000);
	assert_false(path_exists(sock_path));
	zl_grpc_server_destroy(srv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_endpoint_path),
	    cmocka_unit_test(test_code_from_err),
	    cmocka_unit_test_setup_teardown(test_create_refuses, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stale_socket_and_busy, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_python_client, setup, teardown),
	};

	zl_log_init("grpc_server_test");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
