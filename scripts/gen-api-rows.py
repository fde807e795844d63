#!/usr/bin/env python3
"""Generates the API table's rows from the CUDA toolkit's own headers (issue 28).

Every function that cuda.h and cuda_runtime_api.h (and the profiler-control
headers cudaProfiler.h, cuda_profiler_api.h, and the graphics interoperability
headers of OpenGL, EGL and VDPAU) declare becomes a row: its
name, layer, prototype, argument names and how each argument is decoded from
its declared C type, where the x86-64 System V ABI passes it, and the
per-thread-default-stream forms (_ptsz/_ptds) the headers declare for it. The
headers are run through the C preprocessor three times, so that their macros
(`#define cuMemAlloc cuMemAlloc_v2`, `__CUDART_API_PTSZ`, the internal block
of older versions) say which symbols exist:

  default           what a program compiled against the toolkit calls
  per-thread        -DCUDA_API_PER_THREAD_DEFAULT_STREAM: the _ptsz/_ptds forms
  internal          -D__CUDA_API_VERSION_INTERNAL: the older versions libcuda
                    still exports for programs built against older toolkits

The interoperability headers include the system's GL, EGL and VDPAU headers
for a few typedefs: minimal stand-ins of those (FOREIGN_HEADERS) are put first
on the include path, so that the rows are the same whether or not the build
machine has the real ones, and a machine with only the toolkit builds.

The enums of the same headers become name tables (CUresult, cudaMemcpyKind,
CUdevice_attribute, ...), so enum arguments decode by name.

Groups, effects and the hand-written knowledge are not here: they are the
overrides of src/decode/api_overrides.cpp, applied on these rows.

Usage: gen-api-rows.py --cc CC --include DIR --output FILE
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

INTEROP_RUNTIME_HEADERS = ("cuda_gl_interop.h", "cuda_egl_interop.h", "cuda_vdpau_interop.h")
INTEROP_DRIVER_HEADERS = ("cudaGL.h", "cudaEGL.h", "cudaVDPAU.h")
HEADERS = ("cuda.h", "cuda_runtime_api.h", "cudaProfiler.h", "cuda_profiler_api.h") + INTEROP_RUNTIME_HEADERS + \
    INTEROP_DRIVER_HEADERS
RUNTIME_HEADERS = ("cuda_runtime_api.h", "cuda_profiler_api.h") + INTEROP_RUNTIME_HEADERS
# The typedefs the interoperability headers take from the system's graphics
# headers, as those define them on x86-64 (what matters is each type's size
# and kind: GL names are unsigned ints, EGL objects pointers, VDPAU handles
# uint32_t). GL_VERSION: cuda_gl_interop.h wants the GL headers included first
# on ARM.
FOREIGN_HEADERS = {
    "GL/gl.h": "#define GL_VERSION 1\ntypedef unsigned int GLenum;\ntypedef unsigned int GLuint;\n",
    "EGL/egl.h": "typedef int EGLint;\n",
    "EGL/eglext.h": "typedef void *EGLImageKHR;\ntypedef void *EGLStreamKHR;\ntypedef void *EGLSyncKHR;\n",
    "vdpau/vdpau.h": "typedef unsigned int VdpDevice;\ntypedef unsigned int VdpFuncId;\n"
                     "typedef unsigned int VdpVideoSurface;\ntypedef unsigned int VdpOutputSurface;\n"
                     "typedef enum { VDP_STATUS_OK = 0 } VdpStatus;\n"
                     "typedef VdpStatus VdpGetProcAddress(VdpDevice device, VdpFuncId function_id, "
                     "void **function_pointer);\n",
}
PASSES = (
    ("default", []),
    ("per-thread", ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM=1"]),
    ("internal", ["-D__CUDA_API_VERSION_INTERNAL"]),
)
PER_THREAD_SUFFIXES = ("_ptsz", "_ptds")
REG_ARGS = 6  # integer argument registers (bpf_abi.h CT_REG_ARGS)
SSE_ARGS = 8  # xmm0-7

TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:\\.|[^"\\])*")
  | (?P<chr>'(?:\\.|[^'\\])*')
  | (?P<num>(?:0[xX][0-9a-fA-F]+|\d+\.\d*(?:[eE][-+]?\d+)?|\d+)[uUlLfF]*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<op>\.\.\.|<<|>>|<=|>=|==|!=|&&|\|\||->|[-+*/%&|^~!<>=?:;,.(){}\[\]])
""", re.VERBOSE)

QUALIFIERS = {"const", "volatile", "restrict", "__restrict", "__restrict__", "__const"}
IGNORED = {"extern", "__extension__", "__inline", "__inline__", "inline", "register", "auto", "_Noreturn"}
BASE_WORDS = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "_Bool",
              "__signed__", "__int128"}


class HeaderError(Exception):
    pass


class Type:
    """A C type: kind is int, float, void, ptr, record, enum, array or func."""

    def __init__(self, kind, size=0, align=1, signed=False, target=None, tag=None, count=0, params=None,
                 const=False, typedefs=()):
        self.kind, self.size, self.align, self.signed = kind, size, align, signed
        self.target, self.tag, self.count, self.params, self.const = target, tag, count, params, const
        self.typedefs = typedefs  # the typedef names it was reached through, outermost first

    def copy(self, **changes):
        t = Type(self.kind)
        t.__dict__.update(self.__dict__)
        t.__dict__.update(changes)
        return t

    def named(self, name):
        return self.copy(typedefs=(name,) + self.typedefs)


class Record:
    def __init__(self, tag, union):
        self.tag, self.union, self.fields, self.complete = tag, union, None, False
        self.size, self.align = 0, 1


def tokenize(text):
    """Tokens of preprocessed text, each with the header file it came from."""
    out, current = [], ""
    for line in text.split("\n"):
        if line.startswith("#"):
            m = re.match(r'#\s*\d+\s+"([^"]*)"', line)
            if m:
                current = os.path.basename(m.group(1))
            continue
        pos = 0
        while pos < len(line):
            m = TOKEN.match(line, pos)
            if not m:
                raise HeaderError(f"cannot tokenize: {line[pos:pos + 40]!r}")
            pos = m.end()
            if m.lastgroup != "ws":
                out.append((m.group(), current))
    return out


def strip_attributes(tokens):
    """Removes __attribute__((...)) and __asm__(...), keeping aligned(N) as ('@aligned', N)."""
    out, i = [], 0
    while i < len(tokens):
        tok, f = tokens[i]
        if tok in ("__attribute__", "__asm__", "__asm", "__declspec"):
            j = i + 1
            depth = 0
            start = j
            while True:
                if tokens[j][0] == "(":
                    depth += 1
                elif tokens[j][0] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            inner = [t for t, _ in tokens[start:j + 1]]
            for k, t in enumerate(inner):
                if t in ("aligned", "__aligned__") and k + 2 < len(inner) and inner[k + 1] == "(":
                    end, depth = k + 2, 1
                    while depth:
                        depth += inner[end] == "("
                        depth -= inner[end] == ")"
                        end += 1
                    out.append(("@aligned", f, inner[k + 2:end - 1]))
            i = j + 1
            continue
        if tok in IGNORED:
            i += 1
            continue
        out.append((tok, f))
        i += 1
    return out


def int_literal(text):
    return int(text.rstrip("uUlL"), 0)


class Parser:
    def __init__(self):
        self.typedefs = {}
        self.records = {}
        self.enums = {}  # tag or typedef name -> [(name, value)]
        self.enum_names = {}  # enumerator -> value
        self.functions = {}  # symbol -> (return Type, [(name, Type)], file)

    # ---- top level
    def parse(self, tokens):
        self.toks = tokens
        self.i = 0
        while self.i < len(self.toks):
            self.statement()

    def peek(self, k=0):
        j = self.i + k
        return self.toks[j][0] if j < len(self.toks) else None

    def take(self, expected=None):
        tok = self.toks[self.i][0]
        if expected is not None and tok != expected:
            raise HeaderError(f"expected {expected!r}, got {tok!r} near {self.context()}")
        self.i += 1
        return tok

    def context(self):
        return " ".join(t[0] for t in self.toks[max(0, self.i - 8):self.i + 8])

    def statement(self):
        if self.peek() == ";":
            self.take()
            return
        if self.peek() == "_Static_assert":
            while self.take() != ";":
                pass
            return
        typedef = False
        if self.peek() == "typedef":
            self.take()
            typedef = True
        file = self.toks[self.i][1]
        base = self.specifiers()
        if self.peek() == ";":
            self.take()
            return
        while True:
            name, t = self.declarator(base)
            if self.peek() == "{":  # a function definition (static inline): not an API
                self.skip_braces()
                return
            if self.peek() == "=":  # an initialised variable
                while self.peek() not in (",", ";"):
                    self.take()
            if typedef:
                self.typedefs[name] = t.named(name)
                if t.kind == "enum" and t.tag in self.enums:
                    self.enums.setdefault(name, self.enums[t.tag])
            elif t.kind == "func" and name:
                self.functions.setdefault(name, (t.target, t.params, file))
            if self.peek() == ",":
                self.take()
                continue
            self.take(";")
            return

    def skip_braces(self):
        depth = 0
        while True:
            tok = self.take()
            if tok == "{":
                depth += 1
            elif tok == "}":
                depth -= 1
                if depth == 0:
                    return

    # ---- declaration specifiers
    def specifiers(self):
        words, const, t, align = [], False, None, None
        while True:
            tok = self.peek()
            if tok in QUALIFIERS:
                self.take()
                const = const or tok in ("const", "__const")
            elif tok == "@aligned":
                align = self.aligned_value()
            elif tok == "_Alignas":
                self.take()
                self.take("(")
                align = self.constant_until((")",))
                self.take(")")
            elif tok in ("static",):
                self.take()
            elif tok in BASE_WORDS:
                words.append(self.take())
            elif tok in ("struct", "union"):
                t = self.record_specifier()
            elif tok == "enum":
                t = self.enum_specifier()
            elif tok in self.typedefs and t is None and not words:
                t = self.typedefs[self.take()]
            elif tok == "__builtin_va_list" and t is None and not words:
                self.take()
                t = Type("ptr", 8, 8, target=Type("void"))
            else:
                break
        if t is None:
            t = base_type(words)
        if align:
            t = t.copy(align=max(t.align, align))
        return t.copy(const=True) if const else t

    def aligned_value(self):
        tok = self.toks[self.i]
        self.i += 1
        return self.evaluate(tok[2])

    def record_specifier(self):
        union = self.take() == "union"
        align = None
        while self.peek() == "@aligned":
            align = self.aligned_value()
        tag = self.take() if self.peek() not in ("{",) else f"<anon{self.i}>"
        while self.peek() == "@aligned":
            align = self.aligned_value()
        key = ("union " if union else "struct ") + tag
        rec = self.records.setdefault(key, Record(tag, union))
        if self.peek() == "{":
            self.take()
            fields = []
            while self.peek() != "}":
                base = self.specifiers()
                if self.peek() == ";":  # an anonymous struct or union member
                    fields.append((None, base, None))
                    self.take()
                    continue
                while True:
                    name, t = self.declarator(base)
                    bits = None
                    if self.peek() == ":":
                        self.take()
                        bits = self.constant_until((",", ";"))
                    fields.append((name, t, bits))
                    if self.peek() == ",":
                        self.take()
                        continue
                    self.take(";")
                    break
            self.take("}")
            while self.peek() == "@aligned":
                align = self.aligned_value()
            rec.fields = fields
            rec.complete = True
            layout_record(rec, align)
        return Type("record", tag=key)

    def enum_specifier(self):
        self.take("enum")
        tag = self.take() if self.peek() != "{" else None
        if self.peek() == "{":
            self.take()
            values, nxt = [], 0
            while self.peek() != "}":
                name = self.take()
                if self.peek() == "=":
                    self.take()
                    nxt = self.constant_until((",", "}"))
                values.append((name, nxt))
                self.enum_names[name] = nxt
                nxt += 1
                if self.peek() == ",":
                    self.take()
            self.take("}")
            if tag:
                self.enums[tag] = values
            else:
                tag = f"<anon{self.i}>"
                self.enums[tag] = values
        return Type("enum", 4, 4, signed=True, tag=tag)

    def constant_until(self, ends):
        expr = []
        depth = 0
        while depth or self.peek() not in ends:
            tok = self.take()
            depth += tok == "("
            depth -= tok == ")"
            expr.append(tok)
        return self.evaluate(expr)

    def evaluate(self, expr):
        """An integer constant expression: numbers, enumerators, casts, sizeof of a type."""
        out, i = [], 0
        while i < len(expr):
            tok = expr[i]
            if tok in ("sizeof", "__alignof__", "_Alignof"):
                j = i + 2
                depth = 1
                while depth:
                    depth += expr[j] == "("
                    depth -= expr[j] == ")"
                    j += 1
                sub = Parser.__new__(Parser)
                sub.__dict__.update(self.__dict__)
                sub.toks = [(t, "") for t in expr[i + 2:j - 1]] + [(";", "")]
                sub.i = 0
                _, t = sub.declarator(sub.specifiers())
                out.append(str(size_align(t)[0 if tok == "sizeof" else 1]))
                i = j
                continue
            if tok == "(" and i + 1 < len(expr) and (expr[i + 1] in BASE_WORDS or expr[i + 1] in self.typedefs):
                i = expr.index(")", i) + 1  # a cast
                continue
            if re.match(r"[0-9]", tok):
                out.append(str(int_literal(tok)))
            elif tok in self.enum_names:
                out.append(str(self.enum_names[tok]))
            elif tok in ("&&", "||", "!"):
                out.append({"&&": " and ", "||": " or ", "!": " not "}[tok])
            elif tok == "/":
                out.append("//")
            elif re.match(r"[A-Za-z_]", tok):
                raise HeaderError(f"unknown name {tok!r} in constant {' '.join(expr)}")
            else:
                out.append(tok)
            i += 1
        return int(eval("".join(out), {"__builtins__": {}}))  # noqa: S307 - integers and operators only

    # ---- declarators
    def declarator(self, base):
        """(name or None, type) of one declarator on `base`."""
        ptrs = []
        while self.peek() == "*":
            self.take()
            const = False
            while self.peek() in QUALIFIERS or self.peek() == "@aligned":
                if self.peek() == "@aligned":
                    self.aligned_value()
                    continue
                const = const or self.take() in ("const", "__const")
            ptrs.append(const)
        name, inner = None, None
        if self.peek() == "(" and self.is_nested_declarator():
            self.take("(")
            start = self.i
            depth = 1
            while depth:
                tok = self.take()
                depth += tok == "("
                depth -= tok == ")"
            inner = (start, self.i - 1)
        elif self.peek() and re.match(r"[A-Za-z_]", self.peek()) and self.peek() not in QUALIFIERS:
            name = self.take()
        member_align = 0
        while self.peek() == "@aligned":
            member_align = max(member_align, self.aligned_value())
        suffixes = []
        while self.peek() in ("[", "("):
            if self.take() == "[":
                count = 0 if self.peek() == "]" else self.constant_until(("]",))
                self.take("]")
                suffixes.append(("array", count))
            else:
                suffixes.append(("func", self.parameters()))
        t = base
        for const in ptrs:
            t = pointer_to(t, const)
        for kind, arg in reversed(suffixes):
            if kind == "array":
                t = Type("array", t.size * arg, t.align, target=t, count=arg)
            else:
                t = Type("func", target=t, params=arg)
        if inner:
            saved = self.i
            self.i = inner[0]
            name, t = self.declarator(t)
            self.i = saved
        while self.peek() == "@aligned":
            member_align = max(member_align, self.aligned_value())
        if member_align > t.align:
            t = t.copy(align=member_align)
        return name, t

    def is_nested_declarator(self):
        nxt = self.peek(1)
        return nxt in ("*", "(", "^") or (
            nxt is not None and re.match(r"[A-Za-z_]", nxt) and nxt not in self.typedefs and nxt not in BASE_WORDS
            and nxt not in QUALIFIERS and nxt not in ("struct", "union", "enum"))

    def parameters(self):
        params = []
        while self.peek() != ")":
            start = self.i
            if self.peek() == "...":
                self.take()
                params.append(("...", None))
            else:
                name, t = self.declarator(self.specifiers())
                if t.kind == "void" and name is None:
                    pass
                else:
                    if t.kind == "array":
                        t = pointer_to(t.target, False)
                    elif t.kind == "func":
                        t = pointer_to(t, False)
                    params.append((name, t))
            if self.peek() == ",":
                self.take()
            elif self.peek() != ")" or self.i == start:
                raise HeaderError(f"cannot parse a parameter near {self.context()}")
        self.take(")")
        return params


def base_type(words):
    w = [x for x in words if x not in ("signed", "__signed__")]
    unsigned = "unsigned" in w
    w = [x for x in w if x != "unsigned"]
    if w == ["void"]:
        return Type("void")
    if w in (["float"],):
        return Type("float", 4, 4)
    if w in (["double"], ["long", "double"]):
        return Type("float", 8 if w == ["double"] else 16, 8 if w == ["double"] else 16)
    if w == ["_Bool"]:
        return Type("int", 1, 1)
    if w == ["char"]:
        return Type("int", 1, 1, signed=not unsigned)
    if w in (["short"], ["short", "int"]):
        return Type("int", 2, 2, signed=not unsigned)
    if w in ([], ["int"]):
        return Type("int", 4, 4, signed=not unsigned)
    if w in (["long"], ["long", "int"], ["long", "long"], ["long", "long", "int"]):
        return Type("int", 8, 8, signed=not unsigned)
    if w == ["__int128"]:
        return Type("int", 16, 16, signed=not unsigned)
    raise HeaderError(f"unknown type {' '.join(words)}")


def pointer_to(t, const):
    return Type("ptr", 8, 8, target=t, const=const)


RECORDS = {}


def layout_record(rec, align_attr):
    """Offsets, size and alignment of a struct or union (fields: (name, Type, bits))."""
    offset, align, placed = 0, 1, []
    bit_end = None  # bit position after the last bit-field
    for name, t, bits in rec.fields:
        if t.kind == "record" and not RECORDS[t.tag].complete:
            raise HeaderError(f"incomplete member {name} in {rec.tag}")
        fsize, falign = size_align(t)
        if bits is not None:
            start = offset * 8 if bit_end is None else bit_end
            unit = fsize * 8
            if bits == 0 or (start % unit) + bits > unit:
                start = (start + unit - 1) // unit * unit
            placed.append((name, t, start // 8))
            bit_end = start + bits
            if not rec.union:
                offset = (bit_end + 7) // 8
            align = max(align, falign)
            continue
        if bit_end is not None:
            offset = (bit_end + 7) // 8
            bit_end = None
        if rec.union:
            placed.append((name, t, 0))
            offset = max(offset, fsize)
        else:
            offset = (offset + falign - 1) // falign * falign
            placed.append((name, t, offset))
            offset += fsize
        align = max(align, falign)
    if align_attr:
        align = max(align, align_attr)
    rec.size = (offset + align - 1) // align * align
    rec.align = align
    rec.placed = placed


def size_align(t):
    if t.kind == "record":
        rec = RECORDS[t.tag]
        return rec.size, max(rec.align, t.align)
    if t.kind == "array":
        s, a = size_align(t.target)
        return s * t.count, a
    return t.size, t.align


def eightbyte_classes(t, base=0, classes=None):
    """SysV classes (INTEGER or SSE) of each eightbyte of a small aggregate."""
    if classes is None:
        classes = {}
    if t.kind == "record":
        for _, ft, off in RECORDS[t.tag].placed:
            eightbyte_classes(ft, base + off, classes)
    elif t.kind == "array":
        s, _ = size_align(t.target)
        for k in range(t.count):
            eightbyte_classes(t.target, base + k * s, classes)
    else:
        word = base // 8
        cls = "SSE" if t.kind == "float" else "INTEGER"
        if classes.get(word) != "INTEGER":
            classes[word] = cls
    return classes


# ---- how each argument is decoded -------------------------------------------

STREAM_TAGS = {"struct CUstream_st"}
EVENT_TAGS = {"struct CUevent_st"}
FUNC_TAGS = {"struct CUfunc_st", "struct CUkern_st"}
DEVICE_POINTER_TYPEDEFS = {"CUdeviceptr", "CUdeviceptr_v2", "CUdeviceptr_v1"}


def flags_name(name):
    return name is not None and "flag" in name.lower()


def plural(name):
    """An array parameter by its name (kernelParams, optionValues, dependencies)."""
    if not name:
        return False
    low = name.lower()
    return (low.endswith("s") and not low.endswith(("ss", "us", "flags", "bytes"))) or low.endswith(("array", "list"))


def spelled(t):
    """The C spelling of a type, as the header writes it."""
    if t.typedefs and t.typedefs[0]:
        return ("const " if t.const else "") + t.typedefs[0]
    if t.kind == "ptr":
        inner = spelled(t.target)
        return inner + ("*" if inner.endswith("*") else " *") + (" const" if t.const else "")
    if t.kind == "record":
        return ("const " if t.const else "") + t.tag
    if t.kind == "enum":
        return ("const " if t.const else "") + "enum " + t.tag
    if t.kind == "func":
        return "function"
    if t.kind == "void":
        return ("const " if t.const else "") + "void"
    names = {(1, True): "char", (1, False): "unsigned char", (2, True): "short", (2, False): "unsigned short",
             (4, True): "int", (4, False): "unsigned int", (8, True): "long long", (8, False): "unsigned long long"}
    if t.kind == "float":
        return "float" if t.size == 4 else "double"
    return ("const " if t.const else "") + names.get((t.size, t.signed), "int")


class Arg:
    """One argument: its decoding type (api_table.h ArgType), enum, by-value words."""

    def __init__(self, name, ctype, argtype, enum=None, words=0, int_words=0):
        self.name, self.ctype, self.argtype, self.enum = name, ctype, argtype, enum
        self.words, self.int_words = words, int_words


def enum_of(parser, t):
    for n in t.typedefs:
        if n in parser.enums:
            return n
    return t.tag if t.kind == "enum" else None


def classify(parser, name, t, outs, has_string):
    """The decoding of parameter `name` of type `t`; outs counts the out-params before it,
    has_string says whether one before it is read as a string (a row reads one payload)."""
    ctype = spelled(t)
    if t.kind == "float":
        return Arg(name, ctype, "Float")
    if t.kind == "record":
        size, _ = size_align(t)
        if RECORDS[t.tag].tag == "dim3":
            return Arg(name, ctype, "Dim3")
        # Up to 16 bytes: in registers, an integer one for each eightbyte that is not all
        # floating-point; larger: in memory, on the stack.
        classes = eightbyte_classes(t) if size <= 16 else {}
        int_words = sum(1 for c in classes.values() if c == "INTEGER")
        return Arg(name, ctype, "Struct", words=(size + 7) // 8, int_words=int_words)
    if t.kind == "enum":
        return Arg(name, ctype, "Enum", enum=enum_of(parser, t))
    if t.kind == "int":
        if set(t.typedefs) & DEVICE_POINTER_TYPEDEFS:
            return Arg(name, ctype, "Ptr")
        if t.size == 8:
            return Arg(name, ctype, "Flags" if flags_name(name) else "Size")
        if t.signed:
            return Arg(name, ctype, "Int")
        return Arg(name, ctype, "Flags" if flags_name(name) else "UInt")
    if t.kind == "ptr":
        target = t.target
        if target.kind == "record" and target.tag in STREAM_TAGS:
            return Arg(name, ctype, "Stream")
        if target.kind == "record" and target.tag in EVENT_TAGS:
            return Arg(name, ctype, "Event")
        if target.kind == "record" and target.tag in FUNC_TAGS:
            return Arg(name, ctype, "Func")
        if target.kind == "record" and not RECORDS[target.tag].complete:
            return Arg(name, ctype, "Handle")  # an opaque handle (CUcontext, cudaGraph_t, ...)
        if target.kind == "int" and target.size == 1 and target.const and not has_string:
            return Arg(name, ctype, "String")
        # A pointer to a scalar or handle that the call writes: an out-parameter.
        if not target.const and not plural(name) and outs < 2:
            out = out_type(parser, target)
            if out:
                return Arg(name, ctype, out[0], enum=out[1])
        return Arg(name, ctype, "Ptr")
    raise HeaderError(f"cannot decode {name} of type {ctype}")


def out_type(parser, target):
    if target.kind == "float" and target.size == 4:
        return ("OutFloat", None)
    if target.kind == "enum":
        return ("OutEnum", enum_of(parser, target))
    if target.kind == "int":
        if set(target.typedefs) & DEVICE_POINTER_TYPEDEFS:
            return ("OutPtr", None)
        if target.size == 8:
            return ("OutSize", None)
        if target.size == 4:
            return ("OutInt", None) if target.signed else ("OutUInt", None)
        return None
    if target.kind == "ptr":
        inner = target.target
        if inner.kind == "record" and inner.tag in STREAM_TAGS:
            return ("OutStream", None)
        if inner.kind == "record" and inner.tag in EVENT_TAGS:
            return ("OutEvent", None)
        if inner.kind == "record" and inner.tag in FUNC_TAGS:
            return ("OutFunc", None)
        if inner.kind == "record" and not RECORDS[inner.tag].complete:
            return ("OutHandle", None)
        if inner.kind == "void" and not inner.const:
            return ("OutPtr", None)
    return None


# ---- the passes ---------------------------------------------------------------

class Includes:
    """The toolkit's headers behind the stand-ins of FOREIGN_HEADERS, in a temporary directory."""

    def __init__(self, include):
        self.dir = tempfile.TemporaryDirectory()
        for path, text in FOREIGN_HEADERS.items():
            os.makedirs(os.path.join(self.dir.name, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(self.dir.name, path), "w") as f:
                f.write(f"#pragma once\n{text}")
        self.flags = ["-I", self.dir.name, "-I", include]
        self.source = "".join(f"#include <{h}>\n" for h in list(FOREIGN_HEADERS) + list(HEADERS))

    def run(self, cc, options, extra=""):
        with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
            f.write(self.source + extra)
            name = f.name
        try:
            return subprocess.run([cc, *options, *self.flags, name], capture_output=True, text=True)
        finally:
            os.unlink(name)


def preprocess(cc, includes, defines):
    r = includes.run(cc, ["-E", *defines])
    if r.returncode != 0:
        raise HeaderError("the preprocessor failed:\n" + r.stderr)
    return r.stdout


def check_layouts(cc, includes, parser, by_value):
    """Lets the compiler confirm the struct sizes computed here (a wrong one would misplace arguments)."""
    lines = []
    for tag in sorted(by_value):
        rec = RECORDS[tag]
        lines.append(f'_Static_assert(sizeof({tag}) == {rec.size}, "{tag}");')
        lines.append(f'_Static_assert(_Alignof({tag}) == {rec.align}, "{tag}");')
    r = includes.run(cc, ["-fsyntax-only"], "\n".join(lines) + "\n")
    if r.returncode != 0:
        raise HeaderError("struct layouts computed here differ from the compiler's:\n" + r.stderr)


def collect(cc, includes):
    functions, parser = {}, None
    for label, defines in PASSES:
        p = Parser()
        global RECORDS
        RECORDS = p.records
        p.parse(strip_attributes(tokenize(preprocess(cc, includes, defines))))
        for sym, (ret, params, file) in p.functions.items():
            if file not in HEADERS or not (sym.startswith("cu") or sym.startswith("__cuda")):
                continue
            functions.setdefault(sym, (ret, params, file, label, p))
        if parser is None:
            parser = p
    return functions, parser


def layer_of(file):
    return "Runtime" if file in RUNTIME_HEADERS else "Driver"


def rows(functions):
    """[(symbol, layer, prototype, returns, args, per_thread suffixes)] in header order of symbols."""
    bases = {}
    for sym in functions:
        for suffix in PER_THREAD_SUFFIXES:
            base = sym[: -len(suffix)]
            if sym.endswith(suffix) and base in functions and same_params(functions[base], functions[sym]):
                bases.setdefault(base, []).append(suffix)
    variants = {b + s for b, ss in bases.items() for s in ss}
    out = []
    for sym, (ret, params, file, _, parser) in functions.items():
        if sym in variants:
            continue
        global RECORDS
        RECORDS = parser.records
        out.append(make_row(parser, sym, ret, params, file, sorted(bases.get(sym, []))))
    return out


def same_params(a, b):
    return [spelled(t) for _, t in a[1]] == [spelled(t) for _, t in b[1]]


def make_row(parser, sym, ret, params, file, per_thread):
    outs, args, by_value = 0, [], set()
    for name, t in params:
        if name == "...":
            raise HeaderError(f"{sym}: variadic")
        a = classify(parser, name or f"arg{len(args)}", t, outs, any(x.argtype == "String" for x in args))
        outs += a.argtype.startswith("Out")
        if t.kind == "record":
            by_value.add(t.tag)
        args.append(a)
    status = {"cudaError_t", "CUresult", "cudaError"}
    if ret.kind == "record":
        by_value.add(ret.tag)
        returns = "Memory" if size_align(ret)[0] > 16 else "Value"
    elif set(ret.typedefs) & status or (ret.kind == "enum" and ret.tag == "cudaError"):
        returns = "Status"
    elif ret.kind == "void":
        returns = "Void"
    else:
        returns = "Value"
    proto = f"{spelled(ret)} {sym}(" + (", ".join(
        a.ctype + ("" if a.ctype.endswith("*") else " ") + a.name for a in args) or "void") + ")"
    return dict(symbol=sym, layer=layer_of(file), prototype=proto, returns=returns, args=args, per_thread=per_thread,
                by_value=by_value)


# ---- output -------------------------------------------------------------------

def cpp_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write(out_path, table, parser, enums_used, headers):
    lines = [
        "// Generated by scripts/gen-api-rows.py from " + ", ".join(headers) + ": do not edit.",
        "// The rows of every function these headers declare, and the enums their arguments name.",
        "#include <iterator>",
        "",
        '#include "cudatrace/decode/header_rows.h"',
        "",
        "namespace cudatrace {",
        "namespace {",
        "",
        "using A = ArgType;",
    ]
    enum_index = {}
    for k, name in enumerate(sorted(enums_used)):
        enum_index[name] = k
        values = parser.enums[name]
        body = ", ".join(f"{{{v}, {cpp_string(n)}}}" for n, v in values)
        lines.append(f"const EnumValue kEnum{k}[] = {{{body}}};")
    lines.append("")
    lines.append("}  // namespace")
    lines.append("")
    lines.append("const EnumType kHeaderEnums[] = {")
    for name in sorted(enums_used):
        k = enum_index[name]
        lines.append(f"  {{{cpp_string(name)}, kEnum{k}, std::size(kEnum{k})}},")
    lines.append("};")
    lines.append(f"const std::size_t kHeaderEnumCount = {len(enum_index)};")
    lines.append("")
    lines.append("const std::vector<HeaderRow>& header_rows() {")
    lines.append("  static const std::vector<HeaderRow> kRows = {")
    for r in table:
        args = []
        for a in r["args"]:
            enum = f"&kHeaderEnums[{enum_index[a.enum]}]" if a.enum else "nullptr"
            args.append(f"{{{cpp_string(a.name)}, A::{a.argtype}, {cpp_string(a.ctype)}, {enum}, {a.words}, "
                        f"{a.int_words}}}")
        per_thread = " | ".join(f"kPerThread{s[1:].capitalize()}" for s in r["per_thread"]) or "0"
        lines.append(f"    {{{cpp_string(r['symbol'])}, Layer::{r['layer']}, Returns::{r['returns']}, "
                     f"{cpp_string(r['prototype'])}, {{{', '.join(args)}}}, {per_thread}}},")
    lines.append("  };")
    lines.append("  return kRows;")
    lines.append("}")
    lines.append("")
    lines.append("}  // namespace cudatrace")
    text = "\n".join(lines) + "\n"
    try:
        with open(out_path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(out_path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--include", required=True, help="the toolkit's include directory (cuda.h, cuda_runtime_api.h)")
    ap.add_argument("--output", required=True)
    args = ap.parse_args()
    for h in HEADERS:
        if not os.path.exists(os.path.join(args.include, h)):
            sys.exit(f"gen-api-rows: {h} not found in {args.include}")
    includes = Includes(args.include)
    try:
        functions, parser = collect(args.cc, includes)
        table = rows(functions)
        global RECORDS
        RECORDS = parser.records
        by_value = set().union(*(r["by_value"] for r in table))
        check_layouts(args.cc, includes, parser, by_value)
        enums_used = {a.enum for r in table for a in r["args"] if a.enum}
        write(args.output, table, parser, enums_used, [os.path.join(args.include, h) for h in HEADERS])
    except HeaderError as e:
        sys.exit(f"gen-api-rows: {e}")


if __name__ == "__main__":
    main()
