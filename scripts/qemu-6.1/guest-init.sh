#!/bin/bash
# PID 1 of the Linux 6.1 guest of scripts/qemu-6.1/run.sh, run from the host's
# root (read-only over virtio-9p; /dev is already mounted by the initramfs).
# Mounts what the tests write to, runs the suites named in the job share's
# "job" file, writes their exit status to its "status" file and powers off.
# Every step is bounded: the host also kills QEMU after its timeout.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp LANG=C.UTF-8
# Emulation runs 20-50x slower than the VM: the tests' waits get 4x their limits
# (tests/integration/harness.h time_scale; no assertion about time changes).
export CUDATRACE_TEST_TIME_SCALE=4

poweroff_now() {
  sync
  echo o >/proc/sysrq-trigger
  sleep 10  # poweroff is asynchronous; should it fail, exiting panics PID 1 and QEMU ends
  exit 1
}

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs -o mode=1777 tmp /tmp
mount -t tmpfs -o mode=755 run /run
mount -t bpf bpf /sys/fs/bpf
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
busybox ip link set lo up  # the exporter listens on 127.0.0.1 (busybox-static: iproute2 may be absent)
mkdir -p /tmp/job
# cache=none (the default): what the guest writes reaches the host at once.
if ! mount -t 9p -o trans=virtio,version=9p2000.L job /tmp/job; then
  echo "qemu-6.1 guest: cannot mount the job share"
  poweroff_now
fi
. /tmp/job/job
# The repository and the build at their own paths (scripts/qemu-6.1/run.sh):
# under /tmp or /run, the guest's own tmpfs hides the host's copies.
for i in "${!CT_SHARES[@]}"; do
  dir=${CT_SHARES[$i]}
  if ! mkdir -p "$dir" ||
    ! mount -t 9p -o trans=virtio,version=9p2000.L,cache=loose,ro,msize=262144 "share$i" "$dir"; then
    echo "qemu-6.1 guest: cannot mount $dir (share$i)"
    poweroff_now
  fi
done

echo "qemu-6.1 guest: Linux $(uname -r), $(nproc) CPU, BTF: $(test -r /sys/kernel/btf/vmlinux && echo yes || echo no)"
status=0
start=$(date +%s)
run_suite() {  # binary filter; both share CT_SUITES_TIMEOUT
  local left=$((start + CT_SUITES_TIMEOUT - $(date +%s)))
  echo "qemu-6.1 guest: $1 --gtest_filter=$2"
  (cd /tmp && timeout --kill-after=5 "$((left > 1 ? left : 1))" "$CT_BUILD/tests/$1" --gtest_filter="$2") 2>&1 |
    tee -a /tmp/job/output.log
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 124 ] && echo "qemu-6.1 guest: $1 did not finish within ${CT_SUITES_TIMEOUT}s of the start"
  [ "$rc" = 0 ] || status=$rc
}
run_suite integration_tests "$CT_INTEGRATION_FILTER"
run_suite fault_tests "$CT_FAULTS_FILTER"
echo "qemu-6.1 guest: the suites took $(($(date +%s) - start)) s"
echo "$status" >/tmp/job/status
poweroff_now
