/* The pod sandbox's "pause" process: holds the pod's namespaces, reaps zombies, exits on SIGINT/SIGTERM.
   Built static by build-image.sh into a FROM-scratch image (no registry is reachable from here). */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
    signal(SIGINT, stop);
    signal(SIGTERM, stop);
    signal(SIGCHLD, reap);
    for (;;) pause();
    return 0;
}
