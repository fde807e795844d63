// The user stack (--stack): its return addresses, symbolised by the
// recorder (target/stacks.h), innermost first.
#include <nlohmann/json.hpp>

#include "cudatrace/bpf_abi.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/json_fields.h"
#include "cudatrace/options.h"

namespace cudatrace {
namespace {

using namespace json_fields;
using namespace facet_json;

class StackFacet final : public Facet {
 public:
  FacetOption option() const override {
    return {"--stack", "OUTPUT", "Capture and symbolise the user stack of each call (and of leaked allocations)"};
  }
  FacetCapture capture() const override { return {&ct_config::capture_stack}; }

  void decode(const ct_call& rec, const FacetNames* names, Call& c) const override {
    UserStack& stack = user_stack(c);
    stack.addresses = record_stack(rec);  // most records have none: an empty vector, nothing allocated
    // No namer is looked up or called for a record without a stack.
    const StackNamer* name = !stack.addresses.empty() && names ? names->get<StackNamer>(*this) : nullptr;
    if (name)
      stack.frames = (*name)(c.pid, stack.addresses);
    else
      stack.frames.clear();
  }

  bool present(const Call& c) const override { return !user_stack(c).frames.empty(); }

  void write_json(const Call& c, FieldWriter& out) const override {
    out.key(kStack.name());
    write_stack_json(user_stack(c).frames, out);
  }

  void read_json(const nlohmann::json& line, const FacetReading&, Call& c) const override {
    UserStack& stack = user_stack(c);
    stack.frames.clear();
    stack.addresses.clear();
    const auto it = line.find(kStack.name());
    if (it == line.end()) return;
    const std::string frames_error = quoted(kStack.name()) + " is not an array of frames";
    if (!it->is_array() || it->size() > CT_MAX_STACK_FRAMES) throw FacetJsonError{frames_error};
    for (const nlohmann::json& f : *it) {
      if (!f.is_object()) throw FacetJsonError{frames_error};
      StackFrame frame;
      frame.addr = hex_of(field(f, kAddr.name()), "stack " + quoted(kAddr.name()));
      frame.function = optional_string(f, kFunction.name(), "stack " + quoted(kFunction.name()));
      frame.module = optional_string(f, kModule.name(), "stack " + quoted(kModule.name()));
      if (!frame.function.empty()) frame.function_offset = unsigned_of(field(f, kFunctionOffset.name()), "stack offset");
      if (!frame.module.empty()) frame.module_offset = unsigned_of(field(f, kModuleOffset.name()), "stack offset");
      stack.addresses.push_back(frame.addr);
      stack.frames.push_back(std::move(frame));
    }
  }

  void carry(const Call& from, Call& to) const override {
    user_stack(to) = user_stack(from);
  }

  void write_text(const Call& c, std::string&, std::string& below) const override {
    below += stack_lines(user_stack(c).frames, 4);
  }

  // Perfetto shows no stack: its slices have none.
  // Native frames stay in the trace: a span's attributes name the Python call site.
  void otlp_attributes(const Call&, AttributeSink&) const override {}
  void perfetto_args(const Call&, const std::function<void(std::string_view, std::string_view)>&) const override {}
};

}  // namespace

void write_stack_json(const std::vector<StackFrame>& stack, FieldWriter& out) {
  out.begin_array();
  for (const StackFrame& f : stack) {
    out.begin_object();
    out.key(kAddr.name());
    out.hex(f.addr);
    // A part not known: the name and its offset null.
    const auto place = [&](const auto& name, const auto& offset, const std::string& text, std::uint64_t at) {
      out.key(name.name());
      if (text.empty()) {
        out.null();
        out.key(offset.name());
        out.null();
      } else {
        out.string(text);
        out.key(offset.name());
        out.number(at);
      }
    };
    place(kFunction, kFunctionOffset, f.function, f.function_offset);
    place(kModule, kModuleOffset, f.module, f.module_offset);
    out.end_object();
  }
  out.end_array();
}

const Facet& stack_facet() {
  static const StackFacet facet;
  return facet;
}

const UserStack& user_stack(const Call& c) { return facet_form<UserStack>(c, stack_facet()); }

UserStack& user_stack(Call& c) { return facet_form<UserStack>(c, stack_facet()); }

}  // namespace cudatrace
