#!/usr/bin/env python3
"""Prove that launcher.py's patches work, against a real launcher process.

    $VENV/bin/python verify_patches.py        # VENV made from requirements.lock

Starts launcher.py (with --exit-with-stdin) on free loopback ports, drives it with boto3, prints
one PASS/FAIL line per check and a closing "N passed, N failed" line; exits 1 on any failure.
Only 127.0.0.1 is used. Every launcher started here dies with this script (stdin EOF).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from typing import Any, Callable

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(HERE, "launcher.py")
PY = sys.executable
REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's default account
VPC_CIDR = "127.16.0.0/16"
SUBNETS = {"us-west-2a": "127.16.1.0/24", "us-west-2b": "127.16.2.0/24", "us-west-2c": "127.16.3.0/24"}

results: list[tuple[bool, str, str]] = []


def check(name: str, ok: bool, detail: Any = "") -> bool:
    detail = str(detail)
    results.append((bool(ok), name, detail))
    print(f"{'PASS' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}", flush=True)
    return bool(ok)


def guarded(name: str, fn: Callable[[], None]) -> None:
    """Run a group of checks; an unexpected exception fails the group instead of the script."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - report everything
        check(name, False, f"unexpected {type(e).__name__}: {e}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_launcher(*extra: str, port: int | None = None) -> tuple[subprocess.Popen, str, float]:
    port = port or free_port()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [PY, LAUNCHER, "--host", "127.0.0.1", "--port", str(port), "--exit-with-stdin", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(os.path.join("/tmp", f"ballast-emulator-{port}.log"), "wb"),
    )
    line = proc.stdout.readline().decode().strip()  # blocks until "ready" or exit
    elapsed = time.monotonic() - t0
    if not line.startswith("ready "):
        proc.kill()
        raise RuntimeError(f"launcher did not get ready (got {line!r}, rc={proc.poll()})")
    return proc, line.split(" ", 1)[1], elapsed


def stop_launcher(proc: subprocess.Popen) -> None:
    proc.stdin.close()  # --exit-with-stdin: EOF ends it
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def client(service: str, url: str, key: str = "testing", secret: str = "testing",
           token: str | None = None, region: str = REGION) -> Any:
    return boto3.client(
        service,
        endpoint_url=url,
        region_name=region,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        aws_session_token=token,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def error_code(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except ClientError as e:
        return e.response["Error"]["Code"]
    return "OK"


# --------------------------------------------------------------------------------------------
# Process behaviour
# --------------------------------------------------------------------------------------------


def verify_process_behaviour(first_ready_s: float) -> None:
    check("startup: 'ready' line within 15 s", first_ready_s < 15, f"{first_ready_s:.2f} s")

    # Port taken: second launcher on a port a first one holds must fail clearly, non-zero.
    proc, url, _ = start_launcher()
    port = url.rsplit(":", 1)[1]
    second = subprocess.run(
        [PY, LAUNCHER, "--host", "127.0.0.1", "--port", port],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
    )
    check(
        "port taken: non-zero exit, message on stderr, nothing on stdout",
        second.returncode != 0 and b"cannot listen" in second.stderr and not second.stdout,
        f"rc={second.returncode}",
    )

    # --exit-with-stdin, parent closes the pipe.
    t0 = time.monotonic()
    proc.stdin.close()
    try:
        proc.wait(timeout=10)
        check("exit-with-stdin: exits on stdin EOF", proc.returncode == 0,
              f"rc={proc.returncode} after {time.monotonic() - t0:.2f} s")
    except subprocess.TimeoutExpired:
        proc.kill()
        check("exit-with-stdin: exits on stdin EOF", False, "still running after 10 s")

    # --exit-with-stdin, parent SIGKILLed: an intermediate python parent starts the launcher with
    # a pipe as stdin, reports its pid, and is killed -9; the launcher must go too.
    parent_code = textwrap.dedent(f"""
        import subprocess, sys, time
        p = subprocess.Popen([{PY!r}, {LAUNCHER!r}, "--port", "{free_port()}", "--exit-with-stdin"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = p.stdout.readline()
        print(p.pid, line.decode().strip(), flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([PY, "-c", parent_code], stdout=subprocess.PIPE)
    pid_line = parent.stdout.readline().decode().split()
    child_pid = int(pid_line[0])
    ready_ok = len(pid_line) > 1 and pid_line[1] == "ready"
    parent.kill()
    parent.wait()
    gone = False
    for _ in range(100):
        try:
            # The child was reparented; reap is not ours, so check /proc state instead of waitpid.
            with open(f"/proc/{child_pid}/stat") as f:
                if f.read().split(")")[1].split()[0] == "Z":
                    gone = True
                    break
        except FileNotFoundError:
            gone = True
            break
        time.sleep(0.1)
    if not gone:
        os.kill(child_pid, 9)
    check("exit-with-stdin: dies when its parent is SIGKILLed", ready_ok and gone)


# --------------------------------------------------------------------------------------------
# Patches (no IAM enforcement)
# --------------------------------------------------------------------------------------------


class Cloud:
    """The fixture the patch checks share: VPC, 3 subnets, SG, profile, launch template."""

    def __init__(self, url: str):
        self.ec2 = client("ec2", url)
        self.asg = client("autoscaling", url)
        self.iam = client("iam", url)
        vpc = self.ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
        self.subnets: dict[str, str] = {}  # subnet id -> az
        self.subnet_cidr: dict[str, str] = {}
        for az, cidr in SUBNETS.items():
            sid = self.ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=az)["Subnet"]["SubnetId"]
            self.subnets[sid] = az
            self.subnet_cidr[sid] = cidr
        self.sg = self.ec2.create_security_group(GroupName="nodes", Description="n", VpcId=vpc)["GroupId"]
        self.ami = self.ec2.describe_images()["Images"][0]["ImageId"]
        trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
        self.iam.create_role(RoleName="nodes.c1", AssumeRolePolicyDocument=json.dumps(trust))
        self.profile_arn = self.iam.create_instance_profile(InstanceProfileName="nodes.c1")["InstanceProfile"]["Arn"]
        self.iam.add_role_to_instance_profile(InstanceProfileName="nodes.c1", RoleName="nodes.c1")
        self.user_data_v1 = b64("#!/bin/sh\necho config v1\n")
        self.user_data_v2 = b64("#!/bin/sh\necho config v2 \u2713\n")
        self.lt_id = self.ec2.create_launch_template(
            LaunchTemplateName="nodes.c1",
            LaunchTemplateData={
                "ImageId": self.ami,
                "InstanceType": "t3.medium",
                "UserData": self.user_data_v1,
                "SecurityGroupIds": [self.sg],
                "IamInstanceProfile": {"Name": "nodes.c1"},
                "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 2},
                "TagSpecifications": [{"ResourceType": "instance", "Tags": [
                    {"Key": "ballast.io/config-hash", "Value": "h1"}, {"Key": "Name", "Value": "nodes.c1"}]}],
            },
        )["LaunchTemplate"]["LaunchTemplateId"]

    def group_instances(self, group: str) -> list[dict]:
        resp = self.ec2.describe_instances(Filters=[
            {"Name": "tag:aws:autoscaling:groupName", "Values": [group]},
            {"Name": "instance-state-name", "Values": ["running", "pending"]}])
        return [i for r in resp["Reservations"] for i in r["Instances"]]

    def az_counts(self, group: str) -> Counter:
        return Counter(i["Placement"]["AvailabilityZone"] for i in self.group_instances(group))


def tags_of(instance: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def verify_tag_lookup(c: Cloud) -> None:
    """patch_tag_lookup_by_resource: each resource's own tags, exactly as moto's DescribeTags would give them."""
    image = c.ec2.describe_images()["Images"][0]["ImageId"]
    ids = [i["InstanceId"] for i in c.ec2.run_instances(ImageId=image, MinCount=3, MaxCount=3)["Instances"]]
    c.ec2.create_tags(Resources=ids, Tags=[{"Key": "lookup", "Value": "all"}])
    c.ec2.create_tags(Resources=[ids[0]], Tags=[{"Key": "lookup-one", "Value": "first"}, {"Key": "z", "Value": "1"}])
    # Another resource whose id shares no tag with the instances, and a tag key that is a prefix of another.
    c.ec2.create_tags(Resources=[c.sg], Tags=[{"Key": "lookup-one", "Value": "first"}])
    described = {i["InstanceId"]: tags_of(i) for r in c.ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]}
    by_describe_tags: dict[str, dict[str, str]] = {}
    for t in c.ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": ids}])["Tags"]:
        by_describe_tags.setdefault(t["ResourceId"], {})[t["Key"]] = t["Value"]
    check("tags: each instance's tags equal DescribeTags' for it", described == by_describe_tags, described)
    first = c.ec2.describe_instances(Filters=[{"Name": "tag:lookup-one", "Values": ["first"]}])
    found = [i["InstanceId"] for r in first["Reservations"] for i in r["Instances"]]
    check("tags: a tag: filter selects exactly the tagged instance", found == [ids[0]], found)
    c.ec2.delete_tags(Resources=[ids[0]], Tags=[{"Key": "lookup-one"}])
    left = c.ec2.describe_instances(Filters=[{"Name": "tag:lookup-one", "Values": ["*"]}])
    check("tags: a deleted tag no longer matches", not left["Reservations"], left["Reservations"])
    c.ec2.terminate_instances(InstanceIds=ids)


def verify_launch_template_versions(c: Cloud) -> None:
    v2 = c.ec2.create_launch_template_version(
        LaunchTemplateId=c.lt_id, SourceVersion="1", VersionDescription="v2",
        LaunchTemplateData={"UserData": c.user_data_v2, "TagSpecifications": [{"ResourceType": "instance", "Tags": [
            {"Key": "ballast.io/config-hash", "Value": "h2"}, {"Key": "Name", "Value": "nodes.c1"}]}]},
    )["LaunchTemplateVersion"]
    check("a/b: CreateLaunchTemplateVersion with UserData+SourceVersion succeeds", v2["VersionNumber"] == 2)
    d = c.ec2.describe_launch_template_versions(LaunchTemplateId=c.lt_id, Versions=["2"])[
        "LaunchTemplateVersions"][0]["LaunchTemplateData"]
    check("a: version's UserData reads back as the base64 sent", d.get("UserData") == c.user_data_v2)
    check(
        "b: SourceVersion fields inherited (ImageId, InstanceType, SGs, profile, metadata options)",
        d.get("ImageId") == c.ami and d.get("InstanceType") == "t3.medium"
        and d.get("SecurityGroupIds") == [c.sg] and d.get("IamInstanceProfile") == {"Name": "nodes.c1"}
        and d.get("MetadataOptions", {}).get("HttpTokens") == "required",
        json.dumps({k: d.get(k) for k in ("ImageId", "InstanceType", "IamInstanceProfile")}),
    )
    check("b: sent fields override the source's (tag hash h2)",
          "h2" in json.dumps(d.get("TagSpecifications")) and "h1" not in json.dumps(d.get("TagSpecifications")))
    v1 = c.ec2.describe_launch_template_versions(LaunchTemplateId=c.lt_id, Versions=["1"])[
        "LaunchTemplateVersions"][0]["LaunchTemplateData"]
    check("b: source version unchanged", v1.get("UserData") == c.user_data_v1 and "h1" in json.dumps(v1))
    # Without SourceVersion a version holds only what was sent (as on AWS).
    v3 = c.ec2.create_launch_template_version(
        LaunchTemplateId=c.lt_id, LaunchTemplateData={"ImageId": c.ami, "UserData": c.user_data_v1})
    d3 = v3["LaunchTemplateVersion"]["LaunchTemplateData"]
    check("b: without SourceVersion only the sent fields", "InstanceType" not in d3 and d3.get("UserData") == c.user_data_v1)
    # Unknown / invalid source versions are client errors, not 500s.
    codes = {error_code(lambda v=v: c.ec2.create_launch_template_version(
        LaunchTemplateId=c.lt_id, SourceVersion=v, LaunchTemplateData={})) for v in ("9", "0", "x")}
    check("b: bad SourceVersion -> InvalidLaunchTemplateId.VersionNotFound", codes == {"InvalidLaunchTemplateId.VersionNotFound"}, str(codes))
    bad = error_code(lambda: c.ec2.create_launch_template_version(
        LaunchTemplateId=c.lt_id, LaunchTemplateData={"UserData": "not base64!"}))
    check("a: invalid base64 user-data rejected like CreateLaunchTemplate", bad != "OK", bad)


def verify_register_image_root_device_name(c: Cloud) -> None:
    xvda = c.ec2.register_image(Name="root-xvda", RootDeviceName="/dev/xvda")["ImageId"]
    sda1 = c.ec2.register_image(Name="root-sda1", RootDeviceName="/dev/sda1")["ImageId"]
    bare = c.ec2.register_image(Name="root-none")["ImageId"]
    names = {i["ImageId"]: i.get("RootDeviceName")
             for i in c.ec2.describe_images(ImageIds=[xvda, sda1, bare])["Images"]}
    check("RegisterImage keeps RootDeviceName (/dev/xvda, /dev/sda1, none)",
          names == {xvda: "/dev/xvda", sda1: "/dev/sda1", bare: None}, json.dumps(names))


def verify_asg(c: Cloud) -> None:
    subnet_ids = list(c.subnets)
    c.asg.create_auto_scaling_group(
        AutoScalingGroupName="nodes.c1",
        LaunchTemplate={"LaunchTemplateId": c.lt_id, "Version": "2"},
        MinSize=0, MaxSize=12, DesiredCapacity=3,
        VPCZoneIdentifier=",".join(subnet_ids),
        Tags=[
            {"Key": "KubernetesCluster", "Value": "c1", "PropagateAtLaunch": True},
            {"Key": "not-propagated", "Value": "x", "PropagateAtLaunch": False},
        ],
    )
    insts = c.group_instances("nodes.c1")
    check("a: ASG launch from a CreateLaunchTemplateVersion version (no HTTP 500)", len(insts) == 3, f"{len(insts)} instances")

    counts = c.az_counts("nodes.c1")
    check("c: create spreads 3 instances over 3 AZs", sorted(counts.values()) == [1, 1, 1], dict(counts))
    in_subnet = all(
        i["SubnetId"] in c.subnets and c.subnets[i["SubnetId"]] == i["Placement"]["AvailabilityZone"]
        and ipaddress.ip_address(i["PrivateIpAddress"]) in ipaddress.ip_network(c.subnet_cidr[i["SubnetId"]])
        for i in insts)
    check("c: subnet matches AZ and private IP lies in the subnet CIDR", in_subnet,
          ", ".join(f"{i['SubnetId']}:{i['PrivateIpAddress']}" for i in insts))

    i0 = insts[0]
    ud = c.ec2.describe_instance_attribute(InstanceId=i0["InstanceId"], Attribute="userData")["UserData"]["Value"]
    check("a: DescribeInstanceAttribute userData == base64 sent in the version", ud == c.user_data_v2)
    check("a: user-data decodes to the script", base64.b64decode(ud).decode() == "#!/bin/sh\necho config v2 \u2713\n")

    t = tags_of(i0)
    check("tags: aws:autoscaling:groupName", t.get("aws:autoscaling:groupName") == "nodes.c1")
    check("tags: launch template TagSpecifications of the group's version", t.get("ballast.io/config-hash") == "h2", str(t.get("ballast.io/config-hash")))
    check("tags: ASG tag with PropagateAtLaunch=true present, =false absent",
          t.get("KubernetesCluster") == "c1" and "not-propagated" not in t)
    check("bug 4: aws:ec2launchtemplate:version is the group's version",
          t.get("aws:ec2launchtemplate:version") == "2" and t.get("aws:ec2launchtemplate:id") == c.lt_id,
          str(t.get("aws:ec2launchtemplate:version")))

    check("d: IamInstanceProfile (Name in template) on every ASG instance",
          all(i.get("IamInstanceProfile", {}).get("Arn") == c.profile_arn for i in insts),
          str([i.get("IamInstanceProfile") for i in insts][:1]))
    check("d: MetadataOptions HttpTokens=required, HopLimit=2 on every ASG instance",
          all(i["MetadataOptions"]["HttpTokens"] == "required" and i["MetadataOptions"]["HttpPutResponseHopLimit"] == 2 for i in insts),
          str(insts[0]["MetadataOptions"]))
    assoc = c.ec2.describe_iam_instance_profile_associations()["IamInstanceProfileAssociations"]
    check("d: one IAM profile association per instance", len({a["InstanceId"] for a in assoc}) == 3, str(len(assoc)))

    # Scale out: 3 -> 6 -> 7.
    c.asg.set_desired_capacity(AutoScalingGroupName="nodes.c1", DesiredCapacity=6)
    counts = c.az_counts("nodes.c1")
    check("c: scale-out to 6 gives 2/2/2", sorted(counts.values()) == [2, 2, 2], dict(counts))
    c.asg.update_auto_scaling_group(AutoScalingGroupName="nodes.c1", DesiredCapacity=7)
    counts = c.az_counts("nodes.c1")
    check("c: scale-out to 7 (UpdateAutoScalingGroup) gives 3/2/2", sorted(counts.values()) == [2, 2, 3], dict(counts))

    # Replacement via EC2 TerminateInstances: terminate one in an AZ that has 2 -> back in that AZ.
    small_az = min(counts, key=lambda az: (counts[az], az))
    victim = next(i for i in c.group_instances("nodes.c1") if i["Placement"]["AvailabilityZone"] == small_az)
    c.ec2.terminate_instances(InstanceIds=[victim["InstanceId"]])
    after = c.group_instances("nodes.c1")
    counts2 = c.az_counts("nodes.c1")
    check("replacement: TerminateInstances of an ASG instance is replaced at once",
          len(after) == 7 and victim["InstanceId"] not in {i["InstanceId"] for i in after}, f"{len(after)} running")
    check("c: replacement goes to the AZ that lost the instance", counts2 == counts, f"{dict(counts2)} (lost one in {small_az})")
    # Replacement via the ASG API, without decrement.
    victim2 = c.group_instances("nodes.c1")[0]
    c.asg.terminate_instance_in_auto_scaling_group(InstanceId=victim2["InstanceId"], ShouldDecrementDesiredCapacity=False)
    counts3 = c.az_counts("nodes.c1")
    check("replacement: TerminateInstanceInAutoScalingGroup(no decrement) replaced in the same AZ",
          counts3 == counts and len(c.group_instances("nodes.c1")) == 7, dict(counts3))

    # Bug 4 / drift: a newer version launched via $Latest is reported per instance.
    c.ec2.create_launch_template_version(
        LaunchTemplateId=c.lt_id, SourceVersion="2", LaunchTemplateData={"TagSpecifications": [
            {"ResourceType": "instance", "Tags": [{"Key": "ballast.io/config-hash", "Value": "h4"}]}]})
    before = {i["InstanceId"] for i in c.group_instances("nodes.c1")}
    c.asg.update_auto_scaling_group(AutoScalingGroupName="nodes.c1",
                                    LaunchTemplate={"LaunchTemplateId": c.lt_id, "Version": "$Latest"}, DesiredCapacity=8)
    (newest,) = [i for i in c.group_instances("nodes.c1") if i["InstanceId"] not in before]
    t = tags_of(newest)
    check("bug 4: instance from $Latest (v4) carries version tag 4 and the v4 hash",
          t.get("aws:ec2launchtemplate:version") == "4" and t.get("ballast.io/config-hash") == "h4",
          f"{t.get('aws:ec2launchtemplate:version')} {t.get('ballast.io/config-hash')}")
    asi = {a["InstanceId"]: a["LaunchTemplate"]["Version"] for a in
           c.asg.describe_auto_scaling_instances()["AutoScalingInstances"] if a["AutoScalingGroupName"] == "nodes.c1"}
    check("bug 4: DescribeAutoScalingInstances reports each instance's own version",
          asi[newest["InstanceId"]] == "4" and sorted(set(asi.values())) == ["2", "4"], str(Counter(asi.values())))
    check("d: v4 (SourceVersion 2) instance still has the profile and IMDSv2",
          newest.get("IamInstanceProfile", {}).get("Arn") == c.profile_arn and newest["MetadataOptions"]["HttpTokens"] == "required")

    # Scale-in balancing (bug 6): 8 (3/3/2) -> 4 -> 3.
    c.asg.set_desired_capacity(AutoScalingGroupName="nodes.c1", DesiredCapacity=4)
    counts = c.az_counts("nodes.c1")
    check("bug 6: scale-in 8 -> 4 stays balanced (max-min <= 1)",
          sum(counts.values()) == 4 and len(counts) == 3 and max(counts.values()) - min(counts.values()) <= 1, dict(counts))
    c.asg.set_desired_capacity(AutoScalingGroupName="nodes.c1", DesiredCapacity=3)
    counts = c.az_counts("nodes.c1")
    check("bug 6: scale-in to 3 gives 1/1/1", sorted(counts.values()) == [1, 1, 1], dict(counts))

    # Scale-in with protection: protected instances survive.
    keep = c.group_instances("nodes.c1")[0]["InstanceId"]
    c.asg.set_instance_protection(AutoScalingGroupName="nodes.c1", InstanceIds=[keep], ProtectedFromScaleIn=True)
    c.asg.set_desired_capacity(AutoScalingGroupName="nodes.c1", DesiredCapacity=1)
    left = [i["InstanceId"] for i in c.group_instances("nodes.c1")]
    check("bug 6: scale-in keeps the protected instance", left == [keep], str(left))


def verify_mixed_instances_and_interface(c: Cloud) -> None:
    """patch_asg_mixed_instances_policy and patch_launch_template_network_interface: a mixed group launches its
    desired count of the first override's type, keeps its policy through a resize and returns its lifetime; an
    instance launched from a template's interface has that interface's security group and public IP."""
    lt = c.ec2.create_launch_template(LaunchTemplateName="mixed.c1", LaunchTemplateData={
        "ImageId": c.ami, "InstanceType": "t3.medium",
        "NetworkInterfaces": [{"DeviceIndex": 0, "AssociatePublicIpAddress": True, "Groups": [c.sg],
                               "DeleteOnTermination": True}],
    })["LaunchTemplate"]["LaunchTemplateId"]
    subnet = next(iter(c.subnets))
    policy = {
        "LaunchTemplate": {"LaunchTemplateSpecification": {"LaunchTemplateId": lt, "Version": "$Default"},
                           "Overrides": [{"InstanceType": "m5.large"}, {"InstanceType": "m5a.large"}]},
        "InstancesDistribution": {"OnDemandBaseCapacity": 0, "OnDemandPercentageAboveBaseCapacity": 5,
                                  "SpotAllocationStrategy": "lowest-price", "SpotInstancePools": 3},
    }
    c.asg.create_auto_scaling_group(AutoScalingGroupName="mixed", MixedInstancesPolicy=policy, MinSize=2,
                                    MaxSize=3, DesiredCapacity=2, VPCZoneIdentifier=subnet,
                                    MaxInstanceLifetime=604800)
    instances = c.group_instances("mixed")
    check("mixed group launches its desired capacity", len(instances) == 2, len(instances))
    check("mixed group runs the first override's type",
          {i["InstanceType"] for i in instances} == {"m5.large"}, [i["InstanceType"] for i in instances])
    check("template interface's security group reaches the instance",
          all([g["GroupId"] for g in i.get("SecurityGroups", [])] == [c.sg] for i in instances),
          [i.get("SecurityGroups") for i in instances])
    check("template interface's public IP reaches the instance",
          all(i.get("PublicIpAddress") for i in instances), [i.get("PublicIpAddress") for i in instances])
    c.asg.update_auto_scaling_group(AutoScalingGroupName="mixed", MinSize=1, MaxSize=3, DesiredCapacity=3)
    group = c.asg.describe_auto_scaling_groups(AutoScalingGroupNames=["mixed"])["AutoScalingGroups"][0]
    check("a resize keeps the mixed instances policy",
          [o["InstanceType"] for o in group.get("MixedInstancesPolicy", {}).get("LaunchTemplate", {})
           .get("Overrides", [])] == ["m5.large", "m5a.large"], group.get("MixedInstancesPolicy"))
    check("max instance lifetime is returned", group.get("MaxInstanceLifetime") == 604800,
          group.get("MaxInstanceLifetime"))
    check("a resize of a mixed group launches to its new capacity", len(c.group_instances("mixed")) == 3,
          len(c.group_instances("mixed")))
    c.asg.update_auto_scaling_group(AutoScalingGroupName="mixed", MinSize=0, MaxSize=0, DesiredCapacity=0)
    c.asg.delete_auto_scaling_group(AutoScalingGroupName="mixed", ForceDelete=True)


def verify_profile_by_arn_and_plain_run(c: Cloud) -> None:
    lt2 = c.ec2.create_launch_template(
        LaunchTemplateName="masters.c1",
        LaunchTemplateData={"ImageId": c.ami, "InstanceType": "t3.medium",
                            "IamInstanceProfile": {"Arn": c.profile_arn},
                            "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}},
    )["LaunchTemplate"]["LaunchTemplateId"]
    one_subnet = next(s for s, az in c.subnets.items() if az == "us-west-2b")
    c.asg.create_auto_scaling_group(AutoScalingGroupName="master-us-west-2b.c1", LaunchTemplate={"LaunchTemplateId": lt2},
                                    MinSize=1, MaxSize=1, VPCZoneIdentifier=one_subnet)
    (i,) = c.group_instances("master-us-west-2b.c1")
    check("d: IamInstanceProfile given by Arn in template applied",
          i.get("IamInstanceProfile", {}).get("Arn") == c.profile_arn and i["MetadataOptions"]["HttpPutResponseHopLimit"] == 1)
    check("c: single-subnet group stays in its subnet", i["SubnetId"] == one_subnet and i["Placement"]["AvailabilityZone"] == "us-west-2b")
    check("tags: no ballast tag when the template has no TagSpecifications", "ballast.io/config-hash" not in tags_of(i))

    # Plain RunInstances from a launch template, 2 instances: both get profile + options.
    r = c.ec2.run_instances(LaunchTemplate={"LaunchTemplateId": c.lt_id, "Version": "2"}, MinCount=2, MaxCount=2,
                            SubnetId=one_subnet)
    ids = [x["InstanceId"] for x in r["Instances"]]
    d = [x for res in c.ec2.describe_instances(InstanceIds=ids)["Reservations"] for x in res["Instances"]]
    check("d: RunInstances(LaunchTemplate, count 2): profile + IMDSv2 on both",
          all(x.get("IamInstanceProfile", {}).get("Arn") == c.profile_arn and x["MetadataOptions"]["HttpTokens"] == "required" for x in d))
    # Explicit MetadataOptions on RunInstances override the template's.
    r = c.ec2.run_instances(LaunchTemplate={"LaunchTemplateId": c.lt_id, "Version": "2"}, MinCount=1, MaxCount=1,
                            SubnetId=one_subnet, MetadataOptions={"HttpPutResponseHopLimit": 3})
    md = r["Instances"][0]["MetadataOptions"]
    check("d: RunInstances MetadataOptions override the template's field by field",
          md["HttpPutResponseHopLimit"] == 3 and md["HttpTokens"] == "required", str(md))
    # A template naming a missing profile: the launch fails cleanly (no half-made instance).
    c.ec2.create_launch_template(LaunchTemplateName="broken", LaunchTemplateData={
        "ImageId": c.ami, "IamInstanceProfile": {"Name": "does-not-exist"}})
    before = len([x for res in c.ec2.describe_instances()["Reservations"] for x in res["Instances"]])
    code = error_code(lambda: c.ec2.run_instances(LaunchTemplate={"LaunchTemplateName": "broken"}, MinCount=1, MaxCount=1))
    after = len([x for res in c.ec2.describe_instances()["Reservations"] for x in res["Instances"]])
    check("d: template with a missing profile -> client error, no instance", code not in ("OK", "500") and before == after, code)


# --------------------------------------------------------------------------------------------
# IAM enforcement
# --------------------------------------------------------------------------------------------

ADMIN_POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


def verify_iam_enforcement() -> None:
    n = 3  # CreateUser, PutUserPolicy, CreateAccessKey: nothing else may come first
    proc, url, _ = start_launcher("--iam-enforce", "--initial-no-auth", str(n),
                                    "--ec2-service-user", "localcloud-ec2")
    try:
        iam0 = client("iam", url)
        iam0.create_user(UserName="ballast-admin")                                    # request 1
        iam0.put_user_policy(UserName="ballast-admin", PolicyName="admin",           # request 2
                             PolicyDocument=json.dumps(ADMIN_POLICY))
        key = iam0.create_access_key(UserName="ballast-admin")["AccessKey"]          # request 3
        ak, sk = key["AccessKeyId"], key["SecretAccessKey"]
        check("iam: admin user + policy + key created in the first 3 requests", ak.startswith("AKIA"), ak[:4] + "...")

        code = error_code(lambda: client("ec2", url).describe_vpcs())
        check("iam: request 4 with the dummy 'testing' key is refused", code in ("AuthFailure", "InvalidClientTokenId"), code)

        admin_ec2 = client("ec2", url, ak, sk)
        check("iam: admin key works (ec2 DescribeVpcs)", error_code(admin_ec2.describe_vpcs) == "OK")
        vpc_id = admin_ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
        code = error_code(lambda: admin_ec2.create_security_group(
            GroupName="spaces", Description="a description with spaces", VpcId=vpc_id))
        check("signature: a signed body with spaces is accepted under enforcement", code == "OK", code)
        admin_iam = client("iam", url, ak, sk)
        admin_s3 = client("s3", url, ak, sk)
        admin_sts = client("sts", url, ak, sk)
        who = admin_sts.get_caller_identity()["Arn"]
        check("iam: admin identity", who == f"arn:aws:iam::{ACCOUNT}:user/ballast-admin", who)

        code = error_code(lambda: client("ec2", url, "AKIAUNKNOWNUNKNOWN00", "x" * 40).describe_vpcs())
        check("iam: unknown access key refused (ec2)", code in ("AuthFailure", "InvalidClientTokenId"), code)
        code = error_code(lambda: client("ec2", url, ak, "wrong" * 8).describe_vpcs())
        check("iam: admin key with wrong secret refused (ec2)", code in ("AuthFailure", "SignatureDoesNotMatch"), code)
        code = error_code(lambda: client("s3", url, "AKIAUNKNOWNUNKNOWN00", "x" * 40).list_buckets())
        check("iam: unknown access key refused (s3)", code == "InvalidAccessKeyId", code)

        admin_iam.create_user(UserName="nobody")
        nk = admin_iam.create_access_key(UserName="nobody")["AccessKey"]
        nobody_ec2 = client("ec2", url, nk["AccessKeyId"], nk["SecretAccessKey"])
        code = error_code(nobody_ec2.describe_vpcs)
        check("iam: user without policies denied (ec2)", code in ("AccessDenied", "UnauthorizedOperation"), code)
        code = error_code(lambda: client("s3", url, nk["AccessKeyId"], nk["SecretAccessKey"]).list_buckets())
        check("iam: user without policies denied (s3)", code == "AccessDenied", code)

        # Auto Scaling calls are authorized against the named group's ARN (patch_autoscaling_group_resource_for_iam).
        admin_asg = client("autoscaling", url, ak, sk)
        subnet = admin_ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.42.1.0/24",
                                         AvailabilityZone="us-west-2a")["Subnet"]["SubnetId"]
        image = admin_ec2.describe_images()["Images"][0]["ImageId"]
        lt = admin_ec2.create_launch_template(LaunchTemplateName="asg-iam", LaunchTemplateData={
            "ImageId": image, "InstanceType": "t3.medium"})["LaunchTemplate"]["LaunchTemplateId"]
        for name in ("mine.c1", "other.c1"):
            admin_asg.create_auto_scaling_group(AutoScalingGroupName=name, MinSize=0, MaxSize=1, DesiredCapacity=0,
                                                LaunchTemplate={"LaunchTemplateId": lt}, VPCZoneIdentifier=subnet)
        admin_iam.create_user(UserName="hooks")
        admin_iam.put_user_policy(UserName="hooks", PolicyName="hooks", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": [
                "autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"],
                "Resource": [f"arn:aws:autoscaling:{REGION}:*:autoScalingGroup:*:autoScalingGroupName/mine.c1"]}]}))
        hk = admin_iam.create_access_key(UserName="hooks")["AccessKey"]
        hooks_asg = client("autoscaling", url, hk["AccessKeyId"], hk["SecretAccessKey"])

        def complete(group: str) -> str:
            return error_code(lambda: hooks_asg.complete_lifecycle_action(
                AutoScalingGroupName=group, LifecycleHookName="h", InstanceId="i-0", LifecycleActionResult="CONTINUE"))

        codes = (complete("mine.c1"), complete("other.c1"))
        check("iam: a statement naming a group's ARN allows CompleteLifecycleAction on that group only "
              "(ValidationError: no action waiting; AccessDenied elsewhere)",
              codes == ("ValidationError", "AccessDenied"), codes)

        # GetQueueUrl is authorized against the named queue's ARN (patch_sqs_get_queue_url_resource).
        admin_sqs = client("sqs", url, ak, sk)
        for name in ("mine-termination", "other-termination"):
            admin_sqs.create_queue(QueueName=name)
        admin_iam.put_user_policy(UserName="hooks", PolicyName="queue", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": [
                "sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:DeleteMessage"],
                "Resource": [f"arn:aws:sqs:{REGION}:*:mine-termination"]}]}))
        hooks_sqs = client("sqs", url, hk["AccessKeyId"], hk["SecretAccessKey"])
        codes = tuple(error_code(lambda n=n: hooks_sqs.get_queue_url(QueueName=n))
                      for n in ("mine-termination", "other-termination"))
        check("iam: GetQueueUrl is allowed on the queue the statement names only", codes[0] == "OK" and codes[1] != "OK",
              codes)
        mine_url = hooks_sqs.get_queue_url(QueueName="mine-termination")["QueueUrl"]
        code = error_code(lambda: hooks_sqs.receive_message(QueueUrl=mine_url, WaitTimeSeconds=0))
        check("iam: ... and ReceiveMessage on it", code == "OK", code)

        # Assumed role with a narrow S3 policy.
        admin_s3.create_bucket(Bucket="state", CreateBucketConfiguration={"LocationConstraint": REGION})
        admin_s3.put_object(Bucket="state", Key="c1/nodes/spec.yaml", Body=b"spec")
        admin_s3.put_object(Bucket="state", Key="c1/pki/ca/key.pem", Body=b"secret")
        trust = {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"},
            {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/ballast-admin"}, "Action": "sts:AssumeRole"}]}
        role = admin_iam.create_role(RoleName="nodes.c1", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        admin_iam.put_role_policy(RoleName="nodes.c1", PolicyName="read-node-spec", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::state/c1/nodes/*"}]}))
        creds = admin_sts.assume_role(RoleArn=role, RoleSessionName="i-1")["Credentials"]
        role_s3 = client("s3", url, creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])
        body = role_s3.get_object(Bucket="state", Key="c1/nodes/spec.yaml")["Body"].read()
        check("iam: assumed role reads an allowed S3 key", body == b"spec")
        code = error_code(lambda: role_s3.get_object(Bucket="state", Key="c1/pki/ca/key.pem"))
        check("iam: assumed role denied GetObject outside its policy (S3 honours role creds)", code == "AccessDenied", code)
        code = error_code(lambda: role_s3.put_object(Bucket="state", Key="c1/nodes/x", Body=b"x"))
        check("iam: assumed role denied PutObject (action outside its policy)", code == "AccessDenied", code)
        role_ec2 = client("ec2", url, creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])
        code = error_code(role_ec2.describe_instances)
        check("iam: assumed role denied ec2 DescribeInstances", code in ("AccessDenied", "UnauthorizedOperation"), code)
        code = error_code(lambda: client("s3", url, creds["AccessKeyId"], creds["SecretAccessKey"], "bogus").get_object(
            Bucket="state", Key="c1/nodes/spec.yaml"))
        check("iam: assumed-role key with a wrong session token refused", code != "OK", code)

        # Trust policies (patched evaluation): who may assume what.
        def trust_role(name: str, principal: dict) -> str:
            admin_iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}]}))
            return f"arn:aws:iam::{ACCOUNT}:role/{name}"

        svc_role = trust_role("svc-only", {"Service": "ec2.amazonaws.com"})
        root_role = trust_role("acct-root", {"AWS": f"arn:aws:iam::{ACCOUNT}:root"})
        code = error_code(lambda: admin_sts.assume_role(RoleArn=svc_role, RoleSessionName="s1"))
        check("trust: operator cannot assume a role trusting only ec2.amazonaws.com (no 500)", code == "AccessDenied", code)
        code = error_code(lambda: admin_sts.assume_role(RoleArn=root_role, RoleSessionName="s1"))
        check("trust: account-root principal lets the account's admin assume", code == "OK", code)
        admin_iam.create_user(UserName="localcloud-ec2")
        admin_iam.put_user_policy(UserName="localcloud-ec2", PolicyName="assume", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}]}))
        ek = admin_iam.create_access_key(UserName="localcloud-ec2")["AccessKey"]
        svc_sts = client("sts", url, ek["AccessKeyId"], ek["SecretAccessKey"])
        code = error_code(lambda: svc_sts.assume_role(RoleArn=svc_role, RoleSessionName="i-0123"))
        check("trust: --ec2-service-user assumes a role trusting ec2.amazonaws.com", code == "OK", code)
        code = error_code(lambda: svc_sts.assume_role(RoleArn=root_role, RoleSessionName="i-0123"))
        check("trust: account-root principal + identity policy lets the service user assume too", code == "OK", code)
        nobody_sts = client("sts", url, nk["AccessKeyId"], nk["SecretAccessKey"])
        code = error_code(lambda: nobody_sts.assume_role(RoleArn=root_role, RoleSessionName="s1"))
        check("trust: account-root trust still needs the caller's own sts:AssumeRole permission", code == "AccessDenied", code)

        verify_volume_attachment_conditions(url, admin_ec2, admin_iam, admin_sts, trust)
        verify_route_controller_conditions(url, admin_ec2, admin_iam, admin_sts, trust)
        verify_policy_variable_userid(url, client("s3", url, ak, sk), admin_iam, admin_sts, trust)

        # Under enforcement, ASG launches still work for the admin and apply the patches.
        asg = client("autoscaling", url, ak, sk)
        vpc = admin_ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
        subs = [admin_ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=az)["Subnet"]["SubnetId"]
                for az, cidr in SUBNETS.items()]
        admin_iam.create_instance_profile(InstanceProfileName="nodes.c1")
        admin_iam.add_role_to_instance_profile(InstanceProfileName="nodes.c1", RoleName="nodes.c1")
        ami = admin_ec2.describe_images()["Images"][0]["ImageId"]
        admin_ec2.create_launch_template(LaunchTemplateName="nodes-enforced", LaunchTemplateData={
            "ImageId": ami, "IamInstanceProfile": {"Name": "nodes.c1"}, "UserData": b64("x")})
        asg.create_auto_scaling_group(AutoScalingGroupName="n", LaunchTemplate={"LaunchTemplateName": "nodes-enforced"},
                                      MinSize=3, MaxSize=3, VPCZoneIdentifier=",".join(subs))
        insts = [i for r in admin_ec2.describe_instances(Filters=[{"Name": "tag:aws:autoscaling:groupName", "Values": ["n"]}])[
            "Reservations"] for i in r["Instances"]]
        check("iam: under enforcement the admin's ASG launches 3 instances over 3 AZs with the profile",
              len({i["Placement"]["AvailabilityZone"] for i in insts}) == 3 and all("IamInstanceProfile" in i for i in insts))
    finally:
        stop_launcher(proc)


def verify_volume_attachment_conditions(url: str, admin_ec2: Any, admin_iam: Any, admin_sts: Any,
                                        trust: dict) -> None:
    """The control-plane role of cluster c1 attaches only c1's volumes, only to c1's control plane."""
    owned = "ec2:ResourceTag/kubernetes.io/cluster/c1"
    admin_iam.create_role(RoleName="control-plane.c1", AssumeRolePolicyDocument=json.dumps(trust))
    admin_iam.put_role_policy(RoleName="control-plane.c1", PolicyName="volumes", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["ec2:AttachVolume", "ec2:DetachVolume"],
             "Resource": ["arn:aws:ec2:*:*:volume/*"], "Condition": {"StringEquals": {owned: "owned"}}},
            {"Effect": "Allow", "Action": ["ec2:AttachVolume", "ec2:DetachVolume"],
             "Resource": ["arn:aws:ec2:*:*:instance/*"],
             "Condition": {"StringEquals": {owned: "owned", "ec2:ResourceTag/ballast.dev/role": "control-plane"}}},
            {"Effect": "Allow", "Action": ["ec2:DescribeVolumes"], "Resource": "*"}]}))
    creds = admin_sts.assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/control-plane.c1",
                                  RoleSessionName="i-cp")["Credentials"]
    cp_ec2 = client("ec2", url, creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])
    ami = admin_ec2.describe_images()["Images"][0]["ImageId"]

    def instance(tags: dict[str, str]) -> str:
        spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
        return admin_ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, Placement={"AvailabilityZone": "us-west-2a"},
                                       TagSpecifications=spec)["Instances"][0]["InstanceId"]

    def volume(cluster: str) -> str:
        spec = [{"ResourceType": "volume", "Tags": [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"}]}]
        return admin_ec2.create_volume(AvailabilityZone="us-west-2a", Size=3, Encrypted=True,
                                       TagSpecifications=spec)["VolumeId"]

    cp = instance({"kubernetes.io/cluster/c1": "owned", "ballast.dev/role": "control-plane"})
    worker = instance({"kubernetes.io/cluster/c1": "owned", "ballast.dev/role": "node"})
    mine, theirs = volume("c1"), volume("c2")
    code = error_code(lambda: cp_ec2.attach_volume(VolumeId=mine, InstanceId=cp, Device="/dev/sdf"))
    check("volumes: a control-plane role attaches its own cluster's volume to its control plane", code == "OK", code)
    code = error_code(lambda: cp_ec2.attach_volume(VolumeId=theirs, InstanceId=cp, Device="/dev/sdg"))
    check("volumes: ... and is refused another cluster's volume", code in ("AccessDenied", "UnauthorizedOperation"), code)
    code = error_code(lambda: cp_ec2.detach_volume(VolumeId=mine, InstanceId=cp, Device="/dev/sdf"))
    check("volumes: ... detaches its own cluster's volume", code == "OK", code)
    code = error_code(lambda: cp_ec2.attach_volume(VolumeId=mine, InstanceId=worker, Device="/dev/sdf"))
    check("volumes: ... and is refused attaching it to a worker", code in ("AccessDenied", "UnauthorizedOperation"), code)


def verify_route_controller_conditions(url: str, admin_ec2: Any, admin_iam: Any, admin_sts: Any,
                                       trust: dict) -> None:
    """Cluster c1's route controller routes in c1's route tables and unchecks c1's instances only."""
    owned = "aws:ResourceTag/kubernetes.io/cluster/c1"
    admin_iam.create_role(RoleName="routes.c1", AssumeRolePolicyDocument=json.dumps(trust))
    admin_iam.put_role_policy(RoleName="routes.c1", PolicyName="routes", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["ec2:CreateRoute", "ec2:DeleteRoute"],
             "Resource": ["arn:aws:ec2:*:*:route-table/*"], "Condition": {"StringEquals": {owned: "owned"}}},
            {"Effect": "Allow", "Action": ["ec2:ModifyInstanceAttribute"],
             "Resource": ["arn:aws:ec2:*:*:instance/*"], "Condition": {"StringEquals": {owned: "owned"}}}]}))
    creds = admin_sts.assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/routes.c1",
                                  RoleSessionName="i-ccm")["Credentials"]
    ccm = client("ec2", url, creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])
    ami = admin_ec2.describe_images()["Images"][0]["ImageId"]
    vpc = admin_ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = admin_ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/24", AvailabilityZone="us-west-2a")
    subnet_id = subnet["Subnet"]["SubnetId"]

    def tagged(kind: str, cluster: str) -> list[dict[str, Any]]:
        return [{"ResourceType": kind, "Tags": [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"}]}]

    def instance(cluster: str) -> str:
        return admin_ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, SubnetId=subnet_id,
                                       TagSpecifications=tagged("instance", cluster))["Instances"][0]["InstanceId"]

    def table(cluster: str) -> str:
        return admin_ec2.create_route_table(VpcId=vpc, TagSpecifications=tagged("route-table", cluster))[
            "RouteTable"]["RouteTableId"]

    mine, theirs = instance("c1"), instance("c2")
    my_table, their_table = table("c1"), table("c2")
    denied = ("AccessDenied", "UnauthorizedOperation")
    code = error_code(lambda: ccm.modify_instance_attribute(InstanceId=mine, SourceDestCheck={"Value": False}))
    check("routes: the route controller unchecks its own cluster's instance", code == "OK", code)
    code = error_code(lambda: ccm.modify_instance_attribute(InstanceId=theirs, SourceDestCheck={"Value": False}))
    check("routes: ... and is refused another cluster's", code in denied, code)
    code = error_code(lambda: ccm.create_route(RouteTableId=my_table, DestinationCidrBlock="100.96.1.0/24",
                                               InstanceId=mine))
    check("routes: ... routes in its own cluster's route table", code == "OK", code)
    code = error_code(lambda: ccm.create_route(RouteTableId=their_table, DestinationCidrBlock="100.96.1.0/24",
                                               InstanceId=mine))
    check("routes: ... and is refused another cluster's table", code in denied, code)
    code = error_code(lambda: ccm.delete_route(RouteTableId=my_table, DestinationCidrBlock="100.96.1.0/24"))
    check("routes: ... deletes its own route", code == "OK", code)


def verify_policy_variable_userid(url: str, admin_s3: Any, admin_iam: Any, admin_sts: Any, trust: dict) -> None:
    """`${aws:userid}` in a role's policy is `<role-id>:<session>`: a session writes its own key only."""
    admin_s3.create_bucket(Bucket="userid-check", CreateBucketConfiguration={"LocationConstraint": REGION})
    role_id = admin_iam.create_role(RoleName="tails.c1", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["RoleId"]
    admin_iam.put_role_policy(RoleName="tails.c1", PolicyName="tails", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["s3:PutObject"],
             "Resource": ["arn:aws:s3:::userid-check/c1/logs/${aws:userid}.json"]}]}))
    creds = admin_sts.assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/tails.c1",
                                  RoleSessionName="i-0aaa")["Credentials"]
    s3 = client("s3", url, creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])
    sts = client("sts", url, creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])
    user_id = sts.get_caller_identity()["UserId"]
    check("userid: GetCallerIdentity's UserId is <role-id>:<session>", user_id == f"{role_id}:i-0aaa", user_id)
    code = error_code(lambda: s3.put_object(Bucket="userid-check", Key=f"c1/logs/{user_id}.json", Body=b"{}"))
    check("userid: a session writes the key its ${aws:userid} names", code == "OK", code)
    for other in [f"c1/logs/{role_id}:i-0bbb.json", "c1/logs/i-0aaa.json", "c1/logs/${aws:userid}.json"]:
        code = error_code(lambda: s3.put_object(Bucket="userid-check", Key=other, Body=b"{}"))
        check(f"userid: ... and is refused {other}", code == "AccessDenied", code)


def verify_iam_count_is_exact() -> None:
    """With N=2 the third request (CreateAccessKey) is already enforced."""
    proc, url, _ = start_launcher("--iam-enforce", "--initial-no-auth", "2")
    try:
        iam0 = client("iam", url)
        iam0.create_user(UserName="a")
        iam0.put_user_policy(UserName="a", PolicyName="admin", PolicyDocument=json.dumps(ADMIN_POLICY))
        code = error_code(lambda: iam0.create_access_key(UserName="a"))
        check("iam: exactly N requests pass (N=2: the 3rd is refused)", code == "InvalidClientTokenId", code)
    finally:
        stop_launcher(proc)


def verify_no_enforcement_by_default(url: str) -> None:
    code = error_code(lambda: client("ec2", url, "AKIAANYTHING", "anything").describe_vpcs())
    check("iam: without --iam-enforce any key works", code == "OK", code)


def verify_call_stats(url: str) -> None:
    """GET /_ballast/stats counts the requests by Service:Action (form bodies, JSON targets, S3 methods)."""
    import urllib.request

    def stats() -> dict:
        with urllib.request.urlopen(url + "/_ballast/stats", timeout=10) as r:
            return json.loads(r.read())

    before = stats()
    ec2 = client("ec2", url)
    ec2.describe_vpcs()
    ec2.describe_vpcs()
    s3 = client("s3", url)
    s3.create_bucket(Bucket="stats-check", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket="stats-check", Key="k", Body=b"v")
    after = stats()

    def grew(name: str) -> int:
        return after.get(name, [0, 0.0])[0] - before.get(name, [0, 0.0])[0]

    check("stats: DescribeVpcs counted by its form-body action", grew("ec2:DescribeVpcs") == 2, after.get("ec2:DescribeVpcs"))
    ec2.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["running"]}])
    named = stats()
    check("stats: a filtered DescribeInstances counted by its filters",
          named.get("ec2:DescribeInstances{instance-state-name}", [0])[0] - after.get("ec2:DescribeInstances{instance-state-name}", [0])[0] == 1,
          sorted(k for k in named if k.startswith("ec2:DescribeInstances")))
    check("stats: an S3 PUT counted by its method", grew("s3:PUT") >= 2, after.get("s3:PUT"))
    check("stats: time spent is recorded", after.get("ec2:DescribeVpcs", [0, 0.0])[1] > 0.0, after.get("ec2:DescribeVpcs"))
    check("stats: CPU time spent is recorded", after.get("ec2:DescribeVpcs", [0, 0.0, 0.0])[2] > 0.0, after.get("ec2:DescribeVpcs"))
    # The request moto answered still had its body: the VPCs were described, the object stored.
    body = s3.get_object(Bucket="stats-check", Key="k")["Body"].read()
    check("stats: a counted request still reaches moto with its body", body == b"v", body)


def verify_instances_fingerprint(c: Cloud, url: str) -> None:
    """The runner's change detector: stable while nothing changes; a launch, a tag or a termination changes that
    instance's line and no other instance's; a volume attachment changes the volumes line alone."""
    import urllib.request

    def fingerprint() -> dict:
        with urllib.request.urlopen(url + "/_ballast/instances-fingerprint", timeout=10) as r:
            return dict(line.split(" ", 1) for line in r.read().decode().splitlines() if line)

    def changed(before: dict, after: dict) -> set:
        """The lines that differ, but for `all` (which differs whenever any does)."""
        return {k for k in before.keys() | after.keys() if k != "all" and before.get(k) != after.get(k)}

    first = fingerprint()
    check("fingerprint: stable while nothing changes", fingerprint() == first, f"{len(first)} lines")
    check("fingerprint: a volumes line", "volumes" in first, sorted(first)[:3])
    image = c.ec2.describe_images()["Images"][0]["ImageId"]
    instance = c.ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    launched = fingerprint()
    # A launch attaches the instance's root volume too.
    check("fingerprint: a launch adds that instance's line and no other instance's",
          changed(first, launched) - {"volumes"} == {instance}, changed(first, launched))
    c.ec2.create_tags(Resources=[instance], Tags=[{"Key": "k", "Value": "v"}])
    tagged = fingerprint()
    check("fingerprint: a new tag changes that instance's line alone", changed(launched, tagged) == {instance},
          changed(launched, tagged))
    volume = c.ec2.create_volume(AvailabilityZone=c.ec2.describe_instances(InstanceIds=[instance])[
        "Reservations"][0]["Instances"][0]["Placement"]["AvailabilityZone"], Size=1)["VolumeId"]
    created = fingerprint()
    c.ec2.attach_volume(VolumeId=volume, InstanceId=instance, Device="/dev/xvdf")
    attached = fingerprint()
    check("fingerprint: a volume attachment changes the volumes line alone",
          changed(created, attached) == {"volumes"}, changed(created, attached))
    with urllib.request.urlopen(url + "/_ballast/volume-attachments", timeout=10) as r:
        listed = json.loads(r.read())["attachments"]
    described = sorted(
        (v["VolumeId"], a["InstanceId"], a["Device"])
        for v in c.ec2.describe_volumes()["Volumes"]
        for a in v.get("Attachments", [])
        if a.get("State") == "attached"
    )
    check("volume-attachments: what DescribeVolumes shows attached",
          sorted((a["volume_id"], a["instance_id"], a["device"]) for a in listed) == described
          and (volume, instance, "/dev/xvdf") in described, f"{len(listed)} listed, {len(described)} described")
    c.ec2.terminate_instances(InstanceIds=[instance])
    terminated = fingerprint()
    check("fingerprint: a termination changes that instance's line", instance in changed(attached, terminated))

    # Waiting for a change: answered at once when the `all` digest differs, at the change while waiting, and
    # with the same digests after the wait when nothing changed.
    def waited(unchanged: str, wait_ms: int) -> tuple[dict, float]:
        started = time.monotonic()
        with urllib.request.urlopen(
            url + f"/_ballast/instances-fingerprint?unchanged={unchanged}&wait_ms={wait_ms}", timeout=10
        ) as r:
            body = r.read().decode()
        return dict(line.split(" ", 1) for line in body.splitlines() if line), time.monotonic() - started

    got, _ = waited(first["all"], 1000)
    check("fingerprint wait: a digest that differs already is answered", got == terminated)
    got, took = waited(terminated["all"], 300)
    check("fingerprint wait: unchanged after the wait", got == terminated and took >= 0.25, f"{took:.2f} s")
    import threading

    timer = threading.Timer(0.2, lambda: c.ec2.create_tags(Resources=[instance], Tags=[{"Key": "k", "Value": "w"}]))
    timer.start()
    got, took = waited(terminated["all"], 1500)
    timer.join()
    check("fingerprint wait: a change while waiting ends the wait", got != terminated and took < 1.4, f"{took:.2f} s")


def verify_power_cuts(c: Cloud, url: str) -> None:
    """SkipOsShutdown on TerminateInstances / StopInstances is remembered per instance (GET /_ballast/power-cuts);
    a default terminate or stop is not, and clears an earlier flag."""
    import urllib.request

    def cuts() -> list[str]:
        with urllib.request.urlopen(url + "/_ballast/power-cuts", timeout=10) as r:
            return json.loads(r.read())["instance_ids"]

    image = c.ec2.describe_images()["Images"][0]["ImageId"]
    ids = [i["InstanceId"] for i in c.ec2.run_instances(ImageId=image, MinCount=4, MaxCount=4)["Instances"]]
    cut, graceful, stopped, restarted = ids
    c.ec2.terminate_instances(InstanceIds=[cut], SkipOsShutdown=True)
    c.ec2.terminate_instances(InstanceIds=[graceful])
    now = cuts()
    check("power cuts: SkipOsShutdown=true on terminate is recorded", cut in now, now)
    check("power cuts: a default terminate is not", graceful not in now, now)
    state = c.ec2.describe_instances(InstanceIds=[cut])["Reservations"][0]["Instances"][0]["State"]["Name"]
    check("power cuts: the instance is terminated all the same", state in ("shutting-down", "terminated"), state)
    c.ec2.stop_instances(InstanceIds=[stopped, restarted], SkipOsShutdown=True)
    now = cuts()
    check("power cuts: SkipOsShutdown=true on stop is recorded", {stopped, restarted} <= set(now), now)
    c.ec2.start_instances(InstanceIds=[restarted])
    c.ec2.stop_instances(InstanceIds=[restarted])
    now = cuts()
    check("power cuts: a later default stop clears the flag", restarted not in now and stopped in now, now)


def verify_s3_conditional_writes_atomic(url: str) -> None:
    """Writers racing on one version: exactly one wins, each time, and the object is the winner's whole.

    This fails if If-Match is not enforced. The race the patch closes (a check and its write interleaved with
    another's) showed only on a loaded machine, once, and is not reproduced here on demand: the patch closes it by
    construction (one lock over every object write and delete)."""
    import concurrent.futures

    s3 = client("s3", url)
    s3.create_bucket(Bucket="race-check", CreateBucketConfiguration={"LocationConstraint": REGION})
    rounds_with_one_winner = 0
    rounds = 20
    for round_no in range(rounds):
        key = f"race/{round_no}"
        base = s3.put_object(Bucket="race-check", Key=key, Body=b"base")["ETag"]

        def write(i: int) -> str | None:
            body = (f"writer-{i}-" * 2000).encode()
            try:
                s3.put_object(Bucket="race-check", Key=key, Body=body, IfMatch=base)
                return body.decode()
            except Exception as e:  # noqa: BLE001 - a 412 is the expected loser's answer
                if "PreconditionFailed" not in str(e):
                    raise
                return None

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            winners = [w for w in pool.map(write, range(8)) if w is not None]
        stored = s3.get_object(Bucket="race-check", Key=key)["Body"].read().decode()
        if len(winners) == 1 and stored == winners[0]:
            rounds_with_one_winner += 1
    check("s3: 8 writers racing on one ETag, 20 rounds: exactly one wins each round, whole",
          rounds_with_one_winner == rounds, f"{rounds_with_one_winner} of {rounds} rounds")


def verify_s3_expected_bucket_owner(url: str) -> None:
    """ExpectedBucketOwner: the bucket's own account passes, another account is 403 AccessDenied on bucket and
    object calls alike, no header changes nothing, and a missing bucket stays NoSuchBucket. A bucket of another
    account is made through moto's account switch on AssumeRole (the role ARN's account)."""
    s3 = client("s3", url)
    bucket = "owner-check"
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    calls = {
        "PutObject": lambda owner: s3.put_object(Bucket=bucket, Key="k", Body=b"y", ExpectedBucketOwner=owner),
        "GetObject": lambda owner: s3.get_object(Bucket=bucket, Key="k", ExpectedBucketOwner=owner),
        "HeadObject": lambda owner: s3.head_object(Bucket=bucket, Key="k", ExpectedBucketOwner=owner),
        "ListObjectsV2": lambda owner: s3.list_objects_v2(Bucket=bucket, ExpectedBucketOwner=owner),
        "GetBucketAcl": lambda owner: s3.get_bucket_acl(Bucket=bucket, ExpectedBucketOwner=owner),
        "GetBucketVersioning": lambda owner: s3.get_bucket_versioning(Bucket=bucket, ExpectedBucketOwner=owner),
        "DeleteObject": lambda owner: s3.delete_object(Bucket=bucket, Key="k", ExpectedBucketOwner=owner),
    }
    # HeadObject's 403 has no body: botocore names it by its status.
    refused = {name: error_code(lambda: call("999999999999")) for name, call in calls.items()}
    check("s3: another expected owner is refused on every call", all(c in ("AccessDenied", "403") for c in refused.values()),
          refused)
    check("s3: the refused calls changed nothing",
          s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x")
    owned = {name: error_code(lambda: call(ACCOUNT)) for name, call in calls.items()}
    check("s3: the bucket's own account as expected owner passes", set(owned.values()) == {"OK"}, owned)
    check("s3: no expected owner changes nothing", error_code(lambda: s3.list_objects_v2(Bucket=bucket)) == "OK")
    check("s3: a missing bucket stays NoSuchBucket",
          error_code(lambda: s3.list_objects_v2(Bucket="owner-check-missing", ExpectedBucketOwner="999999999999"))
          == "NoSuchBucket")
    other = client("sts", url).assume_role(RoleArn="arn:aws:iam::222222222222:role/other", RoleSessionName="other")
    c = other["Credentials"]
    theirs = client("s3", url, c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"])
    theirs.create_bucket(Bucket="owner-check-theirs", CreateBucketConfiguration={"LocationConstraint": REGION})
    check("s3: another account's bucket, this account as expected owner: AccessDenied",
          error_code(lambda: s3.put_object(Bucket="owner-check-theirs", Key="k", Body=b"x",
                                           ExpectedBucketOwner=ACCOUNT)) == "AccessDenied")
    check("s3: another account's bucket, its owner as expected owner: passes",
          error_code(lambda: s3.list_objects_v2(Bucket="owner-check-theirs",
                                                ExpectedBucketOwner="222222222222")) == "OK")


def verify_web_identity() -> None:
    """AssumeRoleWithWebIdentity checks the token, the issuer's published keys and the role's trust policy."""
    import urllib.error
    import urllib.request

    from botocore import UNSIGNED
    from joserfc import jwt
    from joserfc.jwk import ECKey, KeySet, RSAKey

    proc, url, _ = start_launcher("--iam-enforce", "--initial-no-auth", "3")
    try:
        iam0 = client("iam", url)
        iam0.create_user(UserName="ballast-admin")
        iam0.put_user_policy(UserName="ballast-admin", PolicyName="admin", PolicyDocument=json.dumps(ADMIN_POLICY))
        key = iam0.create_access_key(UserName="ballast-admin")["AccessKey"]
        admin_s3 = client("s3", url, key["AccessKeyId"], key["SecretAccessKey"])
        admin_iam = client("iam", url, key["AccessKeyId"], key["SecretAccessKey"])
        sts = boto3.client("sts", endpoint_url=url, region_name=REGION,
                           config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1}))

        # Two issuers: c1 publishes public documents (an ES256 and an RS256 key), c2 private ones.
        for bucket in ("oidc", "data"):
            admin_s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
        ec, rsa, stranger = ECKey.generate_key("P-256"), RSAKey.generate_key(2048), ECKey.generate_key("P-256")
        issuers = {name: f"{url}/oidc/{name}" for name in ("c1", "c2")}
        jwks = KeySet([ec, rsa]).as_dict(private=False)
        for k, kid in zip(jwks["keys"], ("ec-1", "rsa-1")):
            k["kid"], k["use"] = kid, "sig"
        for name, acl in (("c1", "public-read"), ("c2", "private")):
            discovery = {"issuer": issuers[name], "jwks_uri": f"{issuers[name]}/openid/v1/jwks",
                         "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
                         "id_token_signing_alg_values_supported": ["ES256", "RS256"]}
            admin_s3.put_object(Bucket="oidc", Key=f"{name}/.well-known/openid-configuration", ACL=acl,
                                Body=json.dumps(discovery).encode())
            admin_s3.put_object(Bucket="oidc", Key=f"{name}/openid/v1/jwks", ACL=acl, Body=json.dumps(jwks).encode())
        admin_s3.put_object(Bucket="data", Key="allowed/a.txt", Body=b"a")
        admin_s3.put_object(Bucket="data", Key="other/b.txt", Body=b"b")

        def anonymous_get(path: str) -> int:
            try:
                with urllib.request.urlopen(url + path, timeout=5) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code

        code = anonymous_get("/oidc/c1/.well-known/openid-configuration")
        check("s3 anonymous: a public-read discovery document is read over HTTP under enforcement", code == 200, code)
        code = anonymous_get("/oidc/c2/openid/v1/jwks")
        check("s3 anonymous: a private object is refused (403)", code == 403, code)
        code = anonymous_get("/data/allowed/a.txt")
        check("s3 anonymous: an object without an ACL grant is refused (403)", code == 403, code)
        admin_s3.put_bucket_policy(Bucket="data", Policy=json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/allowed/*"}]}))
        codes = (anonymous_get("/data/allowed/a.txt"), anonymous_get("/data/other/b.txt"))
        check("s3 anonymous: a bucket policy for '*' opens exactly its resources", codes == (200, 403), codes)
        admin_s3.delete_bucket_policy(Bucket="data")

        providers = {}
        for name, audiences in (("c1", ["sts.amazonaws.com", "other-audience"]), ("c2", ["sts.amazonaws.com"])):
            providers[name] = admin_iam.create_open_id_connect_provider(
                Url=issuers[name], ClientIDList=audiences, ThumbprintList=["0" * 40])["OpenIDConnectProviderArn"]
        host = issuers["c1"].split("://", 1)[1]

        def role(name: str, provider: str, conditions: dict) -> str:
            trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Federated": provider},
                     "Action": "sts:AssumeRoleWithWebIdentity", "Condition": conditions}]}
            arn = admin_iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
            admin_iam.put_role_policy(RoleName=name, PolicyName="read", PolicyDocument=json.dumps({
                "Version": "2012-10-17", "Statement": [
                    {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/allowed/*"}]}))
            return arn

        exact = {"StringEquals": {f"{host}:sub": "system:serviceaccount:ns1:reader", f"{host}:aud": "sts.amazonaws.com"}}
        reader = role("irsa-reader", providers["c1"], exact)
        like = role("irsa-like", providers["c1"], {"StringLike": {f"{host}:sub": "system:serviceaccount:ns1:*"}})
        other_provider = role("irsa-c2", providers["c2"], {})

        def token(signing=ec, kid="ec-1", alg="ES256", issuer=issuers["c1"], sub="system:serviceaccount:ns1:reader",
                  aud="sts.amazonaws.com", exp_in=600, nbf_in=-5) -> str:
            now = int(time.time())
            claims = {"iss": issuer, "sub": sub, "aud": [aud], "iat": now, "nbf": now + nbf_in, "exp": now + exp_in,
                      "kubernetes.io": {"namespace": "ns1", "serviceaccount": {"name": sub.rsplit(":", 1)[-1]}}}
            header = {"alg": alg, "kid": kid} if kid else {"alg": alg}
            return jwt.encode(header, claims, signing, algorithms=[alg])

        def assume(role_arn: str, web_token: str) -> tuple[str, dict]:
            try:
                return "OK", sts.assume_role_with_web_identity(
                    RoleArn=role_arn, RoleSessionName="pod-1", WebIdentityToken=web_token)
            except ClientError as e:
                return e.response["Error"]["Code"], {}

        code, answer = assume(reader, token())
        check("web identity: an ES256 token of the exact sub and aud assumes its role (unsigned call, IAM enforced)",
              code == "OK" and answer["SubjectFromWebIdentityToken"] == "system:serviceaccount:ns1:reader"
              and answer["Provider"] == providers["c1"] and answer["Audience"] == "sts.amazonaws.com"
              and answer["AssumedRoleUser"]["Arn"].endswith(":assumed-role/irsa-reader/pod-1"),
              code if code != "OK" else answer["AssumedRoleUser"]["Arn"])
        if code == "OK":
            creds = answer["Credentials"]
            role_s3 = client("s3", url, creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])
            body = role_s3.get_object(Bucket="data", Key="allowed/a.txt")["Body"].read()
            check("web identity: its credentials do what the role's policy allows", body == b"a")
            codes = (error_code(lambda: role_s3.get_object(Bucket="data", Key="other/b.txt")),
                     error_code(lambda: role_s3.put_object(Bucket="data", Key="allowed/c.txt", Body=b"c")))
            check("web identity: ... and get AccessDenied for the rest (IAM enforces them)",
                  codes == ("AccessDenied", "AccessDenied"), codes)
        code, _ = assume(reader, token(signing=rsa, kid="rsa-1", alg="RS256"))
        check("web identity: an RS256 token verifies against the RSA key of the JWKS", code == "OK", code)
        code, _ = assume(like, token(sub="system:serviceaccount:ns1:writer"))
        check("web identity: StringLike on sub admits a matching service account", code == "OK", code)

        refusals = [
            ("another service account (sub)", reader, token(sub="system:serviceaccount:ns1:writer"), "AccessDenied"),
            ("another namespace under StringLike", like, token(sub="system:serviceaccount:ns2:reader"), "AccessDenied"),
            ("a client id the trust policy does not name (aud)", reader, token(aud="other-audience"), "AccessDenied"),
            ("an audience that is no client id of the provider", reader, token(aud="someone-else"),
             "InvalidIdentityToken"),
            ("a key not in the JWKS, under a known kid", reader, token(signing=stranger), "InvalidIdentityToken"),
            ("a kid not in the JWKS", reader, token(signing=stranger, kid="unknown"), "InvalidIdentityToken"),
            ("an RS256 header over the EC key's kid", reader, token(signing=rsa, alg="RS256"), "InvalidIdentityToken"),
            ("an expired token", reader, token(exp_in=-60, nbf_in=-600), "ExpiredTokenException"),
            ("a token not valid yet (nbf)", reader, token(nbf_in=300), "InvalidIdentityToken"),
            ("an issuer with no IAM OIDC provider", reader, token(issuer=f"{url}/oidc/c3"), "InvalidIdentityToken"),
            ("an issuer whose documents are not public", other_provider, token(issuer=issuers["c2"]),
             "InvalidIdentityToken"),
            ("a role trusting another provider", other_provider, token(), "AccessDenied"),
            ("a role that does not exist", f"arn:aws:iam::{ACCOUNT}:role/nope", token(), "AccessDenied"),
            ("a string that is no JWT", reader, "not-a-jwt-at-all", "InvalidIdentityToken"),
            ("an unsigned (alg none) token", reader,
             ".".join(base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=") for part in (
                 {"alg": "none", "kid": "ec-1"},
                 {"iss": issuers["c1"], "sub": "system:serviceaccount:ns1:reader", "aud": "sts.amazonaws.com",
                  "exp": int(time.time()) + 600})) + ".", "InvalidIdentityToken"),
        ]
        for what, role_arn, web_token, expected in refusals:
            code, _ = assume(role_arn, web_token)
            check(f"web identity: refused ({expected}): {what}", code == expected, code)

        # The keys are read at each call: a key that leaves the JWKS stops verifying at once.
        admin_s3.put_object(Bucket="oidc", Key="c1/openid/v1/jwks", ACL="public-read",
                            Body=json.dumps({"keys": [k for k in jwks["keys"] if k["kid"] == "rsa-1"]}).encode())
        codes = (assume(reader, token())[0], assume(reader, token(signing=rsa, kid="rsa-1", alg="RS256"))[0])
        check("web identity: a key removed from the published JWKS is refused, the remaining one still assumes",
              codes == ("InvalidIdentityToken", "OK"), codes)
    finally:
        stop_launcher(proc)


def verify_lifecycle_hooks(c: Cloud, url: str) -> None:
    """patch_asg_terminating_lifecycle_wait and patch_lifecycle_action_completion: with a terminating hook, an
    instance Auto Scaling terminates waits in Terminating:Wait (still running) until CompleteLifecycleAction
    (CONTINUE by instance id, ABANDON by token) or its heartbeat's DefaultResult; a heartbeat restarts the wait;
    a group without hooks terminates at once as before."""
    import urllib.request

    def pending() -> list[dict]:
        with urllib.request.urlopen(url + "/_ballast/lifecycle-actions", timeout=10) as r:
            return json.loads(r.read())["actions"]

    def states(group: str) -> dict[str, str]:
        (g,) = c.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"]
        return {i["InstanceId"]: i["LifecycleState"] for i in g["Instances"]}

    def ec2_state(instance_id: str) -> str:
        (r,) = c.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        return r["Instances"][0]["State"]["Name"]

    def make(group: str, size: int, hook_timeout: int | None, default: str = "CONTINUE") -> list[str]:
        c.asg.create_auto_scaling_group(
            AutoScalingGroupName=group, LaunchTemplate={"LaunchTemplateId": c.lt_id, "Version": "1"},
            MinSize=0, MaxSize=10, DesiredCapacity=size, VPCZoneIdentifier=",".join(c.subnets))
        if hook_timeout is not None:
            c.asg.put_lifecycle_hook(
                AutoScalingGroupName=group, LifecycleHookName="ballast-termination",
                LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
                HeartbeatTimeout=hook_timeout, DefaultResult=default)
        return sorted(states(group))

    # Wait, then CONTINUE by instance id; the replacement launches at once (no decrement).
    a, _, _ = make("hooked.c1", 3, 300)
    c.asg.terminate_instance_in_auto_scaling_group(InstanceId=a, ShouldDecrementDesiredCapacity=False)
    now = states("hooked.c1")
    check("lifecycle: TerminateInstanceInAutoScalingGroup with a hook waits in Terminating:Wait",
          now.get(a) == "Terminating:Wait", now)
    check("lifecycle: ... its EC2 instance keeps running", ec2_state(a) == "running", ec2_state(a))
    check("lifecycle: ... and its replacement launches (3 InService besides it)",
          sum(1 for s in now.values() if s == "InService") == 3, now)
    (action,) = [x for x in pending() if x["instance_id"] == a]
    check("lifecycle: the pending action names its group, hook, transition and a token",
          action["auto_scaling_group_name"] == "hooked.c1" and action["lifecycle_hook_name"] == "ballast-termination"
          and action["lifecycle_transition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
          and len(action["lifecycle_action_token"]) == 36, action)
    code = error_code(lambda: c.asg.complete_lifecycle_action(
        AutoScalingGroupName="hooked.c1", LifecycleHookName="other-hook", InstanceId=a,
        LifecycleActionResult="CONTINUE"))
    check("lifecycle: completing another hook's action is a ValidationError", code == "ValidationError", code)
    code = error_code(lambda: c.asg.complete_lifecycle_action(
        AutoScalingGroupName="hooked.c1", LifecycleHookName="ballast-termination", InstanceId=a,
        LifecycleActionResult="MAYBE"))
    check("lifecycle: a result other than CONTINUE/ABANDON is a ValidationError", code == "ValidationError", code)
    check("lifecycle: ... and leaves the instance waiting", states("hooked.c1").get(a) == "Terminating:Wait")
    c.asg.complete_lifecycle_action(AutoScalingGroupName="hooked.c1", LifecycleHookName="ballast-termination",
                                    InstanceId=a, LifecycleActionResult="CONTINUE")
    now = states("hooked.c1")
    check("lifecycle: CONTINUE by instance id terminates it and it leaves the group",
          a not in now and ec2_state(a) in ("shutting-down", "terminated") and len(now) == 3,
          f"{ec2_state(a)} {now}")
    code = error_code(lambda: c.asg.complete_lifecycle_action(
        AutoScalingGroupName="hooked.c1", LifecycleHookName="ballast-termination", InstanceId=a,
        LifecycleActionResult="CONTINUE"))
    check("lifecycle: completing it again: no active action (ValidationError)", code == "ValidationError", code)

    # Scale-in (SetDesiredCapacity) waits too; ABANDON by token terminates.
    c.asg.set_desired_capacity(AutoScalingGroupName="hooked.c1", DesiredCapacity=2)
    now = states("hooked.c1")
    waiting = [i for i, s in now.items() if s == "Terminating:Wait"]
    check("lifecycle: scale-in by SetDesiredCapacity waits (one Terminating:Wait, 2 InService)",
          len(waiting) == 1 and sum(1 for s in now.values() if s == "InService") == 2, now)
    (b,) = waiting
    (action,) = [x for x in pending() if x["instance_id"] == b]
    c.asg.complete_lifecycle_action(AutoScalingGroupName="hooked.c1", LifecycleHookName="ballast-termination",
                                    LifecycleActionToken=action["lifecycle_action_token"],
                                    LifecycleActionResult="ABANDON")
    check("lifecycle: ABANDON by token terminates it too",
          b not in states("hooked.c1") and ec2_state(b) in ("shutting-down", "terminated"), ec2_state(b))
    c.asg.update_auto_scaling_group(AutoScalingGroupName="hooked.c1", DesiredCapacity=1)
    now = states("hooked.c1")
    check("lifecycle: scale-in by UpdateAutoScalingGroup waits too, without a replacement",
          sorted(now.values()) == ["InService", "Terminating:Wait"], now)

    # The heartbeat timeout applies the hook's DefaultResult; a heartbeat restarts the wait.
    d, e = make("short.c1", 2, 2, default="ABANDON")
    c.asg.terminate_instance_in_auto_scaling_group(InstanceId=d, ShouldDecrementDesiredCapacity=True)
    c.asg.terminate_instance_in_auto_scaling_group(InstanceId=e, ShouldDecrementDesiredCapacity=True)
    for _ in range(3):
        time.sleep(1.0)
        c.asg.record_lifecycle_action_heartbeat(AutoScalingGroupName="short.c1",
                                                LifecycleHookName="ballast-termination", InstanceId=e)
    now = states("short.c1")
    check("lifecycle: the heartbeat timeout (2 s) applied DefaultResult: terminated after 3 s",
          d not in now and ec2_state(d) in ("shutting-down", "terminated"), f"{ec2_state(d)} {now}")
    check("lifecycle: heartbeats every second kept the other waiting past its 2 s",
          now.get(e) == "Terminating:Wait" and ec2_state(e) == "running", now)
    check("lifecycle: with a decrement nothing replaces them", set(now) == {e}, now)
    time.sleep(3.0)
    check("lifecycle: once the heartbeats stop, it goes too", e not in states("short.c1") and
          ec2_state(e) in ("shutting-down", "terminated"), ec2_state(e))

    # A batch terminated at once (rolling-update issues a batch's calls concurrently): each call is one atomic change
    # to the group, as on AWS, so no decrement is lost and no replacement launches twice.
    import concurrent.futures

    batch = make("batch.c1", 8, 300)
    chosen = [(i, n >= 3) for n, i in enumerate(batch[:5])]  # 3 replaced, 2 with a decrement

    def terminate(item: tuple[str, bool]) -> None:
        c.asg.terminate_instance_in_auto_scaling_group(InstanceId=item[0], ShouldDecrementDesiredCapacity=item[1])

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        list(pool.map(terminate, chosen))
    (g,) = c.asg.describe_auto_scaling_groups(AutoScalingGroupNames=["batch.c1"])["AutoScalingGroups"]
    now = {i["InstanceId"]: i["LifecycleState"] for i in g["Instances"]}
    check("lifecycle: 5 concurrent terminations (2 decrementing) of 8: desired 6, 6 InService, 5 waiting",
          g["DesiredCapacity"] == 6 and sum(1 for s in now.values() if s == "InService") == 6
          and sorted(i for i, s in now.items() if s == "Terminating:Wait") == sorted(i for i, _ in chosen),
          f"desired {g['DesiredCapacity']}, {Counter(now.values())}")

    # A group without hooks is unchanged; deleting a group drops its pending actions.
    f, _ = make("plain.c1", 2, None)
    c.asg.terminate_instance_in_auto_scaling_group(InstanceId=f, ShouldDecrementDesiredCapacity=False)
    now = states("plain.c1")
    check("lifecycle: without a hook TerminateInstanceInAutoScalingGroup terminates at once",
          f not in now and ec2_state(f) in ("shutting-down", "terminated") and len(now) == 2, now)
    c.asg.set_desired_capacity(AutoScalingGroupName="plain.c1", DesiredCapacity=1)
    check("lifecycle: ... and scale-in too", list(states("plain.c1").values()) == ["InService"])
    c.asg.delete_auto_scaling_group(AutoScalingGroupName="hooked.c1", ForceDelete=True)
    check("lifecycle: deleting a group drops its pending actions",
          not [x for x in pending() if x["auto_scaling_group_name"] == "hooked.c1"], pending())


def main() -> int:
    proc, url, ready_s = start_launcher()
    print(f"INFO launcher ready in {ready_s:.2f} s at {url}", flush=True)
    try:
        c = Cloud(url)
        guarded("launch template versions", lambda: verify_launch_template_versions(c))
        guarded("auto scaling", lambda: verify_asg(c))
        guarded("register image root device", lambda: verify_register_image_root_device_name(c))
        guarded("mixed instances and launch template interface", lambda: verify_mixed_instances_and_interface(c))
        guarded("profile by arn / plain RunInstances", lambda: verify_profile_by_arn_and_plain_run(c))
        guarded("no enforcement by default", lambda: verify_no_enforcement_by_default(url))
        guarded("tag lookup", lambda: verify_tag_lookup(c))
        guarded("call stats", lambda: verify_call_stats(url))
        guarded("instances fingerprint", lambda: verify_instances_fingerprint(c, url))
        guarded("power cuts", lambda: verify_power_cuts(c, url))
        guarded("lifecycle hooks", lambda: verify_lifecycle_hooks(c, url))
        guarded("s3 conditional writes", lambda: verify_s3_conditional_writes_atomic(url))
        guarded("s3 expected bucket owner", lambda: verify_s3_expected_bucket_owner(url))
    finally:
        stop_launcher(proc)
    guarded("iam enforcement", verify_iam_enforcement)
    guarded("iam count", verify_iam_count_is_exact)
    guarded("web identity", verify_web_identity)
    guarded("process behaviour", lambda: verify_process_behaviour(ready_s))

    failed = sum(1 for ok, _, _ in results if not ok)
    print(f"{len(results) - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
