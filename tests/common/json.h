// Parsing the library's JSON in tests: nlohmann-json when the build found it (tests/CMakeLists.txt), else the
// JSON tests skip with the reason, never pass.
#pragma once

#include <gtest/gtest.h>

#ifndef MT_TEST_HAVE_JSON_PARSER
#define MT_TEST_HAVE_JSON_PARSER 0
#endif

#if MT_TEST_HAVE_JSON_PARSER
#include <nlohmann/json.hpp>
#endif

// First statement of a JSON test; the body that parses stays inside #if MT_TEST_HAVE_JSON_PARSER.
#define MT_REQUIRE_JSON_PARSER()                                                                           \
  do {                                                                                                     \
    if (!MT_TEST_HAVE_JSON_PARSER)                                                                         \
      GTEST_SKIP() << "no JSON parser: nlohmann-json (Debian: nlohmann-json3-dev) was not found at build " \
                      "time";                                                                              \
  } while (0)
