#!/usr/bin/env bash
# Builds the GPU verification kit into BUILD_DIR (default /tmp/gpucheck).
# Usage: bash scripts/gpu/build.sh [BUILD_DIR]
# Env: CUDA_HOME (default /usr/local/cuda), NVCC, CXX.
# Each target is built independently; exits 1 if any failed.
set -u

SRC=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/gpucheck}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
CXX=${CXX:-g++}
ARCH=sm_90 # H100/H200

mkdir -p "$OUT" || exit 1

find_dir() { # find_dir FILE DIR... -> first DIR containing FILE
	local file=$1 d
	shift
	for d in "$@"; do
		[ -e "$d/$file" ] && { echo "$d"; return 0; }
	done
	return 1
}

CUPTI_INC=$(find_dir cupti.h "$CUDA_HOME/extras/CUPTI/include" "$CUDA_HOME/include" \
	"$CUDA_HOME/targets/x86_64-linux/include")
CUPTI_DIRS=("$CUDA_HOME/extras/CUPTI/lib64" "$CUDA_HOME/lib64" "$CUDA_HOME/targets/x86_64-linux/lib")
CUPTI_LINK=-lcupti
CUPTI_LIB=$(find_dir libcupti.so "${CUPTI_DIRS[@]}") ||
	{ CUPTI_LIB=$(find_dir libcupti.so.13 "${CUPTI_DIRS[@]}") && CUPTI_LINK=-l:libcupti.so.13; }
CUDA_STUBS=$(find_dir libcuda.so "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/targets/x86_64-linux/lib/stubs")

failed=()
step() { # step NAME CMD... : run, report, remember failures
	local name=$1
	shift
	echo "+ $*"
	if "$@"; then
		echo "built $name"
	else
		echo "FAILED to build $name" >&2
		failed+=("$name")
	fi
}

if [ -n "$CUPTI_INC" ] && [ -n "$CUPTI_LIB" ]; then
	# Static libstdc++: the library is dlopen'ed into processes (python from
	# a conda-style environment) that may carry an older libstdc++.
	step libcupti_count.so "$CXX" -shared -fPIC -O2 -std=c++17 -Wall -Wextra \
		-I"$CUPTI_INC" -I"$CUDA_HOME/include" "$SRC/cupti_count.cpp" \
		-o "$OUT/libcupti_count.so" -L"$CUPTI_LIB" $CUPTI_LINK -Wl,-rpath,"$CUPTI_LIB" \
		-static-libstdc++ -static-libgcc
else
	echo "FAILED: CUPTI not found under $CUDA_HOME (cupti.h: '${CUPTI_INC}', libcupti.so: '${CUPTI_LIB}')" >&2
	failed+=(libcupti_count.so)
fi

step multistream_shared "$NVCC" -arch=$ARCH -O2 -cudart shared "$SRC/multistream.cu" \
	-o "$OUT/multistream_shared"
step multistream_static "$NVCC" -arch=$ARCH -O2 -cudart static "$SRC/multistream.cu" \
	-o "$OUT/multistream_static"
step stream_events "$NVCC" -arch=$ARCH -O2 "$SRC/stream_events.cu" -o "$OUT/stream_events"
step driver_kernels.fatbin "$NVCC" -fatbin -arch=$ARCH "$SRC/driver_kernels.cu" \
	-o "$OUT/driver_kernels.fatbin"
# Host code only, compiled as C++: nvcc would add cudart fatbin registration.
# Linked against the driver stub, run against the real driver.
step driver_api "$CXX" -x c++ -O2 -Wall -I"$CUDA_HOME/include" "$SRC/driver_api.cu" -x none \
	-o "$OUT/driver_api" ${CUDA_STUBS:+-L"$CUDA_STUBS"} -lcuda

# A library with its own runtime, stripped as cuBLAS is, loaded by a program
# that started CUDA through libcudart.so.
step late_runtime_lib.so bash -c '"$1" -arch=$2 -O2 -shared -Xcompiler -fPIC -cudart static "$3" -o "$4" && strip "$4"' \
	- "$NVCC" "$ARCH" "$SRC/late_runtime_lib.cu" "$OUT/late_runtime_lib.so"
step late_runtime "$NVCC" -arch=$ARCH -O2 -cudart shared "$SRC/late_runtime.cu" -o "$OUT/late_runtime" -ldl

# Launches that fail (issue 35): one build for this GPU, one with sm_80 code only and no PTX.
step launch_failures "$NVCC" -arch=$ARCH -O2 -cudart shared "$SRC/launch_failures.cu" -o "$OUT/launch_failures"
step launch_failures_sm80 "$NVCC" -gencode arch=compute_80,code=sm_80 -O2 -cudart shared \
	"$SRC/launch_failures.cu" -o "$OUT/launch_failures_sm80"

# Where the driver keeps a kernel's name behind each kind of handle (issue 37).
step handle_layout "$NVCC" -arch=$ARCH -O2 -cudart shared "$SRC/handle_layout.cu" -o "$OUT/handle_layout" \
	${CUDA_STUBS:+-L"$CUDA_STUBS"} -lcuda

if [ ${#failed[@]} -gt 0 ]; then
	echo "build: FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "build: all targets in $OUT"
