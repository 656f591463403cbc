/* progress.c — the progress bar on stderr (the library's line:
 * ckpt_progress_line, so that Python's bar is the same), and Ctrl-C. */
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

/* Catches `sig` unless it was ignored when ckpt started: a command run in
 * the background by a non-interactive shell (`ckpt convert … &`) inherits
 * SIGINT ignored, and a Ctrl-C meant for the shell's foreground job must
 * not stop it (as POSIX asks of utilities, and as well-behaved tools do). */
static void catch_unless_ignored(int sig, const struct sigaction *sa) {
    struct sigaction old;
    if (sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_IGN) return;
    sigaction(sig, sa, NULL);
}

static void signals_install(bool winch) {
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    catch_unless_ignored(SIGINT, &sa);
    catch_unless_ignored(SIGTERM, &sa);
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

static void draw(progress_bar *bar, uint64_t done, uint64_t total, double t) {
    if (resized || !bar->width) {
        resized = 0;
        bar->width = terminal_width();
    }
    char line[1024];
    ckpt_progress_line(line, sizeof line, (unsigned)bar->width, bar->label, done, total, t - bar->start,
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
