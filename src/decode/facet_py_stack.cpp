// The Python frames (--py-stack, docs/python.md): the calling thread's,
// innermost first, named by the recorder.
#include <nlohmann/json.hpp>

#include "cudatrace/bpf_abi.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/py_stack.h"
#include "cudatrace/json_fields.h"
#include "cudatrace/options.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

using namespace json_fields;
using namespace facet_json;

// --py-stack's fields (docs/json.md): the Python frames, innermost first.
constexpr auto kPyStack = field("py_stack");
constexpr auto kPyFunc = field("func");
constexpr auto kPyFile = field("file");
constexpr auto kPyLine = field("line");

SourceSite site_of(const PyFrame& f) { return {f.file, f.func, f.line, f.unnamed()}; }

class PyStackFacet final : public Facet {
 public:
  FacetOption option() const override {
    return {"--py-stack", "OUTPUT",
            "Each call of a Python thread carries its Python stack (function, file, line; CPython 3.10-3.13); "
            "--summary adds tables by Python line"};
  }
  // Code objects are named at the read: their frees are watched (ct_py_code_freed) so
  // that a kept identity is dropped. The summary's tables by Python line read every call.
  FacetCapture capture() const override { return {&ct_config::py_stack, "ct_py_code_freed", true}; }

  void decode(const ct_call& rec, const FacetNames* names, Call& c) const override {
    PyStack& frames = py_stack(c);
    const RecordSection s = record_section(rec, CT_SECTION_PY_FRAMES);
    const std::size_t n = s.len / sizeof(ct_py_frame);
    // Whole frames, no more than BPF reads: else not frames BPF wrote.
    const bool whole = n && s.len % sizeof(ct_py_frame) == 0 && n <= CT_MAX_PY_FRAMES;
    const PyFrameNamer* name = whole && names ? names->get<PyFrameNamer>(*this) : nullptr;
    if (!name) {
      frames.clear();
      return;
    }
    // Named over the frames of the call before (their strings' room is reused).
    (*name)(c.pid, reinterpret_cast<const ct_py_frame*>(s.bytes), n, frames);
  }

  bool present(const Call& c) const override { return !py_stack(c).empty(); }

  void write_json(const Call& c, FieldWriter& out) const override {
    out.key(kPyStack.name());
    out.begin_array();
    for (const PyFrame& f : py_stack(c)) {
      out.begin_object();
      out.key(kPyFunc.name());
      if (f.unnamed()) {  // a frame whose code object could not be confirmed
        out.null();
        out.key(kPyFile.name());
        out.null();
        out.key(kPyLine.name());
        out.null();
      } else {
        out.string(f.func);
        out.key(kPyFile.name());
        out.string(f.file);
        out.key(kPyLine.name());
        out.number(static_cast<std::uint64_t>(f.line));
      }
      out.end_object();
    }
    out.end_array();
  }

  void read_json(const nlohmann::json& line, const FacetReading&, Call& c) const override {
    PyStack& frames = py_stack(c);
    frames.clear();
    const auto it = line.find(kPyStack.name());
    if (it == line.end()) return;
    const std::string frames_error = quoted(kPyStack.name()) + " is not an array of Python frames";
    if (!it->is_array() || it->size() > CT_MAX_PY_FRAMES) throw FacetJsonError{frames_error};
    for (const nlohmann::json& f : *it) {
      if (!f.is_object()) throw FacetJsonError{frames_error};
      PyFrame frame;
      frame.func = optional_string(f, kPyFunc.name(), "py_stack " + quoted(kPyFunc.name()));
      frame.file = optional_string(f, kPyFile.name(), "py_stack " + quoted(kPyFile.name()));
      const nlohmann::json& number = field(f, kPyLine.name());  // null: an unnamed frame
      if (!number.is_null()) frame.line = static_cast<int>(unsigned_of(number, "py_stack " + quoted(kPyLine.name())));
      frames.push_back(std::move(frame));
    }
  }

  void carry(const Call& from, Call& to) const override { py_stack(to) = py_stack(from); }

  // The innermost Python frame: the line that made the call.
  void write_text(const Call& c, std::string& line, std::string&) const override {
    line += " py=";
    line += terminal_safe(py_frame_text(py_stack(c).front()));
  }

  // The line that made the call.
  std::string call_site(const Call& c) const override { return "python " + py_frame_text(py_stack(c).front()); }
  std::optional<SourceSite> source_site(const Call& c) const override { return site_of(py_stack(c).front()); }
  // The tables by Python line (analysis/py_sites.h).
  std::vector<std::string_view> analyses() const override { return {"py_sites"}; }

  // "py" the innermost line, "py_stack" every frame, innermost first.
  // OpenTelemetry's code attributes: the innermost frame is the call site.
  void otlp_attributes(const Call& c, AttributeSink& out) const override {
    const PyFrame& site = py_stack(c).front();
    if (!site.func.empty()) out.string("code.function", site.func);
    if (!site.file.empty()) out.string("code.filepath", site.file);
    if (site.line) out.integer("code.lineno", std::int64_t(site.line));
    std::string frames;
    for (const PyFrame& f : py_stack(c)) frames += (frames.empty() ? "" : "\n") + py_frame_text(f);
    out.string("code.stacktrace", frames);
  }
  void perfetto_args(const Call& c,
                     const std::function<void(std::string_view, std::string_view)>& arg) const override {
    arg("py", py_frame_text(py_stack(c).front()));
    std::string frames;
    for (const PyFrame& f : py_stack(c)) frames += (frames.empty() ? "" : "\n") + py_frame_text(f);
    arg("py_stack", frames);
  }
};

}  // namespace

const Facet& py_stack_facet() {
  static const PyStackFacet facet;
  return facet;
}

const PyStack& py_stack(const Call& c) { return facet_form<PyStack>(c, py_stack_facet()); }

PyStack& py_stack(Call& c) { return facet_form<PyStack>(c, py_stack_facet()); }

std::string py_frame_text(const PyFrame& f) { return source_site_text(site_of(f)); }

}  // namespace cudatrace
