// Time to find a statically linked CUDA runtime's entry points in files
// (docs/static-runtime.md): what a library load costs the stopped process.
//
//   static_runtime_bench [--reps N] FILE...
//
// Prints per file: .text size, APIs found, best and first time of N runs.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cudatrace/target/elf_file.h"
#include "cudatrace/target/static_runtime.h"

int main(int argc, char** argv) {
  using namespace cudatrace;
  using Clock = std::chrono::steady_clock;
  int reps = 5, first = 1;
  if (argc > 2 && std::strcmp(argv[1], "--reps") == 0) reps = std::atoi(argv[2]), first = 3;
  if (first >= argc || reps < 1) {
    std::fprintf(stderr, "usage: static_runtime_bench [--reps N] FILE...\n");
    return 2;
  }
  std::printf("%-40s %9s %6s %10s %10s\n", "file", ".text MB", "found", "first ms", "best ms");
  for (int i = first; i < argc; ++i) {
    std::string error;
    auto elf = ElfFile::open(argv[i], error);
    if (!elf) {
      std::fprintf(stderr, "static_runtime_bench: %s\n", error.c_str());
      return 1;
    }
    const auto text = elf->section(".text");
    double first_ms = 0, best_ms = 1e300;
    std::size_t found = 0;
    for (int r = 0; r < reps; ++r) {
      const auto start = Clock::now();
      found = find_static_runtime(*elf, static_runtime_fingerprints()).size();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      if (r == 0) first_ms = ms;
      best_ms = std::min(best_ms, ms);
    }
    const char* base = std::strrchr(argv[i], '/');
    std::printf("%-40s %9.1f %6zu %10.1f %10.1f\n", base ? base + 1 : argv[i], text ? text->size / 1e6 : 0.0, found,
                first_ms, best_ms);
  }
  return 0;
}
