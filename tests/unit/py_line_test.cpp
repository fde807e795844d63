// py_line: the line of an instruction from each CPython version's line
// table, against the lines the interpreters themselves give (co_lines() of
// one function, printed by CPython 3.10.13, 3.11.2, 3.12.1 and 3.13.0).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cudatrace/target/python.h"

namespace cudatrace {
namespace {

struct Case {
  int minor, firstlineno;
  const char* table_hex;
  std::vector<std::pair<int, int>> lines;  // instruction byte offset, line (0: none)
};

const std::vector<Case> kCases = {
  {10, 2, "08010801120108010802", {{0, 3}, {8, 4}, {16, 5}, {34, 6}, {42, 8}}},
  {11, 2, "8000d80809884189058041d80708883182758075d80c21d00c219d05986199089c08d00c21d10c21d40c218801dd0f12903189768c76880de00b0c88718935804c", {{0, 2}, {2, 3}, {4, 3}, {6, 3}, {10, 3}, {12, 4}, {14, 4}, {16, 4}, {22, 4}, {24, 5}, {26, 5}, {28, 5}, {40, 5}, {42, 5}, {46, 5}, {56, 5}, {58, 5}, {62, 5}, {72, 5}, {74, 6}, {86, 6}, {88, 6}, {92, 6}, {102, 6}, {104, 8}, {106, 8}, {108, 8}, {112, 8}}},
  {12, 2, "8000d80809884189058041d8070888318275dc181d98619b08d60c2190318a51d00c218801d00c21dc0f1290318b76880de00b0c88718935804cf9f207000d22", {{0, 2}, {2, 3}, {12, 4}, {22, 5}, {70, 6}, {92, 8}, {102, 0}, {106, 5}}},
  {13, 2, "8000d80809884189058041d8070888318375dc181d98619c08d30c21990890318a5199088801d00c21dc0f1290318b76880de00b0c88718935804cf9f207000d22", {{0, 2}, {2, 3}, {12, 4}, {24, 5}, {74, 6}, {96, 8}, {106, 0}, {110, 5}}},
};

std::string unhex(const char* h) {
  std::string out;
  for (std::size_t i = 0; h[i] && h[i + 1]; i += 2) out += static_cast<char>(std::stoi(std::string(h + i, 2), nullptr, 16));
  return out;
}

TEST(PyLine, AsTheInterpreterSays) {
  for (const Case& c : kCases) {
    const std::string table = unhex(c.table_hex);
    for (const auto& [offset, line] : c.lines)
      EXPECT_EQ(py_line(c.minor, table, c.firstlineno, offset), line) << "3." << c.minor << " offset " << offset;
  }
}

TEST(PyLine, OutsideTheTableIsUnknown) {
  EXPECT_EQ(py_line(11, unhex(kCases[1].table_hex), 2, 100000), 0);
  EXPECT_EQ(py_line(11, "", 2, 0), 0);
}

}  // namespace
}  // namespace cudatrace
