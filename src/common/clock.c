/* clock.c - attn_now_ns (clock.h): one monotonic clock for every module,
 * so that the queue's deadlines, peers.c's timers and the metrics' times
 * can be compared and tests can hand one "now" to all of them. */
#include "attn/clock.h"

#include <time.h>

uint64_t attn_now_ns(void) {
  struct timespec ts;
  /* CLOCK_MONOTONIC cannot fail on Linux with a valid pointer. */
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
