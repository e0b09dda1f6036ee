// ODR check: odr_a.cpp and odr_b.cpp both include every gattn header and are linked into gattn_tests.
// A header that defines a non-inline function or variable breaks the link with "multiple definition";
// this test also calls into both translation units.
#include <gtest/gtest.h>

#include <string>

#include "odr/odr_all.hpp"

namespace gattn_odr {

std::string from_a() { return gattn::detail::concat("odr-", 'a', 1); }
std::string from_b();
void throw_from_b();

}  // namespace gattn_odr

TEST(Odr, TwoTranslationUnitsIncludeEveryHeader) {
  EXPECT_EQ(gattn_odr::from_a(), "odr-a1");
  EXPECT_EQ(gattn_odr::from_b(), "odr-b2");
  try {
    gattn_odr::throw_from_b();
    FAIL() << "expected gattn::config_error";
  } catch (const gattn::error& e) {
    EXPECT_NE(dynamic_cast<const gattn::config_error*>(&e), nullptr);
    EXPECT_EQ(std::string(e.what()), "H_q=6 H_kv=4");
  }
}
