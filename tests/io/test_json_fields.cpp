// io/json_fields.hpp: typed fields name the key they refuse, and text the parser refuses keeps the
// parser's reason and where it is.
#include <string>

#include <gtest/gtest.h>

#include "gattn/io/json_fields.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_json_fields {

/// The format_error message parse_json_text gives for `text`, or "" when it parses.
std::string refusal(const std::string& text) {
  try {
    (void)io::detail::parse_json_text(text, "cfg.json");
  } catch (const format_error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonFields, ANumberBeyondDoubleIsNamedWithItsPosition) {
  const std::string msg = refusal(R"({"decay_lower_bound": -1e400})");
  EXPECT_NE(msg.find("cfg.json: not valid JSON: at byte 28 ('decay_lower_bound')"), std::string::npos) << msg;
  EXPECT_NE(msg.find("number overflow parsing '-1e400'"), std::string::npos) << msg;
  EXPECT_EQ(refusal(R"({"decay_lower_bound": -1e300})"), "");
}

TEST(JsonFields, FieldsNameTheKeyTheyRefuse) {
  const auto j = io::detail::parse_json_text(R"({"heads": "four", "eps": 1e-6, "n": 4.5})", "cfg.json");
  try {
    (void)io::detail::get_index(j, "heads", "cfg");
    ADD_FAILURE() << "a string was read as an index";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("'heads'"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)io::detail::get_index(j, "n", "cfg"), config_error);
  EXPECT_THROW((void)io::detail::get_index(j, "missing", "cfg"), config_error);
  EXPECT_EQ(io::detail::get_double(j, "eps", "cfg"), 1e-6);
}

}  // namespace test_json_fields
}  // namespace gattn
