// Declarations only (see include/CSafeObserveRuntime.h); SwiftPM needs one
// source file per C target.
#include "CSafeObserveRuntime.h"
