// Appending a short piece of text to a formatting buffer, inline. The
// writers append a dozen pieces per traced call; fmt's general append (a
// loop around a memmove call) cost more than the bytes did, about a tenth of
// the reader's time per record (docs/benchmarks.md, "Work per record").
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <string_view>

namespace cudatrace {

inline void append_piece(fmt::memory_buffer& out, const char* p, std::size_t n) {
  const std::size_t size = out.size();
  if (n > out.capacity() - size) {  // the buffer grows: fmt's way
    out.append(p, p + n);
    return;
  }
  out.try_resize(size + n);  // within capacity: only sets the size
  char* to = out.data() + size;
  if (n >= 8 && n <= 16) {  // two overlapping words
    std::uint64_t head, tail;
    std::memcpy(&head, p, 8);
    std::memcpy(&tail, p + n - 8, 8);
    std::memcpy(to, &head, 8);
    std::memcpy(to + n - 8, &tail, 8);
  } else if (n < 8) {
    for (std::size_t i = 0; i < n; ++i) to[i] = p[i];
  } else {
    std::memcpy(to, p, n);
  }
}

inline void append_piece(fmt::memory_buffer& out, std::string_view s) { append_piece(out, s.data(), s.size()); }

// One byte, or `n` of one byte (padding): fmt's push_back is a call per byte
// where the compiler does not inline it, and a line pads with dozens.
[[gnu::always_inline]] inline void append_char(fmt::memory_buffer& out, char c) {
  const std::size_t size = out.size();
  if (size == out.capacity()) {
    out.push_back(c);
    return;
  }
  out.try_resize(size + 1);
  out.data()[size] = c;
}

inline void append_chars(fmt::memory_buffer& out, char c, std::size_t n) {
  const std::size_t size = out.size();
  if (n > out.capacity() - size) out.reserve(size + n);
  out.try_resize(size + n);
  std::memset(out.data() + size, c, n);
}

}  // namespace cudatrace
