/* progress.c — a one-line progress bar (bytes, rate, ETA) that fits the
 * terminal, and Ctrl-C. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static volatile sig_atomic_t interrupted, resized = 1;

static void on_signal(int sig) {
    (void)sig;
    interrupted = 1;
}

static void on_resize(int sig) {
    (void)sig;
    resized = 1;
}

static void signals_install(bool winch) {
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (winch) {
        struct sigaction sw = {0};
        sw.sa_handler = on_resize;
        sw.sa_flags = SA_RESTART; /* a resize must not fail a read or a write */
        sigemptyset(&sw.sa_mask);
        sigaction(SIGWINCH, &sw, NULL);
    }
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The terminal's width in columns: stderr's window, else $COLUMNS, else 80. */
static int terminal_width(void) {
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char *env = getenv("COLUMNS");
    int cols = env ? atoi(env) : 0;
    return cols > 0 && cols < 10000 ? cols : 80;
}

/* "…" where the locale is UTF-8, "..." elsewhere. */
static const char *ellipsis(void) {
    const char *vars[] = {"LC_ALL", "LC_CTYPE", "LANG"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return strstr(v, "UTF-8") || strstr(v, "utf8") || strstr(v, "UTF8") || strstr(v, "utf-8") ? "…" : "...";
    }
    return "...";
}

void progress_start(progress_bar *bar, const char *label, int mode) {
    bar->enabled = mode == 1 || (mode == -1 && isatty(STDERR_FILENO));
    signals_install(bar->enabled && isatty(STDERR_FILENO));
    bar->start = cli_now();
    bar->last = -1;
    bar->label = label;
    bar->final_note = NULL;
    bar->width = 0;
    bar->at_end = false;
    bar->drawn = false;
}

/* Parts of the line, in display order; the lower `keep`, the sooner a part
 * is dropped when the terminal is narrow. */
enum { P_LABEL, P_BAR, P_PCT, P_SIZES, P_RATE, P_NOTE, P_COUNT };
static const int keep[P_COUNT] = {[P_LABEL] = 7, [P_BAR] = 4, [P_PCT] = 6, [P_SIZES] = 3, [P_RATE] = 2, [P_NOTE] = 5};
enum { BAR_MIN = 10, BAR_MAX = 40 };

void progress_line(char *out, size_t cap, int width, const char *label, uint64_t done, uint64_t total, double elapsed,
                   const char *note) {
    double frac = total ? (double)done / (double)total : 1.0;
    if (frac > 1) frac = 1;
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    char text[P_COUNT][96], a[32], b[32];
    snprintf(text[P_LABEL], sizeof text[0], "%s", printable(label));
    text[P_BAR][0] = '\0';
    snprintf(text[P_PCT], sizeof text[0], "%3d%%", (int)(frac * 100));
    snprintf(text[P_SIZES], sizeof text[0], "%s / %s", format_bytes(done, a, sizeof a), format_bytes(total, b, sizeof b));
    snprintf(text[P_RATE], sizeof text[0], "%s/s", format_bytes((uint64_t)rate, a, sizeof a));
    if (note) {
        snprintf(text[P_NOTE], sizeof text[0], "%s", note);
    } else if (rate > 0 && done < total) {
        uint64_t eta = (uint64_t)((double)(total - done) / rate);
        if (eta >= 3600)
            snprintf(text[P_NOTE], sizeof text[0], "ETA %u:%02u:%02u", (unsigned)(eta / 3600), (unsigned)(eta / 60 % 60),
                     (unsigned)(eta % 60));
        else snprintf(text[P_NOTE], sizeof text[0], "ETA %u:%02u", (unsigned)(eta / 60), (unsigned)(eta % 60));
    } else {
        snprintf(text[P_NOTE], sizeof text[0], done < total ? "ETA -:--" : "ETA 0:00");
    }
    if (note) text[P_RATE][0] = '\0'; /* the rate of a finished copy says nothing while syncing */
    bool on[P_COUNT];
    int used = 0, shown = 0;
    for (int i = 0; i < P_COUNT; i++) on[i] = i == P_BAR || text[i][0];
    /* Columns: the parts, one space between them (two before sizes and
     * rate), the bar at BAR_MIN; the last column is never written, so the
     * cursor never wraps. */
    int limit = width - 1;
    for (;;) {
        used = 0, shown = 0;
        for (int i = 0; i < P_COUNT; i++) {
            if (!on[i]) continue;
            used += (shown ? (i == P_SIZES || i == P_RATE || i == P_NOTE ? 2 : 1) : 0) +
                    (i == P_BAR ? BAR_MIN + 2 : text_columns(text[i]));
            shown++;
        }
        if (used <= limit) break;
        int drop = -1;
        for (int i = 0; i < P_COUNT; i++)
            if (on[i] && i != P_LABEL && (drop < 0 || keep[i] < keep[drop])) drop = i;
        if (drop < 0) break; /* the label alone: truncated below */
        on[drop] = false;
    }
    if (on[P_BAR]) {
        int cells = BAR_MIN + (limit - used);
        if (cells > BAR_MAX) cells = BAR_MAX;
        int filled = (int)(frac * cells);
        text[P_BAR][0] = '[';
        for (int i = 0; i < cells; i++) text[P_BAR][1 + i] = i < filled ? '#' : '.';
        text[P_BAR][1 + cells] = ']';
        text[P_BAR][2 + cells] = '\0';
    }
    size_t n = 0;
    int cols = 0;
    out[0] = '\0';
    shown = 0;
    for (int i = 0; i < P_COUNT && n + 1 < cap; i++) {
        if (!on[i]) continue;
        const char *sep = !shown ? "" : (i == P_SIZES || i == P_RATE || i == P_NOTE) ? "  " : " ";
        shown++;
        for (const char *s = sep; *s && n + 1 < cap && cols < limit; s++) out[n++] = *s, cols++;
        /* Whole code points, and never past the limit. */
        for (const unsigned char *s = (const unsigned char *)text[i]; *s && n + 1 < cap;) {
            size_t len = *s < 0x80 ? 1 : (*s >> 5) == 6 ? 2 : (*s >> 4) == 14 ? 3 : 4;
            if (cols >= limit || n + len >= cap) break;
            for (size_t k = 0; k < len && s[k]; k++) out[n++] = (char)s[k];
            s += len;
            cols++;
        }
    }
    out[n] = '\0';
}

static void draw(progress_bar *bar, uint64_t done, uint64_t total, double t) {
    if (resized || !bar->width) {
        resized = 0;
        bar->width = terminal_width();
    }
    char line[1024];
    progress_line(line, sizeof line, bar->width, bar->label, done, total, t - bar->start,
                  bar->at_end && bar->final_note ? bar->final_note : NULL);
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
    bar->last = t;
    bar->drawn = true;
}

int progress_update(uint64_t done, uint64_t total, void *user) {
    progress_bar *bar = user;
    if (bar->enabled) {
        double t = cli_now();
        bool end = done >= total;
        /* The first call, the end (what follows, such as fsync, can take a
         * while), and otherwise at most every 100 ms. */
        if (bar->last < 0 || (end && !bar->at_end) || t - bar->last >= 0.1) {
            bar->at_end = end;
            draw(bar, done, total, t);
        }
    }
    return interrupted != 0;
}

void progress_set_final_note(progress_bar *bar, const char *word) {
    static char note[64];
    if (!word) {
        bar->final_note = NULL;
        return;
    }
    snprintf(note, sizeof note, "%s%s", word, ellipsis());
    bar->final_note = note;
}

void progress_finish(progress_bar *bar, bool success) {
    (void)success;
    if (!bar->enabled || !bar->drawn) return;
    /* The summary line, if any, takes the bar's place. */
    fputs("\r\033[K", stderr);
    fflush(stderr);
}

bool progress_interrupted(void) { return interrupted != 0; }
