// The library's JSON writer (runtime/detail/json.h): every string escaped per RFC 8259, numbers that read
// back as written. Parsed back with nlohmann-json (tests only).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "minitensor/runtime/detail/json.h"
#include "tests/common/json.h"

namespace mt {
namespace {

using detail::json_quote;
using detail::JsonWriter;

// Every byte below 0x20 in the short form where JSON has one, else \u00XX; none left raw.
TEST(Json, EscapesEveryControlCharacter) {
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  for (int c = 0; c < 0x20; ++c) {
    const std::string s = std::string("a") + static_cast<char>(c) + "b";
    const std::string q = json_quote(s);
    for (char ch : q) EXPECT_GE(static_cast<unsigned char>(ch), 0x20) << "byte " << c << " left raw in " << q;
    const auto parsed = nlohmann::json::parse(q);
    ASSERT_TRUE(parsed.is_string());
    EXPECT_EQ(parsed.get<std::string>(), s) << "byte " << c;
  }
  EXPECT_EQ(json_quote("\b\f\n\r\t"), R"("\b\f\n\r\t")");
  EXPECT_EQ(json_quote(std::string(1, '\0')), R"("\u0000")");
  EXPECT_EQ(json_quote("\x01\x1f"), R"("\u0001\u001f")");
  EXPECT_EQ(json_quote("q\"b\\s/"), R"("q\"b\\s/")");
  // All 32 at once, and a string made of nothing else.
  std::string all;
  for (int c = 0; c < 0x20; ++c) all += static_cast<char>(c);
  EXPECT_EQ(nlohmann::json::parse(json_quote(all)).get<std::string>(), all);
#endif
}

// Well-formed UTF-8 is kept; 0x7f is escaped; bytes that are not UTF-8 become U+FFFD, so the document stays
// valid (a strict reader rejects invalid UTF-8).
TEST(Json, KeepsUtf8AndReplacesInvalidBytes) {
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  const std::string utf8 = "caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80";  // café → 😀
  EXPECT_EQ(json_quote(utf8), "\"" + utf8 + "\"");
  EXPECT_EQ(nlohmann::json::parse(json_quote(utf8)).get<std::string>(), utf8);
  EXPECT_EQ(json_quote("\x7f"), R"("\u007f")");
  EXPECT_EQ(nlohmann::json::parse(json_quote("\x7f")).get<std::string>(), "\x7f");
  const std::string replacement = "\xef\xbf\xbd";
  // A stray continuation byte, a lone lead byte, an overlong '/', a surrogate, a code point above U+10FFFF,
  // a truncated sequence at the end.
  for (const std::string bad : {"\x80", "\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x86"}) {
    const std::string q = json_quote("x" + bad + "y");
    const auto parsed = nlohmann::json::parse(q);  // throws on invalid UTF-8
    const std::string back = parsed.get<std::string>();
    EXPECT_EQ(back.front(), 'x');
    EXPECT_EQ(back.back(), 'y');
    EXPECT_NE(back.find(replacement), std::string::npos) << q;
    EXPECT_EQ(back.size(), 2 + bad.size() * replacement.size()) << q;  // one U+FFFD per byte
  }
#endif
}

TEST(Json, NumbersReadBackExactlyAndNonFiniteIsNull) {
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  const double values[] = {0.0,
                           -0.0,
                           0.1,
                           1.0 / 3.0,
                           -2.5e-300,
                           1e300,
                           std::numeric_limits<double>::denorm_min(),
                           std::numeric_limits<double>::max(),
                           123456789.0};
  JsonWriter w;
  w.begin_array();
  for (double v : values) w.value(v);
  w.value(std::numeric_limits<double>::quiet_NaN())
      .value(std::numeric_limits<double>::infinity())
      .value(-std::numeric_limits<double>::infinity())
      .value(std::numeric_limits<std::int64_t>::min())
      .value(std::numeric_limits<std::uint64_t>::max())
      .end_array();
  const auto parsed = nlohmann::json::parse(w.str());
  ASSERT_EQ(parsed.size(), std::size(values) + 5);
  for (std::size_t i = 0; i < std::size(values); ++i) {
    EXPECT_TRUE(parsed[i].is_number_float()) << i << ": " << w.str();  // "5.0", never "5"
    EXPECT_EQ(parsed[i].get<double>(), values[i]) << w.str();
  }
  EXPECT_TRUE(std::signbit(parsed[1].get<double>()));
  const std::size_t n = std::size(values);
  EXPECT_TRUE(parsed[n].is_null());
  EXPECT_TRUE(parsed[n + 1].is_null());
  EXPECT_TRUE(parsed[n + 2].is_null());
  EXPECT_EQ(parsed[n + 3].get<std::int64_t>(), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(parsed[n + 4].get<std::uint64_t>(), std::numeric_limits<std::uint64_t>::max());
#endif
}

// Commas and nesting come out right, keys in call order.
TEST(Json, WriterNestsAndKeepsKeyOrder) {
  JsonWriter w;
  w.begin_object()
      .field("b", 1)
      .field("a", "x")
      .key("list")
      .begin_array()
      .begin_object()
      .end_object()
      .begin_array()
      .end_array()
      .value(true)
      .null()
      .end_array()
      .key("raw")
      .raw(R"({"k":2})")
      .field("unsigned", 7u)
      .end_object();
  EXPECT_EQ(w.str(), R"({"b":1,"a":"x","list":[{},[],true,null],"raw":{"k":2},"unsigned":7})");
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  const auto parsed = nlohmann::json::parse(w.str());
  EXPECT_EQ(parsed["raw"]["k"], 2);
  EXPECT_EQ(parsed["list"].size(), 4u);
#endif
}

}  // namespace
}  // namespace mt
