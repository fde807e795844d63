// Builds decoded calls for the analysis tests (memory, summary, insights,
// report) from hand-made records, the way the BPF side lays them out.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/kernel_names.h"
#include "record_builder.h"

namespace cudatrace_test {
// stream_feed.h has another CallSpec: an inline namespace gives this one its
// own linker name, so the two never share an inline member function.
inline namespace analysis_calls {

// An argument by CUDA parameter name; v1 and v2 fill the extra slots of
// dim3 arguments (Dim3: v0 = x | y << 32, v1 = z; Dim3Split: x, y, z).
struct Arg {
  std::string_view name;
  std::uint64_t v0, v1 = 0, v2 = 0;
};

inline Arg dim3_arg(std::string_view name, std::uint32_t x, std::uint32_t y, std::uint32_t z) {
  return {name, x | std::uint64_t(y) << 32, z};
}

struct CallSpec {
  std::uint32_t pid = 1234, tid = 1235;
  std::uint64_t ts_ns = 1000, dur_ns = 2500;
  std::int64_t ret = 0;
  std::uint8_t depth = 0;
  std::string_view parent = {};
  std::uint64_t caller = 0;
  std::vector<std::uint64_t> outs = {};
  std::vector<std::uint64_t> stack = {};
};

// Builds the record, decodes it and hands the record and the call to `use`
// (the record lives only as long as that). `payload`: a string or struct
// read at return.
inline void with_record_call(std::string_view symbol, const std::vector<Arg>& args, const CallSpec& spec,
                             const std::function<void(const ct_call&, const cudatrace::Call&)>& use,
                             cudatrace::KernelNames* names = nullptr, const std::vector<std::uint8_t>& payload = {}) {
  auto b = std::make_unique<RecBuf>();
  init_rec(*b, symbol, spec.pid);
  b->rec.tid = spec.tid;
  b->rec.ts_ns = spec.ts_ns;
  b->rec.dur_ns = spec.dur_ns;
  b->rec.ret = spec.ret;
  b->rec.depth = spec.depth;
  b->rec.caller = spec.caller;
  if (!spec.parent.empty()) b->rec.parent_api = api_id(spec.parent);
  const cudatrace::Api* api = cudatrace::api_by_symbol(symbol);
  ASSERT_NE(api, nullptr) << symbol;
  for (const Arg& a : args) {
    std::size_t i = 0;
    while (i < api->spec->args.size() && api->spec->args[i].name != a.name) ++i;
    ASSERT_LT(i, api->spec->args.size()) << symbol << " has no argument " << a.name;
    const int slot = api->slots[i];
    b->rec.args[slot] = a.v0;
    if (cudatrace::slot_count(api->spec->args[i].type) > 1) b->rec.args[slot + 1] = a.v1;
    if (cudatrace::slot_count(api->spec->args[i].type) > 2) b->rec.args[slot + 2] = a.v2;
  }
  for (std::size_t o = 0; o < spec.outs.size() && o < CT_MAX_OUTS; ++o) b->rec.outs[o] = spec.outs[o];
  if (!payload.empty()) set_payload(*b, payload.data(), payload.size());
  if (!spec.stack.empty()) add_section(*b, CT_SECTION_STACK, spec.stack.data(), spec.stack.size() * 8);
  cudatrace::Call call;
  ASSERT_TRUE(cudatrace::decode_call(b->rec, names, call));
  use(b->rec, call);
}

// The same, handing `use` the call only.
inline void with_call(std::string_view symbol, const std::vector<Arg>& args, const CallSpec& spec,
                      const std::function<void(const cudatrace::Call&)>& use,
                      cudatrace::KernelNames* names = nullptr, const std::vector<std::uint8_t>& payload = {}) {
  with_record_call(symbol, args, spec, [&](const ct_call&, const cudatrace::Call& c) { use(c); }, names, payload);
}

}  // namespace analysis_calls
}  // namespace cudatrace_test
