// Included by odr_a.cpp and odr_b.cpp: the whole public API, so that a non-inline function or
// variable defined in any header fails to link (multiple definition) in gattn_tests.
#pragma once

#if __has_include(<gattn/gattn.hpp>)
#include <gattn/gattn.hpp>
#else
// No umbrella header yet: every header under include/gattn, listed by tests/CMakeLists.txt at
// configure time (build/tests/generated/gattn_all_headers.hpp).
#include "gattn_all_headers.hpp"
#endif
