// Kernel names from a module's registration code, for host stubs that have no
// symbol. nvcc writes, for every kernel of a translation unit, a call
//
//   __cudaRegisterFunction(handle, (const char*)stub, "mangled", "mangled", -1, 0, 0, 0, 0, 0)
//
// which the host compiler turns into `lea stub(%rip),%rsi` and
// `lea mangled(%rip),%rdx` shortly before the call (through the PLT, or
// `call *GOT(%rip)`, or directly where the runtime is linked in). A library
// built with hidden visibility and stripped (PyTorch's libtorch_cuda.so)
// keeps those calls: they are how the runtime itself learns the names.
// cudatrace reads them when it attaches to a process whose kernels were
// registered before it came (-p), and so never saw the registration calls.
// A runtime linked in statically and stripped (cuBLASLt's) has no symbol for
// its __cudaRegisterFunction: the function is known by the shape of its
// calls instead, `lea stub(%rip),%rsi`, `mov $-1,%r8d` and the name in %rdx
// (or loaded into %rcx and copied to %rdx), the one function called that
// way most, at least twice (a tie with a single look-alike call is no
// answer; and a wrong one would only be asked about stubs, which it never
// registered).
// Since CUDA 12.x a stub launches through a handle that it gets once,
// `__cudaGetKernel(&__handle, stub)`, and keeps in a static variable: those
// calls say which variable holds the handle of which kernel.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "cudatrace/target/elf_file.h"
#include "cudatrace/target/handle_names.h"

namespace cudatrace {

namespace {

constexpr const char* kRegister = "__cudaRegisterFunction";
constexpr const char* kGetKernel = "__cudaGetKernel";
// How far before a registration call its argument loads are looked for:
// the ten arguments' set-up (four pushes, six registers) is under 64 bytes.
constexpr std::size_t kLookBack = 80;
constexpr std::size_t kMaxName = 4096;

// The PLT entries (16 bytes each) of `section` that jump through one of `slots`.
void add_plt_stubs(const ElfFile& elf, std::string_view section, const std::unordered_set<std::uint64_t>& slots,
                   std::unordered_set<std::uint64_t>& stubs) {
  const auto s = elf.section(section);
  if (!s) return;
  for (std::uint64_t entry = s->address; entry + 16 <= s->address + s->size; entry += 16)
    if (slots.count(elf.plt_stub_slot(entry))) stubs.insert(entry);
}

// Calls to the function `callee` (through the PLT, `call *GOT(%rip)` or
// directly) in .text, each with the targets of the last `lea disp(%rip)` into
// %rsi and into the second register wanted (%rdx or %rdi) before it, since
// the previous such call.
enum : unsigned char { kRcx = 0x0d, kRdx = 0x15, kRsi = 0x35, kRdi = 0x3d };  // ModRM of lea disp(%rip),reg
constexpr unsigned kMinStaticRegistrations = 2;

// The kernel-like name NUL-terminated at `vaddr` of `elf`, or "".
std::string_view name_at(const ElfFile& elf, std::uint64_t vaddr) {
  const std::string_view bytes = elf.bytes_at(vaddr).substr(0, kMaxName);
  const std::string_view name = bytes.substr(0, bytes.find('\0'));
  return name.size() < bytes.size() && kernel_identifier(name) ? name : std::string_view();
}

// The statically linked __cudaRegisterFunction (see the top), or 0.
std::uint64_t static_register_function(const ElfFile& elf) {
  const auto text = elf.section(".text");
  if (!text) return 0;
  const std::string_view code = elf.contents().substr(text->offset, text->size);
  const auto in_text = [&](std::uint64_t a) { return a >= text->address && a < text->address + text->size; };
  std::unordered_map<std::uint64_t, unsigned> calls;
  ReleasingScan scan(elf, code, kLookBack + 8);
  std::size_t previous_call = 0;
  for (std::size_t i = 0; i + 5 <= code.size(); ++i) {
    scan.at(i);
    if (static_cast<unsigned char>(code[i]) != 0xe8) continue;
    const std::uint64_t callee = text->address + i + 5 + rel32_at(code, i + 1);
    if (!in_text(callee)) continue;
    const std::size_t from = std::max(previous_call, i >= kLookBack ? i - kLookBack : 0);
    previous_call = i + 5;
    bool stub = false, name = false, minus_one = false;
    for (std::size_t k = from; k + 6 <= i; ++k) {
      if (code.compare(k, 6, "\x41\xb8\xff\xff\xff\xff") == 0) minus_one = true;
      if (k + 7 > i || code[k] != '\x48' || code[k + 1] != '\x8d') continue;
      const auto modrm = static_cast<unsigned char>(code[k + 2]);
      const std::uint64_t target = text->address + k + 7 + rel32_at(code, k + 3);
      if (modrm == kRsi) stub = in_text(target);
      if ((modrm == kRdx || modrm == kRcx) && !in_text(target) && !name_at(elf, target).empty()) name = true;
    }
    if (stub && name && minus_one) ++calls[callee];
  }
  std::uint64_t best = 0;
  unsigned most = 0;
  for (const auto& [callee, n] : calls)
    if (n > most) best = callee, most = n;
  return most >= kMinStaticRegistrations ? best : 0;
}

// Calls to `callee` and the `lea disp(%rip)` loads before each (below).
template <typename Fn>
void for_each_call_with_loads(const ElfFile& elf, const char* callee, unsigned char second, Fn&& fn,
                              bool or_static = false) {
  const auto text = elf.section(".text");
  const std::vector<std::uint64_t> got = elf.got_slots(callee);
  const std::unordered_set<std::uint64_t> slots(got.begin(), got.end());
  std::unordered_set<std::uint64_t> targets;  // where `call rel32` reaches the function
  add_plt_stubs(elf, ".plt", slots, targets);
  add_plt_stubs(elf, ".plt.sec", slots, targets);
  for (const auto& [name, address] : elf.find_functions({callee})) targets.insert(address);
  if (or_static && slots.empty() && targets.empty())
    if (const std::uint64_t linked_in = static_register_function(elf)) targets.insert(linked_in);
  if (!text || (slots.empty() && targets.empty())) return;
  const std::string_view code = elf.contents().substr(text->offset, text->size);
  ReleasingScan scan(elf, code, kLookBack + 8);
  std::size_t previous_call = 0;
  for (std::size_t i = 0; i + 6 <= code.size(); ++i) {
    scan.at(i);
    const auto op = static_cast<unsigned char>(code[i]);
    std::size_t length = 0;
    if (op == 0xe8 && targets.count(text->address + i + 5 + rel32_at(code, i + 1)))
      length = 5;
    else if (op == 0xff && static_cast<unsigned char>(code[i + 1]) == 0x15 &&
             slots.count(text->address + i + 6 + rel32_at(code, i + 2)))
      length = 6;
    if (!length) continue;
    const std::size_t from = std::max(previous_call, i >= kLookBack ? i - kLookBack : 0);
    std::uint64_t rsi = 0, other = 0;
    for (std::size_t k = from; k + 7 <= i; ++k) {
      if (code[k] != '\x48' || code[k + 1] != '\x8d') continue;
      const auto modrm = static_cast<unsigned char>(code[k + 2]);
      const std::uint64_t target = text->address + k + 7 + rel32_at(code, k + 3);
      if (modrm == kRsi) rsi = target;
      // The name may come into %rcx first and be copied to %rdx (both name arguments).
      if (modrm == second || (second == kRdx && modrm == kRcx && !other)) other = target;
    }
    previous_call = i + length;
    if (rsi && other) fn(rsi, other);
  }
}

}  // namespace

bool ElfFile::registered_kernel(std::uint64_t vaddr, std::string_view& name) const {
  if (!registrations_) {
    registrations_ = std::make_unique<std::unordered_map<std::uint64_t, std::string_view>>();
    // __cudaRegisterFunction(handle, stub, name, name, -1, ...): %rsi, %rdx.
    for_each_call_with_loads(
        *this, kRegister, kRdx,
        [&](std::uint64_t stub, std::uint64_t name_vaddr) {
          const std::string_view mangled = name_at(*this, name_vaddr);
          if (!mangled.empty()) registrations_->emplace(stub, mangled);
        },
        /*or_static=*/true);
    release_all();  // the names' pages: read back one by one when a launch needs its name
  }
  const auto it = registrations_->find(vaddr);
  if (it == registrations_->end()) return false;
  name = it->second;
  return true;
}

const std::vector<ElfFile::KernelHandleSlot>& ElfFile::kernel_handle_slots() const {
  if (handle_slots_) return *handle_slots_;
  handle_slots_ = std::make_unique<std::vector<KernelHandleSlot>>();
  std::vector<KernelHandleSlot>& out = *handle_slots_;
  // __cudaGetKernel(&__handle, stub): %rdi, %rsi. The variable keeps the
  // kernel's handle once the stub has run.
  for_each_call_with_loads(*this, kGetKernel, kRdi, [&](std::uint64_t stub, std::uint64_t slot) {
    std::string_view name;
    FunctionSymbol sym;
    if (registered_kernel(stub, name))
      out.push_back({slot, name});
    else if (function_at(stub, sym))
      out.push_back({slot, sym.name});
  });
  release_all();
  return out;
}

}  // namespace cudatrace
