/* recover.c — `ckpt recover DIR`, and the note inspect and verify print
 * about an unfinished commit. */
#include <string.h>

#include "cli.h"

const char recover_usage[] =
    "usage: ckpt recover DIR [--check] [-q]\n"
    "\n"
    "Finish a commit into DIR that a crash cut short.  A writer replacing files\n"
    "in a directory that holds others decides its commit by writing a journal,\n"
    "DIR/.ckpt-commit.json; if it dies before it is done, reading the checkpoint\n"
    "fails (reads never change a directory) until this command, or the next\n"
    "write into DIR, finishes it.\n"
    "\n"
    "The journal is executed only when it is provably one ckpt wrote: its stage\n"
    "is a real directory inside DIR named as ckpt names stages, and it removes\n"
    "or publishes only checkpoint files (names an output format owns: never a\n"
    "file such as notes.txt or config.json, never '.', '..', a path or a\n"
    "symlink's target).  Anything else is refused, naming the rule broken, and\n"
    "left alone.\n"
    "\n"
    "options:\n"
    "  --check      check the journal, change nothing\n"
    "  -q, --quiet  print nothing on success (errors still go to stderr)\n"
    "  -h, --help   show this help\n"
    "\n"
    "Exit status: 0 finished (or nothing to finish), 1 refused or failed,\n"
    "2 usage error.\n";

void note_unfinished_commit(const char *path) {
    if (strstr(path, "://")) return; /* a remote checkpoint has no local journal */
    ckpt_error err;
    ckpt_error_clear(&err);
    int found = 0;
    ckpt_status st = ckpt_commit_recover(path, CKPT_RECOVER_CHECK, &found, &err);
    if (st == CKPT_E_INCOMPLETE)
        fprintf(stderr, "ckpt: warning: %s\n", printable(err.message));
    else if (st == CKPT_OK && found)
        fprintf(stderr,
                "ckpt: warning: the directory of %s holds an unfinished commit of other files: finish it with "
                "`ckpt recover`\n",
                printable(path));
}

int cmd_recover(int argc, char **argv) {
    enum { OPT_HELP = 1, OPT_CHECK, OPT_QUIET };
    static const cli_option options[] = {{"help", 'h', false, OPT_HELP},
                                         {"check", 0, false, OPT_CHECK},
                                         {"quiet", 'q', false, OPT_QUIET},
                                         {NULL, 0, 0, 0}};
    const char *dir = NULL, *value;
    bool check = false, quiet = false;
    args_parser args;
    args_init(&args, "recover", options, argc, argv);
    for (int id; (id = args_next(&args, &value)) != ARG_END;) {
        switch (id) {
        case ARG_ERROR: return EXIT_USAGE;
        case OPT_HELP: fputs(recover_usage, stdout); return EXIT_OK;
        case OPT_CHECK: check = true; break;
        case OPT_QUIET: quiet = true; break;
        default:
            if (dir) return usage_error("recover", "one DIR expected, got '%s' and '%s'", dir, value);
            dir = value;
        }
    }
    if (!dir) return usage_error("recover", "missing DIR");
    ckpt_error err;
    ckpt_error_clear(&err);
    int found = 0;
    if (ckpt_commit_recover(dir, check ? CKPT_RECOVER_CHECK : 0, &found, &err) != CKPT_OK) return report_error(&err);
    if (!quiet)
        printf("%s: %s\n", printable(dir),
               !found  ? "no interrupted commit"
               : check ? "an interrupted commit that `ckpt recover` can finish"
                       : "finished the interrupted commit");
    return EXIT_OK;
}
