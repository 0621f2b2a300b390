/* clock.h - the monotonic clock every part of attnd times itself by. */
#ifndef ATTN_CLOCK_H
#define ATTN_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds: the clock of the queue's deadlines, the
 * connections' timers, the metrics' and the access log's durations.  Any
 * thread. */
uint64_t attn_now_ns(void);

#endif
