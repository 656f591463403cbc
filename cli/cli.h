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

int cmd_inspect(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_verify(int argc, char **argv);

/* Prints "ckpt: <message> [STATUS_NAME]" on stderr; returns the exit code
 * for the status. */
int report_error(const ckpt_error *err);

/* Prints "ckpt <command>: <message>" and a hint on stderr; returns 2. */
int usage_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "1.5 GiB"-style size into buf. */
const char *format_bytes(uint64_t bytes, char *buf, size_t cap);

/* "22,713,728"-style count into buf. */
const char *format_count(uint64_t n, char *buf, size_t cap);

/* A JSON string literal (UTF-8 kept, control characters escaped). */
void print_json_string(FILE *out, const char *s);

/* Progress display on stderr, only when stderr is a terminal. */
typedef struct progress_bar {
    bool enabled;
    double start, last;
    const char *label;
} progress_bar;

/* Starts a bar: `mode` -1 shows it when stderr is a terminal, 0 never,
 * 1 always (--progress / --no-progress).  Also installs the SIGINT/SIGTERM
 * handlers that make progress_update cancel the operation. */
void progress_start(progress_bar *bar, const char *label, int mode);
/* ckpt_progress_fn: redraws at most every 100 ms; returns non-zero after
 * SIGINT/SIGTERM so the library cancels and cleans up. */
int progress_update(uint64_t done, uint64_t total, void *bar);
void progress_finish(progress_bar *bar, bool success);

/* ---- the options every command that opens a checkpoint shares (sources.c) ---- */

typedef struct source_options {
    ckpt_catalog_options catalog;
    char *token; /* read from --bearer-token-file */
} source_options;

/* The help text of those options. */
extern const char source_options_help[];

/* Defaults ($CKPT_CACHE_DIR). */
void source_options_init(source_options *s);

/* If argv[*i] is one of those options (--direct, --cache-dir, …), takes it
 * (and its value, advancing *i) and returns 1; 0 if it is not one; -1
 * after printing a usage error. */
int source_option(const char *command, int argc, char **argv, int *i, source_options *s);

/* The catalog options to open with ($CKPT_BEARER_TOKEN when no file). */
const ckpt_catalog_options *source_options_get(source_options *s);

/* Wipes and frees the token. */
void source_options_free(source_options *s);

/* `name` as it may be printed: a URL without its password and query
 * string (which may hold credentials); in `buf` when changed. */
const char *display_name(const char *name, char *buf, size_t cap);

#endif
