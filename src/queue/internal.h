/* internal.h - the worker pool's test hook (attn__ prefix).  Not a public
 * header: only src/queue/ and tests/test_queue.c include it. */
#ifndef ATTN_QUEUE_INTERNAL_H
#define ATTN_QUEUE_INTERNAL_H

/* For tests only: make pthread_create fail for worker index nth (>= 0) in
 * every later attn_pool_create, or never again (-1, the default).  Not for
 * concurrent use with attn_pool_create. */
void attn__pool_fail_thread_at(int nth);

#endif /* ATTN_QUEUE_INTERNAL_H */
