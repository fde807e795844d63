// A call record's tagged sections (bpf_abi.h: struct ct_section): the one
// lookup the facets find theirs by (record_section) and the reader's check of
// a record (record_fits), on sections as BPF writes them and malformed ones.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/otel.h"
#include "cudatrace/decode/py_stack.h"
#include "record_builder.h"

namespace {

using namespace cudatrace;
using cudatrace_test::add_section;
using cudatrace_test::RecBuf;

// The bytes after the struct ct_call that the ring buffer gives a record: an
// unaligned payload is sent as it is when no section follows.
std::size_t sent_bytes(const ct_call& rec) {
  return rec.sections_len ? CT_ALIGN8(std::size_t(rec.payload_len)) + rec.sections_len : rec.payload_len;
}

std::vector<std::uint8_t> bytes_of(const RecordSection& s) { return {s.bytes, s.bytes + s.len}; }

template <typename T>
std::vector<std::uint8_t> bytes_of(const T& v) {
  std::vector<std::uint8_t> out(sizeof v);
  std::memcpy(out.data(), &v, sizeof v);
  return out;
}

// A span with `attrs` attribute bytes, as read_span writes it: padded with zeros to 8 bytes.
std::vector<std::uint8_t> span_bytes(const std::string& attrs) {
  ct_span s{};
  for (int i = 0; i < 16; ++i) s.trace_id[i] = static_cast<std::uint8_t>(i + 1);
  for (int i = 0; i < 8; ++i) s.span_id[i] = static_cast<std::uint8_t>(0xa0 + i);
  s.valid = 1;
  s.attrs_size = static_cast<std::uint16_t>(attrs.size());
  std::vector<std::uint8_t> out(CT_ALIGN8(CT_SPAN_BYTES(attrs.size())));
  std::memcpy(out.data(), &s, sizeof s);
  std::memcpy(out.data() + sizeof s, attrs.data(), attrs.size());
  return out;
}

// A cuModuleGetFunction record with a 7-byte payload ("kernel").
std::unique_ptr<RecBuf> record() {
  auto b = std::make_unique<RecBuf>();
  cudatrace_test::init_rec(*b, "cuModuleGetFunction");
  cudatrace_test::set_string_payload(*b, "kernel");
  return b;
}

const std::uint64_t kStack[] = {0x401234, 0x405678};
const ct_py_frame kPyFrames[] = {{0x7f0010, 4, 11}, {0x7f0020, 8, 22}};

// What the facets make of a record, named as a live source names it: the
// Python frames by their code objects' addresses.
struct Decoded {
  bool ok = false;
  std::vector<std::uint64_t> stack;
  std::vector<std::uint64_t> py_codes;
  bool has_span = false;
  std::string span_attrs;
};

Decoded decode(const ct_call& rec) {
  FacetNames names;
  names.set(py_stack_facet(), PyFrameNamer([](std::uint32_t, const ct_py_frame* frames, std::size_t n, PyStack& out) {
    for (std::size_t i = 0; i < n; ++i) {
      PyFrame& f = out.emplace_back();
      f.func = "f";
      f.file = "x.py";
      f.line = static_cast<int>(frames[i].code);
    }
  }));
  Call c;
  Decoded d;
  d.ok = decode_call(rec, nullptr, c, nullptr, &names);
  d.stack = user_stack(c).addresses;
  for (const PyFrame& f : py_stack(c)) d.py_codes.push_back(static_cast<std::uint64_t>(f.line));
  d.has_span = call_span(c).has_span;
  d.span_attrs = std::string(call_span(c).span.attrs);
  return d;
}

// No section is found, and the call decodes with none of its contexts.
void expect_no_contexts(const ct_call& rec) {
  for (std::uint32_t kind : {CT_SECTION_STACK, CT_SECTION_PY_FRAMES, CT_SECTION_SPAN})
    EXPECT_EQ(record_section(rec, kind).bytes, nullptr) << kind;
  const Decoded d = decode(rec);
  ASSERT_TRUE(d.ok);
  EXPECT_TRUE(d.stack.empty());
  EXPECT_TRUE(d.py_codes.empty());
  EXPECT_FALSE(d.has_span);
}

TEST(RecordSections, ARecordWithoutSectionsIsItsPayload) {
  auto b = record();
  EXPECT_EQ(b->rec.sections_len, 0u);
  EXPECT_TRUE(record_fits(b->rec, 7));
  EXPECT_FALSE(record_fits(b->rec, 6));
  expect_no_contexts(b->rec);
}

TEST(RecordSections, EachIsFoundByItsKindInAnyOrder) {
  auto b = record();
  const std::string attrs("\x00\x08/predict", 10);
  const std::vector<std::uint8_t> span = span_bytes(attrs);
  const std::uint64_t unknown = 0x1122334455667788;  // a kind this build does not read: skipped
  add_section(*b, CT_SECTION_SPAN, span.data(), span.size());
  add_section(*b, 9, &unknown, sizeof unknown);
  add_section(*b, CT_SECTION_PY_FRAMES, kPyFrames, sizeof kPyFrames);
  add_section(*b, CT_SECTION_STACK, kStack, sizeof kStack);
  EXPECT_EQ(b->rec.sections_len, 4 * sizeof(ct_section) + span.size() + 8 + sizeof kPyFrames + sizeof kStack);
  EXPECT_TRUE(record_fits(b->rec, sent_bytes(b->rec)));
  EXPECT_FALSE(record_fits(b->rec, sent_bytes(b->rec) - 1));

  EXPECT_EQ(bytes_of(record_section(b->rec, CT_SECTION_SPAN)), span);
  EXPECT_EQ(bytes_of(record_section(b->rec, 9)), bytes_of(unknown));
  EXPECT_EQ(bytes_of(record_section(b->rec, CT_SECTION_PY_FRAMES)), bytes_of(kPyFrames));
  EXPECT_EQ(bytes_of(record_section(b->rec, CT_SECTION_STACK)), bytes_of(kStack));
  EXPECT_EQ(record_section(b->rec, 10).bytes, nullptr);

  const Decoded d = decode(b->rec);
  ASSERT_TRUE(d.ok);
  EXPECT_EQ(d.stack, (std::vector<std::uint64_t>{0x401234, 0x405678}));
  EXPECT_EQ(d.py_codes, (std::vector<std::uint64_t>{0x7f0010, 0x7f0020}));
  EXPECT_TRUE(d.has_span);
  EXPECT_EQ(d.span_attrs, attrs);
}

// A copy of a record at the end of a page whose next page cannot be read: a
// read past the bytes the ring buffer gave it faults.
class AtPageEnd {
 public:
  explicit AtPageEnd(const ct_call& rec) {
    const std::size_t n = CT_ALIGN8(sizeof(ct_call) + sent_bytes(rec));
    void* m = mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(m, MAP_FAILED);
    if (m == MAP_FAILED) return;
    mem_ = static_cast<std::uint8_t*>(m);
    EXPECT_EQ(mprotect(mem_ + page_, page_, PROT_NONE), 0);
    rec_ = reinterpret_cast<ct_call*>(mem_ + page_ - n);
    std::memcpy(rec_, &rec, n);
  }
  ~AtPageEnd() {
    if (mem_) munmap(mem_, 2 * page_);
  }
  AtPageEnd(const AtPageEnd&) = delete;
  AtPageEnd& operator=(const AtPageEnd&) = delete;
  const ct_call* rec() const { return rec_; }

 private:
  const std::size_t page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::uint8_t* mem_ = nullptr;
  ct_call* rec_ = nullptr;
};

// A record whose sections are malformed is rejected whole, and a facet
// decoding it anyway finds nothing; no byte past sections_len is read.
void expect_malformed(const ct_call& built) {
  const AtPageEnd copy(built);
  ASSERT_NE(copy.rec(), nullptr);
  const ct_call& rec = *copy.rec();
  EXPECT_FALSE(record_fits(rec, sent_bytes(rec)));
  EXPECT_FALSE(record_fits(rec, sent_bytes(rec) + 64));  // whatever room the ring gave it
  expect_no_contexts(rec);
}

TEST(RecordSections, ALengthPastTheirEndIsRejected) {
  auto b = record();
  const std::vector<std::uint8_t> span = span_bytes("");
  add_section(*b, CT_SECTION_SPAN, span.data(), span.size());
  add_section(*b, CT_SECTION_STACK, kStack, sizeof kStack);
  b->rec.sections_len -= 8;  // the stack's last frame is not there
  expect_malformed(b->rec);
}

TEST(RecordSections, AHeaderCutShortIsRejected) {
  auto b = record();
  add_section(*b, CT_SECTION_STACK, kStack, sizeof kStack);
  b->rec.sections_len = 4;
  expect_malformed(b->rec);
}

TEST(RecordSections, SectionsPastTheRecordDoNotFit) {
  auto b = record();
  add_section(*b, CT_SECTION_STACK, kStack, sizeof kStack);
  EXPECT_TRUE(record_fits(b->rec, sent_bytes(b->rec)));
  EXPECT_FALSE(record_fits(b->rec, sent_bytes(b->rec) - 8));
  EXPECT_FALSE(record_fits(b->rec, b->rec.payload_len));
}

TEST(RecordSections, AKindTwiceIsRejected) {
  auto b = record();
  add_section(*b, CT_SECTION_STACK, kStack, sizeof kStack);
  add_section(*b, CT_SECTION_STACK, kStack, 8);
  expect_malformed(b->rec);
}

TEST(RecordSections, ALengthNotAMultipleOfEightIsRejected) {
  auto b = record();
  add_section(*b, CT_SECTION_STACK, kStack, 12);
  expect_malformed(b->rec);
}

TEST(RecordSections, KindZeroOrOutOfRangeIsRejected) {
  for (std::uint32_t kind : {0u, std::uint32_t(CT_SECTION_KINDS), 0xffffffffu}) {
    auto b = record();
    add_section(*b, CT_SECTION_STACK, kStack, sizeof kStack);
    add_section(*b, kind, kStack, 8);
    SCOPED_TRACE(kind);
    expect_malformed(b->rec);
  }
}

// Well-formed sections whose bytes are not what their kind holds: the record
// fits, the facet is absent.
TEST(RecordSections, AFacetWhoseSectionIsNotItsKindsIsAbsent) {
  auto b = record();
  std::vector<std::uint8_t> span = span_bytes(std::string("\x00\x08/predict", 10));
  span.resize(CT_SPAN_SIZE + 8);  // attrs_size says 10 bytes of attributes, 8 follow
  const std::uint8_t short_span[24] = {};
  const std::uint8_t frame_and_a_half[40] = {};
  add_section(*b, CT_SECTION_PY_FRAMES, frame_and_a_half, sizeof frame_and_a_half);
  add_section(*b, CT_SECTION_SPAN, span.data(), span.size());
  const AtPageEnd copy(b->rec);
  ASSERT_NE(copy.rec(), nullptr);
  ASSERT_TRUE(record_fits(*copy.rec(), sent_bytes(b->rec)));
  const Decoded d = decode(*copy.rec());
  ASSERT_TRUE(d.ok);
  EXPECT_FALSE(d.has_span);
  EXPECT_TRUE(d.py_codes.empty());

  b = record();
  add_section(*b, CT_SECTION_SPAN, short_span, sizeof short_span);
  const AtPageEnd short_copy(b->rec);
  ASSERT_NE(short_copy.rec(), nullptr);
  ASSERT_TRUE(record_fits(*short_copy.rec(), sent_bytes(b->rec)));
  EXPECT_FALSE(decode(*short_copy.rec()).has_span);
}

}  // namespace
