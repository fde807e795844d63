#include "cudatrace/target/identity.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace cudatrace {
namespace {

const std::string kId = "3f4b1c2d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809";
const std::string kUid = "0f6c2a1e-8d3b-4c5a-9e7f-1a2b3c4d5e6f";

TEST(Identity, HostProcessHasNone) {
  const CgroupIdentity id = parse_cgroup("0::/user.slice/user-0.slice/session-1.scope\n");
  EXPECT_EQ(id.container_id, "");
  EXPECT_EQ(id.pod_uid, "");
}

TEST(Identity, DockerCgroupV1) {
  const CgroupIdentity id =
      parse_cgroup("12:memory:/docker/" + kId + "\n11:cpu,cpuacct:/docker/" + kId + "\n1:name=systemd:/docker/" + kId + "\n");
  EXPECT_EQ(id.container_id, kId);
  EXPECT_EQ(id.pod_uid, "");
}

TEST(Identity, DockerSystemdCgroupV2) {
  EXPECT_EQ(parse_cgroup("0::/system.slice/docker-" + kId + ".scope\n").container_id, kId);
}

TEST(Identity, ContainerdKubepodsSystemdV2) {
  std::string uid_ = kUid;
  for (char& c : uid_)
    if (c == '-') c = '_';
  const CgroupIdentity id = parse_cgroup("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ +
                                         ".slice/cri-containerd-" + kId + ".scope\n");
  EXPECT_EQ(id.container_id, kId);
  EXPECT_EQ(id.pod_uid, kUid);
}

TEST(Identity, GuaranteedPodSystemdHasNoQosSlice) {
  std::string uid_ = kUid;
  for (char& c : uid_)
    if (c == '-') c = '_';
  const CgroupIdentity id =
      parse_cgroup("0::/kubepods.slice/kubepods-pod" + uid_ + ".slice/cri-containerd-" + kId + ".scope\n");
  EXPECT_EQ(id.pod_uid, kUid);
  EXPECT_EQ(id.container_id, kId);
}

TEST(Identity, KubepodsCgroupfsV1) {
  const CgroupIdentity id = parse_cgroup("11:devices:/kubepods/besteffort/pod" + kUid + "/" + kId +
                                         "\n4:memory:/kubepods/besteffort/pod" + kUid + "/" + kId + "\n");
  EXPECT_EQ(id.container_id, kId);
  EXPECT_EQ(id.pod_uid, kUid);
}

TEST(Identity, CrioV2AndItsConmonScope) {
  const std::string path = "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
                           std::string("0f6c2a1e_8d3b_4c5a_9e7f_1a2b3c4d5e6f") + ".slice/crio-";
  EXPECT_EQ(parse_cgroup(path + kId + ".scope\n").container_id, kId);
  const CgroupIdentity conmon = parse_cgroup(path + "conmon-" + kId + ".scope\n");
  EXPECT_EQ(conmon.container_id, "");
  EXPECT_EQ(conmon.pod_uid, kUid);
}

TEST(Identity, HybridHostUsesV1WhenUnifiedSaysNothing) {
  const CgroupIdentity id = parse_cgroup("12:pids:/docker/" + kId + "\n0::/\n");
  EXPECT_EQ(id.container_id, kId);
}

TEST(Identity, PodmanLibpod) {
  EXPECT_EQ(parse_cgroup("0::/machine.slice/libpod-" + kId + ".scope/container\n").container_id, kId);
}

TEST(Identity, MalformedInputNamesNothing) {
  for (const std::string& text : {std::string(), std::string("garbage"), std::string("0::"),
                                  "0::/docker/" + kId.substr(1), "0::/kubepods/pod1234/" + kId + "x",
                                  std::string("0::/kubepods/podzzzzzzzz-8d3b-4c5a-9e7f-1a2b3c4d5e6f/")}) {
    const CgroupIdentity id = parse_cgroup(text);
    EXPECT_EQ(id.container_id, "") << text;
    EXPECT_EQ(id.pod_uid, "") << text;
  }
}

TEST(Identity, ReadsThisProcess) {
  ProcessIdentity me;
  ASSERT_TRUE(read_identity(getpid(), me));
  EXPECT_EQ(me.pid, static_cast<std::uint32_t>(getpid()));
  EXPECT_FALSE(me.comm.empty());
  EXPECT_FALSE(read_identity(0x7ffffff0, me));
}

}  // namespace
}  // namespace cudatrace
