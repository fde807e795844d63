#!/usr/bin/env python3
"""The first instructions of the CUDA functions in the files real programs
load (issue 24: where the kernel emulates a probed instruction and where it
single-steps it). Finds libcuda.so.1, the Python wheels' libraries
(site-packages/nvidia/*/lib), JAX's CUDA plugin and CuPy's, and for each
exported function whose name starts with cu/cuda/nccl/__cuda prints its
first bytes. Standard library only (the GPU host has no pyelftools).

  prologues.py [--json OUT] [FILE...]     # no FILE: the files found
"""
import argparse
import collections
import glob
import json
import os
import struct
import subprocess
import sys

PREFIXES = (b"cu", b"nccl", b"__cuda")


def elf_functions(path):
    """(name, file offset) of every defined FUNC symbol (.dynsym and .symtab)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out = {}
    for sec in sections:
        sh_type, sh_offset, sh_size, sh_link, sh_entsize = sec[1], sec[4], sec[5], sec[6], sec[9]
        if sh_type not in (2, 11) or not sh_entsize:  # SHT_SYMTAB, SHT_DYNSYM
            continue
        strtab = sections[sh_link]
        str_off = strtab[4]
        for j in range(sh_size // sh_entsize):
            st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from(
                "<IBBHQQ", data, sh_offset + j * sh_entsize)
            if st_info & 0xF != 2 or st_shndx == 0 or not st_value:  # STT_FUNC, defined
                continue
            end = data.index(b"\0", str_off + st_name)
            name = data[str_off + st_name:end]
            if not name.startswith(PREFIXES):
                continue
            for vaddr, offset, filesz in loads:
                if vaddr <= st_value < vaddr + filesz:
                    out[name.decode()] = st_value - vaddr + offset
                    break
    return sorted((n, o, data[o:o + 128]) for n, o in out.items())


def kind(b):
    """A coarse name for the first instruction(s)."""
    i = 0
    prefix = ""
    if b[:4] == b"\xf3\x0f\x1e\xfa":
        prefix, i = "endbr64+", 4
    c = b[i]
    if c == 0x55:
        return prefix + "push %rbp"
    if 0x50 <= c <= 0x57:
        return prefix + "push reg"
    if c == 0x41 and 0x50 <= b[i + 1] <= 0x57:
        return prefix + "push %r8-15"
    if b[i:i + 5] == b"\x0f\x1f\x44\x00\x00":
        return prefix + "nop5"
    if c == 0x90:
        return prefix + "nop"
    if c in (0xE9, 0xEB):
        return prefix + "jmp"
    if c == 0xFF and b[i + 1] == 0x25:
        return prefix + "jmp *rip"
    if c in (0x48, 0x49, 0x4C, 0x4D) and b[i + 1] == 0x83 and b[i + 2] == 0xEC:
        return prefix + "sub $imm8,%rsp"
    if c in (0x48, 0x49, 0x4C, 0x4D) and b[i + 1] == 0x81 and b[i + 2] == 0xEC:
        return prefix + "sub $imm32,%rsp"
    if c in (0x48, 0x49, 0x4C, 0x4D, 0x89, 0x8B) or (c in (0x48, 0x49, 0x4C, 0x4D) and b[i + 1] in (0x89, 0x8B)):
        return prefix + "mov"
    return prefix + "other %02x %02x" % (c, b[i + 1])


def found_files():
    files = []
    for d in ("/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib"):
        p = os.path.join(d, "libcuda.so.1")
        if os.path.exists(p):
            files.append(os.path.realpath(p))
            break
    try:
        site = subprocess.run([sys.executable, "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
                              capture_output=True, text=True).stdout.split()
    except OSError:
        site = []
    for s in site:
        files += sorted(glob.glob(os.path.join(s, "nvidia", "*", "lib", "lib*.so*")))
        files += sorted(glob.glob(os.path.join(s, "jax_plugins", "*", "*.so")))
        files += sorted(glob.glob(os.path.join(s, "torch", "lib", "libtorch_cuda.so")))
        files += sorted(glob.glob(os.path.join(s, "torch", "lib", "libc10_cuda.so")))
    seen, out = set(), []
    for f in files:
        r = os.path.realpath(f)
        if r not in seen and os.path.isfile(r):
            seen.add(r)
            out.append(r)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    files = args.files or found_files()
    result = {}
    for path in files:
        try:
            funcs = elf_functions(path)
        except (OSError, ValueError, struct.error) as e:
            print(f"{path}: {e}", file=sys.stderr)
            continue
        if not funcs:
            continue
        kinds = collections.Counter(kind(b) for _, _, b in funcs)
        print(f"{path}: {len(funcs)} functions: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
        result[path] = {n: {"offset": o, "bytes": b.hex()} for n, o, b in funcs}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
