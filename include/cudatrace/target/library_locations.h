// Where a host keeps its CUDA libraries, for whole-node mode to probe them
// before any process maps them (docs/prometheus.md, "Probed ahead"): the
// dynamic loader's cache and search directories, the toolkits under
// /usr/local/cuda*, and Python environments' NVIDIA wheels. Only files
// named as the libraries that hold traced APIs are taken: the runtime, the
// driver, NCCL and the math libraries that link the runtime in statically.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cudatrace {

// libcudart.so.13, libcuda.so.1, libcublasLt.so.13, libcudnn_ops.so.9,
// libcudart-d0da41ae.so.11.0 (a wheel's renamed copy)...; not libcufft
// (no runtime inside), libcudart_static.a or libcudadebugger.so.1.
bool is_cuda_library_name(std::string_view basename);
// Whether `basename` is a shared library of `stem` ("libcudart"): the stem,
// then '.', '-' or '_', and ".so" somewhere (libcudart.so.13,
// libcudart.faf08d9a.so.13); not libcudadebugger.so.1 for "libcuda".
bool is_library_of(std::string_view basename, std::string_view stem);

// The x86-64 library paths of a dynamic loader cache (/etc/ld.so.cache, the
// "glibc-ld.so.cache1.1" format, alone or after the old one). Empty if
// `cache` is not one.
std::vector<std::string> ld_cache_paths(std::string_view cache);

// The directories an ld.so.conf names, its `include`s followed (globs
// relative to the file's directory), in order; the files are read under
// `root` ("" for this host's /).
std::vector<std::string> ld_conf_dirs(const std::string& conf_path, const std::string& root = "");

// The CUDA library files of the file system under `root` ("" for
// cudatrace's own /; "/proc/1/root" for the host's, from a container),
// each file once (by device and inode): the loader's cache and directories
// first, then the toolkits, then Python environments. Under a root, paths
// are root + the file's path with its links followed as the root sees them.
std::vector<std::string> find_cuda_libraries(const std::string& root = "");

// The root of the host's files for find_cuda_libraries: "" when cudatrace
// runs in the mount namespace of process 1, else "/proc/1/root" (a
// DaemonSet's container with hostPID: the host's toolkit and driver).
std::string host_root();

}  // namespace cudatrace
