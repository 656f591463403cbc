/* progress.c — the progress line every front end draws (ckpt_progress_line):
 * one format for the command-line tool and the Python package, so that
 * they cannot drift apart. */
#include <stdio.h>
#include <string.h>

#include "base.h"

/* Parts of the line, in display order.  The lower `keep`, the sooner a
 * part is dropped on a narrow terminal; `reserve` is the columns a part
 * always takes, whatever its value, so that nothing moves as numbers grow
 * (0: its own width, which does not change during an operation). */
enum { P_LABEL, P_BAR, P_PCT, P_SIZES, P_RATE, P_NOTE, P_COUNT };
static const int keep[P_COUNT] = {[P_LABEL] = 7, [P_BAR] = 4, [P_PCT] = 6, [P_SIZES] = 3, [P_RATE] = 2, [P_NOTE] = 5};
enum {
    BAR_MIN = 10, BAR_MAX = 40,
    SIZE_COLUMNS = 9,  /* "999.9 KiB", the widest ckpt_format_size below 1000 EiB */
    ETA_COLUMNS = 9,   /* "ETA 59:59", "ETA 9h59m", "ETA 99h" */
};

/* Display columns of UTF-8 text: one per code point (labels and notes are
 * short words, "syncing…"). */
static int columns(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* "ETA 0:05", "ETA 12:34", "ETA 1h02m", "ETA 17h", or "ETA -:--" while no rate is
 * known (or the rate so far promises 100 hours or more: a stalled start). */
static void eta_text(char *out, size_t cap, uint64_t done, uint64_t total, double rate) {
    if (done >= total) {
        snprintf(out, cap, "ETA 0:00");
        return;
    }
    double left = rate > 0 ? (double)(total - done) / rate : 0;
    if (!(rate > 0) || left >= 100 * 3600) {
        snprintf(out, cap, "ETA -:--");
        return;
    }
    unsigned eta = (unsigned)left;
    if (eta >= 36000) snprintf(out, cap, "ETA %uh", eta / 3600);
    else if (eta >= 3600) snprintf(out, cap, "ETA %uh%02um", eta / 3600, eta / 60 % 60);
    else snprintf(out, cap, "ETA %u:%02u", eta / 60, eta % 60);
}

/* The separator before part i: two spaces before sizes, rate and note. */
static int gap(int i) { return i == P_SIZES || i == P_RATE || i == P_NOTE ? 2 : 1; }

/* Appends `text` to the line: whole code points, never past column
 * `limit`. */
static void put(char *out, size_t cap, size_t *n, int *cols, int limit, const char *text) {
    for (const unsigned char *s = (const unsigned char *)text; *s;) {
        size_t len = *s < 0x80 ? 1 : (*s >> 5) == 6 ? 2 : (*s >> 4) == 14 ? 3 : 4;
        if (*cols >= limit || *n + len >= cap) return;
        for (size_t k = 0; k < len && s[k]; k++) out[(*n)++] = (char)s[k];
        s += len;
        ++*cols;
    }
}

size_t ckpt_progress_line(char *out, size_t cap, unsigned width, const char *label, uint64_t done, uint64_t total,
                          double elapsed, const char *note) {
    if (!out || !cap) return 0;
    double frac = total ? (double)done / (double)total : 1.0;
    if (frac > 1) frac = 1;
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    char text[P_COUNT][128], a[32], b[32];
    int reserve[P_COUNT] = {0};
    snprintf(text[P_LABEL], sizeof text[0], "%s", label ? label : "");
    text[P_BAR][0] = '\0';
    snprintf(text[P_PCT], sizeof text[0], "%3d%%", (int)(frac * 100));
    ckpt_format_size(done, a, sizeof a);
    ckpt_format_size(total, b, sizeof b);
    snprintf(text[P_SIZES], sizeof text[0], "%*s / %s", SIZE_COLUMNS, a, b);
    snprintf(text[P_RATE], sizeof text[0], "%*s/s", SIZE_COLUMNS, ckpt_format_size((uint64_t)rate, a, sizeof a));
    if (note) snprintf(text[P_NOTE], sizeof text[0], "%s", note);
    else eta_text(text[P_NOTE], sizeof text[0], done, total, rate);
    reserve[P_NOTE] = note ? 0 : ETA_COLUMNS;
    if (note) text[P_RATE][0] = '\0'; /* the rate of a finished copy says nothing while syncing */
    bool on[P_COUNT];
    for (int i = 0; i < P_COUNT; i++) on[i] = i == P_BAR || text[i][0];
    /* Drop parts until the line fits in width - 1 columns: the last column
     * is never written, so the cursor never wraps. */
    int limit = (int)(width > 1 ? width - 1 : 0), used;
    for (;;) {
        int shown = 0;
        used = 0;
        for (int i = 0; i < P_COUNT; i++) {
            if (!on[i]) continue;
            int w = i == P_BAR ? BAR_MIN + 2 : columns(text[i]);
            used += (shown++ ? gap(i) : 0) + (w > reserve[i] ? w : reserve[i]);
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
    int cols = 0, shown = 0;
    for (int i = 0; i < P_COUNT; i++) {
        if (!on[i]) continue;
        if (shown++) put(out, cap, &n, &cols, limit, gap(i) == 2 ? "  " : " ");
        put(out, cap, &n, &cols, limit, text[i]);
    }
    out[n] = '\0';
    return n;
}
