#include "cudatrace/render/json.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>

#include "json_checker.h"

namespace {

using cudatrace::append_json_string;
using cudatrace_test::JsonParser;
using cudatrace_test::JsonValue;

std::string quote(std::string_view s) {
  fmt::memory_buffer buf;
  append_json_string(buf, s);
  return std::string(buf.data(), buf.size());
}

// The string a JSON string literal decodes to; fails the test if it is not valid JSON.
std::string decoded(const std::string& json) {
  JsonValue v;
  std::string err;
  EXPECT_TRUE(JsonParser::parse(json, v, err)) << err << " in " << json;
  EXPECT_EQ(v.kind, JsonValue::String) << json;
  return v.text;
}

// ---- The checker itself, so a passing parse means something -------------

TEST(JsonChecker, AcceptsValidDocuments) {
  EXPECT_TRUE(JsonParser::valid(R"({"a":[1,-2.5e3,0,true,false,null],"b":{"c":"\u00e9\ud83d\ude00\n"}})"));
  EXPECT_TRUE(JsonParser::valid(" \"x\" "));
  EXPECT_TRUE(JsonParser::valid("{}"));
  EXPECT_TRUE(JsonParser::valid("[]"));
}

TEST(JsonChecker, RejectsInvalidDocuments) {
  EXPECT_FALSE(JsonParser::valid("\"abc"));
  EXPECT_FALSE(JsonParser::valid("\"a\nb\""));           // raw control byte
  EXPECT_FALSE(JsonParser::valid("\"a\x7f\xff\""));       // invalid UTF-8
  EXPECT_FALSE(JsonParser::valid("\"\xc0\x80\""));        // overlong
  EXPECT_FALSE(JsonParser::valid("\"\xed\xa0\x80\""));    // surrogate
  EXPECT_FALSE(JsonParser::valid(R"("\ud800")"));         // lone surrogate escape
  EXPECT_FALSE(JsonParser::valid(R"("\x41")"));           // not a JSON escape
  EXPECT_FALSE(JsonParser::valid(R"({"a":1,})"));
  EXPECT_FALSE(JsonParser::valid("[1,]"));
  EXPECT_FALSE(JsonParser::valid("01"));
  EXPECT_FALSE(JsonParser::valid("nan"));
  EXPECT_FALSE(JsonParser::valid("inf"));
  EXPECT_FALSE(JsonParser::valid("1."));
  EXPECT_FALSE(JsonParser::valid("{} {}"));
  EXPECT_FALSE(JsonParser::valid(""));
  EXPECT_FALSE(JsonParser::valid("{'a':1}"));
}

TEST(JsonChecker, DecodesEscapes) {
  JsonValue v;
  std::string err;
  ASSERT_TRUE(JsonParser::parse(R"("a\"\\\/\n\u0001\u00e9\ud83d\ude00")", v, err)) << err;
  EXPECT_EQ(v.text, "a\"\\/\n\x01\xc3\xa9\xf0\x9f\x98\x80");
}

// ---- append_json_string --------------------------------------------------

// Field names that are identifiers are written as they are; any other name
// is escaped like a value, so that no name can break the line.
TEST(JsonFieldWriter, KeysAreIdentifiersOrEscaped) {
  fmt::memory_buffer buf;
  cudatrace::JsonFieldWriter w(buf);
  w.begin_object();
  w.key("py_stack");
  w.number(1);
  w.key("service.name");
  w.string("a");
  w.key("a\"b\\c\n");
  w.null();
  w.key("");
  w.number(2);
  w.end_object();
  const std::string json(buf.data(), buf.size());
  EXPECT_EQ(json, R"({"py_stack":1,"service.name":"a","a\"b\\c\n":null,"":2})");
  JsonValue v;
  std::string err;
  EXPECT_TRUE(JsonParser::parse(json, v, err)) << err << " in " << json;
}

TEST(AppendJsonString, EmptyAndPlainAscii) {
  EXPECT_EQ(quote(""), "\"\"");
  EXPECT_EQ(quote("cudaMalloc"), "\"cudaMalloc\"");
  EXPECT_EQ(quote("a b/c'd"), "\"a b/c'd\"");
}

TEST(AppendJsonString, EscapesQuotesAndBackslashes) {
  EXPECT_EQ(quote("a\"b"), R"("a\"b")");
  EXPECT_EQ(quote("a\\b"), R"("a\\b")");
  EXPECT_EQ(quote("\"\\\""), R"("\"\\\"")");
  EXPECT_EQ(quote("\\"), R"("\\")");
}

TEST(AppendJsonString, EscapesNewlineCarriageReturnTab) {
  EXPECT_EQ(quote("a\nb"), R"("a\nb")");
  EXPECT_EQ(quote("a\rb"), R"("a\rb")");
  EXPECT_EQ(quote("a\tb"), R"("a\tb")");
  EXPECT_EQ(quote("\r\n\t"), R"("\r\n\t")");
}

TEST(AppendJsonString, EscapesOtherControlBytesAsLowercaseU4) {
  EXPECT_EQ(quote("\x01"), R"("\u0001")");
  EXPECT_EQ(quote("\x08"), R"("\u0008")");  // backspace: \u form, not \b
  EXPECT_EQ(quote("\x0c"), R"("\u000c")");
  EXPECT_EQ(quote("\x1b[0m"), R"("\u001b[0m")");
  EXPECT_EQ(quote("\x1f"), R"("\u001f")");
  EXPECT_EQ(quote("\x7f"), R"("\u007f")");
  EXPECT_EQ(quote(" ~"), R"(" ~")");  // 0x20 and 0x7e are printable
}

TEST(AppendJsonString, EmbeddedNulIsEscapedNotTruncated) {
  EXPECT_EQ(quote(std::string_view("a\0b", 3)), R"("a\u0000b")");
  EXPECT_EQ(quote(std::string_view("\0", 1)), R"("\u0000")");
  EXPECT_EQ(decoded(quote(std::string_view("a\0b", 3))), std::string("a\0b", 3));
}

TEST(AppendJsonString, KeepsValidMultiByteUtf8) {
  EXPECT_EQ(quote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");              // é  (2 bytes)
  EXPECT_EQ(quote("\xe4\xb8\xad"), "\"\xe4\xb8\xad\"");            // 中 (3 bytes)
  EXPECT_EQ(quote("\xf0\x9f\x98\x80"), "\"\xf0\x9f\x98\x80\"");    // 😀 (4 bytes)
  EXPECT_EQ(quote("\xc2\x80"), "\"\xc2\x80\"");                    // U+0080, smallest 2-byte
  EXPECT_EQ(quote("\xdf\xbf"), "\"\xdf\xbf\"");                    // U+07FF
  EXPECT_EQ(quote("\xe0\xa0\x80"), "\"\xe0\xa0\x80\"");            // U+0800, smallest 3-byte
  EXPECT_EQ(quote("\xed\x9f\xbf"), "\"\xed\x9f\xbf\"");            // U+D7FF, just below surrogates
  EXPECT_EQ(quote("\xee\x80\x80"), "\"\xee\x80\x80\"");            // U+E000, just above surrogates
  EXPECT_EQ(quote("\xef\xbf\xbf"), "\"\xef\xbf\xbf\"");            // U+FFFF
  EXPECT_EQ(quote("\xf0\x90\x80\x80"), "\"\xf0\x90\x80\x80\"");    // U+10000, smallest 4-byte
  EXPECT_EQ(quote("\xf4\x8f\xbf\xbf"), "\"\xf4\x8f\xbf\xbf\"");    // U+10FFFF, the largest
}

TEST(AppendJsonString, LoneInvalidByteBecomesReplacementEscape) {
  EXPECT_EQ(quote("\xff"), R"("\ufffd")");
  EXPECT_EQ(quote("a\xff" "b"), R"("a\ufffdb")");
  EXPECT_EQ(quote("\xfe"), R"("\ufffd")");
  EXPECT_EQ(quote("\x80"), R"("\ufffd")");  // continuation byte without a lead
  EXPECT_EQ(quote("\xf8\x88\x80\x80\x80"), R"("\ufffd\ufffd\ufffd\ufffd\ufffd")");  // 5-byte form
}

TEST(AppendJsonString, TruncatedSequenceAtEndIsReplacedBytewise) {
  EXPECT_EQ(quote("a\xe4\xb8"), R"("a\ufffd\ufffd")");
  EXPECT_EQ(quote("\xc3"), R"("\ufffd")");
  EXPECT_EQ(quote("\xf0\x9f\x98"), R"("\ufffd\ufffd\ufffd")");
}

TEST(AppendJsonString, TruncatedSequenceInTheMiddleResynchronises) {
  // E4 B8 then a complete 中: the broken pair is replaced, the character kept.
  EXPECT_EQ(quote("\xe4\xb8\xe4\xb8\xad"), "\"\\ufffd\\ufffd\xe4\xb8\xad\"");
  EXPECT_EQ(quote("\xe4" "ab"), R"("\ufffdab")");
  EXPECT_EQ(quote("\xc3\n"), R"("\ufffd\n")");
}

TEST(AppendJsonString, OverlongFormsAreReplaced) {
  EXPECT_EQ(quote("\xc0\x80"), R"("\ufffd\ufffd")");          // overlong NUL
  EXPECT_EQ(quote("\xc1\xbf"), R"("\ufffd\ufffd")");          // overlong 0x7f
  EXPECT_EQ(quote("\xe0\x80\x80"), R"("\ufffd\ufffd\ufffd")");
  EXPECT_EQ(quote("\xe0\x9f\xbf"), R"("\ufffd\ufffd\ufffd")");  // U+07FF in 3 bytes
  EXPECT_EQ(quote("\xf0\x80\x80\x80"), R"("\ufffd\ufffd\ufffd\ufffd")");
  EXPECT_EQ(quote("\xf0\x8f\xbf\xbf"), R"("\ufffd\ufffd\ufffd\ufffd")");  // U+FFFF in 4 bytes
}

TEST(AppendJsonString, SurrogatesAndOutOfRangeAreReplaced) {
  EXPECT_EQ(quote("\xed\xa0\x80"), R"("\ufffd\ufffd\ufffd")");  // U+D800
  EXPECT_EQ(quote("\xed\xbf\xbf"), R"("\ufffd\ufffd\ufffd")");  // U+DFFF
  EXPECT_EQ(quote("\xf4\x90\x80\x80"), R"("\ufffd\ufffd\ufffd\ufffd")");  // U+110000
}

TEST(AppendJsonString, AppendsWithoutClearingTheBuffer) {
  fmt::memory_buffer buf;
  buf.append(std::string_view("{\"k\":"));
  append_json_string(buf, "v\n");
  buf.push_back('}');
  const std::string s(buf.data(), buf.size());
  EXPECT_EQ(s, R"({"k":"v\n"})");
  EXPECT_TRUE(JsonParser::valid(s));
}

TEST(AppendJsonString, OutputsParseAndDecodeBack) {
  const std::string cases[] = {"plain", "q\"uote", "back\\slash", "nl\ncr\rtab\t", std::string("nul\0in", 6),
                               "\x01\x02\x1f\x7f", "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"};
  for (const std::string& c : cases) EXPECT_EQ(decoded(quote(c)), c);
  // Invalid input still parses, with U+FFFD where the bad bytes were.
  EXPECT_EQ(decoded(quote("a\xff" "b")), "a\xef\xbf\xbd" "b");
  EXPECT_EQ(decoded(quote("\xed\xa0\x80")), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(decoded(quote("\xc0\x80")), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(decoded(quote("x\xe4\xb8")), "x\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(AppendJsonString, EverySingleByteGivesValidJson) {
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    const std::string out = quote(std::string_view(&c, 1));
    EXPECT_TRUE(JsonParser::valid(out)) << "byte " << b << ": " << out;
    EXPECT_EQ(out.find('\n'), std::string::npos) << "byte " << b;
  }
}

TEST(AppendJsonString, RandomBytesAlwaysGiveValidJsonAndValidUtf8RoundTrips) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> len_dist(0, 24), byte_dist(0, 255);
  const unsigned char interesting[] = {0x00, 0x0a, 0x22, 0x5c, 0x7f, 0x80, 0xbf, 0xc0, 0xc2, 0xe0,
                                       0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff, 'a', 0x9f, 0xa0, 0x8f};
  std::uniform_int_distribution<int> pick(0, sizeof interesting - 1);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s(len_dist(rng), '\0');
    for (char& ch : s) ch = static_cast<char>(iter % 2 ? byte_dist(rng) : interesting[pick(rng)]);
    const std::string out = quote(s);
    JsonValue v;
    std::string err;
    ASSERT_TRUE(JsonParser::parse(out, v, err)) << err << " for " << ::testing::PrintToString(s);
    ASSERT_EQ(out.find('\n'), std::string::npos);
    // Valid UTF-8 (control bytes included) survives unchanged.
    if (JsonParser::valid_utf8(s)) {
      ASSERT_EQ(v.text, s) << ::testing::PrintToString(s);
    }
  }
}

}  // namespace
