// Three streams joined by events, with a dependency graph known in advance,
// for checking cudatrace's stream model on a GPU (scripts/gpu/check_streams.py).
// Prints, as one JSON line, what cudatrace should annotate each stream wait
// and synchronisation with (its text format, README.md "Streams and events"),
// and how many pageable-copy warnings it should give:
//   {"annotations":["cudaStreamWaitEvent | waits: ...", ...],"pageable_warnings":1,
//    "pageable_function":"copy_pageable"}
// Usage: stream_events

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CUDA(call) check(#call, (call), __LINE__)

static void check(const char *what, cudaError_t err, int line) {
  if (err != cudaSuccess) {
    fprintf(stderr, "stream_events.cu:%d: %s failed: %s (%d)\n", line, what, cudaGetErrorString(err), (int)err);
    exit(1);
  }
}

__global__ void produce(float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (float)i;
}

__global__ void transform(float *data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * 2.0f + 1.0f;
}

__global__ void consume(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] - 1.0f;
}

// The call site the pageable-copy warning should name.
extern "C" __attribute__((noinline)) void copy_pageable(float *dev, const float *host, size_t bytes, cudaStream_t s) {
  CUDA(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s));
}

int main() {
  const int n = 1 << 20;
  const size_t bytes = n * sizeof(float);
  const int block = 256, grid = (n + block - 1) / block;
  // What 4 MiB of floats prints as.
  const std::string four_mib = "4.0 MiB";

  cudaStream_t s1, s2, s3;  // created first, so cudatrace calls them s1..s3
  CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CUDA(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
  cudaEvent_t e1, e2, e3;
  CUDA(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
  CUDA(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
  CUDA(cudaEventCreateWithFlags(&e3, cudaEventDisableTiming));

  float *h_in, *h_out, *d_a, *d_b;
  CUDA(cudaMallocHost((void **)&h_in, bytes));
  CUDA(cudaMallocHost((void **)&h_out, bytes));
  CUDA(cudaMalloc((void **)&d_a, bytes));
  CUDA(cudaMalloc((void **)&d_b, bytes));
  for (int i = 0; i < n; ++i) h_in[i] = 0.0f;

  std::vector<std::string> expected;
  const std::string s1_work = "s1: 1 launch (produce), 1 copy HtoD " + four_mib;

  CUDA(cudaMemcpyAsync(d_a, h_in, bytes, cudaMemcpyHostToDevice, s1));
  produce<<<grid, block, 0, s1>>>(d_a, n);
  CUDA(cudaGetLastError());
  CUDA(cudaEventRecord(e1, s1));
  CUDA(cudaStreamWaitEvent(s2, e1, 0));
  expected.push_back("cuStreamWaitEvent | waits: e1 (recorded on s1) for " + s1_work);
  transform<<<grid, block, 0, s2>>>(d_a, n);
  transform<<<grid, block, 0, s2>>>(d_a, n);
  CUDA(cudaGetLastError());
  CUDA(cudaEventRecord(e2, s2));
  consume<<<grid, block, 0, s3>>>(d_a, d_b, n);  // races with s2 on purpose: not part of e2
  CUDA(cudaStreamWaitEvent(s3, e2, 0));
  expected.push_back("cuStreamWaitEvent | waits: e2 (recorded on s2) for s2: 2 launches (transform x2); " + s1_work);
  consume<<<grid, block, 0, s3>>>(d_a, d_b, n);
  CUDA(cudaGetLastError());
  CUDA(cudaMemcpyAsync(h_out, d_b, bytes, cudaMemcpyDeviceToHost, s3));
  CUDA(cudaEventSynchronize(e2));
  expected.push_back("cudaEventSynchronize | waited: e2 (recorded on s2) for s2: 2 launches (transform x2); " +
                     s1_work);
  CUDA(cudaStreamSynchronize(s3));
  expected.push_back("cudaStreamSynchronize | waited: s3: 2 launches (consume x2), 1 copy DtoH " + four_mib);
  CUDA(cudaEventSynchronize(e3));
  expected.push_back("cudaEventSynchronize | waited: e3 (never recorded)");

  float *pageable = (float *)malloc(bytes);
  for (int i = 0; i < n; ++i) pageable[i] = 0.0f;
  copy_pageable(d_a, pageable, bytes, s1);
  copy_pageable(d_a, pageable, bytes, s1);  // same call site: no second warning
  produce<<<grid, block, 0, s1>>>(d_a, n);
  CUDA(cudaGetLastError());
  CUDA(cudaDeviceSynchronize());
  expected.push_back("cudaDeviceSynchronize | waited: s1: 1 launch (produce), 2 copies HtoD 8.0 MiB");

  // consume(transform(transform(produce))): (4i + 3) - 1, from the consume that ran after e2.
  for (int i = 0; i < n; ++i) {
    if (h_out[i] != 4.0f * i + 2.0f) {
      fprintf(stderr, "wrong result at %d: %f\n", i, h_out[i]);
      return 1;
    }
  }

  free(pageable);
  CUDA(cudaFree(d_a));
  CUDA(cudaFree(d_b));
  CUDA(cudaFreeHost(h_in));
  CUDA(cudaFreeHost(h_out));
  for (cudaEvent_t e : {e1, e2, e3}) CUDA(cudaEventDestroy(e));
  for (cudaStream_t s : {s1, s2, s3}) CUDA(cudaStreamDestroy(s));

  printf("{\"annotations\":[");
  for (size_t i = 0; i < expected.size(); ++i) printf("%s\"%s\"", i ? "," : "", expected[i].c_str());
  printf("],\"pageable_warnings\":1,\"pageable_function\":\"copy_pageable\"}\n");
  return 0;
}
