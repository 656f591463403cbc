/* main.c — `ckpt`: dispatch to a command. */
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: ckpt <command> [options]\n"
    "\n"
    "Read, inspect, convert, compare and verify model checkpoints with memory that\n"
    "does not grow with the model.\n"
    "\n"
    "commands:\n"
    "  inspect PATH           list tensors, shapes, sizes, shards and metadata\n"
    "  convert SRC DST        re-shard, merge, transform or convert, streaming\n"
    "  diff A B               compare the tensors of two checkpoints\n"
    "  verify PATH            check structure and recorded checksums\n"
    "  recover DIR            finish a commit into DIR that a crash cut short\n"
    "  help [COMMAND]         show this help, or a command's\n"
    "  version                print the version\n"
    "\n"
    "options:\n"
    "  -h, --help             show this help (a command's: ckpt help CMD, ckpt CMD -h)\n"
    "  -v, -V, --version      print the version\n"
    "\n"
    "Every command reads:\n" CLI_READ_FORMATS
    "\n"
    "ckpt convert writes (ckpt help convert says how DST picks one):\n" CLI_WRITE_FORMATS
    "\n"
    "Exit status: 0 success, 1 bad input or I/O error, 2 usage error, 130\n"
    "interrupted; ckpt diff exits as cmp and diff do: 0 identical, 1 different,\n"
    "2 trouble (an unreadable input or a usage error).\n";

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *usage;
    bool opens; /* takes the options of opening a checkpoint (remote ones among them) */
} commands[] = {
    {"inspect", cmd_inspect, inspect_usage, true},
    {"convert", cmd_convert, convert_usage, true},
    {"diff", cmd_diff, diff_usage, true},
    {"verify", cmd_verify, verify_usage, true},
    {"recover", cmd_recover, recover_usage, false},
};
enum { COMMAND_COUNT = sizeof commands / sizeof *commands };

static const struct command *find_command(const char *name) {
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        if (!strcmp(commands[i].name, name)) return &commands[i];
    return NULL;
}

/* "ckpt: unknown command 'inpsect'" and, when one is close, "did you mean
 * 'inspect'?" (as git does), else where the list is. */
static int unknown_command(const char *name) {
    const char *names[COMMAND_COUNT + 2], *found[3];
    for (size_t i = 0; i < COMMAND_COUNT; i++) names[i] = commands[i].name;
    names[COMMAND_COUNT] = "help";
    names[COMMAND_COUNT + 1] = "version";
    size_t n = suggest(name, names, COMMAND_COUNT + 2, found, 3);
    fprintf(stderr, "ckpt: unknown command '%s'\n", name);
    if (n) {
        fputs("did you mean ", stderr);
        print_suggestions(stderr, found, n, "");
        fputs("?\n", stderr);
    } else {
        fputs("Try 'ckpt help' for the list of commands.\n", stderr);
    }
    return EXIT_USAGE;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr, usage);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) return print_usage(stdout, usage);
    if (!strcmp(cmd, "help")) {
        if (argc == 2) return print_usage(stdout, usage);
        if (argc > 3) {
            fprintf(stderr, "ckpt help: one COMMAND expected, got '%s' and '%s'\nTry 'ckpt help'.\n", argv[2], argv[3]);
            return EXIT_USAGE;
        }
        if (!strcmp(argv[2], "help") || !strcmp(argv[2], "-h") || !strcmp(argv[2], "--help"))
            return print_usage(stdout, usage);
        if (!strcmp(argv[2], "version"))
            return print_usage(stdout, "usage: ckpt version (or ckpt -v, ckpt -V, ckpt --version)\n\n"
                                      "Print the version of ckpt (its library's).\n");
        const struct command *c = find_command(argv[2]);
        if (!c) return unknown_command(argv[2]);
        print_usage(stdout, c->usage); /* as `ckpt CMD --help` prints it */
        return print_usage(stdout, c->opens ? source_options_help : "");
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version") || !strcmp(cmd, "-V") || !strcmp(cmd, "-v")) {
        printf("ckpt %s\n", ckpt_version());
        return EXIT_OK;
    }
    const struct command *c = find_command(cmd);
    if (c) return c->run(argc - 1, argv + 1);
    if (cmd[0] == '-' && cmd[1]) {
        static const char *const options[] = {"--help", "--version"};
        const char *found[2];
        size_t n = cmd[1] == '-' ? suggest(cmd, options, 2, found, 2) : 0;
        fprintf(stderr, "ckpt: unknown option '%s'", cmd);
        if (n) {
            fputs(" (did you mean ", stderr);
            print_suggestions(stderr, found, n, "");
            fputs("?)", stderr);
        }
        fputs("\nTry 'ckpt --help'.\n", stderr);
        return EXIT_USAGE;
    }
    return unknown_command(cmd);
}
