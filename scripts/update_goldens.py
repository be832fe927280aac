#!/usr/bin/env python3
"""Re-pins the x86 golden code hashes in tests/x86/x86_kernels_test.cc after a deliberate
change to the generated code (remember to bump x86::kCodegenVersion too).

    ninja -C build/release test_x86_kernels && scripts/update_goldens.py build/release
"""
import re
import subprocess
import sys

build = sys.argv[1] if len(sys.argv) > 1 else "build/release"
test_file = "tests/x86/x86_kernels_test.cc"
out = subprocess.run([f"{build}/tests/x86/test_x86_kernels", "--gtest_filter=X86Golden.*"],
                     capture_output=True, text=True).stdout
got = re.findall(r"^(\S+\(.*\)) at (\w+): got 0x([0-9a-f]+)", out, re.M)
isa_enum = {"avx2": "kAvx2", "avx512": "kAvx512", "avx512_bf16": "kAvx512Bf16",
            "avx512_vbmi": "kAvx512Vbmi", "avx512_fp16": "kAvx512Fp16", "amx": "kAmx"}
text = open(test_file).read()
for spec, isa, value in got:
    pattern = re.compile(r'(\{"%s", X86Isa::%s, )0x[0-9a-f]+ull\}' % (re.escape(spec), isa_enum[isa]))
    text, n = pattern.subn(r"\g<1>0x%sull}" % value, text)
    print(f"{spec} at {isa}: 0x{value} ({'updated' if n else 'NOT FOUND'})")
# The version-guard hash over every example spec (X86Golden.AnyCodeChangeBumpsTheCodegenVersion).
m = re.search(r"ALL x86 example specs \(version ([\w.-]+)\): got 0x([0-9a-f]+)", out)
if m:
    text, n = re.subn(r'(kAllExampleCode\{)"[^"]*", 0x[0-9a-f]+ull\}',
                      r'\g<1>"%s", 0x%sull}' % (m.group(1), m.group(2)), text)
    print(f"all example specs at {m.group(1)}: 0x{m.group(2)} ({'updated' if n else 'NOT FOUND'})")
open(test_file, "w").write(text)
