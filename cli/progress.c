/* progress.c — a one-line progress bar (bytes, rate, ETA) and Ctrl-C. */
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) {
    (void)sig;
    interrupted = 1;
}

static void interrupt_install(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static bool interrupt_requested(void) { return interrupted != 0; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_start(progress_bar *bar, const char *label, int mode) {
    interrupt_install();
    bar->enabled = mode == 1 || (mode == -1 && isatty(STDERR_FILENO));
    bar->start = now();
    bar->last = 0;
    bar->label = label;
}

static void draw(progress_bar *bar, uint64_t done, uint64_t total) {
    double t = now(), elapsed = t - bar->start;
    double frac = total ? (double)done / (double)total : 1.0;
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    char a[32], b[32], r[32];
    format_bytes(done, a, sizeof a);
    format_bytes(total, b, sizeof b);
    format_bytes((uint64_t)rate, r, sizeof r);
    enum { WIDTH = 30 };
    char cells[WIDTH + 1];
    int filled = (int)(frac * WIDTH);
    for (int i = 0; i < WIDTH; i++) cells[i] = i < filled ? '#' : '.';
    cells[WIDTH] = '\0';
    int eta = rate > 0 ? (int)((double)(total - done) / rate) : 0;
    fprintf(stderr, "\r%s [%s] %3d%% %s / %s  %s/s  ETA %d:%02d\033[K", bar->label, cells, (int)(frac * 100), a, b,
            r, eta / 60, eta % 60);
    fflush(stderr);
    bar->last = t;
}

int progress_update(uint64_t done, uint64_t total, void *user) {
    progress_bar *bar = user;
    if (bar->enabled && (now() - bar->last >= 0.1 || done == total)) draw(bar, done, total);
    return interrupt_requested();
}

void progress_finish(progress_bar *bar, bool success) {
    if (!bar->enabled) return;
    fprintf(stderr, success ? "\n" : "\r\033[K");
    fflush(stderr);
}
