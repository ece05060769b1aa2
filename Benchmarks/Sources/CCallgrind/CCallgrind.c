#include "CCallgrind.h"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
void ccallgrind_toggle_collect(void) { CALLGRIND_TOGGLE_COLLECT; }
#else
void ccallgrind_toggle_collect(void) {}
#endif
