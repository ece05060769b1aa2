#ifndef C_MALLOC_STATS_H
#define C_MALLOC_STATS_H
#include <stddef.h>
/// Bytes currently allocated by malloc (glibc), or 0 where unknown.
size_t cmallocstats_bytes_in_use(void);
#endif
