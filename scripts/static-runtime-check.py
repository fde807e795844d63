#!/usr/bin/env python3
"""Research check behind docs/static-runtime.md, independent of cudatrace's C++ matcher.

  scripts/static-runtime-check.py [--archive libcudart_static.a] LIBRARY...

For each LIBRARY (e.g. a PyTorch wheel's nvidia/cublas/lib/libcublasLt.so.13) it reports:
- whether the archive's whole code appears in it as one block (same runtime build);
- how many of the traced runtime APIs (src/decode/api_table.cpp) match exactly once, relocated fields masked;
- whether the matched functions' calls agree (same symbol -> same address);
- how many internal callees' own fingerprints match at the addresses those calls resolve to.
Also checks that in the archive itself every fingerprint finds its own function and nothing else.
Slow (pure Python regular expressions): minutes for a 100 MB library.
"""
import argparse
import collections
import os
import re
import struct
import subprocess
import sys
import tempfile

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PC_RELATIVE = (2, 4)  # R_X86_64_PC32, R_X86_64_PLT32
GOT_RELAXABLE = {41: 2, 42: 3}  # R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX: masked bytes before the field


class Elf:
    def __init__(self, data):
        self.data = data
        shoff, = struct.unpack_from('<Q', data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3a)
        self.sections = []
        for i in range(shnum):
            f = struct.unpack_from('<IIQQQQIIQQ', data, shoff + i * shentsize)
            self.sections.append(dict(zip('name type flags addr off size link info align entsize'.split(), f)))
        names = self.sections[shstrndx]['off']
        for s in self.sections:
            s['name'] = self.cstr(names + s['name'])

    def cstr(self, off):
        return self.data[off:self.data.index(b'\0', off)].decode()

    def section(self, name):
        return next((i, s) for i, s in enumerate(self.sections) if s['name'] == name)

    def symbols(self):
        st = next(s for s in self.sections if s['type'] == 2)
        strs = self.sections[st['link']]['off']
        out = []
        for k in range(st['size'] // 24):
            name, info, _, shndx, value, size = struct.unpack_from('<IBBHQQ', self.data, st['off'] + k * 24)
            out.append(dict(name=self.cstr(strs + name), type=info & 15, shndx=shndx, value=value, size=size))
        return out


def load_archive(path):
    with tempfile.TemporaryDirectory() as tmp:
        members = subprocess.check_output(['ar', 't', path], text=True).split()
        if len(members) != 1:
            sys.exit('expected one object in the archive, found %d' % len(members))
        subprocess.check_call(['ar', 'x', path, members[0]], cwd=tmp)
        obj = Elf(open(os.path.join(tmp, members[0]), 'rb').read())
    ti, text = obj.section('.text')
    code = obj.data[text['off']:text['off'] + text['size']]
    mask = bytearray(b'\1' * len(code))
    syms = obj.symbols()
    relocs = {}
    for s in obj.sections:
        if s['type'] != 4 or s['info'] != ti:
            continue
        for k in range(s['size'] // 24):
            off, info, addend = struct.unpack_from('<QQq', obj.data, s['off'] + k * 24)
            typ, sym = info & 0xffffffff, info >> 32
            lead = GOT_RELAXABLE.get(typ, 0)
            for b in range(off - lead, off + 4):
                mask[b] = 0
            relocs[off] = (typ, sym, addend)
    funcs = [s for s in syms if s['type'] == 2 and s['shndx'] == ti and s['size'] > 0]
    return code, bytes(mask), funcs, relocs, syms


def pattern(code, mask, start, size):
    return re.compile(b''.join(re.escape(code[k:k + 1]) if mask[k] else b'.' for k in range(start, start + size)),
                      re.DOTALL)


def runtime_api_names():
    src = open(os.path.join(SOURCE_DIR, 'src', 'api_table.cpp')).read()
    names = []
    for name, group in re.findall(r'\{"([^"]+)", RT, (\w+),', src):
        names.append(name)
        if group != 'MODULE':
            names += [name + '_ptsz', name + '_ptds']
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--archive', default='/usr/local/cuda/lib64/libcudart_static.a')
    ap.add_argument('libraries', nargs='+')
    args = ap.parse_args()
    code, mask, funcs, relocs, syms = load_archive(args.archive)
    by_name = {f['name']: f for f in funcs}
    is_function = {id(f) for f in funcs}
    names = [n for n in runtime_api_names() if n in by_name]
    patterns = {n: pattern(code, mask, by_name[n]['value'], by_name[n]['size']) for n in names}
    own = sum(1 for n in names if [m.start() for m in patterns[n].finditer(code)] == [by_name[n]['value']])
    print('%s: %d traced runtime APIs defined; %d find their own function and nothing else'
          % (args.archive, len(names), own))
    for path in args.libraries:
        lib = Elf(open(path, 'rb').read())
        _, text = lib.section('.text')
        hay = lib.data[text['off']:text['off'] + text['size']]
        whole = pattern(code, mask, 0, len(code)).search(hay) is not None
        found = {}
        for n in names:
            hits = [m.start() for m in patterns[n].finditer(hay)]
            if len(hits) == 1:
                found[n] = hits[0]
        targets = collections.defaultdict(set)
        for n, at in found.items():
            f = by_name[n]
            for off in range(f['value'], f['value'] + f['size']):
                if off in relocs and relocs[off][0] in PC_RELATIVE:
                    field = at + off - f['value']
                    disp, = struct.unpack_from('<i', hay, field)
                    targets[relocs[off][1:]].add(text['addr'] + field + disp)
        conflicts = sum(1 for v in targets.values() if len(v) > 1)
        callees = matched = 0
        for (sym, addend), where in targets.items():
            callee = syms[sym]
            if id(callee) not in is_function or len(where) != 1:
                continue
            callees += 1
            start = next(iter(where)) - addend - text['addr']  # the field holds S + A - P
            matched += pattern(code, mask, callee['value'], callee['size']).match(hay, start) is not None
        print('%s: whole runtime as one block: %s; APIs found exactly once: %d/%d; call targets: %d, conflicts: %d;'
              ' callees matching at their targets: %d/%d'
              % (path, 'yes' if whole else 'no', len(found), len(names), len(targets), conflicts, matched, callees))


if __name__ == '__main__':
    main()
