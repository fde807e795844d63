// Small formatting helpers every renderer shares: numbers as nsys prints
// them, and text tables in its layout.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cudatrace/terminal.h"

namespace cudatrace {

// Integers appended without a format string (these run for every traced
// call): decimal, and hex as fmt's "{:#x}" (0x, lower case, no leading zeros).
void append_uint(fmt::memory_buffer& out, std::uint64_t v);
void append_int(fmt::memory_buffer& out, std::int64_t v);
void append_hex(fmt::memory_buffer& out, std::uint64_t v);
// 16 lower-case hex digits, leading zeros kept (NCCL communicator ids).
void append_hex16(fmt::memory_buffer& out, std::uint64_t v);

// "1,234,567" and (one decimal) "1,234.5", as nsys prints numbers.
std::string group_digits(std::uint64_t v);
std::string group_tenths(double v);

// "512 B", "1.5 KiB", "4.0 MiB", "2.0 GiB".
std::string format_bytes(std::uint64_t bytes);

// A JSON number with `decimals` decimals; null when it is not finite.
void append_json_number(fmt::memory_buffer& out, double v, int decimals);

// A text table in nsys's layout: right-aligned numbers, two spaces apart.
struct Table {
  std::vector<std::string> headers;
  std::vector<bool> left;  // left-aligned columns
  std::vector<std::vector<std::string>> rows;

  // The header line, a rule, then one line per row; no trailing spaces.
  std::vector<std::string> lines() const;
};

// Each line and a newline.
void append_lines(fmt::memory_buffer& out, const std::vector<std::string>& lines);
// "\nTITLE:\n\n" and the table, or " none" when it has no rows.
void append_section(fmt::memory_buffer& out, std::string_view title, const Table& table);

}  // namespace cudatrace
