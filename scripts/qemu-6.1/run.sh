#!/usr/bin/env bash
# Runs the integration and fault suites of BUILD_DIR on Debian 12's own Linux
# 6.1 kernel, booted under QEMU with this host's root shared read-only: the
# verifier, the perf-event uprobes and the BPF features of a real 6.1, with
# the build of this host (docs/kernels.md).
#
# Usage: scripts/qemu-6.1/run.sh [BUILD_DIR]          (default: build)
# Environment: CT_QEMU_TIMEOUT   seconds the guest may run (default 1200: about twice
#                                what the suites take in CI, which stays under 45 min)
#              CT_QEMU_INTEGRATION, CT_QEMU_FAULTS   gtest filters of the two
#              suites (default: each but the tests about time, below)
# Exit status: the suites' (0 when both passed), 1 when the guest gave none
# (it crashed, hung past the timeout, or could not boot).
#
# Needs (scripts/install-deps.sh): qemu-system-x86, busybox-static, cpio, and
# apt's package lists (apt-get update): the kernel is the newest 6.1 that
# Debian's linux-image-amd64 depends on, fetched with apt-get download into
# BUILD_DIR/qemu-6.1 (never committed) and reused while it is the newest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "${1:-build}")
cache=$build/qemu-6.1
# The repository and the build (when it is not inside the repository) are
# shared with the guest apart from the host's root and mounted at their own
# paths there: the guest mounts its own /tmp and /run, which would hide a
# clone or a build that lives under them (a newcomer's first clone often does).
repo=$(cd "$here/../.." && pwd -P)
if [[ $build/ == "$repo"/* ]]; then
  shares=("$repo")
elif [[ $repo/ == "$build"/* ]]; then
  shares=("$build")
else
  shares=("$repo" "$build")
fi
timeout_s=${CT_QEMU_TIMEOUT:-1200}

# Both suites but the tests whose assertions are about time, which emulation
# stretches 20-50x and a busy host further (docs/kernels.md): a latency
# threshold (--min-us), the cost estimate against measured CPU time, a target
# that makes calls for 4 s while cudatrace attaches, 2,400 library loads
# within 60 s, a library load every 100 ms that must go on while cudatrace
# waits, 800,000 calls that must overflow the ring, scrapes timed against
# the start of tracing. Their kernel paths run in the other tests.
about_time=Trace.ErrorsAndMinDurationFilters:Trace.ProbeHitsAndTheCostTheyAddedArePerProcess
integration_filter=${CT_QEMU_INTEGRATION:--$about_time}
about_time=Faults.SigkillOfTheTracerLeavesNoProbeAndTheTargetRunsOn:Faults.LibraryLoadsFromEightThreads*
about_time+=:Faults.AnOutputWithoutAReaderStopsNothing:Faults.CountsStayExactWhenTheRingLosesLines
about_time+=:Faults.PrometheusAnswersEveryScrapeAnd503UntilTracing
# And those that run no probe: input checks, `cudatrace report`, output files
# (their code is the same on every kernel; the native run has them).
no_probes=Faults.Report*:Faults.ValuesThatMeanNothingAreRefusedWithOneLine:Faults.BadInputGetsOneClearLineAndNonZeroExit
no_probes+=:Faults.CommandsThatCannotRunGetOneLineAndStatusThree:Faults.TraceAndTimelineInOneFileAreRefused
no_probes+=:Faults.*SymlinkInAWorldWritableDirectoryIsRefused:Faults.FullDiskGetsOneLineInBothFormats
no_probes+=:Faults.DiskFillingUpWhileTracingExitsSixForEveryOutput:Faults.TimelineOnAFullDeviceGetsOneLineAndStatusSix
faults_filter=${CT_QEMU_FAULTS:--$about_time:$no_probes}

for tool in qemu-system-x86_64 busybox cpio apt-get; do
  command -v "$tool" >/dev/null || { echo "qemu-6.1: $tool is missing (scripts/install-deps.sh)" >&2; exit 1; }
done

# The kernel: the plain amd64 flavour (cloud-amd64 has no 9p), its image and
# the modules that mount a virtio-9p root, extracted from the package.
package=$(apt-cache depends linux-image-amd64 |
  awk '$1 == "Depends:" && $2 ~ /^linux-image-6\.1\.0-[0-9]+-amd64$/ {print $2; exit}')
[ -n "$package" ] || { echo "qemu-6.1: apt knows no linux-image-6.1.0-*-amd64 (apt-get update?)" >&2; exit 1; }
release=${package#linux-image-}
version=$(apt-cache show --no-all-versions "$package" | awk '$1 == "Version:" {print $2}')
kernel=$cache/$release
if [ ! -f "$kernel/unpacked/boot/vmlinuz-$release" ]; then
  rm -rf "$cache" && mkdir -p "$kernel/unpacked"
  (cd "$cache" && apt-get -o APT::Sandbox::User=root download -qq "$package")
  dpkg-deb --fsys-tarfile "$cache/${package}_"*.deb |
    tar -x -C "$kernel/unpacked" --wildcards "./boot/vmlinuz-$release" \
      "./lib/modules/$release/kernel/drivers/virtio/*" "./lib/modules/$release/kernel/net/9p/*" \
      "./lib/modules/$release/kernel/fs/9p/*" "./lib/modules/$release/kernel/fs/netfs/*" \
      "./lib/modules/$release/kernel/fs/fscache/*"
  rm "$cache/${package}_"*.deb
fi
# The initramfs (built each time, in a second): busybox, the modules, our init.
root=$kernel/initramfs
rm -rf "$root" && mkdir -p "$root/bin" "$root/lib"
cp -a "$kernel/unpacked/lib/modules" "$root/lib/"
busybox depmod -b "$root" "$release"
cp "$(command -v busybox)" "$root/bin/busybox"
cp "$here/initramfs-init" "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$kernel/initramfs.gz"

# The job directory, a second (writable) share: what to run in, what came out.
job=$build/qemu-6.1/job
rm -rf "$job" && mkdir -p "$job"
{
  printf 'CT_BUILD=%q\n' "$build"
  printf 'CT_SHARES=(%s)\n' "$(printf '%q ' "${shares[@]}")"
  printf 'CT_INTEGRATION_FILTER=%q\n' "$integration_filter"
  printf 'CT_FAULTS_FILTER=%q\n' "$faults_filter"
  # The guest stops the suites in time to report, before the host's timeout.
  printf 'CT_SUITES_TIMEOUT=%q\n' "$((timeout_s > 120 ? timeout_s - 60 : timeout_s / 2))"
} >"$job/job"

echo "qemu-6.1: booting $package $version under QEMU (TCG), at most ${timeout_s}s"
start=$(date +%s)
# cache=loose on the root: without it one file can show several inodes, and
# uprobes attach to one of them. /dev/kvm here is kvm-pvm, which cannot run a
# stock kernel: emulation (TCG). panic=-1 with -no-reboot: a crash ends QEMU.
share_devices=()
for i in "${!shares[@]}"; do  # (a comma in a QEMU option value is written twice)
  share_devices+=(-fsdev "local,id=share$i,path=${shares[$i]//,/,,},security_model=none,readonly=on,multidevs=remap"
    -device "virtio-9p-pci,fsdev=share$i,mount_tag=share$i")
done
rc=0
timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 \
  -accel tcg -cpu max -smp 1 -m 2G -nodefaults -no-reboot -display none -serial stdio \
  -kernel "$kernel/unpacked/boot/vmlinuz-$release" -initrd "$kernel/initramfs.gz" \
  -append "console=ttyS0 panic=-1 loglevel=4 ct_init=$here/guest-init.sh" \
  -fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap" \
  -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot "${share_devices[@]}" \
  -fsdev "local,id=job,path=$job,security_model=none" \
  -device virtio-9p-pci,fsdev=job,mount_tag=job </dev/null || rc=$?
echo "qemu-6.1: guest ran $(($(date +%s) - start)) s"
if [ ! -f "$job/status" ]; then
  [ "$rc" = 124 ] && echo "qemu-6.1: the guest did not finish in ${timeout_s}s" >&2
  echo "qemu-6.1: the guest reported no result (QEMU exit status $rc)" >&2
  exit 1
fi
status=$(cat "$job/status")
echo "qemu-6.1: the suites on Linux $release exited with status $status"
exit "$status"
