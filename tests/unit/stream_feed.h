// Feeds hand-built calls through decode_call and the analysis pipeline (its
// stream model above all), for the streams, output, perfetto and driver
// tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/render/json_format.h"
#include "cudatrace/render/text.h"
#include "record_builder.h"

namespace cudatrace_test {

// Handles the fake kernel symbolizer knows: kernel_handle("k1") etc.
inline const std::map<std::uint64_t, std::string>& kernel_symbols() {
  static const std::map<std::uint64_t, std::string> kSymbols = {
      {0xa1, "k1"}, {0xa2, "k2"}, {0xa3, "k3"}, {0xa4, "k4"}, {0xa5, "k5"}, {0xa6, "k6"},
      {0xa7, "_ZN2ns6reduceIfEEvPKT_i"}};
  return kSymbols;
}

struct CallSpec {
  std::string symbol;
  std::vector<std::pair<std::string, std::uint64_t>> args;  // by CUDA parameter name; out-params: the value written
  std::int64_t ret = 0;
  std::uint32_t pid = 100, tid = 100;
  std::string parent;  // enclosing traced call; empty: top level
  std::uint64_t ts_ns = 0, dur_ns = 1000, caller = 0;
  bool unfinished = false;
  std::uint8_t flags = 0;  // CT_FLAG_* of the record
  std::vector<std::uint8_t> payload;  // a String or LaunchConfig argument's bytes
};

class StreamFeed {
 public:
  // Every API displayed: every call reaches the memory accounting.
  static cudatrace::PipelineOptions all_apis() {
    cudatrace::PipelineOptions o;
    for (bool& g : o.display.group) g = true;
    for (bool& l : o.display.layer) l = true;
    return o;
  }

  StreamFeed() {
    names_.set_symbolizer([](std::uint32_t, std::uint64_t addr) {
      auto it = kernel_symbols().find(addr);
      return it == kernel_symbols().end() ? std::string() : it->second;
    });
  }

  // Builds the record and decodes it, without the model: `call()` until the
  // next decode or feed.
  cudatrace::Call& decode(const CallSpec& s) {
    init_rec(buf_, s.symbol, s.pid);
    buf_.rec.tid = s.tid;
    buf_.rec.ret = s.ret;
    buf_.rec.ts_ns = s.ts_ns ? s.ts_ns : (next_ts_ += 10'000);
    buf_.rec.dur_ns = s.dur_ns;
    buf_.rec.caller = s.caller;
    buf_.rec.flags = s.flags;
    if (s.unfinished) {
      buf_.rec.type = CT_REC_UNFINISHED;
      buf_.rec.dur_ns = 0;
    }
    if (!s.parent.empty()) {
      buf_.rec.parent_api = api_id(s.parent);
      buf_.rec.depth = 1;
    }
    const cudatrace::Api* api = cudatrace::api_by_symbol(s.symbol);
    for (const auto& [name, value] : s.args) set_arg(*api, name, value);
    if (!s.payload.empty()) set_payload(buf_, s.payload.data(), s.payload.size());
    EXPECT_TRUE(cudatrace::decode_call(buf_.rec, &names_, call_)) << s.symbol;
    return call_;
  }

  // decode(), then the model; `call()` and the returned activity describe
  // it until the next feed.
  const cudatrace::StreamActivity& feed(const CallSpec& s) {
    analysis_ = &pipeline_.on_call(decode(s));
    return *analysis_->streams;
  }

  const cudatrace::StreamActivity& feed(std::string symbol,
                                        std::initializer_list<std::pair<std::string, std::uint64_t>> args,
                                        std::uint32_t tid = 100) {
    CallSpec s;
    s.symbol = std::move(symbol);
    s.args = args;
    s.tid = tid;
    return feed(s);
  }

  cudatrace::Call& call() { return call_; }
  // What the pipeline found about the last call.
  const cudatrace::CallAnalysis& analysis() const { return *analysis_; }
  cudatrace::StreamTracker& tracker() { return pipeline_.streams(); }
  cudatrace_test::RecBuf& record() { return buf_; }

  // The short id given to argument `name` of the last call, "" if none.
  std::string id_of(std::string_view name) const {
    for (const auto& a : call_.args)
      if (a.name == name) return std::string(a.id);
    return "<missing>";
  }

  // The last call's text annotation, without its leading space; "" if none.
  std::string waited_text() const {
    if (!call_.waited) return "";
    fmt::memory_buffer b;
    cudatrace::append_wait_text(b, *call_.waited);
    return std::string(b.data() + 1, b.size() - 1);
  }

 private:
  void set_arg(const cudatrace::Api& api, const std::string& name, std::uint64_t value) {
    int out_no = 0;
    for (std::size_t i = 0; i < api.spec->args.size(); ++i) {
      const auto& a = api.spec->args[i];
      const bool out = cudatrace::is_out(a.type);
      if (a.name == name) {
        if (out)
          buf_.rec.outs[out_no] = value;
        else
          buf_.rec.args[api.slots[i]] = value;
        return;
      }
      out_no += out;
    }
    ADD_FAILURE() << api.symbol << " has no argument " << name;
  }

  cudatrace::KernelNames names_;
  cudatrace::Pipeline pipeline_{all_apis()};
  const cudatrace::CallAnalysis* analysis_ = nullptr;
  cudatrace::Call call_;
  RecBuf buf_;
  std::uint64_t next_ts_ = 1'000'000;
};

}  // namespace cudatrace_test
