/* Valgrind's callgrind, asked from inside the process it counts (streaming/bench/counting.py):
   a region is counted from start to stop, and written out at its stop. */
#include <valgrind/callgrind.h>

void faultline_count_start(void) {
    CALLGRIND_ZERO_STATS;
    CALLGRIND_START_INSTRUMENTATION;
}

void faultline_count_stop(void) {
    CALLGRIND_STOP_INSTRUMENTATION;
    CALLGRIND_DUMP_STATS_AT("faultline");
}
