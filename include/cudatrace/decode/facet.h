// Facets: the contexts a call may carry besides its arguments (the user
// stack, the Python frames, the OpenTelemetry span). Each facet is one file
// (src/decode/facet_*.cpp) that owns its option and what it asks the record
// stage to capture, decodes and names its part of a record into its slot of
// the call (its form and accessor declared in its own header), and knows its
// JSON fields (written, and read back by `cudatrace report`), its text form,
// its Perfetto args and the analyses of it. The writers, the pipeline and
// the summaries loop over call_facets() and name none of them; a new writer
// (OTLP attributes) does the same. docs/design.md, "Adding a per-call
// context", says how to add one.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <any>
#include <array>
#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cudatrace/bpf_abi.h"
#include "cudatrace/decode/decode.h"

namespace cudatrace {

class Facet;
struct Options;

// A facet's decoded form on a call, for the accessors its header declares
// (py_stack(c), call_span(c), user_stack(c)): one Form per facet. An empty
// slot reads as a default Form.
template <class Form>
const Form& facet_form(const Call& c, const Facet& f);
template <class Form>
Form& facet_form(Call& c, const Facet& f);

// A facet's switch on the command line: cli/main.cpp adds every facet's to
// its --help group; it sets the facet's bit of Options::facets.
struct FacetOption {
  const char* flag;       // "--py-stack"
  const char* help_group;  // "OUTPUT"
  const char* help;
  bool sets = true;  // whether the flag turns it on; false: it is on unless the flag is given
  // Whether it rides on call records: refused where none is sent
  // (--prometheus), and named in that refusal.
  bool needs_records = true;
};

// What a facet asks the record stage for while it is on (record/bpf_object.cpp
// and the driver read it; none names a facet).
struct FacetCapture {
  // The BPF setting (bpf_abi.h) that has each record carry it.
  __u8 ct_config::*setting;
  // A BPF program only it needs (by name): loaded and attached as the
  // others when it is on, not loaded when it is off. Null: none.
  const char* program = nullptr;
  // Whether an analysis of it reads each call: a summary then has every
  // call's record, not only BPF's counts.
  bool every_record = false;
};

// How a live source names what BPF captured, while the record is decoded:
// each facet's namer, of a type its own header declares, set by the record
// stage (the recorder's symbolizer, a process capture). Unset: the facet
// keeps the raw form (addresses) or nothing.
class FacetNames {
 public:
  template <class Namer>
  void set(const Facet& f, Namer namer);
  template <class Namer>
  const Namer* get(const Facet& f) const;

 private:
  std::array<std::any, kMaxFacets> namers_;
};

// Where a facet writes its JSON fields: generic values, each writer's own
// JSON. key() opens the next field of the object being written (the call's
// line, or one the facet opened).
class FieldWriter {
 public:
  virtual ~FieldWriter() = default;
  virtual void key(std::string_view name) = 0;
  virtual void string(std::string_view v) = 0;
  virtual void number(std::uint64_t v) = 0;
  virtual void hex(std::uint64_t v) = 0;  // "0x..."
  virtual void null() = 0;
  virtual void begin_array() = 0;
  virtual void end_array() = 0;
  virtual void begin_object() = 0;
  virtual void end_object() = 0;
};

// Where a facet puts its OpenTelemetry span attributes (--otlp, docs/otlp.md).
class AttributeSink {
 public:
  virtual ~AttributeSink() = default;
  virtual void string(std::string_view key, std::string_view value) = 0;
  virtual void integer(std::string_view key, std::int64_t value) = 0;
};

// What a saved trace keeps for the facets from line to line (what their
// lines of their own said, Facet::line_type), each facet's in its slot
// (Facet::slot), of a type its own file declares.
class FacetLines {
 public:
  template <class T>
  T& of(const Facet& f);

 private:
  std::array<std::any, kMaxFacets> state_;
};

// What a facet reading a call line back may need besides the line.
struct FacetReading {
  std::uint32_t pid = 0;
  FacetLines& lines;
};

// Where in the program's own source a call was made, as a facet that knows
// says (the innermost Python frame): the tables by call site read it
// (analysis/py_sites.h). Views into the call.
struct SourceSite {
  std::string_view file, func;
  int line = 0;     // 0: unknown
  bool unnamed = false;  // its code could not be named
};
// "path/to/file.py:412 func": a site's key (the whole path).
std::string source_site_key(const SourceSite& s);
// "file.py:412 func" with the file's base name; "?" for an unnamed site.
std::string source_site_text(const SourceSite& s);

// A trace line that is not what was written (a field missing or of another
// kind): one phrase, thrown by read_json and the facet_json readers.
struct FacetJsonError {
  std::string what;
};

class Facet {
 public:
  virtual ~Facet() = default;
  // Where it keeps its decoded form in Call::facets, its namer in
  // FacetNames and its bit in Options::facets: one per facet, given as each
  // is made. Asked for every record, so kept rather than looked up.
  std::size_t slot() const { return slot_; }
  virtual FacetOption option() const = 0;
  virtual FacetCapture capture() const = 0;
  // Whether the command line turned it on.
  bool on(const Options& opts) const;
  // Decodes and names its part of a record (bpf_abi.h), or clears it from
  // `c` when the record has none. The record fits (record_fits).
  virtual void decode(const ct_call& rec, const FacetNames* names, Call& c) const = 0;
  // Whether the call carries this facet.
  virtual bool present(const Call& c) const = 0;
  // Its JSON fields, after the call's others (docs/json.md).
  virtual void write_json(const Call& c, FieldWriter& out) const = 0;
  // Reads its fields back from a call line into `c` (nothing when the line
  // has none). Bytes the decoded form points at are kept in the form.
  virtual void read_json(const nlohmann::json& line, const FacetReading& in, Call& c) const = 0;
  // Gives `to` (the call decoded later from the same line) what read_json
  // read into `from`; views stay on `from`'s bytes.
  virtual void carry(const Call& from, Call& to) const = 0;
  // The type of its lines of their own in a JSON trace (written before the
  // calls they concern); empty: none.
  virtual std::string_view line_type() const { return {}; }
  // Reads a line of its own type into `lines`; throws FacetJsonError.
  virtual void read_line(const nlohmann::json&, FacetLines&) const {}
  // A process a saved trace forgets: what `lines` keeps for it goes.
  virtual void forget_process(FacetLines&, std::uint32_t) const {}
  // Its text form: appended to the call's line, and lines below it.
  virtual void write_text(const Call& c, std::string& line, std::string& below) const = 0;
  // Its attributes on the call's OTLP span.
  virtual void otlp_attributes(const Call& c, AttributeSink& out) const = 0;
  // Where it says the call was made, for a warning about the call (after
  // the program's call site, in parentheses); empty: it says nothing.
  virtual std::string call_site(const Call&) const { return {}; }
  // Where in the program's source it says the call was made; none: it does
  // not say.
  virtual std::optional<SourceSite> source_site(const Call&) const { return std::nullopt; }
  // The analyses of its context (analysis/facet_analysis.h), by name.
  virtual std::vector<std::string_view> analyses() const { return {}; }
  // Its Perfetto args (string values).
  virtual void perfetto_args(const Call& c,
                             const std::function<void(std::string_view key, std::string_view value)>& arg) const = 0;

 protected:
  Facet();

 private:
  std::size_t slot_;
};

template <class Form>
const Form& facet_form(const Call& c, const Facet& f) {
  static const Form none;
  const Form* form = c.facet<Form>(f.slot());
  return form ? *form : none;
}
template <class Form>
Form& facet_form(Call& c, const Facet& f) {
  return c.facet<Form>(f.slot());
}
template <class Namer>
void FacetNames::set(const Facet& f, Namer namer) {
  namers_[f.slot()] = std::move(namer);
}
template <class Namer>
const Namer* FacetNames::get(const Facet& f) const {
  return slot_value<Namer>(namers_[f.slot()]);
}
template <class T>
T& FacetLines::of(const Facet& f) {
  return slot_value_or_new<T>(state_[f.slot()]);
}

// Reading a call line's fields; each throws FacetJsonError naming the field.
namespace facet_json {
const nlohmann::json& field(const nlohmann::json& obj, std::string_view key);
std::uint64_t unsigned_of(const nlohmann::json& v, const std::string& what);
const std::string& string_of(const nlohmann::json& v, const std::string& what);
std::uint64_t hex_of(const nlohmann::json& v, const std::string& what);
// The string at `key`; empty when absent or null.
std::string optional_string(const nlohmann::json& obj, std::string_view key, const std::string& what);
// "name": how an error names a field.
std::string quoted(std::string_view name);
}  // namespace facet_json

// Every facet, in the order the outputs write them.
const std::vector<const Facet*>& call_facets();
// The site of the first facet of `c` that gives one.
std::optional<SourceSite> source_site_of(const Call& c);
// Options::facets before the command line: the facets whose option turns them off.
std::bitset<kMaxFacets> facets_on_by_default();
// Turns facet `f` on or off in `opts`, as its option does.
void set_facet(Options& opts, const Facet& f, bool on);

// A user stack's frames as JSON (the stack facet's; leak sites in summaries).
void write_stack_json(const std::vector<StackFrame>& stack, FieldWriter& out);

}  // namespace cudatrace
