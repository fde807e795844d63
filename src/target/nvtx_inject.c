/* SPDX-License-Identifier: MIT */
/* libcudatrace_nvtx.so: the NVTX injection library of `cudatrace --nvtx`
 * (docs/nvtx.md). NVTX 3 (header-only) and recent libnvToolsExt load the
 * library named by NVTX_INJECTION64_PATH at a process's first NVTX call and
 * call InitializeInjectionNvtx2, which fills NVTX's function slots with the
 * handlers below. Each handler turns its NVTX call into one call of a tiny
 * probe target (cudatrace_nvtx_*, shown as nvtxRangePush etc.: probe_symbol
 * in api_table.h) with a plain C string, so cudatrace reads every range with
 * its generic uprobe programs and a string payload: the BPF side decodes no
 * NVTX structure. The probe targets do nothing themselves. */
/* Types and ids only: NVTX's own implementation (its loader) is not wanted
 * here, nor its newer glibc symbols (dlopen@GLIBC_2.34). */
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

/* ---- The probe targets: names and arguments are part of cudatrace's API
 * table (src/decode/api_table.cpp). domain is 0 for NVTX's default domain.
 * Written in assembly so that each starts with `push %rbp`, which the
 * kernel's x86 uprobes emulate: a compiler may reduce an empty function to a
 * bare `ret`, which a uprobe has to single-step out of line, a second trap. */
void cudatrace_nvtx_push(const char* message, uint64_t domain);
void cudatrace_nvtx_pop(uint64_t domain);
void cudatrace_nvtx_start(const char* message, uint64_t domain, uint64_t id);
void cudatrace_nvtx_end(uint64_t id);
void cudatrace_nvtx_mark(const char* message, uint64_t domain);

#define PROBE_TARGET(name)                                   \
  __asm__(".text\n"                                          \
          ".globl " #name "\n"                               \
          ".type " #name ", @function\n"                     \
          ".p2align 4\n" #name ":\n"                          \
          "  push %rbp\n"                                    \
          "  mov %rsp, %rbp\n"                               \
          "  pop %rbp\n"                                     \
          "  ret\n"                                          \
          ".size " #name ", . - " #name "\n");
PROBE_TARGET(cudatrace_nvtx_push)
PROBE_TARGET(cudatrace_nvtx_pop)
PROBE_TARGET(cudatrace_nvtx_start)
PROBE_TARGET(cudatrace_nvtx_end)
PROBE_TARGET(cudatrace_nvtx_mark)

/* ---- Messages */

/* Wide messages become UTF-8 in a per-thread buffer, valid until the
 * thread's next wide message (after the probe target has returned). */
static const char* utf8_of(const wchar_t* w) {
  static __thread char buf[1024];
  size_t n = 0;
  for (; w && *w && n + 4 < sizeof buf; ++w) {
    uint32_t c = (uint32_t)*w;
    if (c > 0x10ffff || (c >= 0xd800 && c < 0xe000)) c = 0xfffd;
    if (c < 0x80) {
      buf[n++] = (char)c;
    } else if (c < 0x800) {
      buf[n++] = (char)(0xc0 | c >> 6);
      buf[n++] = (char)(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      buf[n++] = (char)(0xe0 | c >> 12);
      buf[n++] = (char)(0x80 | ((c >> 6) & 0x3f));
      buf[n++] = (char)(0x80 | (c & 0x3f));
    } else {
      buf[n++] = (char)(0xf0 | c >> 18);
      buf[n++] = (char)(0x80 | ((c >> 12) & 0x3f));
      buf[n++] = (char)(0x80 | ((c >> 6) & 0x3f));
      buf[n++] = (char)(0x80 | (c & 0x3f));
    }
  }
  buf[n] = 0;
  return buf;
}

/* A registered string's handle is its own copy of the string. */
static nvtxStringHandle_t register_string(const char* s) { return (nvtxStringHandle_t)strdup(s ? s : ""); }

static const char* message_of(const nvtxEventAttributes_t* a) {
  if (!a) return "";
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return a->message.ascii ? a->message.ascii : "";
    case NVTX_MESSAGE_TYPE_UNICODE:
      return utf8_of(a->message.unicode);
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return a->message.registered ? (const char*)a->message.registered : "";
    default:
      return "";
  }
}

static uint64_t domain_id(nvtxDomainHandle_t d) { return (uint64_t)(uintptr_t)d; }

/* ---- NVTX's semantics that callers see: push/pop levels, range ids */

static __thread int g_level; /* open push ranges of this thread, all domains */
static uint64_t g_next_range_id = 1;

static int push(const char* message, nvtxDomainHandle_t d) {
  cudatrace_nvtx_push(message, domain_id(d));
  return g_level++;
}
static int pop(nvtxDomainHandle_t d) {
  cudatrace_nvtx_pop(domain_id(d));
  return g_level > 0 ? --g_level : -1;
}
static nvtxRangeId_t start(const char* message, nvtxDomainHandle_t d) {
  const uint64_t id = __atomic_fetch_add(&g_next_range_id, 1, __ATOMIC_RELAXED);
  cudatrace_nvtx_start(message, domain_id(d), id);
  return id;
}

static int NVTX_API h_push_a(const char* m) { return push(m ? m : "", NULL); }
static int NVTX_API h_push_w(const wchar_t* m) { return push(utf8_of(m), NULL); }
static int NVTX_API h_push_ex(const nvtxEventAttributes_t* a) { return push(message_of(a), NULL); }
static int NVTX_API h_pop(void) { return pop(NULL); }
static nvtxRangeId_t NVTX_API h_start_a(const char* m) { return start(m ? m : "", NULL); }
static nvtxRangeId_t NVTX_API h_start_w(const wchar_t* m) { return start(utf8_of(m), NULL); }
static nvtxRangeId_t NVTX_API h_start_ex(const nvtxEventAttributes_t* a) { return start(message_of(a), NULL); }
static void NVTX_API h_end(nvtxRangeId_t id) { cudatrace_nvtx_end(id); }
static void NVTX_API h_mark_a(const char* m) { cudatrace_nvtx_mark(m ? m : "", 0); }
static void NVTX_API h_mark_w(const wchar_t* m) { cudatrace_nvtx_mark(utf8_of(m), 0); }
static void NVTX_API h_mark_ex(const nvtxEventAttributes_t* a) { cudatrace_nvtx_mark(message_of(a), 0); }

static int NVTX_API h_domain_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return push(message_of(a), d);
}
static int NVTX_API h_domain_pop(nvtxDomainHandle_t d) { return pop(d); }
static nvtxRangeId_t NVTX_API h_domain_start_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return start(message_of(a), d);
}
static void NVTX_API h_domain_end(nvtxDomainHandle_t d, nvtxRangeId_t id) {
  (void)d;
  cudatrace_nvtx_end(id);
}
static void NVTX_API h_domain_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  cudatrace_nvtx_mark(message_of(a), domain_id(d));
}
/* A domain handle is its own copy of the domain's name: unique and non-null. */
static nvtxDomainHandle_t NVTX_API h_domain_create_a(const char* name) {
  return (nvtxDomainHandle_t)strdup(name ? name : "");
}
static nvtxDomainHandle_t NVTX_API h_domain_create_w(const wchar_t* name) {
  return (nvtxDomainHandle_t)strdup(utf8_of(name));
}
static nvtxStringHandle_t NVTX_API h_register_a(nvtxDomainHandle_t d, const char* s) {
  (void)d;
  return register_string(s);
}
static nvtxStringHandle_t NVTX_API h_register_w(nvtxDomainHandle_t d, const wchar_t* s) {
  (void)d;
  return register_string(utf8_of(s));
}

/* Fills the slots of one NVTX module that exist in the caller's NVTX version. */
static int fill(const NvtxExportTableCallbacks* cb, NvtxCallbackModule module, const NvtxFunctionPointer* handlers,
                unsigned count) {
  NvtxFunctionTable table = NULL;
  unsigned size = 0;
  if (!cb->GetModuleFunctionTable(module, &table, &size) || !table) return 0;
  for (unsigned i = 1; i < count && i < size; ++i)
    if (handlers[i] && table[i]) *table[i] = handlers[i];
  return 1;
}

#define H(f) ((NvtxFunctionPointer)(f))

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const NvtxExportTableCallbacks* cb = (const NvtxExportTableCallbacks*)get_export_table(NVTX_ETID_CALLBACKS);
  if (!cb || cb->struct_size < sizeof *cb) return 0;
  NvtxFunctionPointer core[NVTX_CBID_CORE_SIZE] = {0};
  core[NVTX_CBID_CORE_MarkEx] = H(h_mark_ex);
  core[NVTX_CBID_CORE_MarkA] = H(h_mark_a);
  core[NVTX_CBID_CORE_MarkW] = H(h_mark_w);
  core[NVTX_CBID_CORE_RangeStartEx] = H(h_start_ex);
  core[NVTX_CBID_CORE_RangeStartA] = H(h_start_a);
  core[NVTX_CBID_CORE_RangeStartW] = H(h_start_w);
  core[NVTX_CBID_CORE_RangeEnd] = H(h_end);
  core[NVTX_CBID_CORE_RangePushEx] = H(h_push_ex);
  core[NVTX_CBID_CORE_RangePushA] = H(h_push_a);
  core[NVTX_CBID_CORE_RangePushW] = H(h_push_w);
  core[NVTX_CBID_CORE_RangePop] = H(h_pop);
  NvtxFunctionPointer core2[NVTX_CBID_CORE2_SIZE] = {0};
  core2[NVTX_CBID_CORE2_DomainMarkEx] = H(h_domain_mark_ex);
  core2[NVTX_CBID_CORE2_DomainRangeStartEx] = H(h_domain_start_ex);
  core2[NVTX_CBID_CORE2_DomainRangeEnd] = H(h_domain_end);
  core2[NVTX_CBID_CORE2_DomainRangePushEx] = H(h_domain_push_ex);
  core2[NVTX_CBID_CORE2_DomainRangePop] = H(h_domain_pop);
  core2[NVTX_CBID_CORE2_DomainRegisterStringA] = H(h_register_a);
  core2[NVTX_CBID_CORE2_DomainRegisterStringW] = H(h_register_w);
  core2[NVTX_CBID_CORE2_DomainCreateA] = H(h_domain_create_a);
  core2[NVTX_CBID_CORE2_DomainCreateW] = H(h_domain_create_w);
  return fill(cb, NVTX_CB_MODULE_CORE, core, NVTX_CBID_CORE_SIZE) &&
         fill(cb, NVTX_CB_MODULE_CORE2, core2, NVTX_CBID_CORE2_SIZE);
}
