// OpenTelemetry context (docs/correlation.md): the process context's header
// and protobuf payload, the thread context's attributes, and a call's span
// written as JSON and read back (report).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/otel.h"
#include "cudatrace/record/trace_line.h"
#include "cudatrace/render/writer.h"

namespace {

using namespace cudatrace;

std::string len_field(unsigned tag, const std::string& bytes) {
  std::string out(1, static_cast<char>(tag << 3 | 2));
  std::size_t n = bytes.size();
  do {  // varint
    out.push_back(static_cast<char>((n & 0x7f) | (n > 0x7f ? 0x80 : 0)));
    n >>= 7;
  } while (n);
  return out + bytes;
}
std::string any_string(const std::string& s) { return len_field(1, s); }
std::string key_value(const std::string& k, const std::string& any) { return len_field(1, k) + len_field(2, any); }

// What an SDK publishes (the reference writer's encoding).
std::string payload() {
  const std::string resource = len_field(1, key_value("service.name", any_string("checkout"))) +
                               len_field(1, key_value("service.namespace", any_string("shop"))) +
                               len_field(1, key_value("deployment.environment.name", any_string("prod")));
  const std::string keys = len_field(1, any_string("http.route")) + len_field(1, any_string("user.id"));
  return len_field(1, resource) + len_field(2, key_value("threadlocal.schema_version", any_string("v1"))) +
         len_field(2, key_value("threadlocal.attribute_key_map", len_field(5, keys))) +
         std::string("\x18\x2a", 2);  // an unknown varint field (3 = 42): skipped
}

TEST(Otel, ProcessContextPayload) {
  ProcessContext ctx;
  ASSERT_TRUE(decode_process_context(payload(), ctx));
  ASSERT_EQ(ctx.resource.size(), 3u);
  EXPECT_EQ(ctx.attribute("service.name"), "checkout");
  EXPECT_EQ(ctx.attribute("service.namespace"), "shop");
  EXPECT_EQ(ctx.attribute("deployment.environment.name"), "prod");
  EXPECT_EQ(ctx.attribute("absent"), "");
  EXPECT_EQ(ctx.span_keys, (std::vector<std::string>{"http.route", "user.id"}));
  EXPECT_EQ(ctx.schema_version, "v1");
  EXPECT_EQ(span_key_name(&ctx, 1), "user.id");
  EXPECT_EQ(span_key_name(&ctx, 7), "7");
  EXPECT_EQ(span_key_name(nullptr, 0), "0");
}

// Whatever a process publishes (up to 1 MiB), what is kept of it is bounded
// (issue 47): names and values of 128 bytes at most, cut with "…", the first
// 64 resource attributes, 256 span attribute names.
TEST(Otel, ProcessContextValuesAreBounded) {
  std::string resource = len_field(1, key_value("service.name", any_string(std::string(100000, 's'))));
  for (int i = 0; i < 100; ++i) resource += len_field(1, key_value("k" + std::to_string(i), any_string("v")));
  resource += len_field(1, key_value(std::string(1000, 'k'), any_string("v")));
  std::string keys;
  for (int i = 0; i < 300; ++i) keys += len_field(1, any_string(std::string(200, 'a')));
  ProcessContext ctx;
  ASSERT_TRUE(decode_process_context(
      len_field(1, resource) + len_field(2, key_value("threadlocal.attribute_key_map", len_field(5, keys))) +
          len_field(2, key_value("threadlocal.schema_version", any_string(std::string(5000, 'v')))),
      ctx));
  EXPECT_EQ(ctx.attribute("service.name"), std::string(125, 's') + "\xE2\x80\xA6");
  EXPECT_EQ(ctx.resource.size(), kMaxResourceAttributes);
  ASSERT_EQ(ctx.span_keys.size(), 256u);
  EXPECT_EQ(ctx.span_keys[255], std::string(125, 'a') + "\xE2\x80\xA6");
  EXPECT_EQ(ctx.schema_version.size(), 128u);
  // Cut between characters: 2-byte ones, never half of one.
  EXPECT_EQ(bounded_value(std::string(122, 'x') + "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9"),  // 130 bytes
            std::string(122, 'x') + "\xC3\xA9" + "\xE2\x80\xA6");
}

// Every cut of the payload and every flipped byte: false or a partial
// context, never a read out of bounds (ASan/UBSan builds run this too).
TEST(Otel, MalformedPayloadsAreRefused) {
  const std::string p = payload();
  for (std::size_t n = 0; n < p.size(); ++n) {
    ProcessContext ctx;
    decode_process_context(p.substr(0, n), ctx);
  }
  for (std::size_t i = 0; i < p.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::string q = p;
      q[i] = static_cast<char>(q[i] ^ (1 << bit));
      ProcessContext ctx;
      decode_process_context(q, ctx);
    }
  ProcessContext ctx;
  EXPECT_FALSE(decode_process_context(std::string("\x0a\xff\xff\xff\xff\x0f", 6), ctx));  // length beyond the end
  EXPECT_FALSE(decode_process_context(std::string("\x0f", 1), ctx));                      // wire type 7
  EXPECT_FALSE(decode_process_context(std::string("\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80", 11), ctx));
}

TEST(Otel, ProcessContextHeader) {
  char h[32] = {};
  std::memcpy(h, "OTEL_CTX", 8);
  const std::uint32_t version = 2, size = 40;
  const std::uint64_t at = 123, ptr = 0x7f0000001000;
  std::memcpy(h + 8, &version, 4);
  std::memcpy(h + 12, &size, 4);
  std::memcpy(h + 16, &at, 8);
  std::memcpy(h + 24, &ptr, 8);
  ProcessContextHeader out;
  ASSERT_TRUE(parse_process_context_header(std::string_view(h, 32), out));
  EXPECT_EQ(out.payload_size, 40u);
  EXPECT_EQ(out.payload, ptr);
  std::memset(h + 16, 0, 8);  // an update in progress
  EXPECT_FALSE(parse_process_context_header(std::string_view(h, 32), out));
  std::memcpy(h + 16, &at, 8);
  h[0] = 'X';
  EXPECT_FALSE(parse_process_context_header(std::string_view(h, 32), out));
  EXPECT_FALSE(parse_process_context_header(std::string_view(h, 16), out));
}

TEST(Otel, SpanAttributes) {
  const std::string bytes = std::string("\x00\x08/predict\x01\x03" "bob", 15);
  const auto attrs = parse_span_attrs(bytes);
  ASSERT_EQ(attrs.size(), 2u);
  EXPECT_EQ(attrs[0].key, 0);
  EXPECT_EQ(attrs[0].value, "/predict");
  EXPECT_EQ(attrs[1].key, 1);
  EXPECT_EQ(attrs[1].value, "bob");
  EXPECT_EQ(parse_span_attrs(bytes.substr(0, 12)).size(), 1u);  // the second one cut: dropped
  EXPECT_TRUE(parse_span_attrs("").empty());
}

TEST(Otel, HexIds) {
  const std::uint8_t id[4] = {0x0a, 0xff, 0x00, 0x10};
  EXPECT_EQ(hex_id(id, 4), "0aff0010");
  std::uint8_t back[4];
  ASSERT_TRUE(parse_hex_id("0aFF0010", back, 4));
  EXPECT_EQ(std::memcmp(back, id, 4), 0);
  EXPECT_FALSE(parse_hex_id("0aff001", back, 4));
  EXPECT_FALSE(parse_hex_id("0aff00g0", back, 4));
}

// A record with a span section after its payload and stack section:
// decoded, written as JSON, read back by report into the same record.
TEST(Otel, SpanOfARecordRoundTrips) {
  alignas(8) std::uint8_t buf[sizeof(ct_call) + 512] = {};
  auto& rec = *reinterpret_cast<ct_call*>(buf);
  rec.type = CT_REC_CALL;
  const Api* api = api_by_symbol("cudaDeviceSynchronize");
  ASSERT_NE(api, nullptr);
  rec.api = api->id;
  rec.parent_api = kNoApi;
  rec.pid = 7;
  rec.tid = 8;
  rec.ts_ns = 1000;
  rec.dur_ns = 50;
  rec.payload_len = 3;
  std::memcpy(rec.comm, "app", 3);
  ct_span span{};
  for (int i = 0; i < 16; ++i) span.trace_id[i] = static_cast<std::uint8_t>(i + 1);
  for (int i = 0; i < 8; ++i) span.span_id[i] = static_cast<std::uint8_t>(0xa0 + i);
  span.valid = 1;
  span.trace_flags = 1;
  const std::string attrs("\x00\x08/predict", 10);
  span.attrs_size = static_cast<std::uint16_t>(attrs.size());
  const ct_section stack{CT_SECTION_STACK, 8};
  const ct_section span_section{CT_SECTION_SPAN, static_cast<std::uint32_t>(CT_ALIGN8(CT_SPAN_BYTES(attrs.size())))};
  std::uint8_t* at = buf + sizeof(ct_call) + CT_ALIGN8(rec.payload_len);
  std::memcpy(at, &stack, sizeof stack);
  at += sizeof stack + stack.len;
  std::memcpy(at, &span_section, sizeof span_section);
  std::memcpy(at + sizeof span_section, &span, sizeof span);
  std::memcpy(at + sizeof span_section + CT_SPAN_SIZE, attrs.data(), attrs.size());
  rec.sections_len = 2 * sizeof(ct_section) + stack.len + span_section.len;
  const std::size_t room = CT_ALIGN8(rec.payload_len) + rec.sections_len;
  EXPECT_TRUE(record_fits(rec, room));
  EXPECT_FALSE(record_fits(rec, room - 1));

  Call c;
  ASSERT_TRUE(decode_call(rec, nullptr, c));
  ASSERT_TRUE(call_span(c).has_span);
  ProcessContext ctx;
  ctx.resource = {{"service.name", "checkout"}};
  ctx.span_keys = {"http.route"};
  call_span(c).process = &ctx;
  user_stack(c).addresses.clear();
  auto out = make_json_writer();
  out->call(c, CallAnalysis{});
  const std::string text = fmt::to_string(*out->buffer());
  const std::string process = text.substr(0, text.find('\n') + 1);
  const std::string line = text.substr(process.size());
  EXPECT_EQ(process,
            "{\"type\":\"process\",\"pid\":7,\"resource\":{\"service.name\":\"checkout\"},\"span_keys\":[\"http.route\"]}\n");
  EXPECT_NE(line.find("\"trace_id\":\"0102030405060708090a0b0c0d0e0f10\",\"span_id\":\"a0a1a2a3a4a5a6a7\","
                      "\"trace_flags\":1,\"span_attrs\":{\"http.route\":\"/predict\"}"),
            std::string::npos)
      << line;

  FacetLines lines;
  TraceLine parsed;
  std::string error;
  ASSERT_TRUE(parsed.parse(std::string_view(process).substr(0, process.size() - 1), error, &lines)) << error;
  EXPECT_EQ(parsed.type(), TraceLine::Type::FacetLine);
  ASSERT_TRUE(parsed.parse(std::string_view(line).substr(0, line.size() - 1), error, &lines)) << error;
  Call back;
  ASSERT_TRUE(decode_call(parsed.record(), nullptr, back));
  for (const Facet* f : call_facets()) f->carry(parsed.facets(), back);  // as a saved trace does
  ASSERT_TRUE(call_span(back).has_span);
  EXPECT_EQ(call_span(back).span.trace_id, call_span(c).span.trace_id);
  EXPECT_EQ(call_span(back).span.span_id, call_span(c).span.span_id);
  EXPECT_EQ(call_span(back).span.trace_flags, 1);
  EXPECT_EQ(call_span(back).span.attrs, attrs);
  ASSERT_NE(call_span(back).process, nullptr) << "the call carries its process line's context";
  EXPECT_EQ(call_span(back).process->span_keys, ctx.span_keys);
  EXPECT_EQ(call_span(back).process->resource, ctx.resource);

  // A process the saved trace forgets: its calls after that carry no published context.
  span_facet().forget_process(lines, 7);
  ASSERT_TRUE(parsed.parse(std::string_view(line).substr(0, line.size() - 1), error, &lines)) << error;
  Call forgotten;
  ASSERT_TRUE(decode_call(parsed.record(), nullptr, forgotten));
  for (const Facet* f : call_facets()) f->carry(parsed.facets(), forgotten);
  ASSERT_NE(call_span(forgotten).process, nullptr) << "its span's attribute names are kept";
  EXPECT_FALSE(call_span(forgotten).process->published);
  EXPECT_EQ(call_span(back).process->resource, ctx.resource) << "a call read before keeps its context";
}

}  // namespace
