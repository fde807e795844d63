// Golden files of the unit tests (tests/data/golden/): compared with what a
// writer produces, or rewritten when CUDATRACE_UPDATE_GOLDEN is set (review
// the diff before committing it).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace cudatrace_test {

inline void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(GOLDEN_DIR) + "/" + name;
  if (const char* update = std::getenv("CUDATRACE_UPDATE_GOLDEN"); update && *update && *update != '0') {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path << " is missing; see tests/unit/golden.h";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "differs from " << path << "; see tests/unit/golden.h";
}

}  // namespace cudatrace_test
