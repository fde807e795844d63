"""Hugging Face GPT-2 (124M, from its config: random weights, nothing is
downloaded) greedy decoding, fp16, batch 1, KV cache, no CUDA graph: the
launch-bound LLM decode loop of issue 24.

Usage: python3 decode_loop.py [GENERATES] [TOKENS] [MAPS_FILE]   (default 4 x 16)
Prints one JSON line: tokens generated, tokens/s of the timed generates
(after one warm-up), and the CUDA libraries the process has mapped.
"""
import json
import sys
import time

import torch
import transformers

from torch_loop import mapped_libraries


def main():
    generates = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    if generates < 1 or tokens < 1:
        sys.exit("GENERATES and TOKENS must be at least 1")
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config()
    model = transformers.GPT2LMHeadModel(config).half().cuda().eval()
    prompt = torch.randint(0, config.vocab_size, (1, 8), device="cuda")
    mask = torch.ones_like(prompt)

    def generate():
        with torch.no_grad():
            return model.generate(prompt, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                                  do_sample=False, use_cache=True, pad_token_id=config.eos_token_id)
    generate()  # warm-up: cuBLAS handles, kernels loaded
    torch.cuda.synchronize()
    start = time.monotonic()
    for _ in range(generates):
        out = generate()
    torch.cuda.synchronize()
    elapsed = time.monotonic() - start
    libs = mapped_libraries(["libcudart", "libcuda.so", "libcublas", "libnccl"])
    if len(sys.argv) > 3:  # MAPS_FILE: this process's mappings, to place call sites of a trace
        with open("/proc/self/maps") as src, open(sys.argv[3], "w") as dst:
            dst.write(src.read())
    print(json.dumps({"generates": generates + 1, "tokens_per_generate": tokens,
                      "tokens": (generates + 1) * tokens, "timed_tokens_per_s": generates * tokens / elapsed,
                      "transformers": transformers.__version__, "torch": torch.__version__,
                      "out_len": int(out.shape[1]), **libs}))


if __name__ == "__main__":
    main()
