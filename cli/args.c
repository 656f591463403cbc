/* args.c — option parsing shared by the commands, and "did you mean". */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Optimal-string-alignment distance (Levenshtein plus adjacent
 * transpositions, as git's help.c weighs typos), capped at `cap`. */
static size_t edit_distance(const char *a, const char *b, size_t cap) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 64 || m > 64) return cap + 1;
    size_t d[65][65];
    for (size_t i = 0; i <= n; i++) d[i][0] = i;
    for (size_t j = 0; j <= m; j++) d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m] < cap + 1 ? d[n][m] : cap + 1;
}

size_t suggest(const char *typed, const char *const *candidates, size_t count, const char **out, size_t cap) {
    size_t best = 3, found = 0, len = strlen(typed);
    for (size_t i = 0; i < count; i++) {
        size_t clen = strlen(candidates[i]);
        size_t d = edit_distance(typed, candidates[i], 2);
        /* A beginning ("conv", "--max-shard") counts as one typo. */
        if (d > 1 && len >= 2 && len < clen && !strncmp(typed, candidates[i], len)) d = 1;
        /* Two typos only in a word long enough that it stays recognisable. */
        if (d > 2 || 2 * d >= clen || d >= len) continue;
        if (d < best) best = d, found = 0;
        if (d == best && found < cap) out[found++] = candidates[i];
    }
    return found;
}

void print_suggestions(FILE *f, const char *const *found, size_t count, const char *prefix) {
    for (size_t i = 0; i < count; i++)
        fprintf(f, "%s'%s%s'", i == 0 ? "" : i + 1 == count ? " or " : ", ", prefix, found[i]);
}

void args_init(args_parser *p, const char *command, const cli_option *options, int argc, char **argv) {
    memset(p, 0, sizeof *p);
    p->command = command;
    p->options = options;
    p->argc = argc;
    p->argv = argv;
    p->next = 1;
}

static int unknown_option(args_parser *p, const char *shown, const char *name) {
    const char *names[64];
    size_t count = 0;
    for (const cli_option *o = p->options; o->name && count < 64; o++) names[count++] = o->name;
    const char *found[3];
    size_t n = name ? suggest(name, names, count, found, 3) : 0;
    fprintf(stderr, "ckpt %s: unknown option '%s'", p->command, shown);
    if (n) {
        fputs(" (did you mean ", stderr);
        print_suggestions(stderr, found, n, "--");
        fputs("?)", stderr);
    }
    fprintf(stderr, "\nTry 'ckpt %s --help'.\n", p->command);
    return ARG_ERROR;
}

int args_next(args_parser *p, const char **value) {
    *value = NULL;
    /* The rest of a cluster of short flags ("-qf"). */
    if (p->cluster && *p->cluster) {
        char c = *p->cluster++;
        for (const cli_option *o = p->options; o->name; o++) {
            if (o->short_name != c) continue;
            if (!o->takes_value) return o->id;
            /* "-oDST" or "-o DST". */
            if (*p->cluster) *value = p->cluster;
            else if (p->next < p->argc) *value = p->argv[p->next++];
            else return usage_error(p->command, "option '-%c' needs a value", c), ARG_ERROR;
            p->cluster = NULL;
            return o->id;
        }
        char shown[3] = {'-', c, '\0'};
        return unknown_option(p, shown, NULL);
    }
    p->cluster = NULL;
    if (p->next >= p->argc) return ARG_END;
    const char *a = p->argv[p->next++];
    if (p->only_positional || a[0] != '-' || a[1] == '\0') {
        *value = a;
        return ARG_POSITIONAL;
    }
    if (!strcmp(a, "--")) {
        p->only_positional = true;
        return args_next(p, value);
    }
    if (a[1] != '-') {
        /* "-force" is a long option with one dash, not "-f -o rce". */
        if (strlen(a) > 2) {
            for (const cli_option *o = p->options; o->name; o++)
                if (!strcmp(o->name, a + 1) || (strlen(a + 1) > 3 && !strncmp(o->name, a + 1, strlen(a + 1))))
                    return usage_error(p->command, "unknown option '%s' (did you mean '--%s'?)", a, o->name),
                           ARG_ERROR;
        }
        p->cluster = a + 1;
        return args_next(p, value);
    }
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    for (const cli_option *o = p->options; o->name; o++) {
        if (strlen(o->name) != len || strncmp(o->name, name, len)) continue;
        if (!o->takes_value) {
            if (eq) return usage_error(p->command, "option '--%s' takes no value", o->name), ARG_ERROR;
            return o->id;
        }
        if (eq) *value = eq + 1;
        else if (p->next < p->argc) *value = p->argv[p->next++];
        else return usage_error(p->command, "option '--%s' needs a value", o->name), ARG_ERROR;
        return o->id;
    }
    char typed[128];
    snprintf(typed, sizeof typed, "%.*s", (int)(len < sizeof typed - 1 ? len : sizeof typed - 1), name);
    char shown[160];
    snprintf(shown, sizeof shown, "--%s", typed);
    return unknown_option(p, shown, typed);
}

/* Glob-escapes a tensor name so that a pattern matches it alone. */
void glob_escape(const char *name, char *out, size_t cap) {
    size_t k = 0;
    for (; *name && k + 2 < cap; name++) {
        if (strchr("*?[]\\", *name)) out[k++] = '\\';
        out[k++] = *name;
    }
    out[k] = '\0';
}

