// The floor under bench/realtime.sh's broadcast: the same number of loopback TCP
// connections, one small message written to each, with no gateway, no WebSocket, no
// JSON. PAIRS writer/reader process pairs each hold STREAMS / PAIRS connections (one
// process cannot hold 50,000 descriptors here); at one signal every writer writes
// BYTES bytes to each of its sockets, one write() each, and every reader, blocked in
// epoll_wait, reads until each of its sockets has its message. Prints, per round, the
// time from the signal until the last reader had everything, and the CPU time writers
// and readers spent; then the median.
//
//   cc -O2 -o tcp-floor bench/tcp-floor.c
//   ./tcp-floor STREAMS PAIRS BYTES ROUNDS     e.g. ./tcp-floor 50000 4 120 5
//
// Readers connect from 127.<pair>.<n / 20000>.1 so no source address runs out of
// ephemeral ports. Traffic stays on loopback.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shared {
    volatile int ready;               // processes set up
    volatile int round;               // bumped by the coordinator to start a round
    volatile long start_ns;           // when the round started
    volatile long done_ns[64];        // per reader: when it had every message of the round
    volatile int done_round[64];      // per reader: the round it finished
};

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static long cpu_ns(pid_t pid) {
    char path[64], buffer[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    size_t count = fread(buffer, 1, sizeof buffer - 1, file);
    fclose(file);
    buffer[count] = 0;
    char *field = strrchr(buffer, ')') + 2;  // field 3
    long utime = 0, stime = 0;
    for (int index = 3; index <= 15 && field; index++) {
        if (index == 14) utime = atol(field);
        if (index == 15) stime = atol(field);
        field = strchr(field, ' ');
        if (field) field++;
    }
    return (utime + stime) * (1000000000L / sysconf(_SC_CLK_TCK));
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

// A writer: listens, accepts `count` connections, then writes `bytes` to each per round.
static void writer(struct shared *shared, int listener, int count, int bytes, int rounds) {
    int *sockets = malloc(sizeof(int) * count);
    for (int index = 0; index < count; index++) {
        sockets[index] = accept(listener, NULL, NULL);
        if (sockets[index] < 0) die("accept");
    }
    __sync_fetch_and_add(&shared->ready, 1);
    char message[4096];
    memset(message, 'x', sizeof message);
    for (int round = 1; round <= rounds; round++) {
        while (shared->round < round) usleep(100);
        for (int index = 0; index < count; index++) {
            if (write(sockets[index], message, bytes) != bytes) die("write");
        }
    }
    while (shared->round <= rounds) usleep(1000);
}

// A reader: connects `count` times, then waits in epoll for every socket's message.
static void reader(struct shared *shared, int pair, int port, int count, int bytes, int rounds) {
    int epoll = epoll_create1(0);
    for (int index = 0; index < count; index++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) die("socket");
        struct sockaddr_in source = {.sin_family = AF_INET};
        source.sin_addr.s_addr = htonl((127u << 24) | ((unsigned)(pair + 16) << 16) | ((unsigned)(index / 20000) << 8) | 1u);
        if (bind(fd, (struct sockaddr *)&source, sizeof source) < 0) die("bind");
        struct sockaddr_in server = {.sin_family = AF_INET, .sin_port = htons(port)};
        server.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&server, sizeof server) < 0) die("connect");
        struct epoll_event event = {.events = EPOLLIN, .data.u64 = ((uint64_t)fd << 32) | (uint32_t)index};
        if (epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) < 0) die("epoll_ctl");
    }
    __sync_fetch_and_add(&shared->ready, 1);
    int *received = calloc(count, sizeof(int));
    struct epoll_event events[512];
    char buffer[4096];
    for (int round = 1; round <= rounds; round++) {
        int complete = 0;
        while (complete < count) {
            int ready = epoll_wait(epoll, events, 512, -1);
            if (ready < 0 && errno == EINTR) continue;
            if (ready < 0) die("epoll_wait");
            for (int item = 0; item < ready; item++) {
                int index = (int)(uint32_t)events[item].data.u64;
                ssize_t got = read((int)(events[item].data.u64 >> 32), buffer, sizeof buffer);
                if (got <= 0) die("read");
                received[index] += (int)got;
                if (received[index] == bytes * round) complete++;
            }
        }
        shared->done_ns[pair] = now_ns();
        shared->done_round[pair] = round;
    }
    while (shared->round <= rounds) usleep(1000);
}

static int compare_longs(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s STREAMS PAIRS BYTES ROUNDS\n", argv[0]);
        return 2;
    }
    int streams = atoi(argv[1]), pairs = atoi(argv[2]), bytes = atoi(argv[3]), rounds = atoi(argv[4]);
    if (pairs < 1 || pairs > 64 || bytes < 1 || bytes > 4096 || rounds < 1 || streams < pairs) return 2;
    struct rlimit limit;
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    struct shared *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(shared, 0, sizeof *shared);
    pid_t writers[64], readers[64];
    for (int pair = 0; pair < pairs; pair++) {
        int count = streams / pairs + (pair < streams % pairs);
        int listener = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in address = {.sin_family = AF_INET};
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(listener, (struct sockaddr *)&address, sizeof address) < 0) die("bind");
        if (listen(listener, 4096) < 0) die("listen");
        socklen_t length = sizeof address;
        getsockname(listener, (struct sockaddr *)&address, &length);
        if ((writers[pair] = fork()) == 0) {
            writer(shared, listener, count, bytes, rounds);
            _exit(0);
        }
        close(listener);
        if ((readers[pair] = fork()) == 0) {
            reader(shared, pair, ntohs(address.sin_port), count, bytes, rounds);
            _exit(0);
        }
    }
    long deadline = now_ns() + 300000000000L;
    while (shared->ready < 2 * pairs) {
        if (now_ns() > deadline) {
            fprintf(stderr, "connections did not open within 300 s\n");
            return 1;
        }
        usleep(10000);
    }
    sleep(2);
    long *lasts = malloc(sizeof(long) * rounds);
    for (int round = 1; round <= rounds; round++) {
        long writer_cpu = 0, reader_cpu = 0;
        for (int pair = 0; pair < pairs; pair++) {
            writer_cpu -= cpu_ns(writers[pair]);
            reader_cpu -= cpu_ns(readers[pair]);
        }
        shared->start_ns = now_ns();
        shared->round = round;
        deadline = now_ns() + 30000000000L;
        for (int pair = 0; pair < pairs; pair++) {
            while (shared->done_round[pair] < round) {
                if (now_ns() > deadline) {
                    fprintf(stderr, "round %d did not finish within 30 s\n", round);
                    return 1;
                }
                usleep(50);
            }
        }
        long last = 0;
        for (int pair = 0; pair < pairs; pair++) {
            if (shared->done_ns[pair] > last) last = shared->done_ns[pair];
        }
        usleep(200000);  // let the writers' loop and the readers' last reads settle
        for (int pair = 0; pair < pairs; pair++) {
            writer_cpu += cpu_ns(writers[pair]);
            reader_cpu += cpu_ns(readers[pair]);
        }
        lasts[round - 1] = last - shared->start_ns;
        printf("floor_round %d streams %d last_ms %.3f cpu_ms writers %.0f readers %.0f\n", round, streams,
               lasts[round - 1] / 1e6, writer_cpu / 1e6, reader_cpu / 1e6);
        fflush(stdout);
        sleep(1);
    }
    shared->round = rounds + 1;
    for (int pair = 0; pair < pairs; pair++) {
        waitpid(writers[pair], NULL, 0);
        waitpid(readers[pair], NULL, 0);
    }
    qsort(lasts, rounds, sizeof(long), compare_longs);
    printf("floor_last_ms_median %.3f\n", lasts[(rounds - 1) / 2] / 1e6);
    return 0;
}
