// Included by odr_a.cpp and odr_b.cpp: every header under include/gattn (listed by
// tests/CMakeLists.txt at configure time), so that a non-inline function or variable defined in any
// header fails to link (multiple definition) in gattn_tests.
#pragma once

#include "gattn_all_headers.hpp"
