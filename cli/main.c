/* main.c — `ckpt`: dispatch to a command. */
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: ckpt <command> [options]\n"
    "\n"
    "Read, inspect, convert and verify model checkpoints (safetensors and PyTorch)\n"
    "with memory that does not grow with the model.\n"
    "\n"
    "commands:\n"
    "  inspect PATH           list tensors, shapes, sizes, shards and metadata\n"
    "  convert SRC DST        re-shard, merge or convert a checkpoint, streaming\n"
    "  verify PATH            check structure and recorded checksums\n"
    "\n"
    "options:\n"
    "  -h, --help             show this help (or a command's: ckpt CMD --help)\n"
    "  --version              print the version\n"
    "\n"
    "Exit status: 0 success, 1 bad input or I/O error, 2 usage error.\n";

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(usage, stdout);
        return EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("ckpt %s\n", ckpt_version());
        return EXIT_OK;
    }
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(cmd, "verify")) return cmd_verify(argc - 1, argv + 1);
    fprintf(stderr, "ckpt: unknown command '%s'\n\n%s", cmd, usage);
    return EXIT_USAGE;
}
