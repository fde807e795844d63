#include "cudatrace/render/format.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "cudatrace/render/append.h"

namespace cudatrace {

void append_uint(fmt::memory_buffer& out, std::uint64_t v) {
  const fmt::format_int text(v);
  append_piece(out, text.data(), text.size());
}

void append_int(fmt::memory_buffer& out, std::int64_t v) {
  const fmt::format_int text(v);
  append_piece(out, text.data(), text.size());
}

void append_hex(fmt::memory_buffer& out, std::uint64_t v) {
  static const char kHex[] = "0123456789abcdef";
  char text[18];
  char* const end = text + sizeof text;
  char* p = end;
  do {
    *--p = kHex[v & 15];
    v >>= 4;
  } while (v);
  *--p = 'x';
  *--p = '0';
  append_piece(out, p, static_cast<std::size_t>(end - p));
}

void append_hex16(fmt::memory_buffer& out, std::uint64_t v) {
  static const char kHex[] = "0123456789abcdef";
  char text[16];
  for (int i = 15; i >= 0; --i, v >>= 4) text[i] = kHex[v & 15];
  append_piece(out, text, sizeof text);
}

std::string group_digits(std::uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string group_tenths(double v) {
  const auto tenths = static_cast<std::uint64_t>(std::llround(std::max(0.0, v) * 10));
  return group_digits(tenths / 10) + "." + std::to_string(tenths % 10);
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

void append_json_number(fmt::memory_buffer& out, double v, int decimals) {
  if (std::isfinite(v))
    fmt::format_to(std::back_inserter(out), "{:.{}f}", v, decimals);
  else
    out.append(std::string_view("null"));
}

std::vector<std::string> Table::lines() const {
  std::vector<std::size_t> width(headers.size());
  for (std::size_t c = 0; c < headers.size(); ++c) {
    width[c] = headers[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](auto cell) {
    std::string s;
    for (std::size_t c = 0; c < headers.size(); ++c) {
      const std::string v = cell(c);
      const std::string pad(width[c] - v.size(), ' ');
      s += c ? "  " : " ";
      s += left[c] ? v + pad : pad + v;
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
  };
  std::vector<std::string> out;
  out.push_back(line([&](std::size_t c) { return headers[c]; }));
  out.push_back(line([&](std::size_t c) { return std::string(width[c], '-'); }));
  for (const auto& r : rows) out.push_back(line([&](std::size_t c) { return r[c]; }));
  return out;
}

void append_lines(fmt::memory_buffer& out, const std::vector<std::string>& lines) {
  for (const std::string& l : lines) {
    out.append(l);
    out.push_back('\n');
  }
}

void append_section(fmt::memory_buffer& out, std::string_view title, const Table& table) {
  fmt::format_to(std::back_inserter(out), "\n{}:\n\n", title);
  if (table.rows.empty())
    out.append(std::string_view(" none\n"));
  else
    append_lines(out, table.lines());
}

}  // namespace cudatrace
