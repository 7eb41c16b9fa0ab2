/* zipline-controller: CSI Identity + Controller service (flags, wiring,
 * signals). The services live in ctrl_*.c. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ctrl.h"

int main(int argc, char **argv)
{
	struct ctrl_cfg cfg;
	struct ctrl c;
	sigset_t set;
	int sig = 0, rc;

	zl_log_init("zipline-controller");
	rc = ctrl_cfg_parse(argc, argv, &cfg);
	if (rc)
		return rc == 1 ? 0 : 2;

	/* gRPC's threads inherit this mask: only sigwait() below sees them. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = ctrl_start(&c, &cfg);
	if (rc) {
		ctrl_stop(&c, 0);
		fprintf(stderr, "zipline-controller: cannot start: %s (see the log above)\n",
			zl_strerror(rc));
		return 1;
	}
	sigwait(&set, &sig);
	ZL_LOG_INFO(CTRL_LOG, "signal=%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
	ctrl_stop(&c, 5000);
	return 0;
}
