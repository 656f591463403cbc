/* cli.h — shared pieces of the ckpt command-line tool.  The CLI uses only
 * the public header, like any other program would. */
#ifndef CKPT_CLI_H
#define CKPT_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ckpt.h"

/* Exit codes: 0 success, 1 bad input or I/O error, 2 usage error, 130 interrupted. */
enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

/* The commands: each takes its own name as argv[0]. */
int cmd_inspect(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_recover(int argc, char **argv);

/* Each command's help text (`ckpt help CMD`, `ckpt CMD --help`). */
extern const char inspect_usage[], convert_usage[], verify_usage[], diff_usage[], recover_usage[];

/* For inspect and verify, after `path` opened: one warning line on stderr
 * when its directory holds a commit journal the open did not stop at (one
 * that is not ckpt's, left alone, or a commit of other files). */
void note_unfinished_commit(const char *path);

/* Where a help text lists the formats ckpt reads, and the formats ckpt
 * convert writes: print_usage puts the library's lists there
 * (ckpt_format_at, ckpt_format_description), so that the tool never
 * keeps a second list. */
#define CLI_READ_FORMATS "@read-formats@\n"
#define CLI_WRITE_FORMATS "@write-formats@\n"

/* Prints a help text with its format lists filled in; EXIT_OK, or
 * EXIT_ERROR when the output cannot be written. */
int print_usage(FILE *f, const char *text);
/* A command's output written out: EXIT_OK, or EXIT_ERROR said on stderr. */
int finish_stdout(void);

/* ---- options ------------------------------------------------------------ */

/* One option of a command: "--name" (and "-c" when short_name is set);
 * values as "--name VALUE", "--name=VALUE", "-c VALUE" or "-cVALUE". */
typedef struct cli_option {
    const char *name;
    char short_name;
    bool takes_value;
    int id; /* > 0 */
} cli_option;

enum { ARG_END = -1, ARG_ERROR = -2, ARG_POSITIONAL = 0 };

typedef struct args_parser {
    const char *command;
    const cli_option *options; /* ends with a {NULL} entry */
    int argc, next;
    char **argv;
    const char *cluster; /* rest of "-qf" */
    bool only_positional; /* after "--" */
} args_parser;

void args_init(args_parser *p, const char *command, const cli_option *options, int argc, char **argv);

/* The next argument: an option's id (its value in *value when it takes
 * one), ARG_POSITIONAL with the argument in *value, ARG_END, or ARG_ERROR
 * once a usage error (an unknown option with suggestions, a missing value)
 * has been printed.  "--" ends the options. */
int args_next(args_parser *p, const char **value);

/* Up to `cap` candidates close to `typed` (edit distance, as git's "did you
 * mean"), into out; returns how many. */
size_t suggest(const char *typed, const char *const *candidates, size_t count, const char **out, size_t cap);

/* "'a'", "'a' or 'b'", "'a', 'b' or 'c'", each with `prefix`. */
void print_suggestions(FILE *f, const char *const *found, size_t count, const char *prefix);

/* ---- output ------------------------------------------------------------- */

/* `ckpt convert` on many ranks (mpi.c): the number of ranks the
 * environment announces (mpirun, srun; 1 outside them), and the collective
 * convert over libckpt_mpi, loaded at run time.  `copt` opens the source
 * (allowed globals); `apply` (may be NULL) applies the command line's
 * transforms to the plan and returns an exit code. */
int mpi_env_ranks(void);
int convert_mpi(const char *src, const char *dst, const ckpt_catalog_options *copt, const ckpt_writer_options *opt,
                int show_progress,
                int (*apply)(ckpt_plan *plan, void *user, ckpt_error *err), void *user);

/* Prints "ckpt: <message> [STATUS_NAME]" on stderr; returns the exit code
 * for the status. */
int report_error(const ckpt_error *err);
/* "CKPT_E_CORRUPT/CKPT_D_DATA_HOLE": the status and, when there is one, the
 * detail of an error, as the error lines show them. */
const char *status_text(const ckpt_error *err, char *buf, size_t cap);

/* Prints "ckpt <command>: <message>" and a hint on stderr; returns 2. */
int usage_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "1.5 GiB"-style size into buf (ckpt_format_size). */
const char *format_bytes(uint64_t bytes, char *buf, size_t cap);

/* "22,713,728"-style count into buf. */
const char *format_count(uint64_t n, char *buf, size_t cap);

/* "in 0.21 s (0.43 GB/s)": the time, and the rate when bytes moved. */
const char *format_elapsed(uint64_t bytes, double seconds, char *buf, size_t cap);

/* The success line on stderr, e.g. "ckpt: wrote 104 tensors, 86.6 MiB in
 * 4 files to minilm/ in 0.21 s (0.43 GB/s)"; `where` may be NULL. */
void print_summary(const char *verb, uint64_t tensors, uint64_t bytes, size_t files, const char *where,
                   double seconds);

/* Seconds on a monotonic clock. */
double cli_now(void);

/*
 * `s` — a name from a checkpoint (a tensor's, a file's, a metadata key or
 * value), a path, or an error message quoting them — as human output
 * shows it: control characters escaped as \n, \r, \t, \x1b…, C1 controls
 * as \u009b…, and a byte that is not UTF-8 as \xff, so that a name can
 * neither break the output's lines nor drive the terminal.  Returns `s`
 * itself when nothing needs escaping, else a buffer valid until the eighth
 * call after this one.  --json output escapes the JSON way instead
 * (print_json_string).
 */
const char *printable(const char *s);

/* A tensor name as a plan pattern that matches it alone (glob characters
 * escaped), in `out`. */
void glob_escape(const char *name, char *out, size_t cap);

/* Display columns of a UTF-8 string (one per code point: good enough for
 * aligning names, which are mostly ASCII). */
int text_columns(const char *s);

/* Prints a name as printable shows it, left-aligned in `width` columns; a
 * longer one loses its middle to an ellipsis. */
void print_padded(FILE *out, const char *name, int width);

/* "…" where the locale is UTF-8, "..." elsewhere. */
const char *ellipsis(void);

/* A JSON string literal (UTF-8 kept, control characters escaped). */
void print_json_string(FILE *out, const char *s);

/* Progress display on stderr, only when stderr is a terminal. */
typedef struct progress_bar {
    bool enabled, at_end, drawn;
    double start, last;
    int width; /* columns, re-read after SIGWINCH */
    const char *label;
    const char *final_note; /* shown once all bytes are done, e.g. "syncing…" */
} progress_bar;

/* Starts a bar: `mode` -1 shows it when stderr is a terminal, 0 never,
 * 1 always (--progress / --no-progress).  Also installs the SIGINT/SIGTERM
 * handlers that make progress_update cancel the operation. */
void progress_start(progress_bar *bar, const char *label, int mode);
/* ckpt_progress_fn: redraws at most every 100 ms; returns non-zero after
 * SIGINT/SIGTERM so the library cancels and cleans up. */
int progress_update(uint64_t done, uint64_t total, void *bar);
/* Erases the bar (a summary line may take its place). */
void progress_finish(progress_bar *bar, bool success);
/* What the bar says between the last byte and the call's return (the
 * commit's fsync): `word` and an ellipsis; NULL for nothing. */
void progress_set_final_note(progress_bar *bar, const char *word);
/* Non-zero once SIGINT or SIGTERM arrived (after progress_start). */
bool progress_interrupted(void);

/* The object tree (ckpt_catalog_tree_json) as an indented outline, two
 * spaces per level: containers to `depth` levels (0: all), `width`
 * entries of each (0: all; "… N more" for the rest), at most `max_lines`
 * lines (0: no limit) — outline.c. */
void print_tree_outline(FILE *out, const ckpt_catalog *cat, const char *json, int depth, int width, long max_lines);
/* Whether the object tree is a state dict: one dict whose values are the
 * catalog's tensors, in order (its OrderedDict's module versions aside),
 * which the tensor table says all of — outline.c. */
bool tree_is_state_dict(const ckpt_catalog *cat, const char *json);

/* ---- JSON text from the library ------------------------------------------- */

/* The library's JSON texts (the object tree) are
 * read with the library's own reader (src/base/json.h: the CLI links the
 * static library), so that the CLI has no second JSON parser. */
#include "../src/base/json.h"

/* A copy of `json` parsed into *doc; *text holds the nodes' strings (a
 * number's node: its text, `len` bytes, not NUL-terminated).  False when
 * it is not JSON; free both with json_close either way. */
bool json_read(const char *json, char **text, ckpt__json_doc *doc);
void json_close(char *text, ckpt__json_doc *doc);

/* ---- the options every command that opens a checkpoint shares (sources.c) ---- */

typedef struct source_options {
    ckpt_catalog_options catalog;
    char *token; /* read from --bearer-token-file */
    /* The bar of whole downloads (a server without byte ranges): shown as
     * progress_start's `mode` says, while one runs. */
    int download_bar_mode;
    bool download_bar_on;
    progress_bar download_bar;
} source_options;

/* The help text of those options. */
extern const char source_options_help[];

/* Defaults ($CKPT_CACHE_DIR; a download bar on a terminal). */
void source_options_init(source_options *s);

/* Whether whole downloads show a bar: progress_start's `mode` (the
 * command's --progress / --no-progress / --quiet). */
void source_options_progress(source_options *s, int mode);

/* Their entries in a command's option table: CLI_SOURCE_OPTIONS before the
 * table's {NULL} end; an id from OPT_SOURCE_FIRST on goes to source_option. */
enum {
    OPT_SOURCE_FIRST = 900,
    OPT_DIRECT = OPT_SOURCE_FIRST, OPT_CACHE_DIR, OPT_BEARER_TOKEN_FILE, OPT_TIMEOUT, OPT_CONNECT_TIMEOUT, OPT_RETRIES,
    OPT_CONNECTIONS, OPT_MIN_SPEED, OPT_MIN_SPEED_TIME, OPT_RETRY_DEADLINE
};
#define CLI_SOURCE_OPTIONS                                                                                       \
    {"direct", 0, false, OPT_DIRECT}, {"cache-dir", 0, true, OPT_CACHE_DIR},                                     \
        {"bearer-token-file", 0, true, OPT_BEARER_TOKEN_FILE}, {"timeout", 0, true, OPT_TIMEOUT},              \
        {"connect-timeout", 0, true, OPT_CONNECT_TIMEOUT}, {"retries", 0, true, OPT_RETRIES},                    \
        {"connections", 0, true, OPT_CONNECTIONS}, {"min-speed", 0, true, OPT_MIN_SPEED},                      \
        {"min-speed-time", 0, true, OPT_MIN_SPEED_TIME}, {"retry-deadline", 0, true, OPT_RETRY_DEADLINE}

/* Takes source option `id` (≥ OPT_SOURCE_FIRST) with its value: EXIT_OK,
 * or EXIT_USAGE after printing a usage error. */
int source_option(const char *command, int id, const char *value, source_options *s);

/* The catalog options to open with ($CKPT_BEARER_TOKEN when no file). */
const ckpt_catalog_options *source_options_get(source_options *s);

/* Opens the checkpoint `path` with `options` (source_options_get's, or a
 * copy with more set) into *cat: EXIT_OK, or the library's error reported
 * (report_error) and its exit code.  With `note`, an unfinished commit in
 * its directory is noted after it opened (note_unfinished_commit). */
int open_checkpoint(const char *path, const ckpt_catalog_options *options, bool note, ckpt_catalog **cat);

/* Wipes and frees the token. */
void source_options_free(source_options *s);

/* `name` as it may be printed (ckpt_redact_name: a URL without its user
 * part and the query values that carry credentials), in `buf`. */
const char *display_name(const char *name, char *buf, size_t cap);

#endif
