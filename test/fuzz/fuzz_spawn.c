/* libFuzzer target: the spawner's request decoder (csi-node/node_spawn.c,
 * node_spawn_msg_decode), which reads what arrives on the spawner's socket.
 * A request it takes must have argv[1] "attach", NUL-terminated strings
 * inside the message, and encode back to exactly the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "csi-node/node.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t buf[NODE_SPAWN_MSG_MAX], again[NODE_SPAWN_MSG_MAX];
	static char *argv[65], *envp[2049];
	const char *why = NULL;
	ssize_t n;

	if (size > sizeof(buf))
		return 0;
	memcpy(buf, data, size);
	if (node_spawn_msg_decode(buf, size, argv, envp, &why)) {
		if (!why || !*why)
			abort();
		return 0;
	}
	if (!argv[0] || !argv[1] || strcmp(argv[1], "attach"))
		abort();
	n = node_spawn_msg_encode((const char *const *)argv, (const char *const *)envp, again,
				  sizeof(again));
	if (n != (ssize_t)size || memcmp(again, data, size))
		abort();
	return 0;
}
